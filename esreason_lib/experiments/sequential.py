"""Notebook 03: sequential post-training (GRPO->ES, ES->GRPO) against ES-only and GRPO-only at one update budget.

The budget. Each method's *full* budget is one single-method training run of the preset:
`preset.sequential.es_budget` ES iterations and `preset.sequential.grpo_budget` GRPO iterations. At tiny scale a
GRPO iteration (a few sampled groups and one backward pass) is cheaper than an ES iteration (every population
member decodes every prompt of the step), so the presets give GRPO more iterations for a comparable run; in the
paper both counts are 234. A sequence spends the 50/50 split of *each method's own* budget on its stage of that
method (the rule is `sequence.sequence_stages`): GRPO->ES = GRPO for grpo_budget/2 iterations, then ES for
es_budget/2 iterations. Every arm therefore spends "one full run" in total, and ES-only / GRPO-only coincide with
notebook 01's runs for the same seed (reused from the run store). Generations and seconds of every arm are
reported so the reader can check the budget in compute.
"""

from __future__ import annotations

import pandas as pd

from ..analysis import non_dominated
from ..presets import Preset
from ..runs import Run
from ..sequence import sequence_stages, train_sequence
from ..training import resolve_device, trainer
from .common import evaluate_ref, model_ref, run_cost

ARMS = ("base", "es", "grpo", "grpo->es", "es->grpo")
"""Arms of the study in display order (`base` is the untrained model)."""


def method_budgets(preset: Preset) -> dict[str, int]:
    """Each method's full budget in its own iterations: {"es": es_budget, "grpo": grpo_budget} of
    `preset.sequential`."""
    return {"es": preset.sequential.es_budget, "grpo": preset.sequential.grpo_budget}


def arm_stages(preset: Preset, arm: str, fractions=(0.5, 0.5)) -> list[tuple[str, int]]:
    """The (method, iterations) stages of an arm: "es" / "grpo" spend the method's full budget; "a->b" are
    `sequence.sequence_stages` of the methods' budgets (stage i gets the i-th share of its own method's budget)."""
    budgets = method_budgets(preset)
    if arm in ("es", "grpo"):
        return [(arm, budgets[arm])]
    order = arm.split("->")
    if len(order) != len(fractions) or any(m not in budgets for m in order):
        raise ValueError(f"arm {arm!r} must be 'es', 'grpo' or {len(fractions)} of them joined by '->'")
    return sequence_stages(order, budgets, fractions)


def train_arms(preset: Preset, seed: int, *, arms=ARMS[1:], home=None, progress: bool = True) -> dict[str, list[Run]]:
    """Train (or load) every arm for `seed`: {arm: [stage runs in order]}. Single-method arms go straight to
    `training.trainer` (so they share notebook 01's cache), sequences through `sequence.train_sequence`."""
    out = {}
    for arm in arms:
        stages = arm_stages(preset, arm)
        if len(stages) == 1:
            method, iterations = stages[0]
            config = preset.config(method, seed=seed, iterations=iterations)
            out[arm] = [trainer(method)(config, home=home, progress=progress)]
        else:
            out[arm] = train_sequence(stages, es=preset.config("es", seed=seed), grpo=preset.config("grpo", seed=seed),
                                      home=home, progress=progress)
    return out


def arm_cost(arms: dict[str, list[Run]], seed: int) -> pd.DataFrame:
    """One row per arm: arm, seed, stages ("grpo 200 + es 75"), generations and seconds summed over stages."""
    rows = [{"arm": arm, "seed": seed, "stages": " + ".join(f"{r.kind} {int(r.config['iterations'])}" for r in runs),
             **run_cost(runs)} for arm, runs in arms.items()]
    return pd.DataFrame(rows, columns=["arm", "seed", "stages", "generations", "seconds"])


