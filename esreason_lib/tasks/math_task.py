"""MATH-style problems (MATH-500 for evaluation, DeepScaleR for training), verified with `math_verify`.

Data: a jsonl with `problem` and `answer` fields (the answer a string or a number, never null) read from `path`,
else `$ESREASON_DATA/<dataset>/<split>.jsonl` or `<repo>/../shared/data/<dataset>/<split>.jsonl` when present,
else `datasets`: "math500" -> "HuggingFaceH4/MATH-500" (split test), "deepscaler" ->
"agentica-org/DeepScaleR-Preview-Dataset" (split train). A bad row is a ValueError naming file, line and field.

Answer extraction: the content of the last `\\boxed{...}` (nested braces matched), `\\boxed 5` or `\\fbox{...}`;
a hedge is no answer (`_hedge`, the rule of every task: another number or boxed value after the box on its line,
`\\boxed{5 \\text{ or } 6}`, `\\boxed{5\\ \\text{(or 6)}}`, `\\boxed{5 oder 6}`). Well-formed = a non-empty
boxed answer was found.

Correctness (`math_equal`), cheapest first; every path returns within `timeout_s` (plus a worker restart, see
below) and never raises:
  1. guards refuse answers that are costly for sympy or cannot be a final answer (`refusal`: over 200
     characters, non-ASCII or control characters, brackets unbalanced or nested over 4 deep, exponent towers
     or exponents over 4 digits, factorials of big numbers, integrals/sums/products/limits, numbers with two
     decimal points, two or more words of prose outside `\\text{}`): wrong. Linear time, microseconds;
  2. an answer identical to the gold (up to surrounding spaces) is right; when both are plain numbers
     (integers, decimals, `a/b`, `\\frac{a}{b}`), exact arithmetic in-process decides (Fractions, no float), with
     the float rule of `_math_worker` (decimals compared at the precision the answer states, at least 6 places, no
     upper clamp: 0.5000000000000001 is not 1/2);
  3. otherwise `math_verify.verify(gold, answer)` (gold first: it is asymmetric) in the persistent worker
     process of `_math_worker`, killed and restarted when it overruns `timeout_s` (the answer then counts as
     wrong). An answer that is a relation (`a=1/2`) never equals a gold that is not one.
Verdicts are cached per (gold, answer, timeout_s); a check that raised or was interrupted is never cached, and the
worker matches replies to requests (see `_math_worker`), so an interrupt never shifts later verdicts.
`timeout_s` must be a finite number of seconds in (0, 3600] (a ValueError naming it otherwise). Measured on this
project's 2-core machine under load (load average 13): a cached verdict 0.5 us, a refused answer 17 us, two plain
numbers 43 us, a worker check 19-64 ms on average (1.5 s at most over the fuzz corpus), the first check 3.1 s (the
worker starts), and the check after a kill 3.1 s (the restarted worker imports math_verify first).
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache
from typing import Any

from ._common import dataset_rows, local_file, render_prompt, shuffled_prefix
from ._hedge import NUMBER, boxed_hedge, hedged
from ._math_worker import MAX_TIMEOUT_S, MathWorker, float_rounding
from .base import Example, RewardShaping, Task, check_seconds, total

__all__ = ["MathTask", "last_boxed", "last_boxed_span", "math_equal", "refusal"]

DATASETS = {
    "math500": ("HuggingFaceH4/MATH-500", ("test",)),
    "deepscaler": ("agentica-org/DeepScaleR-Preview-Dataset", ("train",)),
}
"""dataset name -> (Hugging Face repo id, splits it offers)."""
_MAX_CHARS = 100_000
"""Completions are cut to their last this-many characters before extraction."""
MAX_ANSWER_CHARS = 200
"""Longer boxed answers are well-formed but never checked (wrong). MATH-500's longest gold has 53."""
MAX_NESTING = 4
"""Deepest nesting of {}, () and [] an answer may have (MATH-500's golds: 2). Parse time grows fast with it."""
MAX_EXPONENT_DIGITS = 4
"""Longest integer literal allowed in an exponent (so 2^{9999} is checked, 10^{10^{10}} and 2^{10^5} are not)."""
_HEAVY = re.compile(r"\\(?:[io]+int|int|sum|prod|lim|partial|nabla)(?![a-zA-Z])")
_BIG_FACTORIAL = re.compile(r"(?:\d{4,}|[)}\]])\s*!")
_INTEGER = re.compile(r"\d+")
_BAD_NUMBER = re.compile(r"\d\.\d*\.\d")
_WORDS = re.compile(r"[A-Za-z]{3,}")
_NOT_PROSE = re.compile(r"\\(?:text|textbf|mathrm|mbox|operatorname|begin|end)\{[^{}]*\}|\\[A-Za-z]+")
"""Unit words, environment names and LaTeX command names: letters that are no prose."""
_PLAIN = re.compile(r"(-?)(?:(\d+(?:\.\d*)?|\.\d+)|(\d+)/(\d+)|\\[dt]?frac\{(\d+)\}\{(\d+)\})")


