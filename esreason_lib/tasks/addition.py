"""Addition: a held-out synthetic task for the forgetting study.

Tiny-model format: prompt `"A47+06="` (the letter A, then both operands zero-padded to `digits` digits, so
all prompts have one length) and completion the sum without leading zeros, e.g. `"53"`, then EOS.
The answer is read from the answer span (the last `<answer>` content, else the first line): the final number
is the text after its last "=" (the documented marker, so a short working chain such as `"6+7=13;=433"` is
allowed), or the whole span when it has no "=". It must be a plain run of digits (<= 20 of them).

Reward tiers: correct = that number equals a + b; well-formed = such a number was extracted; else invalid.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._common import answer_span, check_fraction, render_prompt, sample_distinct, split_of
from .base import Example, RewardShaping, Task, total

__all__ = ["Addition"]

_MAX_ANSWER_DIGITS = 20


class Addition(Task):
    """Sums of two uniform `digits`-digit operands (0 .. 10**digits - 1). The problem {a, b} (unordered) is
    assigned to a split by a fixed hash; `examples` returns distinct ordered problems. The default is 2 digits:
    with 10% of the tiny zoo's pretraining mixture, 3-digit sums stayed at ~1% greedy (no room to show a
    drop in the forgetting study); 2-digit sums reach 3.5% (qwen2-s) and 7.5% (qwen2-s-habit) greedy on 200
    held-out problems, and more when sampled."""

    name = "addition"
    stop = None

    def __init__(
        self,
        digits: int = 2,
        *,
        test_fraction: float = 0.1,
        train_size: int = 5000,
        test_size: int = 200,
        shaping: RewardShaping = RewardShaping(),
    ):
        super().__init__(shaping)
        if not (isinstance(digits, int) and 1 <= digits <= 9):
            raise ValueError(f"digits must be an int in 1..9, got {digits!r}")
        self.digits = digits
        self.test_fraction = check_fraction(test_fraction)
        self.sizes = {"train": int(train_size), "test": int(test_size)}
        self.max_new_tokens = digits + 3

    def _draw(self, rng: np.random.Generator, split: str):
        a, b = (int(x) for x in rng.integers(0, 10**self.digits, size=2))
        if split_of(self.name, f"{min(a, b)}+{max(a, b)}", self.test_fraction) != split:
            return None
        return (a, b), {"id": f"addition-{a}-{b}", "a": a, "b": b}

    def examples(self, split: str = "test", n: int | None = None, seed: int = 0) -> list[Example]:
        """Distinct problems of `split`; keys `id`, `a`, `b` (ints)."""
        n = self.sizes.get(split, 0) if n is None else n
        return sample_distinct(f"{self.name}-{self.digits}-{self.test_fraction}", split, n, seed, self._draw)

    def prompt(self, example: Example, tokenizer: Any = None) -> str:
        """`"A47+06="` (2 digits) for plain tokenizers; a chat turn asking for `<answer>N</answer>` otherwise."""
        d = self.digits
        plain = f"A{example['a']:0{d}d}+{example['b']:0{d}d}="
        instruction = f"Compute {example['a']} + {example['b']}. Give only the final number inside <answer></answer>."
        return render_prompt(plain, instruction, tokenizer)

    def extract_answer(self, completion: str) -> str | None:
        """The final number (digits after the last "=" of the answer span, or the whole span), leading zeros
        dropped; None when there is none."""
        text = answer_span(completion)
        text = text.rsplit("=", 1)[-1].strip()
        if not text or len(text) > _MAX_ANSWER_DIGITS or not (text.isascii() and text.isdigit()):
            return None
        return str(int(text))

    @total(False)
    def is_correct(self, completion: str, example: Example) -> bool:
        """The extracted number equals a + b."""
        ans = self.extract_answer(completion)
        return ans is not None and int(ans) == int(example["a"]) + int(example["b"])

    def demonstration(self, example: Example, rng: np.random.Generator | None = None) -> str:
        """The correct completion: the bare sum, e.g. "433" (`rng` unused; one correct answer)."""
        return str(int(example["a"]) + int(example["b"]))
