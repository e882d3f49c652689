"""The toy tasks the tests share: small objectives a tiny random model can be scored (and move) on, each with the
examples, prompt, reward and verdict its tests were written against. Import them from here (`tests/` is on the
path of every test module and of the subprocesses they start), not from another test module."""

from __future__ import annotations

import numpy as np

from esreason_lib.tasks.base import BINARY, RewardShaping, Task

DIGITS = "0123456789"


def digit_strings(count: int, seed: int, length: int = 5) -> list[str]:
    """`count` random strings of `length` digits from `np.random.default_rng(seed)`."""
    rng = np.random.default_rng(seed)
    return ["".join(rng.choice(list(DIGITS), length)) for _ in range(count)]


def char_code_sum(completion: str) -> int:
    """The sum of the completion's character codes: a reward that spreads over members from the first step."""
    return sum(map(ord, completion))


class Paren:
    """Sanity objective: reward 1 when the completion starts with "(" (about 1 in 98 for a random model); 32
    digit strings per split, train and test drawn apart."""

    name, stop, max_new_tokens = "paren", None, 4

    def examples(self, split="test", n=None, seed=0):
        texts = digit_strings(32, 0 if split == "train" else 1)
        ex = [{"id": f"{split}-{i}", "text": t} for i, t in enumerate(texts)]
        return ex[:n] if n else ex

    def prompt(self, example, tokenizer=None):
        return example["text"] + "="

    def is_correct(self, completion, example):
        return completion.startswith("(")

    def reward(self, completion, example):
        return float(self.is_correct(completion, example))


class ParenTask(Task):
    """`Paren` as a `Task` (binary shaping): reward 1 iff the completion starts with "(" (about 1 in 97 at random
    init); 16 prompts "00>" .. "15>"."""

    name = "paren"
    stop = None
    max_new_tokens = 4

    def __init__(self):
        super().__init__(BINARY)

    def examples(self, split="test", n=None, seed=0):
        ex = [{"id": f"{split}-{i}", "text": f"{i:02d}>"} for i in range(16)]
        return ex[:n] if n else ex

    def prompt(self, example, tokenizer=None):
        return example["text"]

    def extract_answer(self, completion):
        return completion[:1] or None

    def is_correct(self, completion, example):
        return completion.startswith("(")


class Graded:
    """A graded toy objective (rewards spread over [0, 1], so every ES update moves theta): the completion's
    character codes summed mod 11, over 10; correct from 0.5. 8 digit strings."""

    name, stop, max_new_tokens = "graded", None, 4

    def examples(self, split="train", n=None, seed=0):
        ex = [{"id": f"{split}-{i}", "text": t} for i, t in enumerate(digit_strings(8, 0))]
        return ex[:n] if n else ex

    def prompt(self, example, tokenizer=None):
        return example["text"] + "="

    def reward(self, completion, example):
        return char_code_sum(completion) % 11 / 10

    def is_correct(self, completion, example):
        return self.reward(completion, example) >= 0.5


class Hash:
    """A reward that varies across members from the first step, so every update moves the weights: character codes
    summed mod 10, over 10; correct when the sum is divisible by 3. 32 digit strings."""

    name, stop, max_new_tokens = "hash", None, 4

    def examples(self, split="test", n=None, seed=0):
        return [{"id": str(i), "text": t} for i, t in enumerate(digit_strings(32, 0))]

    def prompt(self, example, tokenizer=None):
        return example["text"] + "="

    def is_correct(self, completion, example):
        return char_code_sum(completion) % 3 == 0

    def reward(self, completion, example):
        return char_code_sum(completion) % 10 / 10


class Lengths:
    """Prompts of 4-9 characters (left padding differs across rows); reward = completion length / 10; correct when
    it contains "3"; stops at "Vl"."""

    name, stop, max_new_tokens = "lengths", "Vl", 10

    def examples(self, split="test", n=None, seed=0):
        rng = np.random.default_rng(0)
        ex = [{"id": str(i), "text": "".join(rng.choice(list("0123456789+"), rng.integers(3, 9)))} for i in range(24)]
        return ex[:n] if n else ex

    def prompt(self, example, tokenizer=None):
        return example["text"] + "="

    def is_correct(self, completion, example):
        return "3" in completion

    def reward(self, completion, example):
        return len(completion) / 10


class FirstCharTask(Task):
    """A completion is correct when its first character is in the example's `ok` set (None: always correct);
    well-formed when non-empty. The canonical answer is the first character. Four hand-made examples whose
    verdicts are computable by hand from the samples."""

    name = "firstchar"
    stop = None
    max_new_tokens = 6

    def __init__(self):
        super().__init__(RewardShaping(correct=1.0, formatted=0.1, invalid=0.0))
        self._examples = [
            {"id": "007", "prompt": "A12+5=", "ok": None},  # always correct (numeric-looking id on purpose)
            {"id": "never", "prompt": "Sxq", "ok": set()},  # never correct
            {"id": "digit", "prompt": "03 12 07>022=", "ok": set(DIGITS)},
            {"id": "upper", "prompt": "hello!", "ok": set("ABCDEFGHIJKLMNOPQRSTUVWXYZ")},
        ]

    def examples(self, split="test", n=None, seed=0):
        return self._examples[:n]

    def prompt(self, example, tokenizer=None):
        return example["prompt"]

    def extract_answer(self, completion):
        return completion[:1] or None

    def is_correct(self, completion, example):
        if example["ok"] is None:
            return True
        return bool(completion) and completion[0] in example["ok"]


class Parity(Task):
    """The README's own-task example: is n even? ("yes" / "no"), 40 problems per split."""

    name, max_new_tokens = "parity", 3

    def examples(self, split="test", n=None, seed=0):
        start = 0 if split == "train" else 500
        return [{"id": str(i), "n": i} for i in range(start, start + (n or 40))]

    def prompt(self, example, tokenizer=None):
        return f"Is {example['n']} even? "

    def extract_answer(self, completion):
        word = completion.strip()[:3].lower()
        return word if word in ("yes", "no") else None

    def is_correct(self, completion, example):
        return self.extract_answer(completion) == ("yes" if example["n"] % 2 == 0 else "no")
