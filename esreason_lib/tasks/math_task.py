"""MATH-style problems (MATH-500 for evaluation, DeepScaleR for training), verified with `math_verify`.

Data: a jsonl with `problem` and `answer` fields read from `path`, else `$ESREASON_DATA/<dataset>/<split>.jsonl`
or `<repo>/../shared/data/<dataset>/<split>.jsonl` when present, else `datasets` (the extra `esreason[hub]`):
"math500" -> "HuggingFaceH4/MATH-500" (split test), "deepscaler" -> "agentica-org/DeepScaleR-Preview-Dataset"
(split train).

Answer extraction: the content of the last `\\boxed{...}` (nested braces matched), `\\boxed 5` or `\\fbox{...}`.
Correctness: `math_verify.verify(gold, pred)` (gold first: it is asymmetric) on both answers wrapped as
`\\boxed{...}` and parsed with `math_verify.parse`. math_verify's own signal-based timeouts are switched off
(they fail off the main thread); instead the check runs in a daemon thread that is abandoned after
`timeout_s` seconds (a Python thread cannot be killed; a runaway sympy call then finishes in the background
and the answer counts as wrong). Results are cached per (gold, answer). Any exception -> wrong.
Well-formed = a non-empty boxed answer was found.
"""

from __future__ import annotations

import logging
import threading
from functools import lru_cache
from typing import Any

from ._common import hub_rows, local_file, read_jsonl, render_prompt, shuffled_prefix
from .base import Example, RewardShaping, Task

__all__ = ["MathTask", "last_boxed", "math_equal"]

DATASETS = {
    "math500": ("HuggingFaceH4/MATH-500", ("test",)),
    "deepscaler": ("agentica-org/DeepScaleR-Preview-Dataset", ("train",)),
}
"""dataset name -> (Hugging Face repo id, splits it offers)."""
_MAX_CHARS = 100_000
"""Completions are cut to their last this-many characters before extraction."""
_MAX_ANSWER_CHARS = 1000
"""Longer boxed answers are well-formed but never sent to sympy (counted wrong)."""


def last_boxed(text: str) -> str | None:
    """The stripped content of the last `\\boxed{...}` / `\\fbox{...}` (nested braces) or `\\boxed 5` in
    `text`; None when there is none, it is empty, or its braces never close. Never raises."""
    if not isinstance(text, str):
        return None
    text = text[-_MAX_CHARS:]
    starts = [(text.rfind(tag), tag) for tag in ("\\boxed", "\\fbox")]
    i, tag = max(starts)
    if i < 0:
        return None
    rest = text[i + len(tag) :]
    if rest.startswith(" ") and not rest.lstrip(" ").startswith("{"):  # "\boxed 5": up to whitespace or "$"
        token = rest.lstrip(" ").split("$", 1)[0].split(None, 1)
        return token[0].strip() if token and token[0].strip() else None
    rest = rest.lstrip(" ")
    if not rest.startswith("{"):
        return None
    depth = 0
    for j, c in enumerate(rest):
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                content = rest[1:j].strip()
                return content or None
    return None


class _DropTimeoutWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "Timeout is disabled" not in str(record.msg)


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_DropTimeoutWarning())


@lru_cache(maxsize=16384)
def _parse(boxed: str):
    from math_verify import parse  # noqa: PLC0415 (heavy import, on first use)

    return parse(boxed, parsing_timeout=None)


def _check(gold: str, pred: str) -> bool:
    from math_verify import verify  # noqa: PLC0415

    g, p = _parse(f"\\boxed{{{gold}}}"), _parse(f"\\boxed{{{pred}}}")
    return bool(g) and bool(p) and bool(verify(g, p, timeout_seconds=None))


@lru_cache(maxsize=65536)
def math_equal(gold: str, pred: str, timeout_s: float = 5.0) -> bool:
    """Whether answer `pred` is mathematically equal to `gold` (math_verify, gold first), within `timeout_s`
    seconds (in a daemon worker thread, so it works off the main thread too). Never raises."""
    if not isinstance(gold, str) or not isinstance(pred, str) or len(pred) > _MAX_ANSWER_CHARS:
        return False
    result: list[bool] = []

    def work() -> None:
        try:
            result.append(_check(gold, pred))
        except BaseException:  # math_verify's TimeoutException derives from BaseException
            result.append(False)

    worker = threading.Thread(target=work, name="esreason-math-verify", daemon=True)
    worker.start()
    worker.join(timeout_s)
    return bool(result[0]) if result else False


class MathTask(Task):
    """Competition math with free-form LaTeX answers. Examples are shuffled by `seed`; ids are
    `<dataset>-<split>-<row index>` and do not depend on the seed."""

    name = "math"
    stop = None
    max_new_tokens = 1024

    def __init__(
        self,
        path: str | None = None,
        dataset: str = "math500",
        *,
        timeout_s: float = 5.0,
        shaping: RewardShaping = RewardShaping(),
    ):
        super().__init__(shaping)
        if dataset not in DATASETS:
            raise ValueError(f"dataset must be one of {sorted(DATASETS)}, got {dataset!r}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
        self.path, self.dataset, self.timeout_s = path, dataset, float(timeout_s)
        self._rows: dict[str, list[Example]] = {}

    def _load(self, split: str) -> list[Example]:
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        if split not in self._rows:
            f = local_file(self.path, self.dataset, split)
            if f is not None:
                rows = read_jsonl(f)
            else:
                repo_id, offered = DATASETS[self.dataset]
                if split not in offered:
                    raise ValueError(f"dataset {self.dataset!r} has no split {split!r} (it offers {offered})")
                rows = hub_rows(repo_id, None, split)
            out = []
            for i, row in enumerate(rows):
                if "problem" not in row or "answer" not in row:
                    raise ValueError(f"{self.dataset} {split} row {i} lacks 'problem' or 'answer': {sorted(row)}")
                ex = {"id": f"{self.dataset}-{split}-{i}", "problem": row["problem"], "answer": str(row["answer"])}
                ex.update({k: row[k] for k in ("solution", "subject", "level", "unique_id") if k in row})
                out.append(ex)
            self._rows[split] = out
        return self._rows[split]

    def examples(self, split: str = "test", n: int | None = None, seed: int = 0) -> list[Example]:
        """Keys `id`, `problem`, `answer` (gold LaTeX), plus `solution`/`subject`/`level`/`unique_id` if given."""
        return shuffled_prefix(self._load(split), n, seed, self.name, self.dataset, split)

    def prompt(self, example: Example, tokenizer: Any = None) -> str:
        """Plain "Problem: ...\\nSolution:" text, or a chat turn; both ask for the answer in \\boxed{}."""
        p = example["problem"]
        plain = f"Problem: {p}\nPut the final answer in \\boxed{{}}.\nSolution:"
        instruction = f"{p}\nPlease reason step by step, and put your final answer within \\boxed{{}}."
        return render_prompt(plain, instruction, tokenizer)

    def extract_answer(self, completion: str) -> str | None:
        """The content of the last boxed expression, or None."""
        try:
            return last_boxed(completion)
        except Exception:
            return None

    def is_correct(self, completion: str, example: Example) -> bool:
        """math_verify equivalence of the boxed answer with the gold `answer`, within `timeout_s`."""
        try:
            ans = self.extract_answer(completion)
            return ans is not None and math_equal(str(example["answer"]), ans, self.timeout_s)
        except Exception:
            return False
