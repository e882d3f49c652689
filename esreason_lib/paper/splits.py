"""Disjoint tuning / selection / test splits of a task's held-out (test) pool, defined by seed and index.

A task's held-out pool is its list `task.examples("test", n=pool, seed=seed)`: a deterministic order of distinct
problems in which every shorter list is a prefix (`tasks._common.sample_distinct`). A `Splits` names index ranges
of that order:

- `selection` [a, b): where notebook 01 chooses each method's best step size (its `comparison.selection_problems`
  are the problems right after its `eval.n_problems` test problems: [200, 300) at `tiny`);
- `tuning` [c, d): where hyperparameters are tuned (`benchmarks/sweep_tiny.py`, notebook 06's per-shaping alpha);
- `test`: every other index below `pool`: all problems not used to choose anything.

Countdown's test pool holds 1,070 distinct problems (the seed-0 draw exhausts at 1,070). History, stated plainly:
the `tiny` hyperparameters were chosen from `benchmarks/sweep_tiny.py`'s tables when it scored the first 1,000 of
them (before this module), i.e. on what are now test, selection and tuning problems alike. The sweep now scores
the tuning split only; its re-run there is in `papers/sweeps.md` beside the original tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SPLIT_NAMES = ("test", "selection", "tuning")
"""The three splits of a pool."""


@dataclass(frozen=True)
class Splits:
    """Index ranges of a task's held-out pool (order: `task.examples("test", n=pool, seed=seed)`)."""

    seed: int
    """Seed of the pool's draw order (the evaluations' `EvalSpec.seed`)."""
    pool: int
    """Distinct problems in the pool (indices 0 .. pool - 1)."""
    selection: tuple[int, int]
    """[start, stop) of the selection split (where notebook 01 chooses step sizes); (0, 0) for none."""
    tuning: tuple[int, int]
    """[start, stop) of the tuning split (hyperparameter sweeps, per-variant step sizes); (0, 0) for none."""

    def __post_init__(self):
        if self.pool < 1:
            raise ValueError(f"Splits.pool must be >= 1, got {self.pool!r}")
        for name in ("selection", "tuning"):
            start, stop = getattr(self, name)
            if not 0 <= start <= stop <= self.pool:
                raise ValueError(f"Splits.{name} must be [start, stop) with 0 <= start <= stop <= pool "
                                 f"{self.pool}, got {(start, stop)!r}")
        (a, b), (c, d) = self.selection, self.tuning
        if max(a, c) < min(b, d):
            raise ValueError(f"Splits.selection {self.selection} and tuning {self.tuning} overlap")

    def of(self, index) -> np.ndarray:
        """The split name of each pool index (array of str); indices outside [0, pool) are a ValueError."""
        idx = np.asarray(index, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self.pool):
            raise ValueError(f"indices must lie in [0, {self.pool}), got min {idx.min()} max {idx.max()}")
        out = np.full(idx.shape, "test", dtype=object)
        for name in ("selection", "tuning"):
            start, stop = getattr(self, name)
            out[(idx >= start) & (idx < stop)] = name
        return out

    def indices(self, name: str, n: int | None = None) -> np.ndarray:
        """Sorted pool indices of split `name` below `n` (default: the whole pool)."""
        if name not in SPLIT_NAMES:
            raise ValueError(f"split must be one of {SPLIT_NAMES}, got {name!r}")
        n = self.pool if n is None else min(int(n), self.pool)
        idx = np.arange(n)
        return idx[self.of(idx) == name]

    def end(self, name: str) -> int:
        """The smallest n such that the first n pool problems hold every problem of split `name`."""
        idx = self.indices(name)
        return int(idx[-1]) + 1 if idx.size else 0


COUNTDOWN = Splits(seed=0, pool=1070, selection=(200, 300), tuning=(300, 500))
"""Countdown (3 numbers in 1..15, the default task): test = [0, 200) (notebook 01's test problems) and
[500, 1070); selection = [200, 300) (notebook 01's); tuning = [300, 500)."""
SMOKE = Splits(seed=0, pool=12, selection=(6, 8), tuning=(8, 12))
"""The `smoke` preset's splits (its evaluations read 6-12 problems): test [0, 6), selection [6, 8), tuning [8, 12)."""
NONE = Splits(seed=0, pool=1, selection=(0, 0), tuning=(0, 0))
"""No tuning or selection split (the paper presets evaluate the whole test split): anything tuned there is tuned
on test problems, and the studies say so."""


def split_rows(problem_index, splits: Splits, name: str) -> np.ndarray:
    """Boolean mask of the rows whose pool index (`problem_index`, e.g. a table's row order) lies in split `name`;
    with `NONE` (no tuning / selection split) every row counts as every split."""
    idx = np.asarray(problem_index, dtype=np.int64)
    if splits.tuning == (0, 0) and splits.selection == (0, 0) and name != "test":
        return np.ones(idx.shape, dtype=bool)
    inside = idx < splits.pool
    out = np.zeros(idx.shape, dtype=bool)
    out[inside] = splits.of(idx[inside]) == name
    if name == "test":
        out[~inside] = True  # beyond the pool definition: nothing was tuned there
    return out
