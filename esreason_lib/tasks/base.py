"""The Task protocol: examples, prompts, answer extraction, verification and reward shaping.

Every task (synthetic or real) implements the same small interface so that generation, ES, GRPO and
evaluation never know which task they run. Verifiers are total: any string, however hostile, returns a
bool or a float and never raises.

One rule for hedges, shared by every task that extracts a single answer (`_hedge.hedged`, an allow-list after the
answer): an answer that names several candidates ("18 or 19", "B, C", "B unless C", "18 ± 1") is wrong, never read as
its first candidate.
"""

from __future__ import annotations

import abc
import functools
import math
from dataclasses import dataclass
from typing import Any, Callable

Example = dict[str, Any]
"""One problem. Always has a stable string `id`; the other keys are task-specific (e.g. `numbers`, `target`)."""


def total(default: Any) -> Callable:
    """Decorator of a verifier method or function: any exception inside it returns `default` instead (model
    outputs are untrusted input, and a verifier never raises). Time bounds are each task's own (input caps, the
    MATH worker, the MBPP sandbox)."""

    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def never_raises(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except Exception:
                return default

        return never_raises

    return wrap


def check_seconds(value: Any, field: str, upper: float) -> float:
    """`value` as a float when it is a finite number of seconds in (0, `upper`]; a one-line ValueError naming
    `field` and the value otherwise (a bool is no number)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not (ok and 0 < value <= upper):
        raise ValueError(f"{field} must be a number of seconds in (0, {upper:g}], got {value!r}")
    return float(value)


@dataclass(frozen=True)
class RewardShaping:
    """The paper's reward: `correct` if verified, `formatted` if well-formed but wrong, `invalid` otherwise."""

    correct: float = 1.0
    """Reward for a verified-correct completion."""
    formatted: float = 0.1
    """Reward for a completion whose answer could be extracted (well-formed) but is wrong."""
    invalid: float = 0.0
    """Reward for a completion with no extractable answer."""


BINARY = RewardShaping(correct=1.0, formatted=0.0, invalid=0.0)
"""A 0/1 reward, used where the paper reports plain accuracy."""


class Task(abc.ABC):
    """A verifiable reasoning task. Subclasses set `name` and implement the abstract methods."""

    name: str = ""
    stop: str | None = None
    """A stop string for generation besides EOS (e.g. "</answer>"), or None."""
    max_new_tokens: int = 32
    """A sensible generation budget in tokens for the tiny character-level models."""
    version: str | None = None
    """A version your own task may declare: a run's identity then records it instead of a hash of the task's code
    (`tasks.task_version`), so a change that keeps the verifier's answers (a comment, a faster parser) keeps the
    stored runs; change it when the answers change. Built-in tasks leave it None: their runs' identities hold no
    code (they keep the hashes the committed results are found by)."""

    def __init__(self, shaping: RewardShaping = RewardShaping()):
        self.shaping = shaping

    @abc.abstractmethod
    def examples(self, split: str = "test", n: int | None = None, seed: int = 0) -> list[Example]:
        """The first `n` examples of `split` ("train" or "test"; all when n is None), deterministic in `seed`."""

    @abc.abstractmethod
    def prompt(self, example: Example, tokenizer: Any = None) -> str:
        """The prompt text. Plain text for tokenizers without a chat template; the chat template otherwise."""

    @abc.abstractmethod
    def extract_answer(self, completion: str) -> str | None:
        """The answer string found in `completion`, or None when there is none. Never raises."""

    @abc.abstractmethod
    def is_correct(self, completion: str, example: Example) -> bool:
        """Whether `completion` answers `example` correctly. Never raises; unparseable means False."""

    @total(False)
    def is_well_formed(self, completion: str, example: Example) -> bool:
        """Whether an answer can be extracted (the 0.1 tier of the reward)."""
        return self.extract_answer(completion) is not None

    @total(None)
    def canonical_answer(self, completion: str, example: Example) -> str | None:
        """A key that identifies *which* correct solution this is (for counting distinct correct answers).

        Defaults to the extracted answer; Countdown overrides it with a normalised expression.
        """
        return self.extract_answer(completion)

    def reward(self, completion: str, example: Example) -> float:
        """Shaped reward: correct / well-formed but wrong / invalid. Never raises."""
        return self._shaped(completion, example, bool(self.is_correct(completion, example)))

    def score(self, completion: str, example: Example) -> tuple[float, bool]:
        """(`reward`, `is_correct`) of one completion, verifying it once: what ES, GRPO and evaluation score each
        completion with (`reward` then `is_correct` would verify it twice). A task that overrides `reward` gets
        its own reward beside `is_correct`. Never raises."""
        correct = bool(self.is_correct(completion, example))  # every is_correct is total: never raises
        if type(self).reward is Task.reward:
            return self._shaped(completion, example, correct), correct
        return self.reward(completion, example), correct

    def _shaped(self, completion: str, example: Example, correct: bool) -> float:
        """The shaped reward of a completion whose `is_correct` is `correct`. Never raises."""
        if correct:
            return self.shaping.correct
        try:
            if self.is_well_formed(completion, example):
                return self.shaping.formatted
        except Exception:
            pass
        return self.shaping.invalid


def score_completion(task, completion: str, example: Example) -> tuple[float, bool]:
    """(reward, correct) of one completion: the task's `score` (one verification: `Task.score`, or a
    `tasks.contract.ContractTask`'s checked one) where it has one; a duck-typed task's `reward` and `is_correct`
    otherwise."""
    if callable(getattr(task, "score", None)):
        return task.score(completion, example)
    return task.reward(completion, example), bool(task.is_correct(completion, example))


def freeze_task_kwargs(value, where: str) -> tuple:
    """Task keyword arguments as sorted, hashable `(name, value)` pairs (configs hash and serialise them).

    Accepts a dict, a list or a tuple of pairs; anything else is a ValueError naming `where` (e.g. "ESConfig").
    """
    if isinstance(value, dict):
        value = tuple(sorted(value.items()))
    if isinstance(value, list):
        value = tuple(tuple(kv) if isinstance(kv, (list, tuple)) else kv for kv in value)
    if not (isinstance(value, tuple) and all(
            isinstance(kv, tuple) and len(kv) == 2 and isinstance(kv[0], str) for kv in value)):
        raise ValueError(f"{where}.task_kwargs must be a dict or a tuple of (str, value) pairs, got {value!r}")
    try:
        hash(value)
    except TypeError:
        raise ValueError(f"{where}.task_kwargs must have hashable values (use tuples, not lists or dicts), "
                         f"got {value!r}") from None
    return value
