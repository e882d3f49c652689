"""Notebook 01: ES vs GRPO from the same base on the same task: Pass@K, token entropy, coverage and cost.

Both methods train from `preset.base_model` on `preset.task` for every seed in `preset.seeds` (cached runs via
`training.trainer`); the base and every trained model are evaluated under `preset.eval` (cached `eval` runs). The
functions below turn those runs and evaluations into tidy tables; the base model has no training seed and
appears with `seed = BASE_SEED` (-1).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..evaluate import EvalResult
from ..metrics import bootstrap_ci, pass_at_k
from ..presets import Preset
from ..runs import Run
from ..seeding import derive_seed
from ..training import resolve_device, trainer
from .common import evaluate_ref, model_ref, run_cost

METHOD_ORDER = ("base", "grpo", "es")
"""Method labels in display order (`base` is the untrained model)."""
BASE_SEED = -1
"""The `seed` value of the base model's rows (it has no training seed)."""


# ------------------------------------------------------------------------------------ runs and evaluations
def evaluate_runs(preset: Preset, runs: dict[tuple[str, int], Run], *, home=None,
                  progress: bool = True) -> dict[tuple[str, int], EvalResult]:
    """Evaluate the base and every trained run under `preset.eval` (cached): {(method, seed): EvalResult}."""
    device = resolve_device(preset.device)
    refs = {("base", BASE_SEED): preset.base_model, **{key: model_ref(run) for key, run in runs.items()}}
    return {key: evaluate_ref(ref, preset.task, preset.test_task_kwargs(), preset.eval, device=device, home=home,
                              progress=progress) for key, ref in refs.items()}


def cost_table(runs: dict[tuple[str, int], Run]) -> pd.DataFrame:
    """One row per run: method, seed, iterations, generations (the last `<method>/generations` logged: sampled
    completions the update used) and seconds (sum of `time/step_s`)."""
    rows = [{"method": method, "seed": seed, "iterations": int(run.config["iterations"]), **run_cost([run])}
            for (method, seed), run in runs.items()]
    return pd.DataFrame(rows, columns=["method", "seed", "iterations", "generations", "seconds"])


# ------------------------------------------------------------------------------------ tidy tables
def problem_table(results: dict[tuple[str, int], EvalResult]) -> pd.DataFrame:
    """All per-problem evaluation tables stacked with `method` and `seed` columns."""
    return pd.concat([r.table.assign(method=m, seed=s) for (m, s), r in results.items()], ignore_index=True)


def curve_table(results: dict[tuple[str, int], EvalResult]) -> pd.DataFrame:
    """All Pass@K curves (with each evaluation's bootstrap CI) stacked with `method` and `seed` columns."""
    return pd.concat([r.curve.assign(method=m, seed=s) for (m, s), r in results.items()], ignore_index=True)


def _per_problem_seed_mean(problems: pd.DataFrame, method: str, k: int) -> pd.Series:
    """Pass@k per problem averaged over the method's seeds: Series indexed by problem_id."""
    sub = problems[problems["method"] == method]
    if sub.empty:
        raise ValueError(f"no evaluation rows for method {method!r}; have {sorted(problems['method'].unique())}")
    vals = pass_at_k(sub["n"].to_numpy(), sub["c"].to_numpy(), k)  # [rows]
    return pd.Series(np.atleast_1d(vals), index=sub.index).groupby(sub["problem_id"], sort=True).mean()


