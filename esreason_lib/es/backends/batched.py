"""A population-batched ES evaluator: every member of a population decodes greedily in one batched forward.

`BatchedBackend` implements `es.backends.base.PopulationEvaluator` for Qwen2 models. Per step it tokenizes the
prompts once, materialises each member's weights W_i = fl(W + sign_i * sigma * eps(seed_i)) with the very kernel
`es.noise.perturb` uses (so W_i is bit-identical to the sequential path's perturbed weight), stacks them per tensor
([N, *shape]: N copies of the weights, never N model objects; `members_at_once` members at a time when set), and runs
the functional Qwen2 forward of `es.backends.population_forward`, in which each linear layer is one `bmm` over
members (q|k|v and gate|up fused), everything else (norms, rotary, attention, argmax) one op over all N x rows, with
a preallocated KV cache; the prefill runs in member chunks of about `_PREFILL_ROWS` token positions, and each
distinct completion is decoded and scored once.

Why the rewards equal `SequentialBackend`'s exactly (float32 greedy, verified by tests/test_es_batched.py): the
decode loop mirrors `generation._decode_chunk` per member, so each member's running batch has the same rows at
every step as the sequential path's (same compaction rule), laid out in its slot [0, r_i) of an [N, R] grid.
Then (1) a member's linear layer is a gemm of the same shape M = r_i * L, K, O as the sequential `F.linear`, and
`bmm` of a member's slice calls that same gemm (measured bit-identical; a CPU gemm may round differently for
other M, e.g. M <= 3 here, which is why members are grouped by r_i instead of padded); (2) all other ops are
row-independent (elementwise, per-row reductions, per-row attention), measured bit-identical across batch sizes;
(3) the attention gets the mask Hugging Face would build for that member's batch: `None` when every row of the
member's batch is unmasked (SDPA then takes a different, not bit-equal, kernel path), else the boolean mask.
Hence every member's logits, greedy tokens, completions and rewards are bit-identical to the sequential path's.
Greedy only: sampling draws from one generator stream whose order depends on the batch, so it cannot match.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from transformers.models.qwen2.modeling_qwen2 import Qwen2ForCausalLM

from esreason_lib.es.backends.base import Evaluation
from esreason_lib.es.backends.population_forward import Qwen2Population, RowGroups, fuse_weights
from esreason_lib.es.noise import noise, shifted
from esreason_lib.models.generation import (
    COMPACT_FRACTION,
    cut_at_stop,
    decode_rows,
    encode_texts,
    finite_rows,
    left_pad,
    mask_positions,
    special_ids,
    stop_end_tokens,
)
from esreason_lib.models.hf_compat import causal_mask
from esreason_lib.params import named_params
from esreason_lib.tasks.base import score_completion
from esreason_lib.validation import check_optional_positive_int

_PREFILL_ROWS = 4096
"""Token positions per prefill chunk (members x prompts x prompt length): the prefill runs members in chunks of
about this size, whose activations stay in cache; one chunk of all members is memory-bound (measured at N=32,
P=128 on the loaded 2-core machine: 1.2-1.5 s CPU per population with chunks of 2048-8192, 1.8-2.0 s without)."""


@torch.no_grad()
def member_weights(params: dict[str, torch.Tensor], seeds, signs, sigma: float) -> dict[str, torch.Tensor]:
    """name -> [N, *shape]: member i's tensor fl(W + signs[i] * sigma * eps(seeds[i])), bit-identical to what
    `es.noise.perturb` writes into the model (same noise, same kernel); members sharing a seed share one draw.
    Members with the same sign are written by one broadcast op per tensor (into a strided view of the stack when
    they are evenly spaced, as antithetic pairs' are)."""
    coefs = [float(sign) * float(sigma) for sign in signs]
    draws = {s: k for k, s in enumerate(dict.fromkeys(seeds))}  # each distinct seed -> its row of the draws
    out = {}
    for name, p in params.items():
        eps = torch.stack([noise(s, name, p) for s in draws])  # [U, *shape]
        w = p.new_empty(len(seeds), *p.shape)  # [N, *shape]
        for c in dict.fromkeys(coefs):
            members = [i for i, ci in enumerate(coefs) if ci == c]  # [G]
            rows = [draws[seeds[i]] for i in members]
            step = members[1] - members[0] if len(members) > 1 else 1
            even = members == list(range(members[0], members[0] + step * len(members), step))
            source = eps if rows == list(range(len(draws))) else eps[rows]  # [G, *shape]
            if even:
                shifted(p.detach(), source, c, out=w[members[0]::step][: len(members)])
            else:
                w[members] = shifted(p.detach(), source, c, out=torch.empty_like(source))
        out[name] = w
    return out


@torch.no_grad()
def _decode_population(model, tokenizer, forward, n: int, ids, mask, *, max_new_tokens: int, stop: str | None,
                       pad: int, eos: set[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy decoding of one chunk of prompts (`ids`, `mask` [b, Lp], one row per prompt) by the `n` members,
    mirroring `generation._decode_chunk` member by member; `forward` is a fresh `Qwen2Population` (or one with
    its interface) of capacity Lp + max_new_tokens. Returns (tokens, valid), each [N, b, T]."""
    (b, lp), device = ids.shape, ids.device
    eos_t = torch.tensor(sorted(eos), device=device)  # [E]
    stop_window = len(stop) if stop else 0
    stop_ends = stop_end_tokens(tokenizer, stop, model.config.vocab_size, device) if stop else None  # [V]
    tokens = torch.full((n, b, max_new_tokens), pad, dtype=torch.long, device=device)  # [N, b, T]
    valid = torch.zeros((n, b, max_new_tokens), dtype=torch.bool, device=device)  # [N, b, T]
    member = torch.arange(n, device=device)[:, None]  # [N, 1]
    rows = torch.arange(b, device=device).repeat(n, 1)  # [N, R] chunk row of each slot
    counts = torch.full((n,), b, dtype=torch.long, device=device)  # [N] r_i: running rows of member i
    attn = torch.zeros((n, b, lp + max_new_tokens), dtype=torch.bool, device=device)  # [N, R, Lmax]
    attn[:, :, :lp] = mask
    pos = mask_positions(mask)  # [b, Lp]
    shape_only = torch.empty((b, lp, model.config.hidden_size), dtype=model.dtype, device=device)  # [b, Lp, d]
    prefill_mask = causal_mask(config=model.config, inputs_embeds=shape_only, attention_mask=mask, cache=None,
                               position_ids=pos)  # None or [b, 1, Lp, Lp], as the sequential prefill gets
    if prefill_mask is not None:
        prefill_mask = prefill_mask.repeat(n, 1, 1, 1)  # [N*b, 1, Lp, Lp]
    step = max(1, _PREFILL_ROWS // (b * lp))  # members per prefill chunk: its activations stay cache-sized
    chunks = [slice(at, min(at + step, n)) for at in range(0, n, step)]
    logits = torch.cat([forward(ids.expand(c.stop - c.start, b, lp), pos.expand(c.stop - c.start, b, lp),
                                None if prefill_mask is None else prefill_mask[: (c.stop - c.start) * b],
                                RowGroups(counts[c], b), c) for c in chunks])  # [N, b, V]
    forward.length = lp
    last_pos = pos[:, -1:].expand(n, b, 1)  # [N, R, 1]
    done = torch.zeros((n, b), dtype=torch.bool, device=device)  # [N, R]
    for t in range(max_new_tokens):
        width = rows.shape[1]
        slot = torch.arange(width, device=device)[None] < counts[:, None]  # [N, R] slots in a member's batch
        logits = finite_rows(logits.float())  # [N, R, V]
        live = slot & ~done  # [N, R]
        tok = torch.where(live, logits.max(-1).indices, pad)  # [N, R] argmax's tokens (first of ties), at half its cost
        tokens[member, rows, t] = tok  # slots outside a member's batch hold rows it dropped: pad, not valid
        valid[member, rows, t] = live
        done = done | (torch.isin(tok, eos_t) & slot)
        if stop_window:
            check = torch.nonzero(live & ~done & stop_ends[tok])  # [c, 2] (member, slot) of running rows that may
            # hit the stop (`generation.stop_end_tokens`: only a token holding its last character completes it)
            if len(check):
                tails = tokens[check[:, 0], rows[check[:, 0], check[:, 1]], max(0, t + 1 - stop_window): t + 1]
                hit = [stop in s for s in decode_rows(tokenizer, tails)]
                done[check[:, 0], check[:, 1]] |= torch.tensor(hit, dtype=torch.bool, device=device)
        n_done = (done & slot).sum(1)  # [N]
        counts = torch.where(n_done == counts, 0, counts)  # a member whose rows are all done stops
        if not int(counts.max()):
            break
        attn[:, :width, lp + t] = live
        last_pos = last_pos + 1
        compact = (counts > 0) & (n_done >= torch.clamp(COMPACT_FRACTION * counts, min=1))  # [N]
        if bool(compact.any()):
            keep_slot = slot & ~(done & compact[:, None])  # [N, R]
            counts = torch.where(counts > 0, keep_slot.sum(1), 0)
            new_width = int(counts.max())
            order = torch.argsort((~keep_slot).to(torch.int8), dim=1, stable=True)[:, :new_width]  # [N, R']
            rows, done, last_pos, attn = rows[member, order], done[member, order], last_pos[member, order], \
                attn[member, order]
            tok = tok[member, order]
            forward.select(order)
            width = new_width
        cur = lp + t + 1
        slot = torch.arange(width, device=device)[None] < counts[:, None]  # [N, R]
        full = (attn[:, :, :cur] | ~slot[:, :, None]).all(2).all(1)  # [N] HF passes no mask for such a member
        mask_now = attn[:, :, None, None, :cur].reshape(n * width, 1, 1, cur)  # [N*R, 1, 1, T]
        if bool(full.all()):
            mask_now = None
        elif bool(full.any()):
            mask_now = (mask_now, full[:, None].expand(n, width).reshape(-1))
        logits = forward(tok[:, :, None], last_pos, mask_now, RowGroups(counts, width))  # [N, R, V]
        forward.length += 1
    return tokens, valid


def supports(model) -> bool:
    """Whether the batched forward implements `model`'s architecture (a `Qwen2ForCausalLM`, as the zoo's models and
    Qwen2.5 are); "auto" scores any other causal LM with the sequential backend (`registry.make_backend`)."""
    return isinstance(model, Qwen2ForCausalLM)


class BatchedBackend:
    """Score every member of a population in one batched greedy decode (one per part of `members_at_once`
    members when set; see the module docstring); the same rewards as `SequentialBackend` (bit-identical in
    float32), without touching the model's weights."""

    def __init__(self, task, tokenizer, *, max_new_tokens: int | None = None, batch_size: int = 512,
                 members_at_once: int | None = None):
        self.task, self.tokenizer = task, tokenizer
        self.max_new_tokens = int(max_new_tokens or task.max_new_tokens)
        self.batch_size = int(batch_size)
        """Prompts per decoded chunk (all members together): `generation.generate`'s default, so that prompt
        padding, and with it every row's arithmetic, matches the sequential path."""
        self.members_at_once = members_at_once
        """Members whose weights are stacked and decoded together (`ESConfig.members_at_once`); None: the whole
        population. Each member's rows are computed apart from the others', so the completions do not depend on
        it; memory does (N copies of the weights)."""
        check_optional_positive_int(self, "members_at_once")

    @classmethod
    def from_config(cls, config, task, tokenizer) -> "BatchedBackend":
        """The backend an `ESConfig` describes (it must decode greedily)."""
        if not config.greedy:
            raise ValueError("BatchedBackend: ESConfig.greedy must be True (sampling cannot match the sequential "
                             "path's generator stream)")
        return cls(task, tokenizer, max_new_tokens=config.max_new_tokens, members_at_once=config.members_at_once)

    def stacked_weights(self, params: dict[str, torch.Tensor], population) -> dict:
        """name -> every member's version of the tensor for the batched forward: `member_weights` stacks."""
        return member_weights(params, population.seeds.tolist(), population.signs.tolist(), population.sigma)

    def check_model(self, model) -> None:
        """Raise unless `model` is one this backend's forward implements (`supports`)."""
        if not supports(model):
            raise TypeError(f"BatchedBackend: needs a Qwen2ForCausalLM, got {type(model).__name__} "
                            "(use ESConfig.backend='sequential')")

    def prepare(self, model, weights: dict) -> list:
        """The per-layer weights the forward takes, from the `stacked_weights` stacks: `fuse_weights`."""
        return fuse_weights(model, weights)

    def population(self, model, weights, fused, capacity: int) -> Qwen2Population:
        """A fresh forward over the population (with an empty KV cache of `capacity` positions)."""
        return Qwen2Population(model, weights, fused, capacity)

    def completions(self, model, population, examples: list[dict]) -> list[list[str]]:
        """[N][P] each member's greedy completion of each example's prompt (cut after the task's stop)."""
        self.check_model(model)
        prompts = [self.task.prompt(ex, self.tokenizer) for ex in examples]
        encoded = encode_texts(self.tokenizer, prompts, "prompts")  # once for the whole population
        pad, eos = special_ids(model, self.tokenizer)
        step = self.members_at_once or max(len(population), 1)  # an empty population: no member, no decode
        texts: list[list[str]] = []
        was_training = model.training
        model.eval()
        try:
            for at in range(0, len(population), step):
                part = dataclasses.replace(population, seeds=population.seeds[at: at + step],
                                           signs=population.signs[at: at + step])
                texts += self._decode_members(model, part, encoded, pad, eos)
        finally:
            model.train(was_training)
        return [[cut_at_stop(s, self.task.stop) for s in member] for member in texts]

    def _decode_members(self, model, population, encoded, pad: int, eos: set[int]) -> list[list[str]]:
        """[n][P] the raw greedy completions of `population`'s members (all stacked at once) of the `encoded`
        prompts."""
        weights = self.stacked_weights(named_params(model), population)
        fused = self.prepare(model, weights)
        n = len(population)
        texts: list[list[str]] = [[] for _ in range(n)]
        for start in range(0, len(encoded), self.batch_size):
            ids, mask = left_pad(encoded[start: start + self.batch_size], pad, model.device)  # [b, Lp]
            forward = self.population(model, weights, fused, ids.shape[1] + self.max_new_tokens)
            tokens, valid = _decode_population(model, self.tokenizer, forward, n, ids, mask,
                                               max_new_tokens=self.max_new_tokens, stop=self.task.stop,
                                               pad=pad, eos=eos)  # [N, b, T]
            width = max(int(valid.sum(2).max()), 1)
            chunk = decode_rows(self.tokenizer, tokens[:, :, :width].reshape(-1, width))  # [N * b]
            for i in range(n):
                texts[i] += chunk[i * len(ids): (i + 1) * len(ids)]
        return texts

    def __call__(self, model, population, examples: list[dict], *, iteration: int) -> Evaluation:
        texts = self.completions(model, population, examples)
        n, p = len(population), len(examples)
        rewards, correct = np.zeros(n), np.zeros((n, p))  # [N], [N, P]
        scored: dict[tuple[int, str], tuple[float, bool]] = {}  # (prompt, completion) -> verdict, each scored once
        for i, done in enumerate(texts):
            for j, (c, ex) in enumerate(zip(done, examples)):
                if (j, c) not in scored:
                    scored[j, c] = score_completion(self.task, c, ex)
            verdicts = [scored[j, c] for j, c in enumerate(done)]
            rewards[i] = np.array([r for r, _ in verdicts], dtype=np.float64).mean()
            correct[i] = np.array([c for _, c in verdicts], dtype=np.float64)
        return Evaluation(rewards=rewards, correct=correct, fixup_frac=0.0, generations=n * p)
