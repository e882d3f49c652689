"""A task's verifier held to its contract (`Task.is_correct` returns a bool, `Task.reward` a finite number within
the task's reward shaping, both in bounded time), where training and evaluation call it.

`held_to_contract(task)` wraps a task once: ES and GRPO get it through `training.inputs.training_inputs`, `evaluate`
wraps what it is given. A user's task whose `is_correct` returns 0.5 or None, or whose `reward` returns NaN, an
infinity (`guards.NonFiniteError`) or a value outside [min, max] of its `shaping`'s tiers ([0, 1] without one),
is a one-line `ValueError` naming the task and the value (a bool reward is one too: it is no number), on every
route: a `Task` subclass passed as an instance (the README's `train_es(..., task=MyTask())`) keeps the base
class's `reward` and `score`, which are then computed from the checked `is_correct`; a trainer marks its run
failed. A call (`is_correct`, `reward`, `score`, and what evaluation reads of a completion: `extract_answer`,
`canonical_answer`) that runs past `ESREASON_VERIFIER_TIMEOUT_S` seconds
(default `DEFAULT_TIMEOUT_S`) is stopped, counted wrong (False, the `invalid` tier) and reported with a
`VerifierTimeout` warning naming the task; `held.timeouts` counts them. The bound is a real-time interval timer
(SIGALRM), so it holds in the main thread of a Unix process and stops Python code (a verifier blocked inside
one C call is stopped when that call returns); elsewhere (worker threads) calls run unbounded. Deviation: none of
the paper's; the built-in tasks already keep the contract (their verifiers are total and bounded), and pass
through unchanged.
"""

from __future__ import annotations

import math
import os
import signal
import threading
import warnings
from contextlib import contextmanager
from typing import Any

from ..guards import NonFiniteError
from .base import Example, Task

TIMEOUT_ENV = "ESREASON_VERIFIER_TIMEOUT_S"
"""The environment variable that sets the bound (seconds) on one verifier call."""
DEFAULT_TIMEOUT_S = 60.0
"""The bound on one verifier call when `TIMEOUT_ENV` is unset (the MATH worker's own bound is 10 s per call)."""


class VerifierTimeout(UserWarning):
    """A verifier call ran past its bound: it was stopped and counted wrong; the message names the task."""


class _Stopped(BaseException):
    """Raised inside a verifier call at its bound (a BaseException: a verifier's `except Exception` cannot keep
    running past it)."""


def timeout_s() -> float:
    """The bound from `$ESREASON_VERIFIER_TIMEOUT_S` (default `DEFAULT_TIMEOUT_S`); a one-line ValueError naming the
    variable unless it is a positive finite number of seconds."""
    raw = os.environ.get(TIMEOUT_ENV)
    if raw is None:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"${TIMEOUT_ENV} must be a positive number of seconds, got {raw!r}")
    return value