def seed_mean_curves(problems: pd.DataFrame, ks, *, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Per method and k: pass_at_k (mean over seeds), ci_low/ci_high (bootstrap over problems of the per-problem
    seed-mean), seed_min/seed_max (the spread of the per-seed curves) and n_seeds."""
    rows = []
    for method in [m for m in METHOD_ORDER if m in set(problems["method"])] + \
            sorted(set(problems["method"]) - set(METHOD_ORDER)):
        sub = problems[problems["method"] == method]
        per_problem = np.stack([_per_problem_seed_mean(problems, method, k).to_numpy() for k in ks], axis=1)  # [P, K]
        low, high = bootstrap_ci(per_problem, n_boot=n_boot, random_state=derive_seed(seed, "seed_mean", method))
        per_seed = np.array([[float(np.mean(pass_at_k(g["n"].to_numpy(), g["c"].to_numpy(), k))) for k in ks]
                             for _, g in sub.groupby("seed")])  # [S, K]
        for j, k in enumerate(ks):
            rows.append({"method": method, "k": int(k), "pass_at_k": float(per_problem[:, j].mean()),
                         "ci_low": float(np.atleast_1d(low)[j]), "ci_high": float(np.atleast_1d(high)[j]),
                         "seed_min": float(per_seed[:, j].min()), "seed_max": float(per_seed[:, j].max()),
                         "n_seeds": len(per_seed)})
    return pd.DataFrame(rows)


def paired_difference(problems: pd.DataFrame, a: str, b: str, k: int, *, n_boot: int = 1000,
                      seed: int = 0) -> dict[str, float]:
    """Pass@k of method `a` minus method `b` (seed-means, paired by problem) with a bootstrap-over-problems
    95% CI: {"k", "diff", "ci_low", "ci_high"}. Both methods must have been evaluated on the same problems."""
    pa, pb = _per_problem_seed_mean(problems, a, k), _per_problem_seed_mean(problems, b, k)
    if list(pa.index) != list(pb.index):
        raise ValueError(f"methods {a!r} and {b!r} were evaluated on different problems")
    d = pa.to_numpy() - pb.to_numpy()  # [P]
    low, high = bootstrap_ci(d, n_boot=n_boot, random_state=derive_seed(seed, "paired", a, b, k))
    return {"k": int(k), "diff": float(d.mean()), "ci_low": low, "ci_high": high}


def coverage_table(problems: pd.DataFrame) -> pd.DataFrame:
    """Per (method, seed): distinct_correct (mean distinct correct answers per problem), solved (fraction of
    problems with at least one correct sample = Pass@n), greedy accuracy and eval_entropy (mean token entropy
    of the evaluation samples, nats)."""
    g = problems.assign(solved=problems["c"] > 0,
                        greedy=pd.to_numeric(problems["greedy_correct"], errors="coerce")).groupby(
        ["method", "seed"], sort=False)
    out = pd.DataFrame({"distinct_correct": g["distinct_correct"].mean(), "solved": g["solved"].mean(),
                        "greedy": g["greedy"].mean(), "eval_entropy": g["mean_entropy"].mean()})
    return out.reset_index()


def spread(table: pd.DataFrame, columns) -> pd.DataFrame:
    """Per method: `<col>` (mean over seeds), `<col>_min`, `<col>_max` for each column, methods in display order."""
    g = table.groupby("method", sort=False)[list(columns)]
    out = pd.concat([g.mean(), g.min().add_suffix("_min"), g.max().add_suffix("_max")], axis=1)
    order = [m for m in METHOD_ORDER if m in out.index] + [m for m in out.index if m not in METHOD_ORDER]
    return out.loc[order].reset_index()


def format_spread(table: pd.DataFrame, columns=None, digits: int = 3) -> pd.DataFrame:
    """A display copy of a `spread` table: each column as "mean [min, max]" (just "mean" when min == max)."""
    columns = columns or [c for c in table.columns if c != "method" and not c.endswith(("_min", "_max"))]
    out = table[["method"]].copy()
    for c in columns:
        lo, hi = table[f"{c}_min"], table[f"{c}_max"]
        out[c] = [f"{m:.{digits}f}" if (l == h or pd.isna(m)) else f"{m:.{digits}f} [{l:.{digits}f}, {h:.{digits}f}]"
                  for m, l, h in zip(table[c], lo, hi)]
    return out


# ------------------------------------------------------------------------------------ entropy over training
def entropy_traces(runs: dict[tuple[str, int], Run]) -> dict[str, pd.DataFrame]:
    """{"<method> seed=<s>": metrics with step, progress (= step / iterations, in (0, 1]) and policy/entropy}."""
    out = {}
    for (method, seed), run in runs.items():
        m = run.metrics()
        if "policy/entropy" not in m:
            continue
        m = m.loc[m["policy/entropy"].notna(), ["step", "policy/entropy"]].sort_values("step")
        out[f"{method} seed={seed}"] = m.assign(progress=m["step"] / int(run.config["iterations"]))
    return out


def entropy_change(traces: dict[str, pd.DataFrame], frac: float = 0.1) -> pd.DataFrame:
    """Per trace: method, seed, first / last (mean policy/entropy over the first / last `frac` of training
    progress, at least one step each) and ratio = last / first."""
    if not 0 < frac <= 0.5:
        raise ValueError(f"frac must lie in (0, 0.5], got {frac!r}")
    rows = []
    for label, df in traces.items():
        method, _, seed = label.partition(" seed=")
        ent = df["policy/entropy"].to_numpy(dtype=float)  # [steps]
        w = max(1, int(round(frac * len(ent))))
        first, last = float(ent[:w].mean()), float(ent[-w:].mean())
        rows.append({"method": method, "seed": int(seed), "first": first, "last": last,
                     "ratio": last / first if first > 0 else float("nan")})
    return pd.DataFrame(rows, columns=["method", "seed", "first", "last", "ratio"])


# ------------------------------------------------------------------------------------ the report and finding
def comparison_report(preset: Preset, *, seeds=None, home=None, progress: bool = True) -> dict[str, object]:
    """Everything notebook 01 shows, from cached runs and evaluations: a dict with `runs`, `cost`, `problems`,
    `curves` (per seed), `mean_curves`, `coverage` (per seed), `summary` (per method, mean and seed min/max of
    pass@1, pass@K, distinct_correct, solved, eval_entropy, train entropy ratio), `traces`, `entropy_change`
    and `diffs` (ES - GRPO and ES - base, paired, at K=1 and the largest K)."""
    runs = {(m, s): trainer(m)(preset.config(m, seed=s), home=home, progress=progress)
            for m in ("grpo", "es") for s in (preset.seeds if seeds is None else seeds)}
    results = evaluate_runs(preset, runs, home=home, progress=progress)
    problems, ks = problem_table(results), list(preset.eval.ks)
    kmax = max(ks)
    per_seed = curve_table(results)
    wide = per_seed[per_seed["k"].isin([1, kmax])].pivot_table(index=["method", "seed"], columns="k",
                                                              values="pass_at_k")
    wide.columns = [f"pass@{k}" for k in wide.columns]
    coverage = coverage_table(problems).merge(wide.reset_index(), on=["method", "seed"])
    traces = entropy_traces(runs)
    change = entropy_change(traces)
    cols = ["pass@1", f"pass@{kmax}", "greedy", "distinct_correct", "solved", "eval_entropy"]
    summary = spread(coverage, cols)
    if not change.empty:
        ratio = spread(change, ["ratio"]).rename(columns=lambda c: c.replace("ratio", "train_entropy_ratio"))
        summary = summary.merge(ratio, on="method", how="left")
    nb = preset.eval.n_boot
    diffs = pd.DataFrame([{"a": a, "b": b, **paired_difference(problems, a, b, k, n_boot=nb, seed=preset.eval.seed)}
                          for a, b in (("es", "grpo"), ("es", "base"), ("grpo", "base")) for k in (1, kmax)])
    return {"runs": runs, "cost": cost_table(runs), "problems": problems, "curves": per_seed,
            "mean_curves": seed_mean_curves(problems, ks, n_boot=nb, seed=preset.eval.seed),
            "coverage": coverage, "summary": summary, "traces": traces, "entropy_change": change, "diffs": diffs}


def _verdict(low: float, high: float) -> str:
    """"yes" when the whole CI of (claimed side) > 0, "no" when it is entirely <= 0, else "within noise"."""
    if low > 0:
        return "yes"
    if high <= 0:
        return "no"
    return "within noise"


def describe_comparison(summary: pd.DataFrame, diffs: pd.DataFrame, n_seeds: int) -> str:
    """The finding line of notebook 01, computed from `comparison_report`'s `summary` and `diffs`."""
    s = summary.set_index("method")
    kcol = max((c for c in s.columns if c.startswith("pass@") and c[5:].isdigit()), key=lambda c: int(c[5:]))
    kmax = int(kcol[5:])
    names = {"base": "base", "grpo": "GRPO", "es": "ES"}
    methods = [m for m in METHOD_ORDER if m in s.index]

    def line(col, fmt="{:.2f}"):
        return " / ".join(f"{names[m]} {fmt.format(s.loc[m, col])}" for m in methods)

    def diff(a, b, k):
        r = diffs[(diffs["a"] == a) & (diffs["b"] == b) & (diffs["k"] == k)].iloc[0]
        return (r["ci_low"], r["ci_high"]), f"{r['diff']:+.3f} [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}]"

    es_base1, es_base1_txt = diff("es", "base", 1)
    es_grpo_k, es_grpo_k_txt = diff("es", "grpo", kmax)
    es_grpo1, es_grpo1_txt = diff("es", "grpo", 1)
    parts = [f"pass@1 {line('pass@1')}", f"pass@{kmax} {line(kcol)} ({n_seeds} seed{'s' * (n_seeds != 1)})",
             f"distinct correct/problem {line('distinct_correct', '{:.2f}')}",
             f"eval entropy (nats/token) {line('eval_entropy', '{:.3f}')}"]
    if "train_entropy_ratio" in s.columns:
        parts.append("training entropy last/first " + " / ".join(
            f"{names[m]} x{s.loc[m, 'train_entropy_ratio']:.2f}" for m in ("grpo", "es") if m in s.index))
    parts += [f"ES pass@1 above base: {_verdict(*es_base1)} ({es_base1_txt})",
              f"ES above GRPO at K={kmax}: {_verdict(*es_grpo_k)} ({es_grpo_k_txt})",
              f"GRPO wins at K=1: {_verdict(-es_grpo1[1], -es_grpo1[0])} (ES-GRPO {es_grpo1_txt})"]
    return "; ".join(parts)
