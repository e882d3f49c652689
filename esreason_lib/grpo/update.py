"""The GRPO update: `policy_update`, the optimiser steps of one iteration on a scored rollout batch, and
`forward_rows`, the rows it forwards.

The update (`policy_update`): the clipped surrogate loss (`grpo.loss.policy_loss`) and the optimiser steps on one
scored rollout batch, with one forward and one backward per minibatch (`micro_batch_size` only splits them for
memory), spent only where the loss can have a gradient:
- Identical rows (same prompt, completion and advantage, e.g. a prompt's samples that agree) are forwarded once
  and weighted by their multiplicity: their log-probs, ratios and per-token losses are the same numbers.
- Without a reference model (beta == 0), rows whose advantage is 0 (every row of a group whose rewards are all
  equal) are skipped: their per-token loss -min(ratio * 0, clip(ratio) * 0) is 0 with gradient 0 at any ratio;
  they still count in the normaliser (tokens or sequences of the whole minibatch), so the loss and its gradient
  are the full batch's.
  A minibatch with no row left still takes its optimiser step, from zero gradients (AdamW's momentum moves on).
- Each forward is cut to its rows' longest prompt and completion (the cut columns are padding for every row).
- With `GRPOConfig.shared_prompts`, each distinct prompt is forwarded once and its rows' completions on its KV
  cache (`grpo.logprobs.shared_prompt_logprobs`).
Mathematically the loss and gradient are those of the full batch; in floating point they differ from a forward
over all rows in rounding only (a different number of rows changes the gemm shapes and the order of the sums).
"""

from __future__ import annotations

import math

import torch

from esreason_lib.grpo.config import GRPOConfig
from esreason_lib.grpo.distributed import data_parallel, fully_sharded, micro_batch_rows, my_parts, reduce_step
from esreason_lib.grpo.logprobs import shared_prompt_logprobs
from esreason_lib.grpo.loss import policy_loss
from esreason_lib.models.generation import completion_logprobs
from esreason_lib.models.logprobs import Chunks, completion_scores
from esreason_lib.models.optim import optimizer_step


def forward_rows(p_ids, p_mask, c_ids, c_mask, adv, *, skip_zero_advantage: bool):
    """The rows of a minibatch that need a forward pass: one per distinct (prompt, completion, advantage), in
    order of first occurrence, without those whose advantage is 0 when `skip_zero_advantage`.

    Shapes: p_ids, p_mask [B, Lp]; c_ids, c_mask [B, Lc]; adv [B]. Returns (index [U] long, count [U] long): row
    index[j] stands for count[j] identical rows.
    """
    bits = adv.detach().to(torch.float32).view(torch.int32).long()  # [B] the advantage, bit for bit
    keys = torch.cat([p_ids, p_mask.long(), c_ids, c_mask.long(), bits[:, None]], dim=1)  # [B, K]
    _, inverse, count = torch.unique(keys, dim=0, return_inverse=True, return_counts=True)  # [B], [U]
    rows = torch.arange(len(keys), device=keys.device)  # [B]
    first = torch.full_like(count, len(keys)).scatter_reduce_(0, inverse, rows, "amin")  # [U]
    order = torch.argsort(first)  # [U] by first occurrence
    index, count = first[order], count[order]  # [U], [U]
    if skip_zero_advantage:
        live = adv[index] != 0  # [U]
        index, count = index[live], count[live]
    return index, count


def _chunks(start: int, stop: int, size: int | None) -> list[slice]:
    size = size or max(stop - start, 1)
    return [slice(i, min(i + size, stop)) for i in range(start, stop, size)]