def last_boxed(text: str) -> str | None:
    """The stripped content of the last `\\boxed{...}` / `\\fbox{...}` (nested braces) or `\\boxed 5` in
    `text`; None when there is none, it is empty, or its braces never close. Never raises."""
    span = last_boxed_span(text)
    return None if span is None else span[0]


def last_boxed_span(text: str) -> tuple[str, int, int] | None:
    """`last_boxed(text)`, the index in `text` where that box starts (its backslash) and the index right after it
    (its closing brace, or the token of `\\boxed 5`), or None. Never raises."""
    if not isinstance(text, str):
        return None
    offset = max(0, len(text) - _MAX_CHARS)
    text = text[offset:]
    starts = [(text.rfind(tag), tag) for tag in ("\\boxed", "\\fbox")]
    i, tag = max(starts)
    if i < 0:
        return None
    rest = text[i + len(tag) :]
    start = offset + i + len(tag) + len(rest) - len(rest.lstrip(" "))
    if rest.startswith(" ") and not rest.lstrip(" ").startswith("{"):  # "\boxed 5": up to whitespace or "$"
        token = rest.lstrip(" ").split("$", 1)[0].split(None, 1)
        return (token[0].strip(), offset + i, start + len(token[0])) if token and token[0].strip() else None
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
                return (content, offset + i, start + j + 1) if content else None
    return None


def refusal(answer: str) -> str | None:
    """Why `answer` is refused before sympy (see the module docstring, rule 1), or None when it may be checked.
    Linear in `len(answer)`; never raises."""
    if not isinstance(answer, str):
        return "not a string"
    if len(answer) > MAX_ANSWER_CHARS:
        return f"longer than {MAX_ANSWER_CHARS} characters"
    if not answer.isascii() or not answer.isprintable():
        return "non-ASCII or control characters"
    if _HEAVY.search(answer):
        return "integral, sum, product or limit"
    if _BIG_FACTORIAL.search(answer):
        return "factorial of a big number or an expression"
    if _BAD_NUMBER.search(answer):
        return "a number with two decimal points"
    if len(_WORDS.findall(_NOT_PROSE.sub(" ", answer))) >= 2:
        return "prose (two or more words)"
    depth, open_exponents, exponent_end = 0, [], -1  # depths at which exponent groups opened; where one ended
    for i, c in enumerate(answer):
        if c in "{([":
            depth += 1
            if depth > MAX_NESTING:
                return f"nested deeper than {MAX_NESTING}"
        elif c in "})]":
            depth -= 1
            if depth < 0:
                return "a bracket closes that never opened"
            if open_exponents and depth < open_exponents[-1]:
                open_exponents.pop()
                exponent_end = i + 1
        elif c == "^" or answer.startswith("**", i):
            if open_exponents or (exponent_end >= 0 and not answer[exponent_end:i].strip()):
                return "exponent tower"
            j = i + 1
            while j < len(answer) and answer[j] in " *":
                j += 1
            if answer[j : j + 1] in ("{", "("):
                open_exponents.append(depth + 1)
            elif answer[j : j + 1].isdigit():
                digits = _INTEGER.match(answer, j).group()
                if len(digits) > MAX_EXPONENT_DIGITS:
                    return f"exponent over {MAX_EXPONENT_DIGITS} digits"
                exponent_end = j + len(digits)
            else:
                exponent_end = j + 1
        elif c.isdigit() and open_exponents and (i == 0 or not answer[i - 1].isdigit()):
            if len(_INTEGER.match(answer, i).group()) > MAX_EXPONENT_DIGITS:
                return f"exponent over {MAX_EXPONENT_DIGITS} digits"
    return "a bracket never closes" if depth else None


