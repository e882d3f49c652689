"""Notebook 01: ES vs GRPO from the same base on the same task, across a small grid of each one's step size.

The paper's claim (main results): ES raises Pass@1 over the base and keeps a higher Pass@K at large K than GRPO,
whose token entropy collapses while ES's does not.

The design (a fair comparison):
- Every arm (method, step size) of `preset.comparison` (ES alpha, GRPO lr) trains for every seed of `preset.seeds`
  from `preset.base_model` (cached runs: `methods.trainer`).
- The base and every trained model are evaluated once under `preset.eval` on its `n_problems` test problems plus
  the next `comparison.selection_problems` problems of the same draw (`split` = "test" / "selection").
- Each method's best-Pass@1 and best-Pass@K arm is chosen by its seed mean on the *selection* problems; every
  verdict is computed on the disjoint *test* problems, so choosing does not favour the chosen arm there. With
  `selection_problems = 0` (paper presets) the choice is made on the test problems and favours the chosen arms.
- Evidence (`findings.effect_check`: seeds, then problems, paired by problem): ES's best-Pass@1 arm above the base
  at K=1; ES above GRPO at the largest K (each method's best-Pass@K arm); the evaluation token entropy of GRPO's
  best-Pass@K arm below the base's, and ES's above GRPO's (the same arms as the K=max verdict).
- Reported beside, never in the status: GRPO against ES at K=1 (each method's best-Pass@1 arm). The paper allows
  GRPO to win there (the curves cross) but does not claim it.

Deviations: the paper trains one setting per method. Training entropy (`policy/entropy`) is shown but is no check:
GRPO logs it on its T = 1 samples, ES on its centre's greedy answers, so only its trend compares. The base has no
training seed and appears with `seed = BASE_SEED`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping

import numpy as np
import pandas as pd

from esreason_lib.analysis import non_dominated
from esreason_lib.evaluate import EvalSpec
from esreason_lib.findings import Finding, effect_check, make_finding
from esreason_lib.metrics import bootstrap_ci, pass_at_k
from esreason_lib.studies.presets import Preset
from esreason_lib.store.runs import Run
from esreason_lib.seeding import derive_seed
from esreason_lib.tasks import get_task
from esreason_lib.methods import trainer
from esreason_lib.training import resolve_device
from esreason_lib.studies.common import evaluate_ref, model_ref, run_cost

METHODS = ("grpo", "es")
"""The trained methods, in display order (after the base)."""
BASE_SEED = -1
"""The `seed` value of the base model's rows (it has no training seed)."""
STEP_FIELDS = {"es": "alpha", "grpo": "lr"}
"""The config field each method's grid varies."""


# ------------------------------------------------------------------------------------ arms, runs, evaluations
def arm_label(method: str, step_size: float) -> str:
    """"base", or e.g. "es alpha=0.0024" / "grpo lr=0.0001" (the method first: plots color by it)."""
    return "base" if method == "base" else f"{method} {STEP_FIELDS[method]}={step_size:g}"


def grid(preset: Preset) -> list[tuple[str, float]]:
    """The (method, step size) arms of `preset.comparison`: GRPO's learning rates, then ES's alphas."""
    return [("grpo", lr) for lr in preset.comparison.grpo_lrs] + [("es", a) for a in preset.comparison.es_alphas]


def training_configs(preset: Preset) -> dict[tuple[str, float, int], object]:
    """{(method, step size, seed): the config `compute` trains} for every arm of `grid(preset)` and every seed."""
    return {(m, s, seed): preset.config(m, seed=seed, **{STEP_FIELDS[m]: s})
            for m, s in grid(preset) for seed in preset.seeds}


def evaluation_spec(preset: Preset) -> EvalSpec:
    """`preset.eval` widened by the selection problems (the next ones of the same draw), so one cached evaluation
    per model scores both splits."""
    extra = preset.comparison.selection_problems
    return preset.eval if extra == 0 else replace(preset.eval, n_problems=preset.eval.n_problems + extra)


