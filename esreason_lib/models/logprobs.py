"""Every log-prob and entropy pass over completions, bounded: rows per decoder forward, positions and vocabulary
entries per output-head call.

`generation.completion_logprobs` takes the logits of every completion position at once and casts them to float32:
[rows, Lc, V], plus, for the entropy, its log-softmax, exp and their product (~16 bytes per token per vocabulary
entry; at Qwen2.5's 151,936 entries, 39 MB per completion token per tensor: ~90 GB for 64 rows of 512 tokens).
`completion_scores` runs the decoder on `Chunks.rows` rows at a time, then applies the output head to
`Chunks.positions` completion positions at a time; without gradients it also walks the vocabulary `Chunks.vocab`
entries at a time, keeping a running max, sum of exponentials and their logit-weighted sum (an online logsumexp:
log pi = z_target - logZ, entropy = logZ - E_pi[z]). Its largest logit tensor is rows x positions x vocab entries,
whatever the vocabulary and the length (`logit_bytes` counts it for `grpo.memory` and `models.placement`).
With gradients (GRPO's update) each position chunk runs under activation checkpointing: no chunk's logits are kept
for backward, they are recomputed one chunk at a time (the vocabulary walked whole: rows x positions x V).

Every no-grad pass over completions uses it with `SCORING`: ES's centre scoring on an engine
(`es.backends.vllm_engines.VLLMBackend.score_center`), GRPO's vLLM rollouts and evaluation on vLLM (both through
`models.rollouts_vllm.rollouts_from_tokens`); GRPO's update uses it with `GRPOConfig.logit_chunk`. Values equal
`completion_logprobs`'s up to float rounding (the head's matmul runs on other shapes, the entropy's sums in
another order; tests/test_logprobs_bounded.py); with every bound None it is `completion_logprobs` itself.
Passes over many rows outside these paths take their bounds from a logit byte budget (`SCORING_BYTES` by
default): `budget_chunks` cuts a `completion_scores` pass, `budget_rows` the row blocks of one that needs the whole
vocabulary at once (notebook 02's `full_logprobs`, notebook 05's LM loss). `shared_prompt_logprobs` is the no-grad pass
over many samples of few prompts (notebook 02's `sequence_logp`): each distinct prompt forwarded once, its KV cache
handed to its rows, each block of rows forwarding only its own longest completion.
`model` is a causal LM with `base_model` (the decoder: last hidden states) and `get_output_embeddings()` (the
head, applied as is: Qwen2, Llama, GPT-2; not a model that post-processes its logits, e.g. Gemma's soft-capping).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch.utils.checkpoint import checkpoint
from transformers import DynamicCache

from esreason_lib.models.generation import check_completion_inputs, completion_logprobs, mask_positions
from esreason_lib.models.hf_compat import output_cache, with_cache
from esreason_lib.validation import check_optional_positive_int, is_int


@dataclass(frozen=True)
class Chunks:
    """How a log-prob / entropy pass is cut; None leaves that axis whole."""

    rows: int | None = None
    """Rows per decoder forward (the decoder's no-grad activations scale with rows x sequence)."""
    positions: int | None = None
    """Completion positions per output-head call."""
    vocab: int | None = None
    """Vocabulary entries per output-head slice (no-grad passes only: under gradients the head runs whole)."""

    def __post_init__(self):
        check_optional_positive_int(self, "rows", "positions", "vocab")

    @property
    def whole(self) -> bool:
        """No axis cut: `completion_logprobs` itself."""
        return self.rows is None and self.positions is None and self.vocab is None


SCORING = Chunks(rows=16, positions=256, vocab=16384)
"""The bounds of every no-grad scoring pass: 16 x 256 x 16,384 float32 logits (256 MiB per tensor, ~0.9 GiB with
the entropy's temporaries, `logit_bytes`) however long the completions and large the vocabulary."""

NO_GRAD_BYTES = 14
"""Bytes per (row, position, vocabulary entry) at a no-grad head call's peak: the head's output (2 in bfloat16, 4
in float32), its float32 copy scaled by 1 / T, exp(z - max) and its product with z (4 each)."""
GRAD_BYTES = 10
"""Bytes per (row, position, vocabulary entry) under gradients: bfloat16 logits, their float32 copy and its
gradient (`grpo.memory`'s "logits" term)."""


def logit_bytes(chunks: Chunks, *, rows: int, positions: int, vocab: int, grad: bool = False) -> int:
    """The peak bytes of one output-head call of a pass over `rows` rows of `positions` completion positions with a
    `vocab`-entry vocabulary cut by `chunks` (each axis the smaller of the whole and its chunk)."""
    b = min(rows, chunks.rows or rows)
    c = min(positions, chunks.positions or positions)
    v = vocab if grad else min(vocab, chunks.vocab or vocab)
    return b * c * v * (GRAD_BYTES if grad else NO_GRAD_BYTES)


SCORING_BYTES = logit_bytes(SCORING, rows=SCORING.rows, positions=SCORING.positions, vocab=SCORING.vocab)
"""The logit byte budget of a no-grad pass cut by `budget_chunks` or `budget_rows`: SCORING's own peak (~0.9 GiB)."""


def check_budget(budget) -> None:
    """Raise ValueError naming `budget` unless it is a positive int (bytes)."""
    if not (is_int(budget) and budget >= 1):
        raise ValueError(f"budget must be a positive int (bytes), got {budget!r}")


def budget_rows(budget: int, *, positions: int, vocab: int, bytes_per: int = NO_GRAD_BYTES) -> int:
    """The most rows (at least 1) whose [rows, positions, vocab] logits take at most `budget` bytes at `bytes_per`
    bytes per entry: the row block of a pass that needs the whole vocabulary at once (one row may exceed it)."""
    check_budget(budget)
    return max(1, budget // (max(positions, 1) * max(vocab, 1) * bytes_per))


def head_vocab(model) -> int:
    """Entries of the model's output head: the width of its logits."""
    return int(model.get_output_embeddings().weight.shape[0])


def budget_chunks(budget: int, *, rows: int, positions: int, vocab: int) -> Chunks:
    """The `Chunks` of a no-grad pass over `rows` rows of `positions` completion positions with a `vocab`-entry
    vocabulary whose output-head calls take at most `budget` bytes (`logit_bytes`): `Chunks()` when the whole pass
    fits (`completion_logprobs` itself, bit for bit), else as many rows as fit; when one row does not, one row at
    a time with positions cut, and the vocabulary too when one position does not."""
    check_budget(budget)
    per_row = positions * vocab * NO_GRAD_BYTES
    if rows * per_row <= budget:
        return Chunks()
    if per_row <= budget:
        return Chunks(rows=budget // per_row)
    per_position = vocab * NO_GRAD_BYTES
    if per_position <= budget:
        return Chunks(rows=1, positions=budget // per_position)
    return Chunks(rows=1, positions=1, vocab=max(1, budget // NO_GRAD_BYTES))


def _head_block(hidden, targets, weight, bias, temperature: float, with_entropy: bool):
    """(log pi(targets) [b, c], entropy [b, c] or None) of hidden states [b, c, d] through the whole head (weight
    [V, d], bias [V] or None)."""
    logits = torch.nn.functional.linear(hidden, weight, bias).float() / temperature  # [b, c, V]
    log_z = torch.logsumexp(logits, dim=-1)  # [b, c]
    logp = logits.gather(-1, targets[..., None]).squeeze(-1) - log_z
    if not with_entropy:
        return logp, None
    return logp, log_z - (torch.exp(logits - log_z[..., None]) * logits).sum(-1)


def _head_block_by_vocab(hidden, targets, weight, bias, temperature: float, with_entropy: bool, vocab: int):
    """`_head_block`'s values, the head applied `vocab` entries at a time with an online logsumexp (no grad)."""
    shape = hidden.shape[:-1]  # [b, c]
    top = torch.full(shape, -torch.inf, device=hidden.device)  # running max of z
    total = torch.zeros(shape, device=hidden.device)  # sum exp(z - top)
    weighted = torch.zeros(shape, device=hidden.device)  # sum exp(z - top) z
    picked = torch.zeros(shape, device=hidden.device)  # z at the target
    for v0 in range(0, weight.shape[0], vocab):
        v1 = min(v0 + vocab, weight.shape[0])
        z = torch.nn.functional.linear(hidden, weight[v0:v1], None if bias is None else bias[v0:v1])
        z = z.float() / temperature  # [b, c, v]
        inside = (targets >= v0) & (targets < v1)
        at = z.gather(-1, (targets - v0).clamp(0, v1 - v0 - 1)[..., None]).squeeze(-1)
        picked = torch.where(inside, at, picked)
        new_top = torch.maximum(top, z.amax(-1))
        scale = torch.exp(top - new_top)
        e = torch.exp(z - new_top[..., None])  # [b, c, v]
        total = total * scale + e.sum(-1)
        if with_entropy:
            weighted = weighted * scale + (e * z).sum(-1)
        top = new_top
    log_z = top + torch.log(total)
    return picked - log_z, (log_z - weighted / total) if with_entropy else None


def _head_scores(model, hidden, targets, *, temperature: float, with_entropy: bool, chunks: Chunks):
    """(log-probs [b, Lc], entropies [b, Lc] or None) of the hidden states [b, Lc, d] that predict `targets`
    [b, Lc], the output head applied `chunks.positions` positions (and, without grad, `chunks.vocab` entries) at a
    time."""
    head, lc = model.get_output_embeddings(), targets.shape[1]
    grad = torch.is_grad_enabled()
    logps, ents = [], []
    for s in range(0, lc, chunks.positions or max(lc, 1)):
        block = (hidden[:, s: s + (chunks.positions or lc)], targets[:, s: s + (chunks.positions or lc)],
                 head.weight, head.bias, float(temperature), with_entropy)
        if grad:
            lp, ent = checkpoint(_head_block, *block, use_reentrant=False)
        elif chunks.vocab is None:
            lp, ent = _head_block(*block)
        else:
            lp, ent = _head_block_by_vocab(*block, chunks.vocab)
        logps.append(lp)
        ents.append(ent)
    return torch.cat(logps, dim=1), (torch.cat(ents, dim=1) if with_entropy else None)


def _rows_scores(model, ids, mask, targets, lc: int, *, temperature: float, with_entropy: bool, chunks: Chunks):
    """(log-probs [b, Lc], entropies [b, Lc] or None) of one row block: the decoder once, the head by chunks."""
    out = model.base_model(input_ids=ids, attention_mask=mask, position_ids=mask_positions(mask), use_cache=False)
    hidden = out.last_hidden_state[:, -(lc + 1): -1]  # [b, Lc, d] the states that predict each completion token
    return _head_scores(model, hidden, targets, temperature=temperature, with_entropy=with_entropy, chunks=chunks)


def completion_scores(model, prompt_ids, prompt_mask, completion_ids, completion_mask, *, temperature: float = 1.0,
                      with_entropy: bool = False, chunks: Chunks = Chunks()):
    """Per-token log pi(completion token) [B, Lc] (and entropies [B, Lc], else None), 0 where `completion_mask` is
    False: `generation.completion_logprobs`'s values (differentiable when grad is enabled), cut by `chunks`
    (module docstring). Shapes: prompt_ids, prompt_mask [B, Lp] (left-padded); completion_ids, completion_mask
    [B, Lc]."""
    if chunks.whole:
        return completion_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                                   temperature=temperature, with_entropy=with_entropy)
    check_completion_inputs(temperature, prompt_ids, prompt_mask, completion_ids, completion_mask)
    if torch.is_grad_enabled() and chunks.vocab is not None:
        raise ValueError(f"Chunks.vocab cuts no-grad passes only (under gradients the head runs whole), got "
                         f"{chunks.vocab!r}")
    device = model.device
    lc = completion_ids.shape[1]
    ids = torch.cat([prompt_ids, completion_ids], dim=1).to(device)  # [B, Lp+Lc]
    mask = torch.cat([prompt_mask.bool(), completion_mask.bool()], dim=1).to(device)  # [B, Lp+Lc]
    targets = completion_ids.to(device)  # [B, Lc]
    logps, ents = [], []
    step = chunks.rows or max(len(ids), 1)
    for r in range(0, len(ids), step):
        lp, ent = _rows_scores(model, ids[r: r + step], mask[r: r + step], targets[r: r + step], lc,
                               temperature=temperature, with_entropy=with_entropy, chunks=chunks)
        logps.append(lp)
        ents.append(ent)
    cmask = completion_mask.bool().to(device)  # [B, Lc]
    logp = torch.where(cmask, torch.cat(logps), 0.0)
    return logp, (torch.where(cmask, torch.cat(ents), 0.0) if with_entropy else None)


@torch.no_grad()
def shared_prompt_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask, *, rows: int = 64,
                           budget: int = SCORING_BYTES) -> torch.Tensor:
    """`completion_scores`'s per-token log pi(completion token) [B, Lc] (T = 1, no grad, 0 where
    `completion_mask` is False, float32 on the CPU), each distinct prompt forwarded once.

    The distinct (prompt_ids, prompt_mask) rows are prefilled together and their KV cache handed to every row that
    continues them (a prompt's samples); the rows then go `rows` at a time, longest completions first, each block
    forwarding only its completions (up to its own longest) over the cache, and the output head cut by `budget`
    (`budget_chunks`). Equal to `completion_scores` up to float rounding: attention reads cached keys and the
    gemms run on other shapes (tests/test_logprobs_bounded.py). Decoder compute per row falls from Lp + Lc to
    Lc + Lp / (rows per prompt)."""
    check_completion_inputs(1.0, prompt_ids, prompt_mask, completion_ids, completion_mask)
    check_budget(budget)
    if not (is_int(rows) and rows >= 1):
        raise ValueError(f"rows must be a positive int, got {rows!r}")
    device, lp = model.device, prompt_ids.shape[1]
    pmask = prompt_mask.bool()
    distinct, inverse = torch.unique(torch.cat([prompt_ids, pmask.long()], 1), dim=0, return_inverse=True)  # [U], [B]
    ids, mask = distinct[:, :lp].to(device), distinct[:, lp:].bool().to(device)  # [U, Lp]
    out = model.base_model(input_ids=ids, attention_mask=mask, position_ids=mask_positions(mask),
                           **with_cache(DynamicCache(config=model.config)), use_cache=True)
    prefix, last = output_cache(out), out.last_hidden_state[:, -1]  # the distinct prompts' cache; [U, d]
    lengths = completion_mask.sum(1)  # [B]
    order = torch.argsort(lengths, descending=True, stable=True)  # [B]
    result = torch.zeros(completion_ids.shape, dtype=torch.float32)  # [B, Lc]
    vocab = head_vocab(model)
    for s in range(0, len(order), rows):
        idx = order[s: s + rows]  # [b]
        lc = int(lengths[idx].max())
        if lc == 0:
            break
        cache = copy.deepcopy(prefix)
        cache.batch_select_indices(inverse[idx].to(device))
        cid, cmask = completion_ids[idx, :lc].to(device), completion_mask[idx, :lc].bool().to(device)  # [b, lc]
        full = torch.cat([pmask[idx].to(device), cmask], 1)  # [b, Lp + lc]
        h = model.base_model(input_ids=cid, attention_mask=full, position_ids=mask_positions(full)[:, lp:],
                             **with_cache(cache), use_cache=True).last_hidden_state  # [b, lc, d]
        hidden = torch.cat([last[inverse[idx].to(device)][:, None], h[:, :-1]], 1)  # [b, lc, d] predicting cid
        chunks = budget_chunks(budget, rows=len(idx), positions=lc, vocab=vocab)
        step = chunks.rows or len(idx)
        logp = torch.cat([_head_scores(model, hidden[r: r + step], cid[r: r + step], temperature=1.0,
                                       with_entropy=False, chunks=chunks)[0] for r in range(0, len(idx), step)])
        result[idx, :lc] = torch.where(cmask, logp, 0.0).float().cpu()
    return result
