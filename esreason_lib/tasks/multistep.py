"""Multi-step arithmetic: a chain of additions and subtractions for a pretrained chat model to work out in words.

Problem: `terms` operands of `digits` digits each (uniform in [10**(digits-1), 10**digits - 1]; 1..9 for one
digit) joined by "+" or "-" (a fair coin each), redrawn until the value is >= 0: e.g. "48 + 27 - 19". Several
working paths reach the answer (left to right, the positive terms first, pairing terms), so the task scores the
answer, not the path. The problem (its expression) is assigned to a split by a fixed hash.

Chat prompt, by `style` (`STYLES`): "steps" asks for the working, `Compute 48 + 27 - 19. Work it out step by step,
then end with "The answer is N."`; "short" asks for the number, `What is 48 + 27 - 19? Reply with just the number.`
(SmolLM2-135M-Instruct, the pretrained base, writes a wrong working far more often than a wrong short answer:
docs/pretrained.md). Plain prompt (a tokenizer without a chat template), either style: `48+27-19=`.
Answer, the first rule that finds one wins (linear time, never raises; completions are cut to their last
`MAX_CHARS` characters):
  1. the number right after the last answer marker: "answer is" or "answer:", the word in any case ("The answer
     is 56.", "**Answer:** 56", "the final answer is $56"; `_common.after_answer_marker`);
  2. the content of the last `\\boxed{}` when it is a number;
  3. "steps": for the plain prompt's bare completions, the whole first line when it is one number ("56");
     "short": the last number of the completion ("48 + 27 - 19 is 56.", "56"; GSM8K's lenient rule 4: a short
     reply states the expression, then its value), in training and evaluation alike; where rule 1's marker is
     there, it decides (a hedge after it is no answer).
Numbers are read as GSM8K reads them (`gsm8k.normalize_number`: "56", "56.", "56.0", "$56", "1,056"), and a hedge
("56 or 57", "56-57") is no answer.

Reward tiers: correct = that number equals the value; well-formed = a number was found; else invalid.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import numpy as np

from ._common import after_answer_marker, check_fraction, render_prompt, sample_distinct, split_of
from .base import Example, RewardShaping, Task, total
from .gsm8k import boxed_number, last_number, normalize_number, number_after

__all__ = ["MultiStep"]

MAX_CHARS = 100_000
"""Completions are read from their last this-many characters."""
MAX_TERMS, MAX_DIGITS = 8, 6
"""The largest `terms` and `digits` accepted."""
STYLES = {
    "steps": 'Compute {expression}. Work it out step by step, then end with "The answer is N."',
    "short": "What is {expression}? Reply with just the number.",
}
"""The chat instruction of each prompt style (module docstring)."""


class MultiStep(Task):
    """Chains of `terms` `digits`-digit operands joined by "+" and "-" whose value is >= 0 (module docstring).
    `examples` returns distinct expressions; `train_size` / `test_size` are the default counts of each split."""

    name = "multistep"
    stop = None

    def __init__(
        self,
        terms: int = 3,
        digits: int = 2,
        *,
        test_fraction: float = 0.1,
        train_size: int = 5000,
        test_size: int = 2000,
        style: str = "steps",
        shaping: RewardShaping = RewardShaping(),
    ):
        super().__init__(shaping)
        if isinstance(terms, bool) or not isinstance(terms, int) or not 2 <= terms <= MAX_TERMS:
            raise ValueError(f"terms must be an int in 2..{MAX_TERMS}, got {terms!r}")
        if isinstance(digits, bool) or not isinstance(digits, int) or not 1 <= digits <= MAX_DIGITS:
            raise ValueError(f"digits must be an int in 1..{MAX_DIGITS}, got {digits!r}")
        for field, size in (("train_size", train_size), ("test_size", test_size)):
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise ValueError(f"{field} must be an int >= 0, got {size!r}")
        if style not in STYLES:
            raise ValueError(f"style must be one of {sorted(STYLES)}, got {style!r}")
        self.terms, self.digits, self.style = terms, digits, style
        self.test_fraction = check_fraction(test_fraction)
        self.sizes = {"train": train_size, "test": test_size}
        # room for a worked line per step; a short reply ("48 + 27 - 19 is 56.") fits in 64 (docs/pretrained.md)
        self.max_new_tokens = 64 if style == "short" else 64 + 32 * terms

    def _draw(self, rng: np.random.Generator, split: str):
        low = 10 ** (self.digits - 1)
        operands = [int(x) for x in rng.integers(low, 10 * low, size=self.terms)]
        signs = ["+" if s else "-" for s in rng.integers(0, 2, size=self.terms - 1)]
        value = operands[0] + sum(x if s == "+" else -x for s, x in zip(signs, operands[1:]))
        expression = " ".join([str(operands[0])] + [f"{s} {x}" for s, x in zip(signs, operands[1:])])
        if value < 0 or split_of(self.name, expression, self.test_fraction) != split:
            return None
        return expression, {"id": f"multistep-{expression.replace(' ', '')}", "expression": expression,
                            "answer": value}

    def examples(self, split: str = "test", n: int | None = None, seed: int = 0) -> list[Example]:
        """Distinct problems of `split`; keys `id`, `expression` ("48 + 27 - 19"), `answer` (its int value)."""
        n = self.sizes.get(split, 0) if n is None else n
        return sample_distinct(f"{self.name}-{self.terms}-{self.digits}-{self.test_fraction}", split, n, seed,
                               self._draw)

    def prompt(self, example: Example, tokenizer: Any = None) -> str:
        """The chat instruction of the task's style, or `48+27-19=` for a tokenizer without a chat template."""
        expression = example["expression"]
        instruction = STYLES[self.style].format(expression=expression)
        return render_prompt(expression.replace(" ", "") + "=", instruction, tokenizer)

    @total(None)
    def extract_answer(self, completion: str) -> str | None:
        """The normalised answer number by the module docstring's rules, or None."""
        if not isinstance(completion, str):
            return None
        text = completion[-MAX_CHARS:]
        start = after_answer_marker(text)
        if start is not None and ((number := number_after(text, start)) is not None or self.style == "short"):
            return number  # "short": a marker decides, a hedge after it ("56 or 57") is no answer
        if (number := boxed_number(text)) is not None:
            return number
        if self.style == "short":
            return last_number(text)
        return normalize_number(text.split("\n", 1)[0])

    @total(False)
    def is_correct(self, completion: str, example: Example) -> bool:
        """The extracted number equals the expression's value exactly (as Decimals)."""
        answer = self.extract_answer(completion)
        return answer is not None and Decimal(answer) == Decimal(int(example["answer"]))
