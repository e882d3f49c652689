"""Sorting: a held-out synthetic task for the forgetting study.

Tiny-model format: prompt `"S53819>"` (the letter S, `length` random digits, ">") and completion the digits in
ascending order, e.g. `"13589"`, then EOS. The answer is read from the answer span (the last `<answer>` content,
else the first line), after its last ">" if any; it must be a plain run of digits.

Reward tiers: correct = the extracted digits equal the sorted input; well-formed = a run of digits was
extracted (any length); else invalid.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._common import answer_span, check_fraction, render_prompt, sample_distinct, split_of
from .base import Example, RewardShaping, Task, total

__all__ = ["Sorting"]


class Sorting(Task):
    """Sort a string of `length` uniform random digits (repeats allowed). Each digit sequence is assigned to a
    split by a fixed hash; `examples` returns distinct sequences."""

    name = "sorting"
    stop = None

    def __init__(
        self,
        length: int = 5,
        *,
        test_fraction: float = 0.1,
        train_size: int = 5000,
        test_size: int = 200,
        shaping: RewardShaping = RewardShaping(),
    ):
        super().__init__(shaping)
        if not (isinstance(length, int) and 2 <= length <= 20):
            raise ValueError(f"length must be an int in 2..20, got {length!r}")
        self.length = length
        self.test_fraction = check_fraction(test_fraction)
        self.sizes = {"train": int(train_size), "test": int(test_size)}
        self.max_new_tokens = length + 2

    def _draw(self, rng: np.random.Generator, split: str):
        digits = "".join(str(int(x)) for x in rng.integers(0, 10, size=self.length))
        if split_of(self.name, digits, self.test_fraction) != split:
            return None
        return digits, {"id": f"sorting-{digits}", "digits": digits}

    def examples(self, split: str = "test", n: int | None = None, seed: int = 0) -> list[Example]:
        """Distinct problems of `split`; keys `id`, `digits` (str of `length` digits)."""
        n = self.sizes.get(split, 0) if n is None else n
        return sample_distinct(f"{self.name}-{self.length}-{self.test_fraction}", split, n, seed, self._draw)

    def prompt(self, example: Example, tokenizer: Any = None) -> str:
        """`"S53819>"` for plain tokenizers; a chat turn asking for `<answer>digits</answer>` otherwise."""
        plain = f"S{example['digits']}>"
        instruction = (
            f"Sort the digits {example['digits']} in ascending order. Give only the sorted digits, with no "
            "separators, inside <answer></answer>."
        )
        return render_prompt(plain, instruction, tokenizer)

    def extract_answer(self, completion: str) -> str | None:
        """The digits after the last ">" of the answer span (or the whole span); None when not all digits."""
        text = answer_span(completion).rsplit(">", 1)[-1].strip()
        if not text or len(text) > 64 or not (text.isascii() and text.isdigit()):
            return None
        return text

    @total(False)
    def is_correct(self, completion: str, example: Example) -> bool:
        """The extracted digits equal the sorted input digits."""
        return self.extract_answer(completion) == "".join(sorted(str(example["digits"])))

    def demonstration(self, example: Example, rng: np.random.Generator | None = None) -> str:
        """The correct completion: the sorted digits (`rng` unused; one correct answer)."""
        return "".join(sorted(str(example["digits"])))
