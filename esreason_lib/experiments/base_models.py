"""Notebook 00: the base models (the zoo) and their Pass@K on Countdown and the held-out tasks."""

from __future__ import annotations

import pandas as pd

from ..models import load_model
from ..zoo import num_parameters
from ..presets import Preset
from ..training import resolve_device
from .common import evaluate_ref


def zoo_models(preset: Preset) -> list[str]:
    """Every base model a preset uses: the base, its control, and the scaling sizes (deduplicated, in order)."""
    names = [preset.base_model, preset.control_model, *preset.scaling.models]
    return list(dict.fromkeys(n for n in names if n))


def base_model_report(preset: Preset, *, models: list[str] | None = None, home=None,
                      progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Build (or load) each model and evaluate it on the preset's task and held-out tasks.

    Returns `(curves, summary)`: curves has one row per (model, task, k) with pass_at_k and its CI; summary one
    row per (model, task) with params, greedy accuracy, pass@1, pass@16 (or the largest K <= 16) and
    distinct correct answers per problem.
    """
    curves, rows = [], []
    device = resolve_device(preset.device)
    for name in models or zoo_models(preset):
        model, _ = load_model(name, device=device, home=home, progress=progress)
        params = num_parameters(model)
        del model
        for task in (preset.task, *preset.heldout_tasks):
            kwargs = preset.test_task_kwargs() if task == preset.task else {}
            result = evaluate_ref(name, task, kwargs, preset.eval, device=device, home=home, progress=progress)
            curves.append(result.curve.assign(model=name, task=task))
            table = result.table
            k16 = max(k for k in preset.eval.ks if k <= 16)
            curve = result.curve.set_index("k")["pass_at_k"]
            rows.append({"model": name, "task": task, "params": params,
                         "greedy": float(table["greedy_correct"].mean()), "pass@1": float(curve.loc[1]),
                         f"pass@{k16}": float(curve.loc[k16]),
                         "distinct_correct": float(table["distinct_correct"].mean())})
    return pd.concat(curves, ignore_index=True), pd.DataFrame(rows)


def in_regime(pass1: float, pass16: float) -> bool:
    """The issue's target regime for the default base: 0.10 <= pass@1 <= 0.50 and pass@16 >= 2 pass@1."""
    return 0.10 <= pass1 <= 0.50 and pass16 >= 2 * pass1


def describe_base(summary: pd.DataFrame, preset: Preset) -> str:
    """The finding line for notebook 00, computed from the summary table."""
    k16 = [c for c in summary.columns if c.startswith("pass@") and c != "pass@1"][0]
    parts = []
    for name in (preset.base_model, preset.control_model):
        if not name:
            continue
        row = summary[(summary["model"] == name) & (summary["task"] == preset.task)].iloc[0]
        regime = "in" if in_regime(row["pass@1"], row[k16]) else "NOT in"
        parts.append(f"{name}: greedy {row['greedy']:.2f}, pass@1 {row['pass@1']:.2f}, {k16} {row[k16]:.2f} "
                     f"({regime} the target regime)")
    return "; ".join(parts)
