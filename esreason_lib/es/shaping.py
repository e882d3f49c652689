"""Fitness shaping: rewards [N] of one population -> the weights z [N] of its members in the ES update.

`ESConfig.fitness_shaping` names one of `FITNESS_SHAPING`; `ES(..., fitness_shaping=fn)` injects any other."""

from __future__ import annotations

from typing import Callable

import numpy as np


def zscore(rewards: np.ndarray) -> np.ndarray:
    """(r - mean) / (std + 1e-8) with the population std (ddof=0); all-equal rewards give exactly zeros."""
    r = np.asarray(rewards, dtype=np.float64)  # [N]
    if r.max() == r.min():
        return np.zeros_like(r)
    return (r - r.mean()) / (r.std() + 1e-8)


def centered_ranks(rewards: np.ndarray) -> np.ndarray:
    """Ranks mapped linearly to [-0.5, 0.5] (OpenAI-ES, Salimans et al. 2017). Tied rewards share their average
    rank (OpenAI-ES breaks ties by index, which invents a signal), so all-equal rewards give zeros."""
    r = np.asarray(rewards, dtype=np.float64)  # [N]
    if r.size < 2:
        return np.zeros_like(r)
    ranks = np.empty(r.size)
    ranks[np.argsort(r, kind="stable")] = np.arange(r.size)  # [N] 0..N-1
    _, inv = np.unique(r, return_inverse=True)
    ranks = (np.bincount(inv, ranks) / np.bincount(inv))[inv]  # [N] average rank within ties
    return ranks / (r.size - 1) - 0.5


def raw(rewards: np.ndarray) -> np.ndarray:
    """The rewards unchanged (as float64)."""
    return np.asarray(rewards, dtype=np.float64).copy()


FITNESS_SHAPING: dict[str, Callable[[np.ndarray], np.ndarray]] = {"zscore": zscore, "rank": centered_ranks,
                                                                  "none": raw}
"""Named fitness-shaping functions rewards [N] -> z [N]; add an entry to make a new name valid in ESConfig."""