def policy_update(model, ref, opt, p_ids, p_mask, c_ids, c_mask, adv, config: GRPOConfig) -> list[dict[str, float]]:
    """The optimiser steps of one iteration on a scored rollout batch: `ppo_epochs` passes over it, each split
    into minibatches of `minibatch_size` prompts (group_size rows each, in batch order), one step apiece.

    Shapes: p_ids, p_mask [B, Lp]; c_ids, c_mask [B, Lc]; adv [B] (rows grouped by prompt). pi_old is the model
    as passed in (the rollout policy), computed without grad before the first step (the first minibatch of the
    first pass takes it from its own forward: the same weights); pi_ref is `ref` (None when beta == 0). Only
    `forward_rows` are forwarded (see the module docstring). Returns one dict per step: `policy_loss`'s metrics
    over the minibatch (`policy/ratio_mean` over the forwarded rows' tokens, absent when there are none) and
    `policy/grad_norm`.
    """
    c, shard = config, data_parallel()  # (rank, world) under torch.distributed: `grpo.distributed`
    lockstep = shard is not None and fully_sharded(model)  # FSDP2: every forward and backward is a collective
    B = c_ids.shape[0]
    rows = B if c.minibatch_size is None else c.minibatch_size * c.group_size
    if B % rows:
        raise ValueError(f"batch of {B} rows does not split into minibatches of {rows} rows")
    lens = c_mask.sum(dim=1)  # [B]
    minibatches = []  # (minibatch slice, forwarded rows [U], their multiplicities [U])
    for mb in _chunks(0, B, rows):
        index, count = forward_rows(p_ids[mb], p_mask[mb], c_ids[mb], c_mask[mb], adv[mb],
                                    skip_zero_advantage=ref is None)
        minibatches.append((mb, index + mb.start, count))

    def logprobs_of(net, grad: bool, index: torch.Tensor) -> torch.Tensor:  # [u, lc] cut to the rows' padding
        lp_width, lc = int(p_mask[index].sum(1).max()), max(int(lens[index].max()), 1)
        args = (net, p_ids[index, -lp_width:], p_mask[index, -lp_width:], c_ids[index, :lc], c_mask[index, :lc])
        with torch.set_grad_enabled(grad):
            if c.shared_prompts:
                lp = shared_prompt_logprobs(*args, temperature=c.temperature)
            elif c.logit_chunk is not None:
                lp, _ = completion_scores(*args, temperature=c.temperature, chunks=Chunks(positions=c.logit_chunk))
            else:
                lp, _ = completion_logprobs(*args, temperature=c.temperature)
        return lp.float()  # [u, lc]

    def parts_of(index: torch.Tensor) -> list[slice | None]:  # the micro-batches of `index` this process forwards
        parts = _chunks(0, len(index), micro_batch_rows(len(index), c.micro_batch_size, shard))
        return my_parts(parts, shard, lockstep)  # None: a stand-in forward of one row, for the collectives

    def frozen_logprobs(net, index: torch.Tensor, out: torch.Tensor) -> None:  # fills out[index] [u, Lc]
        for part in parts_of(index):
            lp = logprobs_of(net, False, index[part or slice(0, 1)])  # [u, lc]
            if part is not None:
                out[index[part], : lp.shape[1]] = lp

    old = torch.zeros(c_ids.shape, dtype=torch.float32, device=c_ids.device)  # [B, Lc] pi_old
    ref_lp = None if ref is None else torch.zeros_like(old)  # [B, Lc] pi_ref
    for k, (_, index, _) in enumerate(minibatches):
        if k > 0 and len(index):
            frozen_logprobs(model, index, old)
        if ref is not None and len(index):
            frozen_logprobs(ref, index, ref_lp)

    if lockstep:
        model.reshard()  # FSDP2 keeps the root's parameters gathered after a forward: the sharded ones are stepped
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    steps: list[dict[str, float]] = []
    for epoch in range(c.ppo_epochs):
        for k, (mb, index, count) in enumerate(minibatches):
            model.zero_grad(set_to_none=True)
            n_tok, n_live = lens[mb].sum().clamp(min=1), (lens[mb] > 0).sum().clamp(min=1)  # [], []
            fwd_tok = (lens[index] * count).sum().clamp(min=1)  # [] tokens of the forwarded rows, with multiplicity
            acc = {"policy/clip_frac": 0.0, "policy/kl": 0.0 if ref is not None else math.nan, "loss/policy": 0.0}
            for part in parts_of(index):
                if part is None:  # FSDP2: this process's turn in the collectives, contributing nothing
                    (logprobs_of(model, True, index[:1]).sum() * 0.0).backward()
                    continue
                sel, w = index[part], count[part]  # [u] rows, [u] multiplicities
                logp = logprobs_of(model, True, sel)  # [u, lc]
                lc = logp.shape[1]
                if epoch == 0 and k == 0:
                    old[sel, :lc] = logp.detach()
                loss, m = policy_loss(logp, old[sel, :lc], None if ref_lp is None else ref_lp[sel, :lc],
                                      adv[sel], c_mask[sel, :lc], c.clip_eps, c.beta, c.aggregation, weight=w)
                part_tok = (lens[sel] * w).sum()  # []
                share = float(part_tok / n_tok) if c.aggregation == "token-mean" else \
                    float(((lens[sel] > 0) * w).sum() / n_live)
                (loss * share).backward()
                for key, v in m.items():  # token-weighted average over the parts (ratio: over forwarded tokens)
                    scale = share if key == "loss/policy" else float(part_tok / (
                        fwd_tok if key == "policy/ratio_mean" else n_tok))
                    acc[key] = acc.get(key, 0.0) + scale * v
            if not len(index):  # no row with a gradient: the step still runs, from zero gradients
                for p in params:
                    p.grad = torch.zeros_like(p)
            if shard is not None:  # the other processes' micro-batches: gradients (FSDP2 summed them) and metrics
                acc = reduce_step([] if lockstep else params, acc)
            acc["policy/grad_norm"] = optimizer_step(params, opt, c.max_grad_norm)
            steps.append(acc)
    model.eval()
    return steps
