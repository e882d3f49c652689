"""The model passes behind notebook 02 (`studies.diversity`): what `diversity_estimators` needs from a model,
each pass bounded in memory (`models.logprobs`).

Shapes: `B` rows (samples), `Lp` / `Lc` prompt / completion positions, `V` vocabulary, `D` parameters, `K`
directions.

- `full_logprobs`: the whole next-token distribution at every completion position (for `tokenwise_kl`).
- `sequence_logp`: each completion's summed log-probability (for `mis_success` / `is_success`).
- `stack_rollouts`: several rollouts over the same prompts as one batch.
- `flat_directions` / `fisher_projections`: the ES noise of given seeds flattened, and per-sample
  ||grad log pi(y)||^2 (the Fisher trace, as `theory.fisher_trace`) with the gradient's projections on those
  directions, giving each drawn population's own second-order prediction of JS_pol.
"""

from __future__ import annotations

import numpy as np
import torch

from esreason_lib.es.noise import noise
from esreason_lib.models.generation import completion_logprobs
from esreason_lib.models.logprobs import SCORING_BYTES, budget_rows, head_vocab, shared_prompt_logprobs
from esreason_lib.params import named_params

FULL_BYTES = 20
"""Bytes per (row, position, vocabulary entry) of `full_logprobs` on the model's device: the logits (at most 4),
their float64 copy and its log-softmax (8 each)."""


@torch.no_grad()
def full_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask, *,
                  batch_size: int = 256, budget: int = SCORING_BYTES) -> torch.Tensor:
    """log pi(. | x, y<t) over the whole vocabulary at every completion position: [B, Lc, V] float64.

    Inputs as in `generation.Rollouts` (prompts left-padded, completions right-padded). Rows go `batch_size` at a
    time, fewer when their logits would take more than `budget` bytes on the device (`FULL_BYTES` per entry,
    `models.logprobs.budget_rows`); the result itself, on the CPU, is whole."""
    lc, out = completion_ids.shape[1], []
    step = min(batch_size, budget_rows(budget, positions=lc, vocab=head_vocab(model), bytes_per=FULL_BYTES))
    for s in range(0, completion_ids.shape[0], step):
        ids = torch.cat([prompt_ids[s:s + step], completion_ids[s:s + step]], 1).to(model.device)
        mask = torch.cat([prompt_mask[s:s + step], completion_mask[s:s + step]], 1).bool().to(model.device)
        pos = (mask.long().cumsum(-1) - 1).clamp(min=0)  # [b, Lp+Lc]
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False,
                       logits_to_keep=lc + 1).logits[:, :-1]  # [b, Lc, V]
        out.append(torch.log_softmax(logits.double(), dim=-1).cpu())
    return torch.cat(out)  # [B, Lc, V]


def stack_rollouts(rollouts, pad_id: int):
    """Concatenate rollouts over the same prompts: (prompt_ids, prompt_mask, completion_ids, completion_mask),
    rows in order (rollout, row); completions right-padded with `pad_id` to the longest."""
    lp = {r.prompt_ids.shape[1] for r in rollouts}
    if len(lp) != 1:
        raise ValueError(f"rollouts must share their prompt padding, got widths {sorted(lp)}")
    lc = max(r.completion_ids.shape[1] for r in rollouts)

    def right(x, fill):
        gap = lc - x.shape[1]
        return torch.cat([x, torch.full((x.shape[0], gap), fill, dtype=x.dtype, device=x.device)], 1) if gap else x

    return (torch.cat([r.prompt_ids for r in rollouts]), torch.cat([r.prompt_mask for r in rollouts]),
            torch.cat([right(r.completion_ids, pad_id) for r in rollouts]),
            torch.cat([right(r.completion_mask, False) for r in rollouts]))


def sequence_logp(model, prompt_ids, prompt_mask, completion_ids, completion_mask, *, rows: int = 64,
                  budget: int = SCORING_BYTES) -> np.ndarray:
    """Summed log pi(completion | prompt) of each row under `model` (T = 1): [B] float64.

    `models.logprobs.shared_prompt_logprobs`: each distinct prompt forwarded once for all its samples, `rows` rows
    per decoder forward, no output-head call above `budget` bytes."""
    logp = shared_prompt_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask, rows=rows,
                                  budget=budget)  # [B, Lc]
    return logp.double().sum(-1).numpy()


def flat_directions(model, seeds) -> torch.Tensor:
    """The ES noise eps(seed) of each seed flattened over `named_params(model)` in order: [K, D] float32 on the
    CPU (drawn on the parameters' device, as `es.noise.perturbed` draws it)."""
    params = named_params(model)
    return torch.stack([torch.cat([noise(int(s), name, p).reshape(-1).cpu() for name, p in params.items()])
                        for s in seeds])  # [K, D]


def fisher_projections(model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                       directions: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample squared gradient norms and gradient projections (T = 1; one backward per row).

    For each row b, g_b = grad_theta log pi(y_b | x_b) over `named_params(model)` (flattened like
    `flat_directions`). Returns (sq [B] = ||g_b||^2, proj [B, K] = directions @ g_b). With rows sampled from the
    model itself, mean sq estimates tr I_x and mean (d . g)^2 estimates d^T I_x d."""
    params = list(named_params(model).values())
    was = model.training
    model.eval()
    sq, proj = np.zeros(completion_ids.shape[0]), np.zeros((completion_ids.shape[0], directions.shape[0]))
    try:
        for b in range(completion_ids.shape[0]):
            sl = slice(b, b + 1)
            logp, _ = completion_logprobs(model, prompt_ids[sl], prompt_mask[sl], completion_ids[sl],
                                          completion_mask[sl])  # [1, Lc]
            grads = torch.autograd.grad(logp.sum(), params, allow_unused=True)
            g = torch.cat([(gr if gr is not None else torch.zeros_like(p)).reshape(-1).float().cpu()
                           for gr, p in zip(grads, params)])  # [D]
            sq[b] = float(g.double().square().sum())
            proj[b] = (directions.to(g.device) @ g).double().numpy()  # [K]
    finally:
        model.train(was)
    return sq, proj
