"""An evaluation's per-sample table on disk: one row per problem, so that a store (and a result bundle) of
thousands of evaluations stays small.

`EvalResult.samples` has a row per (problem, sample): problem_id, sample, answer, correct. `<name>_samples.csv`
holds a row per problem instead (`COLUMNS`): problem_id, outcomes (a JSON list of the distinct [answer, correct]
pairs in the order first drawn; answer null where none was extracted) and draws (each sample's index into
outcomes, space-separated, in drawing order). At the tiny preset's shapes (64 samples of ~8-character answers, a
few distinct per problem) that is ~8x smaller than a row per sample. `decode` also reads the row-per-sample layout
that stores written before this module hold (answer as a JSON string, so "007" and "7" stay apart).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

COLUMNS = ("problem_id", "outcomes", "draws")
"""Columns of the stored per-sample table, in order (one row per problem)."""


def encode(samples: pd.DataFrame, n: int) -> pd.DataFrame:
    """The stored table (`COLUMNS`) of `samples` (a row per (problem, sample), `n` samples per problem, problems in
    table order and samples in drawing order, as `evaluate` builds them)."""
    answers = [None if isinstance(a, float) and np.isnan(a) else a for a in samples["answer"]]  # pandas' missing
    correct = samples["correct"].astype(bool).tolist()
    rows = []
    for start in range(0, len(answers), n):
        index: dict[str, int] = {}  # the JSON of an [answer, correct] pair -> its place in outcomes
        draws = [index.setdefault(json.dumps([a, ok], separators=(",", ":")), len(index))
                 for a, ok in zip(answers[start: start + n], correct[start: start + n])]
        rows.append((samples["problem_id"].iat[start], "[" + ",".join(index) + "]", " ".join(map(str, draws))))
    return pd.DataFrame(rows, columns=list(COLUMNS))


def decode(stored: pd.DataFrame, ids: list[str], n: int) -> pd.DataFrame | None:
    """The per-sample rows (problem_id, sample, answer, correct) of `stored` (this module's layout or the older
    row-per-sample one) for the problems `ids` in order, `n` samples each; None when `stored` holds another number
    of problems or samples (a stale table: the evaluation is recomputed)."""
    if "draws" not in stored:  # a row per sample
        if len(stored) != n * len(ids):
            return None
        answers = [None if pd.isna(a) else json.loads(a) for a in stored["answer"]]
        correct = stored["correct"].astype(bool).tolist()
    else:
        if len(stored) != len(ids):
            return None
        answers, correct = [], []
        for outcomes, draws in zip(stored["outcomes"], stored["draws"]):
            pairs = json.loads(outcomes)
            picks = [pairs[int(i)] for i in str(draws).split()]  # read_csv reads a lone "0" as the integer 0
            if len(picks) != n:
                return None
            answers += [a for a, _ in picks]
            correct += [bool(ok) for _, ok in picks]
    return pd.DataFrame({"problem_id": np.repeat(ids, n), "sample": np.tile(np.arange(n, dtype=np.int64), len(ids)),
                         "answer": answers, "correct": np.asarray(correct, dtype=bool)})
