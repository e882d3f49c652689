"""Notebook 00: the base models (the zoo) and their latent capability: Pass@K on Countdown and the held-out tasks.

The paper's premise is that the base model solves some problems greedily and many more when sampled. The check,
per model on the held-out problems of the preset's task: Pass@K (K = 16, or the largest K <= 16 of `eval.ks`;
the unbiased estimate per problem from `eval.n_samples` samples) minus greedy correctness exceeds
`LATENT_MARGIN`, with a CI over problems (a base model has no training-seed axis).

This is a setup check, not a claim of the paper: the habit base was built to answer 40% of problems with a fixed
"habit" answer, so its latent capability is by construction (the clean control passes as well). The finding has
kind "setup": shown in the findings table, never counted in the tally of the paper's claims.
"""

from __future__ import annotations

import pandas as pd

from esreason_lib.metrics import pass_at_k
from esreason_lib.models.load import load_model
from esreason_lib.models.zoo import num_parameters
from esreason_lib.paper.findings import Finding, effect_check, make_finding
from esreason_lib.paper.studies.common import evaluate_ref
from esreason_lib.paper.studies.preset_spec import HeldoutTask
from esreason_lib.paper.studies.presets import Preset
from esreason_lib.paper.studies.registry import make_test
from esreason_lib.training.inputs import resolve_device

LATENT_MARGIN = 0.10
""""Many more when sampled": Pass@K must exceed greedy accuracy by more than this (absolute)."""


def zoo_models(preset: Preset) -> list[str]:
    """Every base model a preset uses: the base, its control, and the scaling sizes (deduplicated, in order)."""
    names = [preset.base_model, preset.control_model, *preset.scaling.models]
    return list(dict.fromkeys(n for n in names if n))


def compute(preset: Preset, *, models: list[str] | None = None, home=None,
            progress: bool = True) -> dict[str, pd.DataFrame]:
    """Build (or load) each model (default `zoo_models`) and evaluate it on the preset's task and held-out tasks.

    Returns tidy tables: `curves` one row per (model, task, k) with pass_at_k and its CI; `summary` one row per
    (model, task) with role ("base", "control" or "scaling"), params, greedy accuracy, pass@1, pass@K (K = 16 or
    the largest K <= 16) and distinct correct answers per problem; `problems` one row per (model, problem) of the
    preset's task with greedy_correct (0/1), pass_at_k (the unbiased per-problem Pass@K) and k.
    """
    curves, rows, problems = [], [], []
    device = resolve_device(preset.device)
    k = max(k for k in preset.eval.ks if k <= 16)
    roles = {preset.base_model: "base", preset.control_model: "control"}
    for name in models or zoo_models(preset):
        model, _ = load_model(name, device=device, home=home, progress=progress)
        params = num_parameters(model)
        del model
        for held in (HeldoutTask(preset.task, preset.task, preset.test_task_kwargs()), *preset.heldout()):
            task = held.label
            result = evaluate_ref(name, held.task, held.kwargs, preset.eval, device=device, home=home,
                                  progress=progress)
            curves.append(result.curve.assign(model=name, task=task))
            table, curve = result.table, result.curve.set_index("k")["pass_at_k"]
            rows.append({"model": name, "task": task, "role": roles.get(name, "scaling"), "params": params,
                         "greedy": float(table["greedy_correct"].mean()), "pass@1": float(curve.loc[1]),
                         f"pass@{k}": float(curve.loc[k]),
                         "distinct_correct": float(table["distinct_correct"].mean())})
            if task == preset.task:
                problems.append(pd.DataFrame({
                    "model": name, "task": task, "problem_id": table["problem_id"],
                    "greedy_correct": table["greedy_correct"].astype(float),
                    "pass_at_k": pass_at_k(table["n"].to_numpy(), table["c"].to_numpy(), k), "k": k}))
    return {"curves": pd.concat(curves, ignore_index=True), "summary": pd.DataFrame(rows),
            "problems": pd.concat(problems, ignore_index=True)}


def in_regime(pass1: float, pass16: float) -> bool:
    """The issue's target regime for the default base: 0.10 <= pass@1 <= 0.50 and pass@16 >= 2 pass@1."""
    return 0.10 <= pass1 <= 0.50 and pass16 >= 2 * pass1


def finding(tables: dict[str, pd.DataFrame]) -> Finding:
    """One check per model: mean over held-out problems of pass@K - greedy_correct above `LATENT_MARGIN`; the first
    model's (the default base) is the primary check, the other bases' are shown beside it."""
    probs = tables["problems"]
    k, task = int(probs["k"].iloc[0]), probs["task"].iloc[0]
    checks = [effect_check(f"{m}: pass@{k} - greedy above {LATENT_MARGIN:.2f}",
                           (g["pass_at_k"] - g["greedy_correct"]).to_numpy()[None], threshold=LATENT_MARGIN,
                           seed_axis=False)
              for m, g in probs.groupby("model", sort=False)]
    rows = tables["summary"][tables["summary"]["task"] == task]
    parts = [f"{r['model']} greedy {r['greedy']:.3f}, pass@{k} {r[f'pass@{k}']:.3f}" for _, r in rows.iterrows()]
    base = rows[rows["role"] == "base"].iloc[0]
    regime = "in" if in_regime(base["pass@1"], base[f"pass@{k}"]) else "NOT in"
    sentence = (f"held-out {task}: " + "; ".join(parts) + f"; the default base {base['model']} is {regime} the "
                f"target regime (0.10 <= pass@1 {base['pass@1']:.3f} <= 0.50, pass@{k} >= 2 pass@1)")
    return make_finding("setup check (the base was built to have it; not a claim of the paper): " + sentence, checks,
                        kind="setup", tests=(make_test("00_base_models", "paper", checks[0], checks[1:]),))
