"""The Countdown held-out pool's splits: disjoint, covering, and matching notebook 01's test and selection."""

import numpy as np
import pytest

from esreason_lib.paper.splits import COUNTDOWN, SMOKE, Splits
from esreason_lib.tasks import get_task


@pytest.mark.parametrize("splits", [COUNTDOWN, SMOKE])
def test_splits_are_disjoint_and_cover_the_pool(splits):
    parts = [set(splits.indices(n)) for n in ("test", "selection", "tuning")]
    assert all(not (a & b) for i, a in enumerate(parts) for b in parts[i + 1:])
    assert set().union(*parts) == set(range(splits.pool))


def test_countdown_splits_by_seed_and_index():
    assert COUNTDOWN.indices("selection").tolist() == list(range(200, 300))  # notebook 01's selection problems
    assert COUNTDOWN.indices("test", 200).tolist() == list(range(200))  # notebook 01's test problems
    assert len(COUNTDOWN.indices("test")) == 770 and COUNTDOWN.end("tuning") == 500
    pool = get_task("countdown").examples("test", n=COUNTDOWN.end("tuning"), seed=COUNTDOWN.seed)
    ids = np.array([str(e["id"]) for e in pool])
    assert len(set(ids[COUNTDOWN.indices("tuning")]) & set(ids[COUNTDOWN.indices("test", 500)])) == 0


def test_overlapping_splits_are_rejected():
    with pytest.raises(ValueError, match="overlap"):
        Splits(seed=0, pool=10, selection=(0, 5), tuning=(4, 8))
