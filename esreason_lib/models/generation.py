"""Batched generation with a KV cache: greedy and temperature/top-p sampling, logprobs and entropies.

One code path serves the tiny character-level Qwen2 models on CPU and Qwen2.5 on GPUs. Rows are grouped by
prompt (row i belongs to prompt i // n), prompts are left-padded, and every forward pass gets the attention
mask and position ids derived from it, so padding never changes a row's distribution. `generate` records
the log-probability of each sampled token under the temperature-scaled distribution (before top-p
truncation), which is exactly what `completion_logprobs` recomputes in one differentiable forward pass.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np
import torch
import transformers
from transformers.tokenization_utils_tokenizers import TokenizersBackend

from esreason_lib.models.fused_qwen2 import FusedQwen2, KVBuffers, check_fusable, model_weights
from esreason_lib.models.hf_compat import output_cache, with_cache
from esreason_lib.seeding import torch_generator

FORWARDS = ("hf", "fused", "native")
"""How `generate` computes logits: the model's own modules, `models.fused_qwen2`'s forward (float32 Qwen2), or that
forward with its attention in the C kernel of `models.native`."""
SAMPLERS = ("multinomial", "inverse-cdf")
"""How `generate` draws a sampled token from the (top-p cut) next-token distribution: "multinomial" is
`torch.multinomial` (one exponential draw per vocabulary entry of every running row, dealt out in running-row order,
so a row's draws depend on which rows still run); "inverse-cdf" draws one uniform u per row and position for the
whole chunk up front and takes the first token whose cumulative probability exceeds u x the total (one draw per
token instead of one per vocabulary entry, and a row's draws fixed by its place in the chunk alone). Both sample the
same distribution; their samples differ."""
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


def special_ids(model, tokenizer) -> tuple[int, set[int]]:
    """(pad id, set of EOS ids): the tokenizer's EOS plus any in the model's generation config."""
    eos = set()
    if tokenizer.eos_token_id is not None:
        eos.add(int(tokenizer.eos_token_id))
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if gen_eos is not None:
        eos.update(int(e) for e in (gen_eos if isinstance(gen_eos, (list, tuple)) else [gen_eos]))
    if not eos:
        raise ValueError("tokenizer.eos_token_id is None: generation needs an EOS token")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos)
    return int(pad), eos


def encode_texts(tokenizer, texts: list[str], field: str) -> list[list[int]]:
    """Token ids of each text, without special tokens (chat templates already carry their own)."""
    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
        raise TypeError(f"{field} must be a list of str, got {type(texts).__name__}")
    return tokenizer(list(texts), add_special_tokens=False)["input_ids"] if texts else []


def left_pad(seqs: list[list[int]], pad: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ids [B, L] and mask [B, L]."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)  # [B, L]
    mask = torch.zeros((len(seqs), width), dtype=torch.bool)  # [B, L]
    for i, s in enumerate(seqs):
        if s:
            ids[i, width - len(s):] = torch.tensor(s, dtype=torch.long)
            mask[i, width - len(s):] = True
    return ids.to(device), mask.to(device)


def right_pad(seqs: list[list[int]], pad: int, device, width: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids [B, L] and mask [B, L], L = the longest sequence (at least `width`)."""
    width = max([width, *(len(s) for s in seqs)])
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)  # [B, L]
    mask = torch.zeros((len(seqs), width), dtype=torch.bool)  # [B, L]
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, : len(s)] = True
    return ids.to(device), mask.to(device)


def mask_positions(mask: torch.Tensor) -> torch.Tensor:
    """Position ids [B, L] from an attention mask [B, L]: index among real tokens (pads clamp to 0)."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def inverse_cdf_tokens(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """[r] the token of each row of `weights` [r, V] (non-negative, unnormalised, a positive sum) for uniforms `u`
    [r] in [0, 1): the first whose cumulative weight exceeds u x the row's total (a zero-weight token never)."""
    cdf = weights.cumsum(-1)  # [r, V]
    tok = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True).squeeze(-1)  # [r]
    return tok.clamp_(max=weights.shape[-1] - 1)  # u x total rounding up to the total: the last token


