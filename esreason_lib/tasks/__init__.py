"""Verifiable tasks: synthetic (countdown, addition, sorting, multistep), real training and test sets (gsm8k, math)
and the paper's held-out suite (commonsenseqa, gpqa, hotpotqa, mbpp), one module each.

`get_task("countdown", num_count=4)` builds a task by name; every task follows `base.Task`. `register_task` adds
your own under a name (then `ESConfig(task=name)` and `esreason train --task-module` find it), and `task_version`
is what a run's identity records of a task that is not built in: its code, so that an edited verifier trains anew.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import inspect
import sys
import types
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


def _code_digest(code: types.CodeType) -> bytes:
    """A function's byte code, names and constants (nested code objects included), without file names or line
    numbers: what it computes, wherever it was defined."""
    consts = [_code_digest(c) if isinstance(c, types.CodeType) else repr(c).encode() for c in code.co_consts]
    return b"|".join([code.co_code, repr(code.co_names).encode(), *consts])


def _class_source(cls: type) -> bytes:
    """The source of `cls`'s module (helpers the verifier calls included), else of the class itself, else (a class
    typed into a notebook or a REPL, whose source Python cannot find) its methods' code and plain attributes."""
    for obj in (sys.modules.get(cls.__module__), cls):
        try:
            return inspect.getsource(obj).encode()
        except (OSError, TypeError):
            continue
    parts = []
    for key, value in sorted(vars(cls).items()):
        func = getattr(value, "__func__", value)  # staticmethod / classmethod
        if isinstance(func, types.FunctionType):
            parts.append(key.encode() + b"=" + _code_digest(func.__code__))
        elif isinstance(value, (str, int, float, bool, tuple, type(None))):
            parts.append(f"{key}={value!r}".encode())
    return b"\n".join(parts)


def task_version(task: Task) -> str | None:
    """What a run's identity records of `task`'s code: None for a built-in task (whose stored runs keep their
    identities; a built-in verifier changes only with this package's version), the `version` the task declares
    when it sets one, else "code:" and 12 hex of a sha256 over the qualified name and source of every class of its
    type outside this package (`_class_source`; a duck-typed task that does not subclass `Task` too), so that
    editing a verifier trains anew."""
    cls = type(task)
    if cls.__module__.startswith("esreason_lib."):
        return None
    if getattr(task, "version", None) is not None:
        return str(task.version)
    digest = hashlib.sha256()
    for klass in cls.__mro__:
        if klass.__module__ not in ("builtins", "abc") and not klass.__module__.startswith("esreason_lib."):
            digest.update(f"{klass.__module__}.{klass.__qualname__}\n".encode() + _class_source(klass))
    return "code:" + digest.hexdigest()[:12]


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
