"""Verifiable tasks: synthetic (countdown, addition, sorting) and real (gsm8k, math), one module each.

`get_task("countdown", num_count=4)` builds a task by name; every task follows `base.Task`.
"""

from __future__ import annotations

from typing import Callable

from .addition import Addition
from .base import BINARY, Example, RewardShaping, Task
from .countdown import Countdown
from .gsm8k import GSM8K
from .math_task import MathTask
from .sorting import Sorting

_REGISTRY: dict[str, Callable[..., Task]] = {
    "countdown": Countdown,
    "addition": Addition,
    "sorting": Sorting,
    "gsm8k": GSM8K,
    "math": MathTask,
}

TASK_NAMES: tuple[str, ...] = tuple(_REGISTRY)
"""The names `get_task` accepts."""


def get_task(name: str, **kwargs) -> Task:
    """A new task instance by name (kwargs go to its constructor); ValueError naming the choices otherwise."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown task {name!r}; choose one of {TASK_NAMES}")
    return _REGISTRY[name](**kwargs)


__all__ = [
    "BINARY",
    "TASK_NAMES",
    "Addition",
    "Countdown",
    "Example",
    "GSM8K",
    "MathTask",
    "RewardShaping",
    "Sorting",
    "Task",
    "get_task",
]
