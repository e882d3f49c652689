"""Notebook 03: sequential post-training (GRPO->ES, ES->GRPO) against ES-only and GRPO-only at one update budget.

The paper's claim: a sequence at an equal update budget combines both gains, GRPO's Pass@1 and ES's Pass@K.

The budget. Each method's *full* budget is one single-method training run of the preset:
`preset.sequential.es_budget` ES iterations and `preset.sequential.grpo_budget` GRPO iterations (in the paper
both are 234). A sequence spends the 50/50 split of *each method's own* budget on its stage of that method (the
one rule: `sequence.sequence_stages`): GRPO->ES = GRPO for grpo_budget/2 iterations, then ES for es_budget/2.
Every arm therefore spends "one full run", and ES-only / GRPO-only at the preset's step sizes are notebook 01's
runs for the same seed (reused from the run store). Every arm trains for every seed of `preset.seeds` and is
evaluated like notebook 01 (`comparison.evaluate_models`, shared cache); generations and seconds per arm are
reported so the reader can check the budget in compute.

Evidence (`findings.effect_check` on the test problems, seeds then problems, paired by problem), for each order:
the sequence's Pass@1 above ES-only's (it keeps GRPO's Pass@1 gain) and its Pass@K at the largest K above
GRPO-only's (it keeps ES's Pass@K gain).
"""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from esreason_lib.analysis import non_dominated
from esreason_lib.findings import Finding, effect_check, make_finding
from esreason_lib.studies.presets import Preset
from esreason_lib.store.runs import Run
from esreason_lib.methods import sequence_stages, train_sequence
from esreason_lib.methods import trainer
from esreason_lib.studies.common import model_ref, run_cost
from esreason_lib.studies.comparison import BASE_SEED, evaluate_models, pass_curves, seed_problem_values, with_pass

ARMS = ("base", "es", "grpo", "grpo->es", "es->grpo")
"""Arms of the study in display order (`base` is the untrained model)."""
SEQUENCES = ("grpo->es", "es->grpo")
"""The two orders the paper trains."""


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
    """Train (or load) every arm for `seed`: {arm: [stage runs in order]}. Single-method arms call
    `methods.trainer` (so they share notebook 01's cache), sequences `methods.train_sequence`."""
    out = {}
    for arm in arms:
        stages = arm_stages(preset, arm)
        if len(stages) == 1:
            method, iterations = stages[0]
            out[arm] = [trainer(method)(preset.config(method, seed=seed, iterations=iterations), home=home,
                                        progress=progress)]
        else:
            out[arm] = train_sequence(stages, es=preset.config("es", seed=seed), grpo=preset.config("grpo", seed=seed),
                                      home=home, progress=progress)
    return out


def arm_cost(arms: Mapping[str, list[Run]], seed: int) -> pd.DataFrame:
    """One row per arm: arm, seed, stages ("grpo 200 + es 75"), generations and seconds summed over stages."""
    rows = [{"arm": arm, "seed": seed, "stages": " + ".join(f"{r.kind} {int(r.config['iterations'])}" for r in runs),
             **run_cost(runs)} for arm, runs in arms.items()]
    return pd.DataFrame(rows, columns=["arm", "seed", "stages", "generations", "seconds"])


def plane_points(problems: pd.DataFrame, k: int) -> pd.DataFrame:
    """Per arm (in `ARMS` order): pass@1 and pass@K (K = `k`) averaged over seeds and test problems, n_seeds, k,
    and non_dominated (no other arm at least as good on both axes and better on one)."""
    test = with_pass(problems[problems["split"] == "test"], (1, k))
    g = test.groupby("arm", sort=False)
    pts = pd.DataFrame({"pass@1": g["pass@1"].mean(), "pass@K": g[f"pass@{k}"].mean(), "n_seeds": g["seed"].nunique()})
    order = [a for a in ARMS if a in pts.index] + [a for a in pts.index if a not in ARMS]
    pts = pts.loc[order].rename_axis("arm").reset_index().assign(k=int(k))
    pts["non_dominated"] = non_dominated(pts["pass@1"], pts["pass@K"])
    return pts


def compute(preset: Preset, *, home=None, progress: bool = True) -> dict[str, pd.DataFrame]:
    """Train every arm for every seed of `preset.seeds` and evaluate them and the base (all cached): tidy tables
    `problems` (per model and problem), `cost` (per arm and seed), `points` (the Pass@1-Pass@K plane per arm) and
    `curves` (seed-mean Pass@K per arm with bootstrap bands over problems)."""
    runs = {seed: train_arms(preset, seed, home=home, progress=progress) for seed in preset.seeds}
    refs = {("base", BASE_SEED): preset.base_model,
            **{(arm, seed): model_ref(stages[-1]) for seed, arms in runs.items() for arm, stages in arms.items()}}
    problems = evaluate_models(preset, refs, home=home, progress=progress)
    curves, _ = pass_curves(problems, preset.eval.ks, n_boot=preset.eval.n_boot, seed=preset.eval.seed)
    return {"problems": problems, "cost": pd.concat([arm_cost(arms, seed) for seed, arms in runs.items()],
                                                     ignore_index=True),
            "points": plane_points(problems, max(preset.eval.ks)), "curves": curves}


def finding(tables: Mapping[str, pd.DataFrame]) -> Finding:
    """Notebook 03's finding from `compute`'s `problems` and `points` (checks in the module docstring)."""
    pts = tables["points"]
    k = int(pts["k"].iloc[0])
    p = with_pass(tables["problems"], (1, k))
    checks = []
    for seq in SEQUENCES:
        checks.append(effect_check(f"{seq} Pass@1 above ES-only", *seed_problem_values(p, "pass@1", seq, "es")))
        checks.append(effect_check(f"{seq} Pass@{k} above GRPO-only",
                                   *seed_problem_values(p, f"pass@{k}", seq, "grpo")))
    points = "; ".join(f"{r.arm} {r['pass@1']:.3f}/{r['pass@K']:.3f}" for _, r in pts.iterrows())
    front = ", ".join(pts.loc[pts["non_dominated"], "arm"])
    return make_finding(f"Pass@1/Pass@{k} (seed means): {points}; non-dominated: {front}", checks)