def plane_points(per_seed: pd.DataFrame, k: int) -> pd.DataFrame:
    """Mean over seeds per arm of pass@1 and pass@K (K = `k`) from a tidy curve table [method, seed, k,
    pass_at_k], with `non_dominated` (higher is better in both) and n_seeds; arms in `ARMS` order."""
    sub = per_seed[per_seed["k"].isin([1, k])]
    wide = sub.pivot_table(index=["method", "seed"], columns="k", values="pass_at_k").reset_index()
    if 1 not in wide or k not in wide:
        raise ValueError(f"the curve table must hold k=1 and k={k}")
    g = wide.groupby("method", sort=False)
    pts = pd.DataFrame({"pass@1": g[1].mean(), "pass@K": g[k].mean(), "n_seeds": g["seed"].nunique()})
    order = [a for a in ARMS if a in pts.index] + [a for a in pts.index if a not in ARMS]
    pts = pts.loc[order].rename_axis("method").reset_index()
    pts["non_dominated"] = non_dominated(pts["pass@1"], pts["pass@K"])
    return pts


def sequential_report(preset: Preset, *, seeds=None, home=None, progress: bool = True) -> dict[str, object]:
    """Train and evaluate every arm for `seeds` (default `preset.seeds[:1]`), plus the base: a dict with `cost`,
    `curves` (tidy, per arm and seed, with bootstrap CIs), `arm_curves` ({arm: seed-mean curve}), `points` (the
    Pass@1 vs Pass@K plane), `k`, `budgets` and `seeds`."""
    seeds = tuple(preset.seeds[:1] if seeds is None else seeds)
    device = resolve_device(preset.device)

    def ev(ref):
        return evaluate_ref(ref, preset.task, preset.test_task_kwargs(), preset.eval, device=device, home=home,
                            progress=progress)

    costs, curves = [], [ev(preset.base_model).curve.assign(method="base", seed=-1)]
    for seed in seeds:
        arms = train_arms(preset, seed, home=home, progress=progress)
        costs.append(arm_cost(arms, seed))
        curves += [ev(model_ref(runs[-1])).curve.assign(method=arm, seed=seed) for arm, runs in arms.items()]
    curves = pd.concat(curves, ignore_index=True)
    k = max(preset.eval.ks)
    arm_curves = {m: g.groupby("k", as_index=False)[["pass_at_k", "ci_low", "ci_high"]].mean()
                  for m, g in curves.groupby("method", sort=False)}  # seed means (bands: mean of per-seed CIs)
    return {"cost": pd.concat(costs, ignore_index=True), "curves": curves, "arm_curves": arm_curves,
            "points": plane_points(curves, k),
            "k": k, "budgets": method_budgets(preset), "seeds": seeds}


def describe_sequential(points: pd.DataFrame, k: int, budgets: dict[str, int], seeds) -> str:
    """The finding line of notebook 03, computed from `sequential_report`'s points, k, budgets and seeds."""
    p = points.set_index("method")
    k_label = "pass@K"
    vals = " / ".join(f"{m} {p.loc[m, 'pass@1']:.2f}/{p.loc[m, k_label]:.2f}" for m in p.index)
    front = [m for m in p.index if p.loc[m, "non_dominated"]]

    def dominates_both(arm):
        if arm not in p.index or not {"es", "grpo"} <= set(p.index):
            return "n/a"
        a = p.loc[arm]
        ok = all(a["pass@1"] >= p.loc[m, "pass@1"] and a[k_label] >= p.loc[m, k_label] for m in ("es", "grpo"))
        return "yes" if ok else "no"

    seeds = tuple(seeds)
    seed_txt = f"seed {seeds[0]}" if len(seeds) == 1 else f"mean of {len(seeds)} seeds"
    return (f"pass@1/pass@{k} {vals} (budget: ES {budgets['es']} it, GRPO {budgets['grpo']} it, 50/50 per method; "
            f"{seed_txt}); non-dominated: {', '.join(front)}; GRPO->ES at least as good as both singles on both "
            f"axes: {dominates_both('grpo->es')}; ES->GRPO: {dominates_both('es->grpo')}")
