"""Where the updates went: parameter drift, magnitude-threshold resets, random controls, per-module summaries;
and the per-problem score tables the studies of notebooks 04 and 05 test their findings on.

All functions take plain state dicts (`{name: tensor}`, e.g. `model.state_dict()`) of a base and a tuned
model with the same keys and shapes. "Changed" coordinates are those with a nonzero update delta = tuned - base;
sparsity is always counted over changed coordinates, since ES changes nearly every weight a little while GRPO's
Adam steps leave some exactly untouched.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from esreason_lib.metrics import pass_at_k
from esreason_lib.seeding import numpy_rng, torch_generator

StateDict = dict[str, torch.Tensor]

def module_type(name: str) -> str:
    """Coarse module type of a Qwen2 parameter name (embedding, attention, mlp, norm, lm_head, other)."""
    lowered = name.lower()
    if "embed" in lowered:
        return "embedding"
    if "norm" in lowered:
        return "norm"
    if "self_attn" in lowered or any(k in lowered for k in ("q_proj", "k_proj", "v_proj", "o_proj")):
        return "attention"
    if "mlp" in lowered or any(k in lowered for k in ("gate_proj", "up_proj", "down_proj")):
        return "mlp"
    if "lm_head" in lowered:
        return "lm_head"
    return "other"


def _check_pair(base: StateDict, tuned: StateDict) -> None:
    if set(base) != set(tuned):
        missing = sorted(set(base) ^ set(tuned))[:5]
        raise ValueError(f"base and tuned state dicts differ in keys, e.g. {missing}")
    for name in base:
        if base[name].shape != tuned[name].shape:
            raise ValueError(f"parameter {name!r}: base shape {tuple(base[name].shape)} != tuned "
                             f"{tuple(tuned[name].shape)}")


def _float_items(state: StateDict):
    return [(k, v) for k, v in state.items() if torch.is_floating_point(v)]


def update_deltas(base: StateDict, tuned: StateDict) -> StateDict:
    """delta = tuned - base in float32 for every floating-point tensor."""
    _check_pair(base, tuned)
    return {k: tuned[k].float() - v.float() for k, v in _float_items(base)}


def drift_table(base: StateDict, tuned: StateDict) -> pd.DataFrame:
    """One row per tensor: name, module, numel, changed (count of nonzero deltas), delta_l2, base_l2,
    rel_l2 = delta_l2 / base_l2, max_abs_delta."""
    rows = []
    for name, delta in update_deltas(base, tuned).items():
        base_l2 = float(base[name].float().norm())
        delta_l2 = float(delta.norm())
        rows.append({"name": name, "module": module_type(name), "numel": delta.numel(),
                     "changed": int((delta != 0).sum()), "delta_l2": delta_l2, "base_l2": base_l2,
                     "rel_l2": delta_l2 / base_l2 if base_l2 > 0 else float("nan"),
                     "max_abs_delta": float(delta.abs().max()) if delta.numel() else 0.0})
    return pd.DataFrame(rows)


def module_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per module type: rel_l2 (module-level relative L2), share of the total squared update, fraction changed."""
    g = table.assign(d2=table["delta_l2"] ** 2, b2=table["base_l2"] ** 2).groupby("module")
    out = pd.DataFrame({"numel": g["numel"].sum(), "changed": g["changed"].sum(),
                        "rel_l2": np.sqrt(g["d2"].sum()) / np.sqrt(g["b2"].sum()),
                        "update_share": g["d2"].sum() / max(float((table["delta_l2"] ** 2).sum()), 1e-30)})
    out["frac_changed"] = out["changed"] / out["numel"]
    return out.reset_index().sort_values("update_share", ascending=False, ignore_index=True)


def delta_quantiles(base: StateDict, tuned: StateDict, quantiles) -> np.ndarray:
    """Quantiles of |delta| over changed coordinates (thresholds tau for `reset_small_updates`)."""
    mags = torch.cat([d[d != 0].abs().flatten() for d in update_deltas(base, tuned).values()])
    if mags.numel() == 0:
        raise ValueError("tuned equals base: there are no changed coordinates to take quantiles of")
    qs = np.asarray(quantiles, dtype=np.float64)
    if np.any((qs < 0) | (qs > 1)):
        raise ValueError(f"quantiles must lie in [0, 1], got {quantiles!r}")
    return np.quantile(mags.numpy().astype(np.float64), qs)