@contextmanager
def _bounded(seconds: float):
    """Raise `_Stopped` in this thread after `seconds` (main thread only; elsewhere no bound)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise _Stopped

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class ContractTask:
    """`task` with `is_correct` and `reward` checked and bounded (module docstring); every other attribute is the
    task's own."""

    def __init__(self, task: Task, seconds: float):
        self.task = task
        """The wrapped task."""
        self.seconds = seconds
        """The bound on one verifier call."""
        self.timeouts = 0
        """Verifier calls stopped at the bound so far."""

    def __getattr__(self, name: str) -> Any:
        if name == "task":  # before __init__ ran (unpickling)
            raise AttributeError(name)
        return getattr(self.task, name)

    def _call(self, method: str, stopped, completion, *more):
        try:
            with _bounded(self.seconds):
                return getattr(self.task, method)(completion, *more)
        except _Stopped:
            self.timeouts += 1
            example = more[0] if more and isinstance(more[0], dict) else {}
            warnings.warn(f"task {self.task.name!r}: {method} ran past {self.seconds:g} s (${TIMEOUT_ENV}) on "
                          f"example {example.get('id', '?')!r}; stopped and counted wrong", VerifierTimeout,
                          stacklevel=3)
            return stopped

    def extract_answer(self, completion: str):
        """The task's extracted answer, bounded like the verdict (None when stopped at the bound); a built-in
        task's (total and bounded already) directly."""
        if self._built_in():
            return self.task.extract_answer(completion)
        return self._call("extract_answer", None, completion)

    def canonical_answer(self, completion: str, example: Example):
        """The task's key of a correct solution (evaluation's distinct count), bounded as `extract_answer` is."""
        if self._built_in():
            return self.task.canonical_answer(completion, example)
        return self._call("canonical_answer", None, completion, example)

    def _built_in(self) -> bool:
        return type(self.task).__module__.startswith("esreason_lib.")

    def _inherits(self, method: str) -> bool:
        """Whether the task is a user's `Task` that keeps the base class's `method` (which would call its own
        `is_correct` unchecked, and read a verdict of 0.5 as True); a built-in task's verdicts are bools already
        and keep their one bounded call."""
        return (isinstance(self.task, Task) and not self._built_in() and
                getattr(type(self.task), method) is getattr(Task, method))

    def is_correct(self, completion: str, example: Example) -> bool:
        """The task's verdict; ValueError naming the task unless it is a bool (False when stopped at the bound)."""
        return self._verdict(self._call("is_correct", False, completion, example))

    def reward(self, completion: str, example: Example) -> float:
        """The task's reward; ValueError naming the task unless it is a finite number within the shaping's tiers
        (the `invalid` tier when stopped at the bound). A `Task` with the base class's `reward` is shaped from its
        checked `is_correct`."""
        if self._inherits("reward"):
            return self._shaped(completion, example, self.is_correct(completion, example))
        return self._reward(self._call("reward", min(self._tiers()), completion, example))

    def _shaped(self, completion: str, example: Example, correct: bool) -> float:
        return self._reward(self._call("_shaped", min(self._tiers()), completion, example, correct))

    def score(self, completion: str, example: Example) -> tuple[float, bool]:
        """(reward, correct) from the task's one-verification `score` (`tasks.base.Task.score`), each held to the
        contract as `reward` and `is_correct` are; a task without its own `score` is asked for both (a `Task` with
        the base class's `score` through its checked `is_correct`, verifying once)."""
        if self._inherits("score"):
            correct = self.is_correct(completion, example)
            if self._inherits("reward"):
                return self._shaped(completion, example, correct), correct
            return self.reward(completion, example), correct
        if not callable(getattr(self.task, "score", None)):
            return self.reward(completion, example), self.is_correct(completion, example)
        scored = self._call("score", (min(self._tiers()), False), completion, example)
        if not (isinstance(scored, tuple) and len(scored) == 2):
            raise ValueError(f"task {self.task.name!r}: score must return (reward, correct), got {scored!r:.60}")
        return self._reward(scored[0]), self._verdict(scored[1])

    def _tiers(self) -> list[float]:
        shaping = getattr(self.task, "shaping", None)
        return [shaping.invalid, shaping.formatted, shaping.correct] if shaping is not None else [0.0, 1.0]

    def _verdict(self, verdict) -> bool:
        if type(verdict).__name__ not in ("bool", "bool_"):
            raise ValueError(f"task {self.task.name!r}: is_correct must return a bool, got "
                             f"{type(verdict).__name__} {verdict!r:.40}")
        return bool(verdict)

    def _reward(self, value) -> float:
        tiers = self._tiers()
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) or type(value).__name__ in (
            "float32", "float64", "int64")
        if ok and not math.isfinite(value):
            raise NonFiniteError(f"task {self.task.name!r}: rewards must be finite numbers, got {value!r}")
        if not (ok and min(tiers) <= value <= max(tiers)):
            raise ValueError(f"task {self.task.name!r}: reward must be a finite number in [{min(tiers):g}, "
                             f"{max(tiers):g}] (its shaping), got {type(value).__name__} {value!r:.40}")
        return float(value)


def held_to_contract(task: Task, seconds: float | None = None) -> ContractTask:
    """`task` wrapped in a `ContractTask` bounded by `seconds` (default `timeout_s()`); a task already wrapped is
    returned as it is."""
    if isinstance(task, ContractTask):
        return task
    return ContractTask(task, timeout_s() if seconds is None else seconds)
