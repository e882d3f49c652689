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

Controls. Any interpolation between the two single-method endpoints passes "Pass@1 above ES-only and Pass@K
above GRPO-only" (GRPO alone at half budget does), so those two checks are joined by two that such an
explanation fails: the sequence against its *own first stage* (the cached stage run, paired by seed: the second
stage must add its method's gain, Pass@K for an ES stage, Pass@1 for a GRPO stage), and the sequence's Pass@K
against GRPO-only's *path* at the sequence's Pass@1 (`frontier.matched` on GRPO-only's snapshots: a sequence
that is just GRPO trained less sits on that path).

Evidence (`findings.effect_check` on the test problems, seeds then problems, paired by problem; deltas from
`SequentialSpec`), for each order: the second stage over the first; Pass@1 above ES-only; Pass@K (K =
`comparison.primary_k`) above GRPO-only; Pass@K above GRPO-only's path at the sequence's Pass@1. The paper's test
and the control each take one of them as primary (`finding`, `registry`).
"""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from esreason_lib.methods import sequence_stages, train_sequence, trainer
from esreason_lib.paper.analysis import non_dominated
from esreason_lib.paper.findings import Finding, effect_check, make_finding
from esreason_lib.paper.studies.common import model_ref, run_cost
from esreason_lib.paper.studies.comparison import BASE_SEED, evaluate_models, path_table, primary_k
from esreason_lib.paper.studies.comparison_tables import pass_curves, seed_problem_values, with_pass
from esreason_lib.paper.studies.frontier import matched
from esreason_lib.paper.studies.presets import Preset
from esreason_lib.paper.studies.registry import make_test
from esreason_lib.store.runs import Run

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


def first_stage(seq: str) -> str:
    """The arm label of a sequence's own first stage: "grpo->es stage 1"."""
    return f"{seq} stage 1"


def compute(preset: Preset, *, home=None, progress: bool = True) -> dict[str, pd.DataFrame]:
    """Train every arm for every seed of `preset.seeds` and evaluate them, each sequence's first stage and the
    base (all cached): tidy tables `problems` (per model and problem), `paths` (GRPO-only's path: base, snapshots,
    final, with `step`), `cost` (per arm and seed), `points` (the Pass@1-Pass@K plane per arm), `curves`
    (seed-mean Pass@K per arm with bootstrap bands over problems) and `deltas` (`SequentialSpec.delta_*`)."""
    runs = {seed: train_arms(preset, seed, home=home, progress=progress) for seed in preset.seeds}
    refs = {("base", BASE_SEED): preset.base_model,
            **{(arm, seed): model_ref(stages[-1]) for seed, arms in runs.items() for arm, stages in arms.items()},
            **{(first_stage(arm), seed): model_ref(stages[0]) for seed, arms in runs.items()
               for arm, stages in arms.items() if arm in SEQUENCES}}
    problems = evaluate_models(preset, refs, home=home, progress=progress)
    paths = path_table(preset, {("grpo", seed): arms["grpo"][0] for seed, arms in runs.items()}, problems,
                       home=home, progress=progress)
    curves, _ = pass_curves(problems, preset.eval.ks, n_boot=preset.eval.n_boot, seed=preset.eval.seed)
    spec = preset.sequential
    return {"problems": problems, "paths": paths,
            "cost": pd.concat([arm_cost(arms, seed) for seed, arms in runs.items()], ignore_index=True),
            "points": plane_points(problems, max(preset.eval.ks)), "curves": curves,
            "deltas": pd.DataFrame([{"stage": spec.delta_stage, "pass1": spec.delta_pass1,
                                     "passk": spec.delta_passk}])}


SECOND_STAGE_METRIC = {"grpo->es": "pass@K", "es->grpo": "pass@1"}
"""The gain each order's second stage must add over its first: ES's (Pass@K), or GRPO's (Pass@1)."""


def finding(tables: Mapping[str, pd.DataFrame]) -> Finding:
    """Notebook 03's finding from `compute`'s `problems`, `paths`, `points`, `deltas` (and `curves`), at
    K = `comparison.primary_k`. The paper's test (`registry`): GRPO->ES Pass@K above GRPO-only (secondaries: the
    Pass@1 and ES->GRPO comparisons with the single-method arms); the control: GRPO->ES Pass@K above GRPO-only's
    path at its Pass@1 (secondaries: each order's second stage over its first, ES->GRPO against the path)."""
    pts, d = tables["points"], tables["deltas"].iloc[0]
    ks = sorted(tables["curves"]["k"].unique()) if "curves" in tables else [int(pts["k"].iloc[0])]
    k = primary_k(tables["problems"], ks)
    kk = f"pass@{k}"
    p, paths = with_pass(tables["problems"], (1, k)), with_pass(tables["paths"], (1, k))
    checks, gaps = {}, []
    for seq in SEQUENCES:
        metric = SECOND_STAGE_METRIC[seq].replace("pass@K", kk)
        checks[seq, "stage"] = effect_check(f"{seq} {metric} above its own first stage",
                                            *seed_problem_values(p, metric, seq, first_stage(seq)),
                                            delta=d["stage"], paired_seeds=True)
        checks[seq, "pass1"] = effect_check(f"{seq} Pass@1 above ES-only",
                                            *seed_problem_values(p, "pass@1", seq, "es"), delta=d["pass1"])
        checks[seq, "passk"] = effect_check(f"{seq} Pass@{k} above GRPO-only", *seed_problem_values(p, kk, seq, "grpo"),
                                            delta=d["passk"])
        s1, sk = seed_problem_values(p, "pass@1", seq)[0], seed_problem_values(p, kk, seq)[0]
        g, info = matched(paths, "grpo", float(s1.mean()), [kk], split="test")
        gaps.append(f"{seq}: GRPO-only matched at Pass@1 {s1.mean():.3f}, max |gap| {info['gap'].abs().max():.3f}")
        checks[seq, "path"] = effect_check(f"{seq} Pass@{k} above GRPO-only's path at its Pass@1", sk, g[kk],
                                           delta=d["passk"])
    first, second = SEQUENCES
    tests = (make_test("03_sequential", "paper", checks[first, "passk"],
                       [checks[first, "pass1"], checks[second, "pass1"], checks[second, "passk"]]),
             make_test("03_sequential", "control", checks[first, "path"],
                       [checks[first, "stage"], checks[second, "stage"], checks[second, "path"]]))
    points = "; ".join(f"{r.arm} {r['pass@1']:.3f}/{r['pass@K']:.3f}" for _, r in pts.iterrows())
    front = ", ".join(pts.loc[pts["non_dominated"], "arm"])
    return make_finding(f"Pass@1/Pass@{int(pts['k'].iloc[0])} (seed means): {points}; non-dominated: {front}; "
                        f"evidence at K={k}", (), gaps, tests=tests)
