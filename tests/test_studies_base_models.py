"""Notebook 00's study (the base models): the zoo list of a preset, the target-regime test, the finding on hand-made
tables (including inputs where a check fails), and `compute` on the smoke model in a temporary run store."""

import numpy as np
import pandas as pd
import pytest
import torch

from esreason_lib.models.load import load_model
from esreason_lib.models.zoo import num_parameters
from esreason_lib.paper.studies.base_models import LATENT_MARGIN, compute, finding, in_regime, zoo_models
from esreason_lib.paper.studies.presets import get_preset


# ------------------------------------------------------------------------------------------- zoo_models
def test_zoo_models_lists_base_control_and_scaling_sizes_once_in_order():
    assert zoo_models(get_preset("tiny")) == ["qwen2-s-habit", "qwen2-s", "qwen2-m"]  # qwen2-s once
    assert zoo_models(get_preset("full"))[-1] == "qwen2-l"
    assert zoo_models(get_preset("smoke")) == ["smoke"]  # no control; the scaling size is the base itself
    assert zoo_models(get_preset("paper-easy")) == ["Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct",
                                                    "Qwen/Qwen2.5-3B-Instruct"]
    assert zoo_models(get_preset("tiny", control_model=None, **{"scaling.models": ()})) == ["qwen2-s-habit"]


# ------------------------------------------------------------------------------------------- in_regime
@pytest.mark.parametrize("pass1, pass16, want", [
    (0.10, 0.20, True),     # both lower bounds met with equality
    (0.50, 1.00, True),     # the upper bound of pass@1 with equality
    (0.30, 0.60, True),
    (0.30, 0.59, False),    # pass@16 short of 2 x pass@1
    (0.09, 0.90, False),    # pass@1 too low
    (0.51, 1.00, False),    # pass@1 too high
    (0.00, 0.00, False),
])
def test_in_regime_on_its_boundaries(pass1, pass16, want):
    assert in_regime(pass1, pass16) is want


# ------------------------------------------------------------------------------------------- finding
def _tables(latent: dict[str, tuple[float, float]], n_problems: int = 100) -> dict[str, pd.DataFrame]:
    """Hand-built tables: per model (greedy accuracy, pass@16); the first model is the base. Problem i is greedy-
    correct for i < greedy * P, and its pass@16 is 1 for i < pass16 * P (else 0)."""
    probs, rows = [], []
    for j, (model, (greedy, p16)) in enumerate(latent.items()):
        i = np.arange(n_problems)
        g, p = (i < greedy * n_problems).astype(float), (i < p16 * n_problems).astype(float)
        probs.append(pd.DataFrame({"model": model, "task": "countdown", "problem_id": [f"p{x}" for x in i],
                                   "greedy_correct": g, "pass_at_k": p, "k": 16}))
        rows.append({"model": model, "task": "countdown", "role": "base" if j == 0 else "control", "params": 1,
                     "greedy": g.mean(), "pass@1": 0.2, "pass@16": p.mean(), "distinct_correct": 1.0})
        rows.append({**rows[-1], "task": "addition", "greedy": 0.9})
    return {"summary": pd.DataFrame(rows), "problems": pd.concat(probs, ignore_index=True)}


def test_finding_reproduced_when_every_model_samples_far_beyond_greedy():
    f = finding(_tables({"habit": (0.10, 0.60), "clean": (0.30, 0.80)}))
    assert f.kind == "setup" and f.to_json()["kind"] == "setup"  # shown, never counted as a claim of the paper
    assert f.status == "reproduced" and [c.status for c in f.checks] == ["reproduced"] * 2
    habit = f.checks[0]
    assert habit.name == "habit: pass@16 - greedy above 0.10" and habit.effect == pytest.approx(0.5)
    assert habit.threshold == LATENT_MARGIN and habit.n_seeds is None and habit.ci_low > LATENT_MARGIN
    assert f.sentence.startswith("setup check (the base was built to have it; not a claim of the paper): "
                                 "held-out countdown: habit greedy 0.100, pass@16 0.600; clean greedy 0.300, "
                                 "pass@16 0.800; the default base habit is in the target regime")


def test_a_control_base_adding_less_than_the_margin_is_shown_beside_the_default_bases_check():
    f = finding(_tables({"habit": (0.10, 0.60), "flat": (0.50, 0.52)}))
    assert [c.status for c in f.checks] == ["reproduced", "not reproduced"] and f.checks[1].ci_high < LATENT_MARGIN
    assert f.tests[0].primary is f.checks[0] and f.status == "reproduced"  # the default base's check is primary
    assert finding(_tables({"flat": (0.50, 0.52), "habit": (0.10, 0.60)})).status == "not reproduced"


def test_finding_not_resolved_near_the_margin():
    f = finding(_tables({"edge": (0.20, 0.30)}, n_problems=50))  # effect exactly the margin: the CI straddles it
    assert f.checks[0].effect == pytest.approx(LATENT_MARGIN) and f.status == "not resolved"
    assert "the default base edge is NOT in the target regime" in f.sentence  # pass@16 0.3 < 2 x pass@1 0.2


# ------------------------------------------------------------------------------------------- compute
def test_compute_on_the_smoke_model(tmp_path, monkeypatch):
    monkeypatch.setenv("ESREASON_HOME", str(tmp_path / "default"))
    torch.set_num_threads(1)
    smoke, store = get_preset("smoke"), tmp_path / "store"
    tables = compute(smoke, home=store, progress=False)
    curves, summary, problems = tables["curves"], tables["summary"], tables["problems"]
    tasks = [smoke.task, *smoke.heldout_tasks]
    assert list(summary.columns) == ["model", "task", "role", "params", "greedy", "pass@1", "pass@4",
                                     "distinct_correct"]
    assert summary["model"].tolist() == ["smoke"] * 3 and summary["task"].tolist() == tasks
    assert (summary["role"] == "base").all()
    assert summary["params"].tolist() == [num_parameters(load_model("smoke", home=store, progress=False)[0])] * 3
    for col in ("greedy", "pass@1", "pass@4"):
        assert summary[col].between(0, 1).all(), col
    assert (summary["pass@4"] >= summary["pass@1"]).all()
    assert len(curves) == len(tasks) * len(smoke.eval.ks)
    assert set(curves.columns) == {"k", "pass_at_k", "ci_low", "ci_high", "model", "task"}
    by_task = curves.set_index(["task", "k"])["pass_at_k"]
    for _, row in summary.iterrows():  # the summary's pass@k are the curve's values
        assert row["pass@1"] == by_task[(row["task"], 1)] and row["pass@4"] == by_task[(row["task"], 4)]
    # the per-problem table of the preset's task: its means are the summary's
    assert list(problems.columns) == ["model", "task", "problem_id", "greedy_correct", "pass_at_k", "k"]
    assert len(problems) == smoke.eval.n_problems and (problems["k"] == 4).all()
    assert problems["pass_at_k"].mean() == pytest.approx(by_task[(smoke.task, 4)])
    assert problems["greedy_correct"].mean() == pytest.approx(summary.loc[0, "greedy"])
    assert finding(tables).checks[0].n_seeds is None
    assert len(list(store.glob("eval-*"))) == len(tasks)  # one cached evaluation per (model, task)
    assert not (tmp_path / "default").exists(), "the report wrote outside its run store"
