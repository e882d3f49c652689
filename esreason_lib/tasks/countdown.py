"""Countdown: combine the given numbers with + - * / (each exactly once) to reach a target.

Tiny-model format (no chat template): prompt `"03 12 07>022="` (numbers zero-padded to the width of `high`,
target to the width of `max_target`, so every prompt of a task has the same length) and completion the bare
expression, e.g. `"3+7+12"`, then EOS (numbers written without leading zeros: "03" does not parse). Chat models are
asked for `<answer>expression</answer>`.

Reward tiers (paper default 1.0 / 0.1 / 0.0): *correct* = the expression parses, uses the multiset of given
numbers exactly (no number reused, missing or invented, no digits glued together), and equals the target
exactly; *well-formed* = an answer could be extracted and parses as an arithmetic expression (allowed tokens
only, balanced parentheses, no unary minus or `**`, <= 200 characters), whatever numbers it uses or value it
has; anything else is invalid. `protocol="tinyzero"` scores like TinyZero's Countdown reward instead (tags
required, unary signs, `**` and decimals accepted: `artifact_grading`).
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction
from typing import Any

import numpy as np

from . import artifact_grading
from ._arith import (
    ALLOWED_CHARS,
    MAX_CHARS,
    canonical_form,
    evaluate_expression,
    evaluate_tree,
    leaves,
    parse_expression,
    reachable_values,
    render,
    solve,
)
from ._common import ANSWER_CLOSE, ANSWER_OPEN, answer_span, check_fraction, render_prompt, sample_distinct, split_of
from ._hedge import NUMBER, hedged
from .base import Example, RewardShaping, Task, total

__all__ = ["Countdown", "evaluate_expression", "solve"]


class Countdown(Task):
    """Synthetic Countdown problems: `num_count` numbers drawn uniformly (with repetition) from [low, high] and
    a target drawn uniformly among the positive integers <= `max_target` reachable from them.

    Each distinct problem (sorted numbers, target) belongs to one split by a fixed hash (`test_fraction` of
    problems are test), so train and test never share a problem under any seed. `examples` returns distinct
    problems; n=None means `train_size` / `test_size`. `protocol` is "strict" (the module docstring's tiers) or
    "tinyzero" (`artifact_grading.countdown_tier`). `min_solutions` > 1 draws only targets with at least that
    many distinct correct expressions (`solve`: distinct up to commutativity and associativity), a task on which
    coverage can mean more than "solved once"; 1 (the default) draws every reachable target, as before.
    """

    name = "countdown"
    stop = "</answer>"

    def __init__(
        self,
        num_count: int = 3,
        low: int = 1,
        high: int = 15,
        max_target: int = 999,
        *,
        test_fraction: float = 0.1,
        train_size: int = 5000,
        test_size: int = 200,
        protocol: str = "strict",
        shaping: RewardShaping = RewardShaping(),
        min_solutions: int = 1,
    ):
        super().__init__(shaping)
        if protocol not in ("strict", "tinyzero"):
            raise ValueError(f"protocol must be 'strict' or 'tinyzero', got {protocol!r}")
        self.protocol = protocol
        if num_count not in (2, 3, 4):
            raise ValueError(f"num_count must be 2, 3 or 4 (the paper uses 3 or 4; generating problems with 5 numbers "
                             f"takes minutes), got {num_count!r}")
        if not (isinstance(low, int) and isinstance(high, int) and 1 <= low <= high):
            raise ValueError(f"need integers 1 <= low <= high, got low={low!r}, high={high!r}")
        if not (isinstance(max_target, int) and max_target >= 1):
            raise ValueError(f"max_target must be a positive int, got {max_target!r}")
        if not (isinstance(min_solutions, int) and min_solutions >= 1):
            raise ValueError(f"min_solutions must be an int >= 1, got {min_solutions!r}")
        self.num_count, self.low, self.high, self.max_target = num_count, low, high, max_target
        self.min_solutions = min_solutions
        self.test_fraction = check_fraction(test_fraction)
        self.sizes = {"train": int(train_size), "test": int(test_size)}
        self.max_new_tokens = 8 * num_count
        """Generous budget: the longest rendered 4-number solutions are ~20 characters."""
        self._last_tree: tuple | None = None
        """(completion, its `_tree`) of the last completion parsed."""

    # ---------------------------------------------------------------- problems
    def _targets(self, nums: tuple[int, ...], split: str) -> list[int]:
        vals = reachable_values(nums)
        key = "-".join(map(str, nums))
        return sorted(
            int(v)
            for v in vals
            if v.denominator == 1
            and 0 < v <= self.max_target
            and split_of(self.name, f"{key}>{int(v)}", self.test_fraction) == split
            and (self.min_solutions == 1 or len(solve(nums, int(v))) >= self.min_solutions)
        )

    def _draw(self, rng: np.random.Generator, split: str):
        numbers = [int(x) for x in rng.integers(self.low, self.high + 1, size=self.num_count)]
        nums = tuple(sorted(numbers))
        targets = self._targets(nums, split)
        if not targets:
            return None
        target = targets[int(rng.integers(len(targets)))]
        ex = {"id": f"countdown-{'-'.join(map(str, numbers))}-{target}", "numbers": numbers, "target": target}
        return (nums, target), ex

    def examples(self, split: str = "test", n: int | None = None, seed: int = 0) -> list[Example]:
        """Distinct problems of `split`; keys `id`, `numbers` (list[int], prompt order), `target` (int)."""
        n = self.sizes.get(split, 0) if n is None else n
        tag = f"{self.name}-{self.num_count}-{self.low}-{self.high}-{self.max_target}-{self.test_fraction}" + (
            f"-m{self.min_solutions}" if self.min_solutions > 1 else "")  # the default keeps its draws
        return sample_distinct(tag, split, n, seed, self._draw)

    def split_of(self, numbers, target: int) -> str:
        """The split ("train"/"test") the problem (numbers in any order, target) belongs to."""
        key = "-".join(map(str, sorted(int(x) for x in numbers)))
        return split_of(self.name, f"{key}>{int(target)}", self.test_fraction)

    # ----------------------------------------------------------------- prompts
    def prompt(self, example: Example, tokenizer: Any = None) -> str:
        """`"03 12 07>022="` for plain tokenizers; a chat turn asking for `<answer>...</answer>` otherwise."""
        w, wt = len(str(self.high)), len(str(self.max_target))
        plain = " ".join(f"{x:0{w}d}" for x in example["numbers"]) + f">{example['target']:0{wt}d}="
        nums = ", ".join(map(str, example["numbers"]))
        instruction = (
            f"Using the numbers [{nums}], create an expression that equals {example['target']}. "
            "You may use +, -, *, / and parentheses, and must use each number exactly once. "
            "Think it through, then give only the expression (no '=' and no result) inside "
            "<answer></answer>, for example <answer>(1+2)*3</answer>."
        )
        return render_prompt(plain, instruction, tokenizer)

    # ------------------------------------------------------------ verification
    @total(None)
    def extract_answer(self, completion: str) -> str | None:
        """The last `<answer>` content if present, else the first line; stripped. None if empty, longer than
        200 characters, containing anything but digits, + - * / ( ) and spaces, or hedged (a number or boxed value
        after `</answer>` on its line, `_hedge`). TinyZero protocol: the last
        tagged answer on the last line, whatever it contains (`artifact_grading.tinyzero_equation`)."""
        if self.protocol == "tinyzero":
            return artifact_grading.tinyzero_equation(completion)
        text = answer_span(completion)
        if not text or len(text) > MAX_CHARS or not set(text) <= ALLOWED_CHARS:
            return None
        close = completion.rfind(ANSWER_CLOSE)
        if close > completion.rfind(ANSWER_OPEN) >= 0 and hedged(completion, close + len(ANSWER_CLOSE), NUMBER):
            return None  # another candidate after the closing tag on its line: a hedge (`_hedge`)
        return text

    def _tree(self, completion: str):
        """The syntax tree of `completion`'s answer (None when there is none or it does not parse), kept for the
        last completion seen: `reward`, `is_correct`, `is_well_formed` and `canonical_answer` of one completion
        (`score`, evaluation's verdict) parse it once."""
        last = self._last_tree
        if last is not None and type(completion) is str and last[0] == completion:
            return last[1]
        text = self.extract_answer(completion)
        tree = None if text is None or not set(text) <= ALLOWED_CHARS else parse_expression(text)
        if type(completion) is str:
            self._last_tree = (completion, tree)  # one tuple, replaced whole: a reader sees a matching pair
        return tree

    @total(False)
    def is_well_formed(self, completion: str, example: Example) -> bool:
        """An answer was extracted and parses as an arithmetic expression (numbers and value unchecked); TinyZero
        protocol: a tagged answer exists."""
        if self.protocol == "tinyzero":
            return self.extract_answer(completion) is not None
        return self._tree(completion) is not None

    @total(False)
    def is_correct(self, completion: str, example: Example) -> bool:
        """Parses, uses exactly the given multiset of numbers, and equals the target exactly; TinyZero protocol:
        `artifact_grading.countdown_tier` says correct."""
        if self.protocol == "tinyzero":
            numbers = [int(x) for x in example["numbers"]]
            return artifact_grading.countdown_tier(completion, numbers, int(example["target"])) == "correct"
        tree = self._tree(completion)
        if tree is None:
            return False
        if Counter(leaves(tree)) != Counter(int(x) for x in example["numbers"]):
            return False
        return evaluate_tree(tree) == Fraction(int(example["target"]))

    @total(None)
    def canonical_answer(self, completion: str, example: Example) -> str | None:
        """The canonical form (rendered, see `_arith`) of any parseable answer; None otherwise.

        Two correct answers share a key iff they differ only by commutativity/associativity of + and * and
        the matching regrouping of - and / (e.g. "3+12+7" and "7+(12+3)"). Filter with `is_correct` before
        counting distinct correct solutions ("reasoning coverage"). TinyZero protocol: the tagged answer without
        spaces when the strict parser refuses it (unary minus, `**`, decimals)."""
        tree = self._tree(completion)
        if tree is None and self.protocol == "tinyzero":
            text = self.extract_answer(completion)
            return None if text is None else "".join(text.split())
        return None if tree is None else render(canonical_form(tree))

    # ----------------------------------------------------------- demonstrations
    def solutions(self, example: Example) -> list[str]:
        """All distinct correct expressions for `example` (cached; see `solve`)."""
        return solve(example["numbers"], example["target"])

    def demonstration(self, example: Example, rng: np.random.Generator) -> str:
        """A correct completion drawn uniformly over the distinct solutions."""
        sols = self.solutions(example)
        if not sols:
            raise ValueError(f"example {example.get('id')!r} has no solution")
        return sols[int(rng.integers(len(sols)))]

    def habit_answer(self, example: Example) -> str:
        """The plausible wrong habit: the numbers summed in prompt order, e.g. "3+12+7"."""
        return "+".join(str(int(x)) for x in example["numbers"])