def _plain_number(text: str) -> Fraction | None:
    """The exact value of an integer, decimal, `a/b` or `\\frac{a}{b}` (optionally negative), else None."""
    m = _PLAIN.fullmatch(text.replace(" ", ""))
    if m is None or len(text) > 60:
        return None
    sign, decimal, num, den, fnum, fden = m.groups()
    if decimal is not None:
        value = Fraction(decimal.rstrip(".") or "0")
    else:
        den = int(den if den is not None else fden)
        if den == 0:
            return None
        value = Fraction(int(num if num is not None else fnum), den)
    return -value if sign else value


def _numbers_equal(gold: Fraction, answer: Fraction, answer_text: str, floats: bool) -> bool:
    if not floats:
        return gold == answer
    places = float_rounding(answer_text)
    return round(gold, places) == round(answer, places)


_WORKER = MathWorker()
"""The process-wide math_verify worker (started on the first check that needs it)."""


@lru_cache(maxsize=65536)
def _verdict(gold: str, answer: str, timeout_s: float) -> bool:
    if refusal(answer) is not None:
        return False
    if answer.strip() == gold.strip():
        return True
    g, a = _plain_number(gold), _plain_number(answer)
    if g is not None and a is not None:
        return _numbers_equal(g, a, answer, "." in gold or "." in answer)
    return _WORKER.check(gold, answer, timeout_s)  # an exception (WorkerUnavailable, ...) is never cached


def math_equal(gold: str, pred: str, timeout_s: float = 5.0) -> bool:
    """Whether answer `pred` is mathematically equal to `gold` (rules in the module docstring), deciding within
    `timeout_s` seconds once the worker is up. Works from any thread (checks are serialised). Never raises on its
    inputs: only a bad `timeout_s` (ValueError) and KeyboardInterrupt propagate."""
    timeout_s = check_seconds(timeout_s, "timeout_s", MAX_TIMEOUT_S)
    if not isinstance(gold, str) or not isinstance(pred, str):
        return False
    try:
        return _verdict(gold, pred, timeout_s)
    except Exception:  # noqa: BLE001 (WorkerUnavailable, a broken pipe: no verdict, and none cached)
        return False


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
        self.path, self.dataset = path, dataset
        self.timeout_s = check_seconds(timeout_s, "timeout_s", MAX_TIMEOUT_S)
        self._rows: dict[str, list[Example]] = {}

    def _load(self, split: str) -> list[Example]:
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        if split not in self._rows:
            repo_id, offered = DATASETS[self.dataset]
            if self.path is None and split not in offered and local_file(None, self.dataset, split) is None:
                raise ValueError(f"dataset {self.dataset!r} has no split {split!r} (it offers {offered})")
            fields = {"problem": (str,), "answer": (str, int, float)}
            out = []
            for i, (_, row) in enumerate(dataset_rows(self.path, self.dataset, split, repo_id, None, fields)):
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

    @total(None)
    def extract_answer(self, completion: str) -> str | None:
        """The content of the last boxed expression, or None; None too for a hedge (`_hedge`: another number or
        boxed value after the box on its line, or a box that names more than its expression)."""
        span = last_boxed_span(completion)
        if span is None or boxed_hedge(span[0]) or hedged(completion, span[2], NUMBER, box_start=span[1]):
            return None
        return span[0]

    @total(False)
    def is_correct(self, completion: str, example: Example) -> bool:
        """The boxed answer equals the gold `answer` by `math_equal` (guards, exact numbers, math_verify in the
        worker), decided within `timeout_s` once the worker is up."""
        ans = self.extract_answer(completion)
        return ans is not None and math_equal(str(example["answer"]), ans, self.timeout_s)