def evaluate_models(preset: Preset, refs: Mapping[tuple[str, int], str], *, home=None,
                    progress: bool = True) -> pd.DataFrame:
    """Per-problem rows (`evaluate.PROBLEM_COLUMNS`) of every model in `refs` ({(arm, seed): model reference})
    under `evaluation_spec`, with arm, seed and split: "test" for `preset.eval`'s problems, else "selection"."""
    spec, device = evaluation_spec(preset), resolve_device(preset.device)
    task = get_task(preset.task, **preset.test_task_kwargs())
    test_ids = {str(e["id"]) for e in task.examples("test", n=preset.eval.n_problems, seed=preset.eval.seed)}
    tables = []
    for (arm, seed), ref in refs.items():
        t = evaluate_ref(ref, preset.task, preset.test_task_kwargs(), spec, device=device, home=home,
                         progress=progress).table
        tables.append(t.assign(arm=arm, seed=seed, split=np.where(t["problem_id"].isin(test_ids), "test", "selection")))
    return pd.concat(tables, ignore_index=True)


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
def with_pass(problems: pd.DataFrame, ks) -> pd.DataFrame:
    """`problems` with one column `pass@k` per k in `ks` (the unbiased per-problem estimate from n and c)."""
    n, c = problems["n"].to_numpy(), problems["c"].to_numpy()
    return problems.assign(**{f"pass@{k}": np.atleast_1d(pass_at_k(n, c, k)).astype(float) for k in ks})


def seed_table(problems: pd.DataFrame, k: int) -> pd.DataFrame:
    """Per (arm, seed) on the test split: pass@1, pass@K (K = `k`), greedy accuracy, distinct_correct (distinct
    correct answers per problem), solved (problems solved at least once = Pass@n) and eval_entropy (mean token
    entropy of the evaluation samples, nats)."""
    test = with_pass(problems[problems["split"] == "test"], (1, k))
    t = test.assign(solved=(test["c"] > 0).astype(float), greedy=pd.to_numeric(test["greedy_correct"], errors="coerce"),
                    eval_entropy=test["mean_entropy"]).rename(columns={f"pass@{k}": "pass@K"})
    cols = ["pass@1", "pass@K", "greedy", "distinct_correct", "solved", "eval_entropy"]
    return t.groupby(["arm", "seed"], sort=False)[cols].mean().reset_index()


def spread(table: pd.DataFrame, columns, label: str = "arm") -> pd.DataFrame:
    """Per `label` (first-appearance order): `<col>` (mean over seeds), `<col>_min` and `<col>_max`."""
    g = table.groupby(label, sort=False)[list(columns)]
    return pd.concat([g.mean(), g.min().add_suffix("_min"), g.max().add_suffix("_max")], axis=1).reset_index()


def format_spread(table: pd.DataFrame, columns, label: str = "arm", digits: int = 3) -> pd.DataFrame:
    """A display copy of a `spread` table: each column as "mean [min, max]" (just "mean" when min == max)."""
    out = table[[label]].copy()
    for c in columns:
        out[c] = [f"{m:.{digits}f}" if (lo == hi or pd.isna(m)) else f"{m:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"
                  for m, lo, hi in zip(table[c], table[f"{c}_min"], table[f"{c}_max"])]
    return out


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


def frontier(problems: pd.DataFrame, k: int) -> pd.DataFrame:
    """Per arm: method, step_size, n_seeds, k, pass@1 / pass@K (seed means on the test split), non_dominated (on
    the test Pass@1-Pass@K plane among its method's arms), sel_pass@1 / sel_pass@K (on the split the choice is
    made on, `chosen_on`: "selection", or "test" when there is no selection split) and best_pass@1 /
    best_pass@K (the arm its method chooses by that criterion)."""
    p = with_pass(problems, (1, k)).rename(columns={f"pass@{k}": "pass@K"})
    chosen_on = "selection" if (p["split"] == "selection").any() else "test"
    keys = ["arm", "method", "step_size"]
    test = p[p["split"] == "test"].groupby(keys, sort=False, dropna=False).agg(
        n_seeds=("seed", "nunique"), **{"pass@1": ("pass@1", "mean"), "pass@K": ("pass@K", "mean")}).reset_index()
    sel = p[p["split"] == chosen_on].groupby("arm")[["pass@1", "pass@K"]].mean().add_prefix("sel_")
    out = test.join(sel, on="arm").assign(k=int(k), chosen_on=chosen_on, non_dominated=False)
    for _, idx in out.groupby("method", sort=False).groups.items():
        out.loc[idx, "non_dominated"] = non_dominated(out.loc[idx, "pass@1"], out.loc[idx, "pass@K"])
    for crit in ("pass@1", "pass@K"):
        best = out[out["method"] != "base"].groupby("method")[f"sel_{crit}"].idxmax()
        out[f"best_{crit}"] = out.index.isin(best.to_numpy())
    return out


