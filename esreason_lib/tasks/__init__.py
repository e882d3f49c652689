"""Verifiable tasks: synthetic (countdown, addition, sorting), real training and test sets (gsm8k, math) and the
paper's held-out suite (commonsenseqa, gpqa, hotpotqa, mbpp), one module each.

`get_task("countdown", num_count=4)` builds a task by name; every task follows `base.Task`.
"""

from __future__ import annotations

from typing import Callable

from .addition import Addition
from .base import BINARY, Example, RewardShaping, Task
from .commonsenseqa import CommonsenseQA
from .countdown import Countdown
from .gpqa import GPQA
from .gsm8k import GSM8K
from .hotpotqa import HotpotQA
from .math_task import MathTask
from .mbpp import MBPP
from .sorting import Sorting

_REGISTRY: dict[str, Callable[..., Task]] = {
    "countdown": Countdown,
    "addition": Addition,
    "sorting": Sorting,
    "gsm8k": GSM8K,
    "math": MathTask,
    "commonsenseqa": CommonsenseQA,
    "gpqa": GPQA,
    "hotpotqa": HotpotQA,
    "mbpp": MBPP,
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
    "CommonsenseQA",
    "Countdown",
    "Example",
    "GPQA",
    "GSM8K",
    "HotpotQA",
    "MBPP",
    "MathTask",
    "RewardShaping",
    "Sorting",
    "Task",
    "get_task",
]
