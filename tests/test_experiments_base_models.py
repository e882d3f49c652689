"""Notebook 00's experiments module (the base models): the zoo list of a preset, the target-regime test and the
finding line on hand-made values, and the report on the smoke model in a temporary run store."""

import pandas as pd
import pytest
import torch

from esreason_lib.experiments.base_models import base_model_report, describe_base, in_regime, zoo_models
from esreason_lib.models import load_model
from esreason_lib.zoo import num_parameters
from esreason_lib.presets import get_preset


# ------------------------------------------------------------------------------------------- zoo_models
def test_zoo_models_lists_base_control_and_scaling_sizes_once_in_order():
    assert zoo_models(get_preset("tiny")) == ["qwen2-s-habit", "qwen2-s", "qwen2-m", "qwen2-l"]  # qwen2-s once
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


# ------------------------------------------------------------------------------------------- describe_base
def test_describe_base_reports_base_and_control_on_the_preset_task():
    summary = pd.DataFrame([
        {"model": "qwen2-s-habit", "task": "countdown", "params": 1, "greedy": 0.05, "pass@1": 0.2,
         "pass@16": 0.55, "distinct_correct": 1.0},
        {"model": "qwen2-s-habit", "task": "addition", "params": 1, "greedy": 0.9, "pass@1": 0.9,
         "pass@16": 0.99, "distinct_correct": 1.0},
        {"model": "qwen2-s", "task": "countdown", "params": 1, "greedy": 0.6, "pass@1": 0.62,
         "pass@16": 0.9, "distinct_correct": 1.0},
        {"model": "qwen2-m", "task": "countdown", "params": 2, "greedy": 0.7, "pass@1": 0.3,
         "pass@16": 0.8, "distinct_correct": 1.0},
    ])
    text = describe_base(summary, get_preset("tiny"))
    assert text == ("qwen2-s-habit: greedy 0.05, pass@1 0.20, pass@16 0.55 (in the target regime); "
                    "qwen2-s: greedy 0.60, pass@1 0.62, pass@16 0.90 (NOT in the target regime)")


def test_describe_base_without_a_control_uses_the_largest_k_column():
    summary = pd.DataFrame([{"model": "smoke", "task": "countdown", "params": 1, "greedy": 0.0, "pass@1": 0.25,
                             "pass@4": 0.4, "distinct_correct": 0.0}])
    assert describe_base(summary, get_preset("smoke")) == (
        "smoke: greedy 0.00, pass@1 0.25, pass@4 0.40 (NOT in the target regime)")


# ------------------------------------------------------------------------------------------- base_model_report
def test_base_model_report_on_the_smoke_model(tmp_path, monkeypatch):
    monkeypatch.setenv("ESREASON_HOME", str(tmp_path / "default"))
    torch.set_num_threads(1)
    smoke, store = get_preset("smoke"), tmp_path / "store"
    curves, summary = base_model_report(smoke, home=store, progress=False)
    tasks = [smoke.task, *smoke.heldout_tasks]
    assert list(summary.columns) == ["model", "task", "params", "greedy", "pass@1", "pass@4", "distinct_correct"]
    assert summary["model"].tolist() == ["smoke"] * 3 and summary["task"].tolist() == tasks
    assert summary["params"].tolist() == [num_parameters(load_model("smoke", home=store, progress=False)[0])] * 3
    for col in ("greedy", "pass@1", "pass@4"):
        assert summary[col].between(0, 1).all(), col
    assert (summary["pass@4"] >= summary["pass@1"]).all()
    assert len(curves) == len(tasks) * len(smoke.eval.ks)
    assert set(curves.columns) == {"k", "pass_at_k", "ci_low", "ci_high", "model", "task"}
    by_task = curves.set_index(["task", "k"])["pass_at_k"]
    for _, row in summary.iterrows():  # the summary's pass@k are the curve's values
        assert row["pass@1"] == by_task[(row["task"], 1)] and row["pass@4"] == by_task[(row["task"], 4)]
    assert len(list(store.glob("eval-*"))) == len(tasks)  # one cached evaluation per (model, task)
    assert not (tmp_path / "default").exists(), "the report wrote outside its run store"
