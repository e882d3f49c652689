"""Notebook 01's descriptive tables (no verdict): training cost, training-entropy traces, seed spreads."""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from esreason_lib.paper.studies.common import run_cost
from esreason_lib.store.runs import Run


def cost_table(runs: Mapping[tuple[str, int], Run]) -> pd.DataFrame:
    """One row per run ({(arm, seed): Run}): arm, seed, iterations, generations (completions the updates used)
    and seconds (summed `time/step_s`), from `common.run_cost`."""
    rows = [{"arm": arm, "seed": seed, "iterations": int(run.config["iterations"]), **run_cost([run])}
            for (arm, seed), run in runs.items()]
    return pd.DataFrame(rows, columns=["arm", "seed", "iterations", "generations", "seconds"])


def entropy_traces(runs: Mapping[tuple[str, int], Run]) -> pd.DataFrame:
    """Tidy `policy/entropy` over training: arm, seed, step, progress (= step / iterations, in (0, 1]), entropy."""
    frames = []
    for (arm, seed), run in runs.items():
        m = run.metrics()
        if "policy/entropy" in m:
            m = m.loc[m["policy/entropy"].notna(), ["step", "policy/entropy"]].sort_values("step")
            frames.append(pd.DataFrame({"arm": arm, "seed": seed, "step": m["step"].to_numpy(),
                                        "progress": m["step"].to_numpy() / int(run.config["iterations"]),
                                        "entropy": m["policy/entropy"].to_numpy(dtype=float)}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["arm", "seed", "step", "progress", "entropy"])


def entropy_change(traces: pd.DataFrame, frac: float = 0.1) -> pd.DataFrame:
    """Per (arm, seed): first / last (mean entropy over the first / last `frac` of the logged steps, at least one
    step each) and ratio = last / first (x1.00: no change; a collapse is well below)."""
    if not 0 < frac <= 0.5:
        raise ValueError(f"frac must lie in (0, 0.5], got {frac!r}")
    rows = []
    for (arm, seed), df in traces.groupby(["arm", "seed"], sort=False):
        ent = df.sort_values("step")["entropy"].to_numpy(dtype=float)  # [steps]
        w = max(1, int(round(frac * len(ent))))
        first, last = float(ent[:w].mean()), float(ent[-w:].mean())
        rows.append({"arm": arm, "seed": int(seed), "first": first, "last": last,
                     "ratio": last / first if first > 0 else float("nan")})
    return pd.DataFrame(rows, columns=["arm", "seed", "first", "last", "ratio"])


# ------------------------------------------------------------------------------------ tidy tables


def spread(table: pd.DataFrame, columns, label: str = "arm") -> pd.DataFrame:
    """Per `label` (first-appearance order): `<col>` (mean over seeds), `<col>_min` and `<col>_max`."""
    g = table.groupby(label, sort=False)[list(columns)]
    return pd.concat([g.mean(), g.min().add_suffix("_min"), g.max().add_suffix("_max")], axis=1).reset_index()


def format_spread(table: pd.DataFrame, columns, label: str = "arm", digits: int = 3) -> pd.DataFrame:
    """A display copy of a `spread` table: each column as "mean [min, max]" (just "mean" when min == max)."""
    out = table[[label]].copy()
    for c in columns:
        out[c] = [f"{m:.{digits}f}" if (lo == hi or pd.isna(m))
                  else f"{m:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"
                  for m, lo, hi in zip(table[c], table[f"{c}_min"], table[f"{c}_max"])]
    return out