def _top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus filtering of probs [b, V]: keep the smallest top set with mass >= top_p (at least one token)."""
    sorted_p, order = probs.sort(dim=-1, descending=True)  # [b, V]
    drop = (sorted_p.cumsum(-1) - sorted_p) >= top_p  # [b, V] mass before this token already reaches top_p
    drop[:, 0] = False
    sorted_p = sorted_p.masked_fill(drop, 0.0)
    return torch.zeros_like(probs).scatter_(-1, order, sorted_p)  # [b, V] unnormalised


def finite_rows(logits: torch.Tensor) -> torch.Tensor:
    """logits [..., V] with every row that holds a non-finite value set to 0 (a uniform distribution): what a
    diverged model (e.g. a wild ES member) samples from. Returns `logits` itself when all are finite (the common
    case: one sum, finite only if every value is, instead of a masked copy; a sum that overflows takes the per-row
    path, which finds every row finite)."""
    if bool(torch.isfinite(logits.sum())):
        return logits
    return torch.where(torch.isfinite(logits).all(-1, keepdim=True), logits, 0.0)


def cut_at_stop(text: str, stop: str | None) -> str:
    """`text` up to and including the first occurrence of `stop` (the whole text when absent or stop is None)."""
    if stop:
        at = text.find(stop)
        if at >= 0:
            return text[: at + len(stop)]
    return text


def _unique_rows(keys: torch.Tensor):
    """(distinct keys [U], index of one occurrence of each [U], inverse [B]) of keys [B]."""
    distinct, inverse = torch.unique(keys, return_inverse=True)  # [U], [B]
    first = torch.empty(len(distinct), dtype=torch.long, device=keys.device)
    first[inverse] = torch.arange(len(keys), device=keys.device)  # any occurrence will do
    return distinct, first, inverse


def decode_rows(tokenizer, ids: torch.Tensor) -> list[str]:
    """`tokenizer.batch_decode` of each row of ids [B, L] (special tokens skipped), decoding each distinct row
    once: rows often agree (ES members, a prompt's samples, short stop-check tails). A tokenizers-backed tokenizer
    without space clean-up is decoded by its Rust backend directly (batch_decode's per-token Python conversion
    dominated decoding)."""
    if not len(ids):
        return []
    base = int(ids.max()) + 1
    if base ** ids.shape[1] < 2**62:  # each row as one int64 number in base `base`: a 1-D unique is much faster
        keys = (ids * base ** torch.arange(ids.shape[1] - 1, -1, -1, device=ids.device)).sum(1)  # [B]
        _, first, inverse = _unique_rows(keys)
        distinct = ids[first]  # [U, L]
    else:
        distinct, inverse = torch.unique(ids, dim=0, return_inverse=True)  # [U, L], [B]
    rows = distinct.tolist()
    if type(tokenizer)._decode is TokenizersBackend._decode and not tokenizer.clean_up_tokenization_spaces:
        texts = tokenizer.backend_tokenizer.decode_batch(rows, skip_special_tokens=True)  # what batch_decode does,
    else:  # without its per-token Python checks (`to_py_obj`)
        texts = tokenizer.batch_decode(rows, skip_special_tokens=True)
    return [texts[k] for k in inverse.tolist()]


_STOP_ENDS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
"""tokenizer -> {(stop, vocabulary size): `stop_end_tokens`' table}, built once per tokenizer and stop string."""


def stop_end_tokens(tokenizer, stop: str, vocab_size: int, device) -> torch.Tensor:
    """[V] bool: the tokens whose own text holds `stop`'s last character, the only tokens that can complete an
    occurrence of `stop` (the rows a decode step's stop check needs to decode); every token when that character is
    not printable ASCII (a byte-level token's text shows an ASCII character exactly when its bytes hold it), and
    every id the tokenizer does not know. Built once per (tokenizer, stop, V) (per call for a tokenizer that cannot
    be weakly referenced)."""
    try:
        tables = _STOP_ENDS.setdefault(tokenizer, {})
    except TypeError:  # a tokenizer that cannot be weakly referenced or hashed: built for this call only
        tables = {}
    table = tables.get((stop, vocab_size))
    if table is None:
        last = stop[-1]
        table = torch.ones(vocab_size, dtype=torch.bool)  # [V]
        known = min(vocab_size, len(tokenizer))
        if last.isascii() and last.isprintable() and not last.isspace() and known:
            texts = decode_rows(tokenizer, torch.arange(known)[:, None])
            table[:known] = torch.tensor([last in text for text in texts])
        tables[stop, vocab_size] = table
    return table.to(device)


class _FusedStep:
    """`generate(..., forward="fused" or "native")`'s model call: `models.fused_qwen2.FusedQwen2` with one member,
    behind the interface `_decode_chunk` uses (prefill the distinct prompts, copy rows, decode one token, keep
    rows)."""

    def __init__(self, model, fused: list, capacity: int, buffers: KVBuffers, native: bool):
        self.net = FusedQwen2(model, fused, capacity, buffers=buffers, native=native)

    def prefill(self, ids, mask, expand) -> torch.Tensor:
        """Last-position logits [r, V] of each row's prompt: `ids`, `mask` [u, Lp] prefilled once, then expanded
        (`expand` None: the distinct prompts' logits [u, V], one cache row each)."""
        lp = ids.shape[1]
        causal = torch.ones(lp, lp, dtype=torch.bool, device=ids.device).tril()  # [Lp, Lp]
        full = None if bool(mask.all()) else causal & mask[:, None, None, :]  # [u, 1, Lp, Lp]
        logits = self.net(ids[None], mask_positions(mask)[None], full, None)[0]  # [u, V]
        self.net.length = lp
        if expand is None:
            return logits
        self.net.select(expand[None])
        return logits[expand]

    def step(self, tok, pos, attn) -> torch.Tensor:
        """Logits [r, V] after token `tok` [r, 1] at positions `pos` [r, 1]; `attn` [r, T] every key's mask."""
        mask = None if bool(attn.all()) else attn[:, None, None, :]  # [r, 1, 1, T]
        logits = self.net(tok[None], pos[None], mask, None)[0]
        self.net.length += 1
        return logits

    def select(self, keep) -> None:
        """Keep running rows `keep` [r']."""
        self.net.select(keep[None])


def _decode_chunk(model, tokenizer, ids, mask, expand, *, greedy, temperature, top_p, max_new_tokens, stop,
                  pad, eos, gen, use_cache=True, fused=None, buffers=None, native=False, sampler="multinomial",
                  share_prefixes=False):
    """Generate for one chunk. `ids`, `mask` [u, Lp]: the chunk's distinct left-padded prompts; `expand` [b]:
    the prompt of each row. With the cache, each distinct prompt is prefilled once and its cache copied to
    its rows. With `fused` (`fused_qwen2.model_weights(model)`), `_FusedStep` computes the logits instead of
    `model`'s modules (its attention by the native kernel with `native`), with its KV cache in `buffers` (a
    `fused_qwen2.KVBuffers` the caller reuses across chunks). `sampler` is one of `SAMPLERS`. With `fused` and
    `share_prefixes`, the cache holds one row per distinct running prefix (prompt and tokens so far): each step
    forwards the distinct prefixes' newest tokens and hands every running row its prefix's logits (`slot`), so the
    rows, their draws and their compaction are those of the unshared decode. Returns (tokens, valid, logprobs,
    entropies), each [b, T]."""
    b = expand.shape[0]
    device = ids.device
    eos_t = torch.tensor(sorted(eos), device=device)  # [E]
    temp = 1.0 if greedy else float(temperature)
    stop_window = len(stop) if stop else 0  # a stop string of k chars spans at most k tokens
    stop_ends = stop_end_tokens(tokenizer, stop, model.config.vocab_size, device) if stop else None  # [V]
    tokens = torch.full((b, max_new_tokens), pad, dtype=torch.long, device=device)  # [b, T]
    valid = torch.zeros((b, max_new_tokens), dtype=torch.bool, device=device)  # [b, T]
    logps = torch.zeros((b, max_new_tokens), dtype=torch.float32, device=device)  # [b, T]
    ents = torch.zeros((b, max_new_tokens), dtype=torch.float32, device=device)  # [b, T]
    rows = torch.arange(b, device=device)  # [r] chunk row of each running row
    seq, attn = ids[expand], mask[expand]  # [r, L] the tokens so far (cached: the newest) / every key's mask
    pos = mask_positions(attn)  # [r, L] (cached: the newest)
    cache = transformers.DynamicCache(config=model.config) if use_cache and fused is None else None
    runner = None if fused is None else _FusedStep(model, fused, ids.shape[1] + max_new_tokens, buffers, native)
    step_ids, step_pos, step_attn = seq, pos, attn  # [r, L] what the next forward sees
    slot = expand if runner is not None and share_prefixes else None  # [r] each running row's cache row
    slots = ids.shape[0]  # cache rows while sharing prefixes
    done = torch.zeros(b, dtype=torch.bool, device=device)  # [r]
    uniforms = None  # [b, T] "inverse-cdf"'s draw of each chunk row and position
    if not greedy and sampler == "inverse-cdf":
        uniforms = torch.rand((b, max_new_tokens), generator=gen, device=device)
    for t in range(max_new_tokens):
        if runner is not None:
            last = (runner.prefill(ids, mask, None if slot is not None else expand) if t == 0
                    else runner.step(step_ids, step_pos, step_attn))  # [r or distinct prefixes, V]
            last = last if slot is None else last[slot]  # [r, V]
        elif use_cache and t == 0:  # prefill the distinct prompts, then give each row its prompt's cache
            out = model(input_ids=ids, attention_mask=mask, position_ids=mask_positions(mask), **with_cache(cache),
                        use_cache=True, logits_to_keep=1)
            cache = output_cache(out)
            cache.batch_select_indices(expand)
            last = out.logits[expand, -1]  # [r, V]
        else:
            out = model(input_ids=step_ids, attention_mask=attn, position_ids=step_pos, **with_cache(cache),
                        use_cache=use_cache, logits_to_keep=1)
            cache = output_cache(out) if use_cache else None
            last = out.logits[:, -1]  # [r, V]
        logits = last.float() / temp  # [r, V]
        logits = finite_rows(logits)  # [r, V]
        logp = torch.log_softmax(logits, dim=-1)  # [r, V]
        probs = logp.exp()  # [r, V]
        entropy = -(probs * logp).nan_to_num().sum(-1)  # [r]
        if greedy:
            tok = logits.max(-1).indices  # [r] argmax's tokens (first of ties), at half its cost on CPU
        else:
            weights = _top_p_filter(probs, top_p) if top_p < 1.0 else probs  # [r, V]
            tok = (torch.multinomial(weights, 1, generator=gen).squeeze(-1) if uniforms is None
                   else inverse_cdf_tokens(weights, uniforms[rows, t]))  # [r]
        live = ~done  # [r]
        tok = torch.where(live, tok, torch.full_like(tok, pad))  # [r]
        tokens[rows, t] = tok
        valid[rows, t] = live
        logps[rows, t] = torch.where(live, logp.gather(-1, tok[:, None]).squeeze(-1), 0.0)
        ents[rows, t] = torch.where(live, entropy, 0.0)
        done = done | torch.isin(tok, eos_t)
        if stop_window:  # every row was live at some point of this step (all-done breaks the loop)
            lo = max(0, t + 1 - stop_window)
            # [c] running rows that may have hit the stop: an occurrence first completes at a token holding its
            # last character (one that completed earlier was found at that step)
            check = torch.nonzero(live & ~done & stop_ends[tok]).squeeze(-1)
            if len(check):
                tails = decode_rows(tokenizer, tokens[rows[check], lo: t + 1])
                hit = torch.tensor([stop in s for s in tails], dtype=torch.bool, device=device)  # [c]
                done[check] = done[check] | hit
        n_done = int(done.sum())  # the one host sync per step
        if n_done == len(rows):
            break
        attn = torch.cat([attn, live[:, None]], dim=1)  # [r, L+1]
        if use_cache:  # a cached forward sees only the newest token
            seq, pos = tok[:, None], pos[:, -1:] + 1  # [r, 1]
        else:
            seq, pos = torch.cat([seq, tok[:, None]], dim=1), torch.cat([pos, pos[:, -1:] + 1], dim=1)  # [r, L+1]
        if n_done >= max(1, COMPACT_FRACTION * len(rows)):
            keep = torch.nonzero(~done).squeeze(-1)  # [r']
            rows, seq, attn, pos, done = rows[keep], seq[keep], attn[keep], pos[keep], done[keep]
            if slot is not None:
                slot = slot[keep]
            elif runner is not None:
                runner.select(keep)
            elif use_cache:
                cache.batch_select_indices(keep)
        step_ids, step_pos, step_attn = seq, pos, attn
        if slot is not None:  # the running rows' distinct prefixes: (their prefix's cache row, the newest token)
            _, first, inverse = _unique_rows(slot * last.shape[-1] + seq[:, 0])  # [u'] one row of each, [r]
            parents = slot[first]  # [u'] the cache row each distinct prefix extends
            if len(parents) != slots or not torch.equal(parents, torch.arange(slots, device=device)):
                runner.select(parents)  # no copy when every prefix has exactly one continuation
            slots, slot = len(parents), inverse
            step_ids, step_pos, step_attn = seq[first], pos[first], attn[first]
    return tokens, valid, logps, ents


def _generate(model, tokenizer, prompts, *, n=1, temperature=1.0, top_p=1.0, greedy=False, max_new_tokens=32,
              stop=None, seed=0, batch_size=512, use_cache=True, forward="hf", sampler="multinomial",
              fused=None, share_prefixes=False) -> Rollouts:
    """`generate` with a switch for the KV cache (`use_cache=False` recomputes the full prefix every step)."""
    if forward not in FORWARDS:
        raise ValueError(f"forward must be one of {FORWARDS}, got {forward!r}")
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {SAMPLERS}, got {sampler!r}")
    if forward != "hf":
        check_fusable(model, f"generate(forward={forward!r})")
        if not use_cache:
            raise ValueError(f"forward={forward!r} decodes with its own KV cache: use_cache must be True")
    elif share_prefixes:
        raise ValueError("share_prefixes needs forward 'fused' or 'native' (their KV cache rows are selectable)")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    if not greedy and not temperature > 0:
        raise ValueError(f"temperature must be > 0 when sampling, got {temperature!r}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    if stop is not None and (not isinstance(stop, str) or not stop):
        raise ValueError(f"stop must be a non-empty str or None, got {stop!r}")
    encoded = encode_texts(tokenizer, prompts, "prompts")
    if not encoded:
        raise ValueError("prompts must not be empty")
    for i, e in enumerate(encoded):
        if not e:
            raise ValueError(f"prompts[{i}] = {prompts[i]!r} encodes to no tokens")
    pad, eos = special_ids(model, tokenizer)
    device = model.device
    n_rows = len(encoded) * n  # B, rows grouped by prompt
    gen = torch_generator(seed, "generate", device=device)
    was_training = model.training
    model.eval()
    parts = []
    try:
        with torch.no_grad():
            fused = None if forward == "hf" else model_weights(model) if fused is None else fused
            buffers = None if fused is None else KVBuffers()  # one KV cache storage for every chunk
            for start in range(0, n_rows, batch_size):
                which = np.arange(start, min(start + batch_size, n_rows)) // n  # [b] prompt of each row
                uniq, expand = np.unique(which, return_inverse=True)  # [u], [b]
                ids, mask = left_pad([encoded[i] for i in uniq], pad, device)  # [u, Lp]
                expand = torch.as_tensor(expand, device=device)  # [b]
                parts.append((ids[expand], mask[expand]) + _decode_chunk(
                    model, tokenizer, ids, mask, expand, greedy=greedy, temperature=temperature, top_p=top_p,
                    max_new_tokens=max_new_tokens, stop=stop, pad=pad, eos=eos, gen=gen, use_cache=use_cache,
                    fused=fused, buffers=buffers, native=forward == "native", sampler=sampler,
                    share_prefixes=share_prefixes))
    finally:
        model.train(was_training)
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

    prompt_ids, prompt_mask = cat(0, lp, pad, True), cat(1, lp, False, True)  # [B, Lp]
    completion_ids, completion_mask = cat(2, lc, pad, False), cat(3, lc, False, False)  # [B, Lc]
    logprobs, entropies = cat(4, lc, 0.0, False), cat(5, lc, 0.0, False)  # [B, Lc]
    texts = decode_rows(tokenizer, completion_ids)
    return Rollouts(prompts=list(prompts), n=n, completions=[cut_at_stop(s, stop) for s in texts],
                    prompt_ids=prompt_ids, prompt_mask=prompt_mask, completion_ids=completion_ids,
                    completion_mask=completion_mask, logprobs=logprobs, entropies=entropies)


def generate(model, tokenizer, prompts, *, n=1, temperature=1.0, top_p=1.0, greedy=False, max_new_tokens=32,
             stop=None, seed=0, batch_size=512, forward="hf", sampler="multinomial", fused=None,
             share_prefixes=False) -> Rollouts:
    """Sample `n` completions per prompt (or decode greedily), `batch_size` rows per forward batch.

    Rows stop at an EOS (kept as their last token) or once their text contains `stop` (kept in the text);
    finished rows emit pad and are masked. Greedy ignores `temperature` and `top_p`; its logprobs and
    entropies are those of the T=1 distribution. Runs under no_grad in eval mode (the mode is restored);
    deterministic for a given `seed` and `batch_size` (one torch generator, stream "generate"). `forward`
    "fused" (a float32 Qwen2 only) computes the logits with `models.fused_qwen2` instead of the model's modules:
    faster on small models, equal to "hf" up to float rounding (tests/test_generation_fused.py); "native" is that
    forward with `models.native`'s attention kernel (equal to "hf" up to float rounding too). `sampler` (one of
    `SAMPLERS`) draws the sampled tokens: "multinomial" (`torch.multinomial`) or "inverse-cdf" (one uniform per
    token: the same distribution, other samples). `fused` is `fused_qwen2.model_weights(model)` computed by a
    caller that samples the same weights in several calls (forward "fused" or "native"; None computes it here).
    `share_prefixes` (forward "fused" or "native") forwards each distinct running prefix once per step (a prompt's
    samples share their first tokens: ~10% of the tiny evaluation's row-steps are distinct) and gives its rows
    its logits: the same draws, equal to the unshared decode up to float rounding (other gemm shapes).
    """
    return _generate(model, tokenizer, prompts, n=n, temperature=temperature, top_p=top_p, greedy=greedy,
                     max_new_tokens=max_new_tokens, stop=stop, seed=seed, batch_size=batch_size, forward=forward,
                     sampler=sampler, fused=fused, share_prefixes=share_prefixes)


def completion_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask, *, temperature=1.0,
                        with_entropy=False):
    """Per-token log pi(completion token) [B, Lc] (and entropies [B, Lc] or None), differentiable.

    One forward pass over [prompt_ids, completion_ids] with the joint attention mask and position ids from
    it; the log-softmax of logits / temperature (in float32) is gathered at the completion tokens. Entries
    where `completion_mask` is False are 0.
    """
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    if prompt_ids.shape != prompt_mask.shape or completion_ids.shape != completion_mask.shape:
        raise ValueError(f"ids/mask shapes differ: prompt {tuple(prompt_ids.shape)} vs {tuple(prompt_mask.shape)}, "
                         f"completion {tuple(completion_ids.shape)} vs {tuple(completion_mask.shape)}")
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
