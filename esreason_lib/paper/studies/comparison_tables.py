"""Notebook 01's tables (no verdict): over the per-problem evaluation table (`comparison.evaluate_models`: one row
per arm, seed and problem), its Pass@k columns, seed means, Pass@K curves, [seeds, problems] arrays and the
frontier's points; over the runs, training cost, training-entropy traces and seed spreads."""

from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from esreason_lib.metrics import bootstrap_ci, pass_at_k
from esreason_lib.paper.studies.common import run_cost
from esreason_lib.seeding import derive_seed
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


def with_pass(problems: pd.DataFrame, ks) -> pd.DataFrame:
    """`problems` with one column `pass@k` per k in `ks` (the unbiased per-problem estimate from n and c)."""
    n, c = problems["n"].to_numpy(), problems["c"].to_numpy()
    return problems.assign(**{f"pass@{k}": np.atleast_1d(pass_at_k(n, c, k)).astype(float) for k in ks})


def seed_table(problems: pd.DataFrame, k: int) -> pd.DataFrame:
    """Per (arm, seed) on the test split: pass@1, pass@K (K = `k`), greedy accuracy, distinct_correct (distinct
    correct answers per problem), solved (problems solved at least once = Pass@n) and eval_entropy (mean token
    entropy of the evaluation samples, nats), and maj@K (Maj@K on the test split) when `problems` has it."""
    test = with_pass(problems[problems["split"] == "test"], (1, k))
    t = test.assign(solved=(test["c"] > 0).astype(float), greedy=pd.to_numeric(test["greedy_correct"], errors="coerce"),
                    eval_entropy=test["mean_entropy"]).rename(columns={f"pass@{k}": "pass@K"})
    cols = ["pass@1", "pass@K", "greedy", "distinct_correct", "solved", "eval_entropy"] + (
        ["maj@K"] if "maj@K" in t else [])
    return t.groupby(["arm", "seed"], sort=False)[cols].mean().reset_index()


def pass_curves(problems: pd.DataFrame, ks, *, n_boot: int = 1000, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Pass@K curves on the test split: (mean, per_seed). `mean` per arm and k: pass_at_k (mean over seeds and
    problems), ci_low/ci_high (bootstrap over problems of the per-problem seed mean), n_seeds; `per_seed` per arm,
    seed and k: pass_at_k."""
    cols = [f"pass@{k}" for k in ks]
    test = with_pass(problems[problems["split"] == "test"], ks)
    per_seed = test.groupby(["arm", "seed"], sort=False)[cols].mean().reset_index().melt(
        ["arm", "seed"], cols, var_name="k", value_name="pass_at_k")
    rows = []
    for arm, g in test.groupby("arm", sort=False):
        per_problem = g.groupby("problem_id")[cols].mean().to_numpy()  # [P, K] seed means
        low, high = bootstrap_ci(per_problem, n_boot=n_boot, random_state=derive_seed(seed, "pass_curves", arm))
        rows += [{"arm": arm, "k": int(k), "pass_at_k": float(per_problem[:, j].mean()),
                  "ci_low": float(np.atleast_1d(low)[j]), "ci_high": float(np.atleast_1d(high)[j]),
                  "n_seeds": g["seed"].nunique()} for j, k in enumerate(ks)]
    return pd.DataFrame(rows), per_seed.assign(k=per_seed["k"].str[5:].astype(int))


def seed_problem_values(problems: pd.DataFrame, column: str, *arms: str) -> list[np.ndarray]:
    """For each arm, `column` on the test split as [seeds, problems] (seeds ascending, problems sorted by id);
    every arm must have been scored on the same problems."""
    test = problems[problems["split"] == "test"]
    out, ids = [], None
    for arm in arms:
        sub = test[test["arm"] == arm]
        if sub.empty:
            raise ValueError(f"no test rows for arm {arm!r}; have {sorted(test['arm'].unique())}")
        wide = sub.pivot(index="seed", columns="problem_id", values=column).sort_index(axis=1)
        if ids is not None and list(wide.columns) != ids:
            raise ValueError(f"arms {arms!r} were evaluated on different problems")
        ids = list(wide.columns)
        out.append(wide.to_numpy(dtype=float))
    return out


def frontier_points(paths: pd.DataFrame, k: int) -> pd.DataFrame:
    """Per arm and step on the test split: pass@1 and pass@K (K = `k`), seed means (what `plot_frontier_paths`
    draws)."""
    test = with_pass(paths[paths["split"] == "test"], (1, k)).rename(columns={f"pass@{k}": "pass@K"})
    return test.groupby(["arm", "step"], sort=False)[["pass@1", "pass@K"]].mean().reset_index()