def selected_arms(front: pd.DataFrame, criterion: str) -> dict[str, str]:
    """{method: the arm `frontier` chose for `criterion` ("pass@1" or "pass@K")} for every trained method."""
    if criterion not in ("pass@1", "pass@K"):
        raise ValueError(f"criterion must be 'pass@1' or 'pass@K', got {criterion!r}")
    chosen = front[front[f"best_{criterion}"]]
    return dict(zip(chosen["method"], chosen["arm"]))


# ------------------------------------------------------------------------------------ the study face
def compute(preset: Preset, *, home=None, progress: bool = True) -> dict[str, pd.DataFrame]:
    """Train every arm for every seed and evaluate them and the base (all cached): tidy tables `problems` (per
    model and problem, both splits), `cost` and `traces` (per run), `frontier` (per arm), `seeds` (per arm and
    seed), `summary` (per arm: seed mean, min, max), `curves` and `seed_curves` (Pass@K on the test split)."""
    runs = {(arm_label(m, s), seed): trainer(m)(config, home=home, progress=progress)
            for (m, s, seed), config in training_configs(preset).items()}
    arms = pd.DataFrame([{"arm": arm_label(m, s), "method": m, "step_size": s}
                         for m, s in [("base", float("nan"))] + grid(preset)])
    refs = {("base", BASE_SEED): preset.base_model, **{key: model_ref(run) for key, run in runs.items()}}
    problems = evaluate_models(preset, refs, home=home, progress=progress).merge(arms, on="arm", how="left")
    k = max(preset.eval.ks)
    seeds = seed_table(problems, k)
    curves, seed_curves = pass_curves(problems, preset.eval.ks, n_boot=preset.eval.n_boot, seed=preset.eval.seed)
    return {"problems": problems, "cost": cost_table(runs).merge(arms, on="arm"), "traces": entropy_traces(runs),
            "frontier": frontier(problems, k), "seeds": seeds, "summary": spread(seeds, seeds.columns[2:]),
            "curves": curves, "seed_curves": seed_curves}


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


def finding(tables: Mapping[str, pd.DataFrame]) -> Finding:
    """Notebook 01's finding from `compute`'s `problems` and `frontier` (rules in the module docstring)."""
    front = tables["frontier"]
    k, chosen_on = int(front["k"].iloc[0]), front["chosen_on"].iloc[0]
    p = with_pass(tables["problems"], (1, k))
    b1, bk = selected_arms(front, "pass@1"), selected_arms(front, "pass@K")

    def check(name, column, a, b, direction="greater"):
        return effect_check(name, *seed_problem_values(p, column, a, b), direction=direction)

    checks = [check(f"ES ({b1['es']}) Pass@1 above base", "pass@1", b1["es"], "base"),
              check(f"ES ({bk['es']}) above GRPO ({bk['grpo']}) at K={k}", f"pass@{k}", bk["es"], bk["grpo"]),
              check(f"GRPO ({bk['grpo']}) eval token entropy below base", "mean_entropy", bk["grpo"], "base",
                    "less"),
              check(f"ES ({bk['es']}) eval token entropy above GRPO ({bk['grpo']})", "mean_entropy", bk["es"],
                    bk["grpo"])]
    crossing = check(f"GRPO ({b1['grpo']}) above ES ({b1['es']}) at K=1", "pass@1", b1["grpo"], b1["es"])
    n = p.drop_duplicates("problem_id")["split"].value_counts()
    where = (f"{n.get('selection', 0)} selection problems disjoint from the {n['test']} test problems"
             if chosen_on == "selection" else f"the {n['test']} test problems themselves, which favours them")
    points = "; ".join(f"{r.arm} {r['pass@1']:.3f}/{r['pass@K']:.3f}" for _, r in front.iterrows())
    sanity = [f"Pass@{k} >= Pass@1 for every arm: {bool((front['pass@K'] >= front['pass@1'] - 1e-12).all())}"]
    return make_finding(f"Pass@1/Pass@{k} (test, seed means): {points}; best settings chosen on {where}; "
                        f"reported, not part of the claim: {crossing.describe()}", checks, sanity)
