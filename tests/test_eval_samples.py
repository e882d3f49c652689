"""Tests for esreason_lib.eval_samples: the stored per-sample table round-trips exactly, reads the older
row-per-sample layout to the same rows, and a stale table reads as None."""

import io
import json

import numpy as np
import pandas as pd

from esreason_lib import eval_samples


def _samples(ids, answers, correct):
    n = len(answers) // len(ids)
    return pd.DataFrame({"problem_id": np.repeat(ids, n), "sample": np.tile(np.arange(n, dtype=np.int64), len(ids)),
                         "answer": answers, "correct": np.asarray(correct, dtype=bool)})


def _through_csv(df: pd.DataFrame) -> pd.DataFrame:
    return pd.read_csv(io.StringIO(df.to_csv(index=False)))


IDS = ["p-1", "007"]
ANSWERS = ["7", "007", None, "7", "x", "x", "x", None]  # "007" and "7" apart; None where nothing was extracted
CORRECT = [True, False, False, True, False, True, False, False]  # one answer scored both ways (p 2: "x")


def test_round_trip_through_csv_is_exact():
    samples = _samples(IDS, ANSWERS, CORRECT)
    stored = eval_samples.encode(samples, 4)
    assert list(stored.columns) == list(eval_samples.COLUMNS) and len(stored) == 2
    assert stored["draws"].tolist() == ["0 1 2 0", "0 1 0 2"]  # first-drawn order of [answer, correct] pairs
    assert json.loads(stored["outcomes"][1]) == [["x", False], ["x", True], [None, False]]
    pd.testing.assert_frame_equal(eval_samples.decode(_through_csv(stored), IDS, 4), samples)


def test_one_sample_per_problem():
    samples = _samples(IDS, ["3", None], [True, False])
    back = eval_samples.decode(_through_csv(eval_samples.encode(samples, 1)), IDS, 1)  # draws "0" reads as 0
    pd.testing.assert_frame_equal(back, samples)


def test_reads_the_row_per_sample_layout_to_the_same_rows():
    samples = _samples(IDS, ANSWERS, CORRECT)
    old = samples.assign(answer=[json.dumps(a) if a is not None else None for a in ANSWERS])
    pd.testing.assert_frame_equal(eval_samples.decode(_through_csv(old), IDS, 4), samples)
    assert eval_samples.decode(_through_csv(old), IDS, 2) is None  # 8 rows are not 2 x 2


def test_stale_table_reads_as_none():
    stored = _through_csv(eval_samples.encode(_samples(IDS, ANSWERS, CORRECT), 4))
    assert eval_samples.decode(stored, IDS, 8) is None  # other n
    assert eval_samples.decode(stored, IDS + ["p-3"], 4) is None  # other problems
