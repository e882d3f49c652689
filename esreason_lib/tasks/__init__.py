"""Verifiable tasks: synthetic (countdown, addition, sorting, multistep), real training and test sets (gsm8k, math)
and the paper's held-out suite (commonsenseqa, gpqa, hotpotqa, mbpp), one module each.

`get_task("countdown", num_count=4)` builds a task by name; every task follows `base.Task`. `register_task` adds
your own under a name (then `ESConfig(task=name)` and `esreason train --task-module` find it), and `task_version`
is what a run's identity records of a task that is not built in: its code, so that an edited verifier trains anew.
"""

from __future__ import annotations

import difflib
import importlib
import uuid
from typing import Callable

from .addition import Addition
from .base import BINARY, Example, RewardShaping, Task
from .code_identity import Unreadable, class_digest
from .commonsenseqa import CommonsenseQA
from .countdown import Countdown
from .gpqa import GPQA
from .gsm8k import GSM8K
from .hotpotqa import HotpotQA
from .math_task import MathTask
from .mbpp import MBPP
from .multistep import MultiStep
from .sorting import Sorting

_REGISTRY: dict[str, Callable[..., Task]] = {
    "countdown": Countdown,
    "addition": Addition,
    "sorting": Sorting,
    "multistep": MultiStep,
    "gsm8k": GSM8K,
    "math": MathTask,
    "commonsenseqa": CommonsenseQA,
    "gpqa": GPQA,
    "hotpotqa": HotpotQA,
    "mbpp": MBPP,
}

TASK_NAMES: tuple[str, ...] = tuple(_REGISTRY)
"""The built-in tasks' names (`get_task` also accepts those added by `register_task`)."""


def register_task(name: str, factory: Callable[..., Task]) -> None:
    """Make `get_task(name, **kwargs)` return `factory(**kwargs)` (a `Task` subclass, or any callable returning a
    `Task`); registering a name again replaces it (an edited class in a notebook). ValueError for a name that is
    empty or built in (`TASK_NAMES`), or a factory that is not callable."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"register_task: name must be a non-empty string, got {name!r}")
    if name in TASK_NAMES:
        raise ValueError(f"register_task: {name!r} is a built-in task ({', '.join(TASK_NAMES)}); give yours "
                         f"another name")
    if not callable(factory):
        raise ValueError(f"register_task: factory must be a Task subclass or a callable, got {factory!r}")
    _REGISTRY[name] = factory


def task_names() -> tuple[str, ...]:
    """Every name `get_task` accepts: the built-in ones (`TASK_NAMES`), then those `register_task` added."""
    return tuple(_REGISTRY)


def import_task_module(spec: str) -> None:
    """Import the module `spec` names, which registers its tasks (`register_task`); "MODULE:CLASS" also registers
    the `Task` subclass CLASS under its `name` (`esreason train --task-module`). ImportError or ValueError naming
    `spec` when the module or the class is not there."""
    module_name, _, class_name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ImportError(f"task module {spec!r}: {err}") from None
    if class_name:
        cls = getattr(module, class_name, None)
        if not (isinstance(cls, type) and issubclass(cls, Task) and cls.name):
            raise ValueError(f"task module {spec!r}: {module_name} has no Task subclass {class_name!r} with a name")
        register_task(cls.name, cls)


def get_task(name: str, **kwargs) -> Task:
    """A new task instance by name (kwargs go to its constructor); ValueError naming the choices otherwise."""
    if name not in _REGISTRY:
        close = difflib.get_close_matches(str(name), task_names(), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ValueError(f"unknown task {name!r}; {hint}choose one of {task_names()} (or `register_task` "
                         f"your own)")
    return _REGISTRY[name](**kwargs)


def task_version(task: Task) -> str | None:
    """What a run's identity records of `task`'s code: None for a built-in task (whose stored runs keep their
    identities; a built-in verifier changes only with this package's version), the `version` the task declares
    when it sets one, else "code:" and 12 hex of `code_identity.class_digest`: its classes' code and what their
    methods reach (helper modules, installed packages' versions, globals), so that editing a verifier or a helper
    trains anew. A task whose code cannot be hashed (`code_identity.Unreadable`) gets "uncached:" and a fresh
    random suffix, so that its runs are never reused, and one line says so."""
    cls = type(task)
    if cls.__module__.startswith("esreason_lib."):
        return None
    if getattr(task, "version", None) is not None:
        return str(task.version)
    try:
        return "code:" + class_digest(cls)[:12]
    except Unreadable as err:
        if cls not in _SAID:
            _SAID.add(cls)
            from esreason_lib.progress import say  # noqa: PLC0415 (tqdm: only when there is something to say)

            say(f"esreason: the code of task {getattr(task, 'name', cls.__name__)!r} cannot be hashed ({err}): its "
                "runs and evaluations are not reused; declare a `version` on the class to cache them")
        return f"uncached:{uuid.uuid4().hex[:12]}"


_SAID: set[type] = set()
"""The task classes `task_version` has said are not cached (once each per process)."""


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
    "MultiStep",
    "RewardShaping",
    "Sorting",
    "Task",
    "get_task",
    "import_task_module",
    "register_task",
    "task_names",
    "task_version",
]
