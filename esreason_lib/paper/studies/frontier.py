"""The Pass@1-Pass@K frontier along training paths: Pass@K (or any per-problem column) at a matched Pass@1.

A *path* is one training run seen at its snapshots: the base (step 0), every `snapshot_every` iteration and the
final model, each evaluated per problem. The paper's claim is about the frontier these paths trace: at the same
Pass@1, ES keeps a higher Pass@K than GRPO. Comparing final models alone compares two points at different
Pass@1, and a gentle GRPO that barely moved scores like the base.

The matching rule (`matched`): for each seed of an arm, the path's seed Pass@1 (mean over the split's problems)
in training order; the first segment whose two ends bracket the target Pass@1 gives the point, by linear
interpolation (weight w on the later end); every per-problem value is interpolated with the same w. When no
segment brackets the target, the point nearest in Pass@1 is used and its gap is reported (`gap` != 0).

Tables here are tidy per-problem rows with columns arm, seed, step, split, problem_id and the value columns
(e.g. pass@1, pass@K, mean_entropy); base rows (arm "base") belong to every path at step 0.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

BASE = "base"
"""The arm label of the base model (step 0 of every path)."""


def _wide(rows: pd.DataFrame, column: str) -> tuple[np.ndarray, list]:
    """{step: per-problem values} of one seed's rows as ([steps, P], steps ascending), problems sorted by id."""
    wide = rows.pivot(index="step", columns="problem_id", values=column).sort_index().sort_index(axis=1)
    return wide.to_numpy(dtype=float), list(wide.index)


def bracket(x: np.ndarray, target: float) -> tuple[int, int, float, float]:
    """(i, j, w, gap) for a path of Pass@1 values `x` [S] in training order: the first segment (i, i + 1) with
    target between its ends gives w = (target - x_i) / (x_{i+1} - x_i) (w = 0 on a flat segment) and gap 0;
    otherwise i = j = the index nearest to target, w = 0, gap = x_i - target."""
    x = np.asarray(x, dtype=float)
    for i in range(len(x) - 1):
        lo, hi = sorted((x[i], x[i + 1]))
        if lo <= target <= hi:
            w = 0.0 if x[i + 1] == x[i] else float((target - x[i]) / (x[i + 1] - x[i]))
            return i, i + 1, w, 0.0
    i = int(np.argmin(np.abs(x - target)))
    return i, i, 0.0, float(x[i] - target)


def matched(paths: pd.DataFrame, arm: str, target: float, columns, *, split: str = "test",
            match_on: str = "pass@1") -> tuple[dict[str, np.ndarray], pd.DataFrame]:
    """`arm`'s per-problem values of each of `columns` at Pass@1 = `target` on `split` (the rule in the module
    docstring): ({column: [seeds, problems]}, per seed: seed, step_lo, step_hi, w, gap), seeds ascending."""
    sub = paths[paths["split"] == split]
    base = sub[sub["arm"] == BASE]
    own = sub[sub["arm"] == arm]
    if own.empty:
        raise ValueError(f"no {split} rows of arm {arm!r} in the paths; have {sorted(sub['arm'].unique())}")
    values: dict[str, list] = {c: [] for c in columns}
    info = []
    for seed, rows in sorted(own.groupby("seed"), key=lambda kv: kv[0]):
        rows = pd.concat([base.assign(step=0), rows]) if not base.empty else rows
        x, steps = _wide(rows, match_on)
        i, j, w, gap = bracket(x.mean(axis=1), target)
        for c in columns:
            v, _ = _wide(rows, c)
            values[c].append((1 - w) * v[i] + w * v[j])
        info.append({"seed": int(seed), "step_lo": int(steps[i]), "step_hi": int(steps[j]), "w": w, "gap": gap})
    return {c: np.stack(v) for c, v in values.items()}, pd.DataFrame(info)


def choose_matched_arm(paths: pd.DataFrame, arms, target: float, column: str, *, split: str) -> str:
    """Of `arms`, the one whose path reaches the highest mean `column` at Pass@1 = `target` on `split`, among
    those whose every seed's path brackets the target (all arms when none does; then the smallest mean |gap|
    first, the highest value among equals)."""
    scored = []
    for arm in arms:
        vals, info = matched(paths, arm, target, [column], split=split)
        reaches = bool((info["gap"] == 0).all())
        scored.append((reaches, -float(np.abs(info["gap"]).mean()), float(vals[column].mean()), arm))
    return max(scored, key=lambda s: s[:3])[3]
