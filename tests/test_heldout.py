"""The held-out suite summary (average Delta Pass@K) and the paper presets' held-out suite."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from esreason_lib.heldout import average_delta
from esreason_lib.studies.presets import get_preset
from esreason_lib.tasks import TASK_NAMES

SUITE = ("commonsenseqa", "gpqa", "hotpotqa", "mbpp")


def test_average_delta_by_hand():
    deltas = {"math": -0.02, "commonsenseqa": 0.01, "gpqa": 0.0, "hotpotqa": -0.05, "mbpp": 0.01}
    assert average_delta(deltas) == pytest.approx(-0.05 / 5)  # (-0.02 + 0.01 + 0 - 0.05 + 0.01) / 5
    assert average_delta(pd.Series(deltas)) == pytest.approx(-0.01)
    assert average_delta([("a", 0.5), ("b", -0.25)]) == 0.125 and average_delta({"a": np.float64(1.0)}) == 1.0


@pytest.mark.parametrize("bad, message", [
    ({}, "per_task_deltas is empty"),
    ({"gpqa": float("nan")}, r"per_task_deltas\['gpqa'\] must be a finite number in \[-1, 1\], got nan"),
    ({"mbpp": 0.1, "gpqa": 1.5}, r"per_task_deltas\['gpqa'\] must be .*got 1\.5"),
    ({"mbpp": True}, r"per_task_deltas\['mbpp'\] must be .*got True"),
    ({"mbpp": "0.1"}, r"per_task_deltas\['mbpp'\] must be .*got '0\.1'"),
    (3, "per_task_deltas must map task names to deltas, got 3"),
])
def test_average_delta_rejects_bad_input(bad, message):
    with pytest.raises(ValueError, match=message):
        average_delta(bad)


def test_paper_presets_hold_the_heldout_suite():
    assert get_preset("paper-easy").heldout_tasks == ("math", *SUITE)
    assert get_preset("paper-hard").heldout_tasks == ("gsm8k", *SUITE)
    assert set(SUITE) <= set(TASK_NAMES)
