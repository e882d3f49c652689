"""GSM8K: grade-school word problems with an integer answer.

Data: the official jsonl (rows `question`, `answer`; the answer's last line is `#### N`) read from `path`, else
`$ESREASON_DATA/gsm8k/<split>.jsonl` or `<repo>/../shared/data/gsm8k/<split>.jsonl` when present, else
`datasets.load_dataset("openai/gsm8k", "main")` (the optional extra `esreason[hub]`).

Answer extraction, in this order (the first rule that finds a number wins):
  1. the number after the last `####`;
  2. the first number inside the last `\\boxed{...}`;
  3. the number after the last "the answer is" (case-insensitive, optional ":" / "$");
  4. the last number anywhere in the completion.
Numbers are normalised (thousands commas, `$`, a trailing period dropped) and compared exactly as Decimals,
so "18.00", "$18" and "18." all equal 18. Well-formed = some number was extracted.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation, localcontext
from typing import Any

from ._common import hub_rows, local_file, read_jsonl, render_prompt, shuffled_prefix
from .base import Example, RewardShaping, Task
from .math_task import last_boxed

__all__ = ["GSM8K", "normalize_number"]

_NUM = r"-?(?:\d[\d,]*(?:\.\d+)?|\.\d+)"
_NUM_RE = re.compile(_NUM)
_HASH_RE = re.compile(r"####\s*\$?\s*(" + _NUM + ")")
_ANSWER_IS_RE = re.compile(r"answer is\s*:?\s*\$?\s*(" + _NUM + ")", re.IGNORECASE)
_MAX_CHARS = 100_000
"""Completions are truncated to their last this-many characters before extraction."""


def normalize_number(text: str) -> str | None:
    """A canonical decimal string for a number ("1,000.50" -> "1000.5", "18.00" -> "18", "$7." -> "7"),
    or None when `text` is not a number."""
    if not isinstance(text, str):
        return None
    s = text.strip().replace(",", "").replace("$", "").rstrip(".").strip()
    if not s or len(s) > 64:
        return None
    try:
        with localcontext() as ctx:
            ctx.prec = 200  # exact for every accepted length
            d = Decimal(s)
            if not d.is_finite():
                return None
            out = format(d.normalize(), "f")
    except (InvalidOperation, ValueError):
        return None
    return "0" if out in ("-0", "0") else out


def _first_number(text: str) -> str | None:
    for m in _NUM_RE.finditer(text):
        norm = normalize_number(m.group(0))
        if norm is not None:
            return norm
    return None


def extract_number(completion: str) -> str | None:
    """The answer number of a free-text solution, by the module's documented rule order; never raises."""
    if not isinstance(completion, str):
        return None
    text = completion[-_MAX_CHARS:]
    hashes = _HASH_RE.findall(text)
    if hashes and (norm := normalize_number(hashes[-1])) is not None:
        return norm
    boxed = last_boxed(text)
    if boxed is not None and (norm := _first_number(boxed)) is not None:
        return norm
    said = _ANSWER_IS_RE.findall(text)
    if said and (norm := normalize_number(said[-1])) is not None:
        return norm
    for m in reversed(list(_NUM_RE.finditer(text))):
        norm = normalize_number(m.group(0))
        if norm is not None:
            return norm
    return None


class GSM8K(Task):
    """GSM8K word problems (splits "train": 7473, "test": 1319). Examples are shuffled by `seed`; ids are
    `gsm8k-<split>-<row index in the file>` and do not depend on the seed."""

    name = "gsm8k"
    stop = None
    max_new_tokens = 512

    def __init__(self, path: str | None = None, *, shaping: RewardShaping = RewardShaping()):
        super().__init__(shaping)
        self.path = path
        self._rows: dict[str, list[Example]] = {}

    def _load(self, split: str) -> list[Example]:
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        if split not in self._rows:
            f = local_file(self.path, "gsm8k", split)
            rows = read_jsonl(f) if f is not None else hub_rows("openai/gsm8k", "main", split)
            out = []
            for i, row in enumerate(rows):
                marks = _HASH_RE.findall(row["answer"])
                gold = normalize_number(marks[-1]) if marks else None
                if gold is None:
                    raise ValueError(f"gsm8k {split} row {i}: answer has no '#### N' line: {row['answer'][-80:]!r}")
                out.append(
                    {"id": f"gsm8k-{split}-{i}", "question": row["question"], "answer": gold, "solution": row["answer"]}
                )
            self._rows[split] = out
        return self._rows[split]

    def examples(self, split: str = "test", n: int | None = None, seed: int = 0) -> list[Example]:
        """Keys `id`, `question`, `answer` (normalised gold number string), `solution` (reference text)."""
        return shuffled_prefix(self._load(split), n, seed, self.name, split)

    def prompt(self, example: Example, tokenizer: Any = None) -> str:
        """Plain: "Question: ...\\nAnswer:" with an instruction to end with "#### N"; chat: asks for \\boxed{}."""
        q = example["question"]
        plain = f"Question: {q}\nSolve step by step and end with a line '#### N' where N is the final answer.\nAnswer:"
        instruction = f"{q}\nPlease reason step by step, and put your final answer within \\boxed{{}}."
        return render_prompt(plain, instruction, tokenizer)

    def extract_answer(self, completion: str) -> str | None:
        """The normalised answer number (see the module docstring for the rule order), or None."""
        try:
            return extract_number(completion)
        except Exception:
            return None

    def is_correct(self, completion: str, example: Example) -> bool:
        """The extracted number equals the gold answer exactly (as Decimals)."""
        try:
            ans = self.extract_answer(completion)
            gold = normalize_number(str(example["answer"]))
            return ans is not None and gold is not None and Decimal(ans) == Decimal(gold)
        except Exception:
            return False
