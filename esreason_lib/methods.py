"""The trained methods (`METHODS`, `trainer`) and sequential post-training: one method's output is the next one's base
(GRPO->ES, ES->GRPO, ...). This registry sits above `es/` and `grpo/`, which never import it.

Sequential post-training: one method's output is the next one's base (GRPO->ES, ES->GRPO, ...).

The paper compares sequences against single methods at an equal *update budget*. The one rule here: each method
has a full budget in its own iterations (one single-method run; ES iterations and GRPO optimizer iterations each
count one update), and a sequence gives stage i the i-th share (`split_budget`, 50/50 by default) of its own
method's budget, so every arm spends "one full run" in total. Every stage is an ordinary, cached, resumable run in
the run store, whose config names the previous stage's saved model directory as its base, so a finished stage is
never retrained.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Mapping, Sequence

from esreason_lib.es.config import ESConfig
from esreason_lib.es.loop import train_es
from esreason_lib.grpo.config import GRPOConfig
from esreason_lib.grpo.loop import train_grpo
from esreason_lib.store.runs import Run

METHODS = ("es", "grpo")
"""The trained methods; `trainer(method)` is each one's `train_*` function (`config, *, home, resume, progress`)."""


def trainer(method: str):
    """`es.loop.train_es` or `grpo.loop.train_grpo` for `method`, one of `METHODS`."""
    if method not in METHODS:
        raise ValueError(f"method {method!r} is not one of {METHODS}")
    return {"es": train_es, "grpo": train_grpo}[method]


def split_budget(total: int, fractions: Sequence[float] = (0.5, 0.5)) -> tuple[int, ...]:
    """Split `total` updates by `fractions` (summing to 1) into integers that add up to exactly `total`."""
    if isinstance(total, bool) or not isinstance(total, int) or total < len(fractions):
        raise ValueError(f"total must be an int >= the number of stages ({len(fractions)}), got {total!r}")
    if any(f <= 0 for f in fractions) or abs(sum(fractions) - 1.0) > 1e-9:
        raise ValueError(f"fractions must be positive and sum to 1, got {tuple(fractions)!r}")
    parts = [math.floor(round(total * f, 9)) for f in fractions]  # round: 100 * 0.29 = 28.999999999999996
    parts[-1] = total - sum(parts[:-1])
    return tuple(parts)


def sequence_stages(order: Sequence[str], budgets: int | Mapping[str, int],
                    fractions: Sequence[float] | None = None) -> list[tuple[str, int]]:
    """`(method, iterations)` stages for `order` (e.g. ("grpo", "es")): stage i gets the i-th share (`fractions`,
    equal by default) of its method's full budget, `budgets[method]` (an int: the same budget for every method,
    so the stages share that many updates)."""
    if not order:
        raise ValueError(f"order must name at least one method, got {order!r}")
    for method in order:
        if method not in METHODS:
            raise ValueError(f"method {method!r} is not one of {METHODS}")
    fractions = fractions or [1.0 / len(order)] * len(order)
    if len(fractions) != len(order):
        raise ValueError(f"fractions must give one share per stage of {tuple(order)!r}, got {tuple(fractions)!r}")
    full = {m: budgets for m in METHODS} if isinstance(budgets, int) else budgets
    return [(m, split_budget(full[m], fractions)[i]) for i, m in enumerate(order)]


def train_sequence(stages: Sequence[tuple[str, int]], *, es: ESConfig, grpo: GRPOConfig,
                   base_model: str | Path | None = None, home=None, resume: bool = True,
                   progress: bool = True) -> list[Run]:
    """Train `stages` in order; stage i+1 starts from stage i's saved model. Returns the stage runs.

    `es` and `grpo` give each method's hyperparameters; their `model` and `iterations` fields are replaced by the
    chain's current base and the stage's budget. The chain starts from `base_model` (default: the first stage's
    config model).
    """
    if not stages:
        raise ValueError("stages must name at least one (method, budget) pair")
    for method, budget in stages:  # every stage is checked before the first one trains
        if method not in METHODS:
            raise ValueError(f"stage method {method!r} is not one of {METHODS}")
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise ValueError(f"stage {method!r} budget must be a positive int, got {budget!r}")
    configs = {"es": es, "grpo": grpo}
    current = str(base_model) if base_model is not None else configs[stages[0][0]].model
    runs: list[Run] = []
    for method, budget in stages:
        config = replace(configs[method], model=current, iterations=budget)
        run = trainer(method)(config, home=home, resume=resume, progress=progress)
        runs.append(run)
        current = str(run.model_dir)
    return runs