def reset_small_updates(base: StateDict, tuned: StateDict, tau: float) -> tuple[StateDict, float]:
    """Reset every coordinate with 0 < |delta| <= tau to its base value.

    Returns the new state dict and the sparsity: the fraction of changed coordinates that were reset.
    """
    if not tau >= 0:
        raise ValueError(f"tau must be >= 0, got {tau!r}")
    out, reset, changed = dict(tuned), 0, 0
    for name, delta in update_deltas(base, tuned).items():
        nonzero = delta != 0
        small = nonzero & (delta.abs() <= tau)
        changed += int(nonzero.sum())
        reset += int(small.sum())
        out[name] = torch.where(small, base[name], tuned[name])
    return out, reset / max(changed, 1)


def random_reset(base: StateDict, tuned: StateDict, sparsity: float, seed: int = 0) -> tuple[StateDict, float]:
    """Control for `reset_small_updates`: reset exactly round(sparsity * changed) changed coordinates, every
    subset of that size equally likely, so a control given a magnitude reset's sparsity resets the same count.

    The count is split over tensors by a multivariate hypergeometric draw (stream (seed, "random_reset",
    "split")), then drawn without replacement inside each tensor (stream (seed, "random_reset", name)).
    Returns the new state dict and the sparsity achieved (the count over the changed coordinates).
    """
    if not 0.0 <= sparsity <= 1.0:
        raise ValueError(f"sparsity must lie in [0, 1], got {sparsity!r}")
    deltas = update_deltas(base, tuned)
    changed_at = {k: (d != 0).flatten().nonzero().squeeze(1) for k, d in deltas.items()}  # flat positions
    counts = np.array([len(v) for v in changed_at.values()], dtype=np.int64)  # [tensors]
    changed = int(counts.sum())
    target = int(round(sparsity * changed))
    split = numpy_rng(seed, "random_reset", "split").multivariate_hypergeometric(counts, target) if changed \
        else counts  # [tensors]
    out = dict(tuned)
    for (name, where), k in zip(changed_at.items(), split.tolist()):
        order = torch.randperm(len(where), generator=torch_generator(seed, "random_reset", name))  # [changed_t]
        pick = torch.zeros(deltas[name].numel(), dtype=torch.bool)
        pick[where[order[:k]]] = True
        out[name] = torch.where(pick.view(deltas[name].shape), base[name], tuned[name])
    return out, target / max(changed, 1)


def non_dominated(x, y) -> np.ndarray:
    """Mask of points not dominated in (x, y), higher is better in both: no other point is >= in both and > in one."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"x and y must be 1-D of equal length, got shapes {x.shape} and {y.shape}")
    ge = (x[None, :] >= x[:, None]) & (y[None, :] >= y[:, None])  # [i, j]: j is at least as good as i
    gt = (x[None, :] > x[:, None]) | (y[None, :] > y[:, None])
    return ~np.any(ge & gt, axis=1)


def per_problem_pass(table: pd.DataFrame, k: int) -> pd.DataFrame:
    """Per problem of an evaluation table (columns problem_id, n, c; `evaluation.EvalResult.table`): problem_id,
    pass@1 = c / n, pass@K (the unbiased Pass@k at `k`) and K = k."""
    n, c = table["n"].to_numpy(), table["c"].to_numpy()  # [P], [P]
    return pd.DataFrame({"problem_id": table["problem_id"].astype(str).to_numpy(), "pass@1": c / n,
                         "pass@K": pass_at_k(n, c, k), "K": int(k)})


def seed_by_problem(table: pd.DataFrame, value: str = "pass@1", problems=None) -> np.ndarray:
    """[seeds, problems] array of `value` from a tidy table with columns seed, problem_id and `value` (one row
    per pair): seeds in ascending order, problems in the order of `problems` (default: first appearance).
    Raises when a (seed, problem) pair is missing or repeated, naming it."""
    if table.empty:
        raise ValueError("seed_by_problem: the table has no rows (nothing was evaluated for this selection)")
    repeated = table[table.duplicated(["seed", "problem_id"])]
    if len(repeated):
        row = repeated.iloc[0]
        raise ValueError(f"seed_by_problem: seed {row['seed']}, problem {row['problem_id']!r} appears more than once")
    order = list(dict.fromkeys(table["problem_id"])) if problems is None else list(problems)
    wide = table.pivot(index="seed", columns="problem_id", values=value).sort_index()
    wide = wide.reindex(columns=order)
    if wide.isna().any().any():
        seed, problem = wide.isna().stack().loc[lambda x: x].index[0]
        raise ValueError(f"seed_by_problem: no {value!r} for seed {seed}, problem {problem!r}")
    return wide.to_numpy(dtype=np.float64)
