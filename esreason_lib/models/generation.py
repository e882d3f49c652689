"""Batched generation with a KV cache: greedy and temperature/top-p sampling, logprobs and entropies.

One code path serves the tiny character-level Qwen2 models and the pretrained Llama base on CPU and Qwen2.5 on
GPUs. What is drawn is a `sampling.Sampling`, how the logits are computed a `sampling.Forward`; both pass whole to
the decode loop, which sees the model only through a step object of `models.decode_steps` (prefill, step, select).
Rows are grouped by prompt (row i belongs to prompt i // n), prompts are left-padded, and every forward pass gets the
attention mask and position ids derived from it, so padding never changes a row's distribution. `generate` records
the log-probability of each sampled token under the temperature-scaled distribution (before top-p truncation), which
is exactly what `completion_logprobs` recomputes in one differentiable forward pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from esreason_lib.models.decode_steps import make_step
from esreason_lib.models.fused_qwen2 import KVBuffers, check_fusable, model_weights
from esreason_lib.models.sampling import (
    DEFAULT_FORWARD,
    DEFAULT_SAMPLING,
    FORWARDS,
    SAMPLERS,
    Forward,
    Sampling,
    finite_rows,
    inverse_cdf_tokens,
    next_tokens,
)
from esreason_lib.models.tokens import (
    StopRule,
    cut_at_stop,
    decode_rows,
    encode_texts,
    left_pad,
    mask_positions,
    right_pad,
    special_ids,
    stop_end_tokens,
)
from esreason_lib.seeding import torch_generator

__all__ = ["DEFAULT_FORWARD", "DEFAULT_SAMPLING", "FORWARDS", "SAMPLERS", "Forward", "Generator", "Rollouts",
           "Sampling", "completion_logprobs", "cut_at_stop", "decode_rows", "encode_texts", "finite_rows", "generate",
           "inverse_cdf_tokens", "left_pad", "mask_positions", "right_pad", "sequence_logprobs", "special_ids",
           "stop_end_tokens"]

COMPACT_FRACTION = 0.25
"""Drop finished rows from the running batch (and its KV cache) once this fraction of it is finished."""


@dataclass
class Rollouts:
    """Completions for `prompts`, `n` rows per prompt (row i -> prompt i // n), with per-token statistics."""

    prompts: list[str]
    """[P] the input prompts."""
    n: int
    """Samples per prompt."""
    completions: list[str]
    """[B] decoded completion text (special tokens removed; cut right after a stop string)."""
    prompt_ids: torch.LongTensor
    """[B, Lp] prompt tokens, left-padded with pad_token_id."""
    prompt_mask: torch.BoolTensor
    """[B, Lp] True on real prompt tokens."""
    completion_ids: torch.LongTensor
    """[B, Lc] generated tokens, right-padded with pad_token_id (the EOS that stopped a row is kept)."""
    completion_mask: torch.BoolTensor
    """[B, Lc] True on generated tokens, including the EOS that stopped the row."""
    logprobs: torch.FloatTensor
    """[B, Lc] log pi(token) under the temperature-scaled distribution (T=1 when greedy); 0 where masked."""
    entropies: torch.FloatTensor
    """[B, Lc] entropy (nats) of the full temperature-scaled next-token distribution; 0 where masked."""

    def prompt_index(self) -> np.ndarray:
        """[B] int: the prompt index of each row."""
        return np.arange(len(self.completions)) // self.n


def _decode_chunk(step, prompts: tuple, sampling: Sampling, stops: StopRule, pad: int, gen) -> tuple:
    """Generate for one chunk through `step` (a `decode_steps` step object). `prompts` = (ids, mask [u, Lp]: the
    chunk's distinct left-padded prompts, expand [b]: the prompt of each row); `stops` finishes rows, which then emit
    `pad`; `gen` draws the samples. Returns (tokens, valid, logprobs, entropies), each [b, T]."""
    ids, mask, expand = prompts
    b, width, device = expand.shape[0], sampling.max_new_tokens, ids.device
    tokens = torch.full((b, width), pad, dtype=torch.long, device=device)  # [b, T]
    valid = torch.zeros((b, width), dtype=torch.bool, device=device)  # [b, T]
    logps = torch.zeros((b, width), dtype=torch.float32, device=device)  # [b, T]
    ents = torch.zeros((b, width), dtype=torch.float32, device=device)  # [b, T]
    rows = torch.arange(b, device=device)  # [r] chunk row of each running row
    done = torch.zeros(b, dtype=torch.bool, device=device)  # [r]
    tok = live = None  # [r] the step's tokens and which rows were running (from the second step on)
    uniforms = None  # [b, T] "inverse-cdf"'s draw of each chunk row and position
    if not sampling.greedy and sampling.sampler == "inverse-cdf":
        uniforms = torch.rand((b, width), generator=gen, device=device)
    for t in range(width):
        last = step.prefill(ids, mask, expand) if t == 0 else step.step(tok, live)  # [r, V]
        tok, logp, entropy = next_tokens(last, sampling, gen, None if uniforms is None else uniforms[rows, t])
        live = ~done  # [r]
        tok = torch.where(live, tok, torch.full_like(tok, pad))  # [r]
        tokens[rows, t] = tok
        valid[rows, t] = live
        logps[rows, t] = torch.where(live, logp, 0.0)
        ents[rows, t] = torch.where(live, entropy, 0.0)
        done = stops.finished(done, tok, live, tokens, rows, t)
        n_done = int(done.sum())  # the one host sync per step
        if n_done == len(rows):
            break
        if n_done >= max(1, COMPACT_FRACTION * len(rows)):
            keep = torch.nonzero(~done).squeeze(-1)  # [r']
            rows, done, tok, live = rows[keep], done[keep], tok[keep], live[keep]
            step.select(keep)
    return tokens, valid, logps, ents


def _joined(parts: list, pad: int) -> tuple:
    """The chunks' (prompt ids, prompt mask, tokens, valid, logprobs, entropies) as whole tensors: prompts left-padded
    to the longest, completions cut to the longest completion (at least 1)."""
    lp = max(p[0].shape[1] for p in parts)
    lc = max(max(int(p[3].sum(1).max()) if p[3].numel() else 0 for p in parts), 1)

    def cat(idx, width, fill, left):
        out = []
        for p in parts:
            x = p[idx][:, :width] if not left else p[idx]
            gap = width - x.shape[1]
            if gap:
                filler = torch.full((x.shape[0], gap), fill, dtype=x.dtype, device=x.device)
                x = torch.cat([filler, x] if left else [x, filler], dim=1)
            out.append(x)
        return torch.cat(out, dim=0)

    return (cat(0, lp, pad, True), cat(1, lp, False, True), cat(2, lc, pad, False), cat(3, lc, False, False),
            cat(4, lc, 0.0, False), cat(5, lc, 0.0, False))


class Generator:
    """Generation with one model, tokenizer and `Forward`: the fused forward's weights are folded once, at
    construction, for every later call (make a new one after the weights change)."""

    def __init__(self, model, tokenizer, forward: Forward = DEFAULT_FORWARD):
        if not isinstance(forward, Forward):
            raise TypeError(f"forward must be a Forward, got {type(forward).__name__}")
        if forward.kind != "hf":
            check_fusable(model, f"generate(forward={forward.kind!r})")
        self.model, self.tokenizer, self.forward = model, tokenizer, forward
        with torch.no_grad():
            self.weights = None if forward.kind == "hf" else model_weights(model)
            """`fused_qwen2.model_weights(model)` for the fused kinds."""

    def __call__(self, prompts: list[str], sampling: Sampling = DEFAULT_SAMPLING, *, n: int = 1,
                 stop: str | None = None, seed: int = 0) -> Rollouts:
        """`generate(model, tokenizer, prompts, sampling, n=n, stop=stop, seed=seed, forward=self.forward)`."""
        if not isinstance(sampling, Sampling):
            raise TypeError(f"sampling must be a Sampling, got {type(sampling).__name__}")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be a positive int, got {n!r}")
        if stop is not None and (not isinstance(stop, str) or not stop):
            raise ValueError(f"stop must be a non-empty str or None, got {stop!r}")
        encoded = encode_texts(self.tokenizer, prompts, "prompts")
        if not encoded:
            raise ValueError("prompts must not be empty")
        for i, e in enumerate(encoded):
            if not e:
                raise ValueError(f"prompts[{i}] = {prompts[i]!r} encodes to no tokens")
        model, batch = self.model, self.forward.batch_size
        pad, eos = special_ids(model, self.tokenizer)
        stops = StopRule(self.tokenizer, stop, eos, model.config.vocab_size, model.device)
        n_rows = len(encoded) * n  # B, rows grouped by prompt
        gen = torch_generator(seed, "generate", device=model.device)
        buffers = None if self.weights is None else KVBuffers()  # one KV cache storage for every chunk
        was_training = model.training
        model.eval()
        parts = []
        try:
            with torch.no_grad():
                for start in range(0, n_rows, batch):
                    which = np.arange(start, min(start + batch, n_rows)) // n  # [b] prompt of each row
                    uniq, expand = np.unique(which, return_inverse=True)  # [u], [b]
                    ids, mask = left_pad([encoded[i] for i in uniq], pad, model.device)  # [u, Lp]
                    expand = torch.as_tensor(expand, device=model.device)  # [b]
                    step = make_step(model, self.forward, self.weights, ids.shape[1] + sampling.max_new_tokens,
                                     buffers)
                    parts.append((ids[expand], mask[expand]) + _decode_chunk(step, (ids, mask, expand), sampling,
                                                                             stops, pad, gen))
        finally:
            model.train(was_training)
        prompt_ids, prompt_mask, completion_ids, completion_mask, logprobs, entropies = _joined(parts, pad)
        texts = decode_rows(self.tokenizer, completion_ids)
        return Rollouts(prompts=list(prompts), n=n, completions=[cut_at_stop(s, stop) for s in texts],
                        prompt_ids=prompt_ids, prompt_mask=prompt_mask, completion_ids=completion_ids,
                        completion_mask=completion_mask, logprobs=logprobs, entropies=entropies)


def generate(model, tokenizer, prompts: list[str], sampling: Sampling = DEFAULT_SAMPLING, *, n: int = 1,
             stop: str | None = None, seed: int = 0, forward: Forward = DEFAULT_FORWARD) -> Rollouts:
    """Sample `n` completions per prompt as `sampling` says (or decode greedily), computing logits as `forward`
    says (`Forward.batch_size` rows per forward batch).

    Rows stop at an EOS (kept as their last token) or once their text contains `stop` (kept in the text);
    finished rows emit pad and are masked. Greedy ignores the temperature and top_p; its logprobs and entropies are
    those of the T=1 distribution. Runs under no_grad in eval mode (the mode is restored); deterministic for a given
    `seed` and batch size (one torch generator, stream "generate"). Forward kinds "fused" and "native" (a float32
    Qwen2 or Llama) equal "hf" up to float rounding (tests/test_generation_fused.py, tests/test_fused_llama.py);
    `Sampling.sampler` "inverse-cdf" draws the same distribution as "multinomial", other samples. A caller that
    samples the same weights in several calls makes one `Generator` instead (the fused weights folded once).
    """
    return Generator(model, tokenizer, forward)(prompts, sampling, n=n, stop=stop, seed=seed)


def check_completion_inputs(temperature, prompt_ids, prompt_mask, completion_ids, completion_mask) -> None:
    """ValueError in one line when `temperature` is not > 0 or an ids tensor and its mask differ in shape (the
    inputs of `completion_logprobs` and `models.logprobs.completion_scores`)."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    if prompt_ids.shape != prompt_mask.shape or completion_ids.shape != completion_mask.shape:
        raise ValueError(f"ids/mask shapes differ: prompt {tuple(prompt_ids.shape)} vs {tuple(prompt_mask.shape)}, "
                         f"completion {tuple(completion_ids.shape)} vs {tuple(completion_mask.shape)}")


def completion_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask, *, temperature=1.0,
                        with_entropy=False):
    """Per-token log pi(completion token) [B, Lc] (and entropies [B, Lc] or None), differentiable.

    One forward pass over [prompt_ids, completion_ids] with the joint attention mask and position ids from
    it; the log-softmax of logits / temperature (in float32) is gathered at the completion tokens. Entries
    where `completion_mask` is False are 0.
    """
    check_completion_inputs(temperature, prompt_ids, prompt_mask, completion_ids, completion_mask)
    lc = completion_ids.shape[1]
    ids = torch.cat([prompt_ids, completion_ids], dim=1).to(model.device)  # [B, Lp+Lc]
    mask = torch.cat([prompt_mask.bool(), completion_mask.bool()], dim=1).to(model.device)  # [B, Lp+Lc]
    out = model(input_ids=ids, attention_mask=mask, position_ids=mask_positions(mask), use_cache=False,
                logits_to_keep=lc + 1)
    logits = out.logits[:, :-1].float() / temperature  # [B, Lc, V] logits predicting each completion token
    cmask = completion_mask.bool().to(logits.device)  # [B, Lc]
    targets = completion_ids.to(logits.device)[..., None]  # [B, Lc, 1]
    # gather - logsumexp: no second [B, Lc, V] tensor kept for backward (matters for 150k-token vocabularies)
    logp = logits.gather(-1, targets).squeeze(-1) - torch.logsumexp(logits, dim=-1)  # [B, Lc]
    logp = torch.where(cmask, logp, 0.0)
    entropy = None
    if with_entropy:
        logp_all = torch.log_softmax(logits, dim=-1)  # [B, Lc, V]
        ent = -(logp_all.exp() * logp_all).nan_to_num().sum(-1)  # [B, Lc]
        entropy = torch.where(cmask, ent, 0.0)
    return logp, entropy


def sequence_logprobs(model, tokenizer, prompts, completions, *, temperature=1.0, batch_size=256) -> np.ndarray:
    """[B] summed log pi(completion + EOS | prompt) for each (prompt, completion) pair, under no_grad."""
    if len(prompts) != len(completions):
        raise ValueError(f"prompts and completions differ in length: {len(prompts)} vs {len(completions)}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    pad, _ = special_ids(model, tokenizer)
    eos_id = int(tokenizer.eos_token_id)
    p_enc = encode_texts(tokenizer, prompts, "prompts")
    c_enc = [c + [eos_id] for c in encode_texts(tokenizer, completions, "completions")]
    for i, e in enumerate(p_enc):
        if not e:
            raise ValueError(f"prompts[{i}] = {prompts[i]!r} encodes to no tokens")
    out = np.zeros(len(p_enc), dtype=np.float64)  # [B]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for s in range(0, len(p_enc), batch_size):
                pids, pmask = left_pad(p_enc[s: s + batch_size], pad, model.device)  # [b, Lp]
                chunk = c_enc[s: s + batch_size]
                cids, cmask = right_pad(chunk, pad, model.device)  # [b, Lc]
                logp, _ = completion_logprobs(model, pids, pmask, cids, cmask, temperature=temperature)
                out[s: s + len(chunk)] = logp.double().sum(-1).cpu().numpy()
    finally:
        model.train(was_training)
    return out
