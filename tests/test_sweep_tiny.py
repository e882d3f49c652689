"""benchmarks/sweep_tiny.py scores on the tuning split only (no test or selection problem)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from esreason_lib.evaluation import EvalResult
from esreason_lib.paper.studies.presets import get_preset

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import sweep_tiny  # noqa: E402


def test_the_sweep_evaluates_through_the_tuning_split_and_scores_only_it():
    preset = get_preset("tiny")
    assert preset.splits.tuning == (300, 500) and sweep_tiny._spec(preset, 4).n_problems == 500
    c = np.zeros(500, dtype=int)
    c[300:500] = 2  # 2 of 4 correct on every tuning problem, 0 elsewhere
    greedy = np.zeros(500, dtype=bool)
    greedy[300:400] = True
    table = pd.DataFrame({"problem_id": [str(i) for i in range(500)], "n": 4, "c": c, "greedy_correct": greedy})
    scores = sweep_tiny.tuning_scores(EvalResult(table=table, curve=None), preset, 4)
    assert scores == {"greedy": 0.5, "pass@1": 0.5, "pass@4": pytest.approx(1.0), "problems": 200}
