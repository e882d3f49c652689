"""GSM8K: grade-school word problems with an integer answer.

Data: the official jsonl (rows `question`, `answer`: strings; the answer's last line is `#### N`) read from
`path`, else `$ESREASON_DATA/gsm8k/<split>.jsonl` or `<repo>/../shared/data/gsm8k/<split>.jsonl` when present,
else `datasets.load_dataset("openai/gsm8k", "main")`. A bad row is a ValueError naming file, line and field.

A *number* is a whole token: optional sign and `$`, digits with thousands commas only in groups of three
("1,800"; "1,8" is no number), an optional decimal part, then nothing that continues it ("18e5", "18^2",
"18/2" are no number); a trailing ".", "%" or unit words after a space are allowed. Numbers are compared
exactly as Decimals, so "18.00", "$18", "1,800" and "18." equal 18, 1800 and 18.

Training reward (`reward`, the paper's artifact): `shaping.correct` (1) when the content of the last
`\\boxed{}` is a number equal to the gold, `shaping.formatted` (0.1) when a non-empty `\\boxed{}` exists but
is not that, `shaping.invalid` (0) otherwise; `is_well_formed` is the middle tier's test (a boxed answer exists).
Evaluation (`extract_answer`, `is_correct`), the first rule that finds a number wins:
  1. the number right after the last `####`;
  2. the content of the last `\\boxed{...}` when it is a number (`\\$`, `\\text{units}` and `\\%` allowed);
  3. the number right after the last "the answer is" (case-insensitive, optional ":");
  4. only with `lenient=True`: the last number anywhere in the completion.
A hedge is no answer (`_hedge.hedged`, the rule of every task): any other number (digits of any script, number
words) or boxed value on the answer's line after it, whatever stands between: "#### 18 or 19", "the answer is 18
or 20", "#### 18 ± 1", "#### 18 oder 19", "\\boxed{18} or 19", "#### 18 19" give None, and so does a hedged "####"
line whatever follows it. A number split by a space of any Unicode kind ("18 000" with a thin or no-break space)
is such a hedge too: never read as 18 (a boxed `18\\,000` or `18{,}000` is 18000).
Every rule scans the completion (its last 100,000 characters) a bounded number of times: linear time.
`protocol="artifact"` replaces all of this by the paper artifact's own grading (`artifact_grading`), and its chat
prompt: the instruction `ARTIFACT_SYSTEM` as a system turn, the question as the user turn (the strict protocol
asks in one user turn, after which a template such as Qwen2.5's adds its default system prompt).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation, localcontext
from typing import Any

from . import artifact_grading
from ._common import dataset_rows, render_prompt, shuffled_prefix
from ._hedge import NUMBER, hedged
from .base import Example, RewardShaping, Task, total
from .math_task import last_boxed, last_boxed_span

__all__ = ["GSM8K", "extract_number", "normalize_number", "number_after"]

ARTIFACT_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
"""The instruction of every chat prompt: the artifact's system turn, and the end of the user turn otherwise."""
_MAX_CHARS = 100_000
"""Completions are truncated to their last this-many characters before extraction."""
_MAX_NUMBER_CHARS = 64
"""Longer tokens are never numbers."""
_NUMBER = re.compile(r"-?\$?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|-?\$?\.\d+")
"""The number at the start of a token (see the module docstring); no nested quantifiers: linear to match."""
_TOKEN_TAIL = re.compile(r"%?[.,;:!?)\]}*]*")
"""What may follow a number inside its token: an optional "%", then closing punctuation."""
_LEAD = re.compile(r"[ \t:$*]*")
"""Skipped between a marker ("####", "the answer is") and its number."""
_TOKEN = re.compile(r"\S*")
_ANSWER_IS = re.compile(r"the answer is", re.IGNORECASE)
_NUMBER_END = re.compile(f"(?:{_NUMBER.pattern})%?")
_BOX_DECORATION = re.compile(r"\\[,!; ]|\\?\$|\\?%|\\(?:text|mbox|mathrm)\{[A-Za-z .]*\}")
"""What a boxed number may carry: LaTeX spaces, dollar and percent signs, unit words."""


def normalize_number(text: str) -> str | None:
    """A canonical decimal string for a whole number token ("1,000.50" -> "1000.5", "18.00" -> "18",
    "$7." -> "7"), or None when `text` (stripped) is not exactly one number (see the module docstring)."""
    if not isinstance(text, str):
        return None
    s = text.strip()
    m = _NUMBER.match(s) if len(s) <= _MAX_NUMBER_CHARS else None
    if m is None or not _TOKEN_TAIL.fullmatch(s, m.end()):
        return None
    try:
        with localcontext() as ctx:
            ctx.prec = 200  # exact for every accepted length
            out = format(Decimal(m.group(0).replace(",", "").replace("$", "")).normalize(), "f")
    except (InvalidOperation, ValueError):
        return None
    return "0" if out in ("-0", "0") else out


class _Hedge(Exception):
    """The answer names several numbers ("#### 18 or 19"): no answer at all."""


def _number_at(text: str, start: int) -> str | None:
    """The normalised number that is the token at `text[start:]` (after spaces, ":", "$" or "*"), or None;
    raises _Hedge when another candidate follows it on its line (`_hedge.hedged`)."""
    start = _LEAD.match(text, start).end()
    number = normalize_number(_TOKEN.match(text, start, start + 2 * _MAX_NUMBER_CHARS).group())
    if number is not None and hedged(text, _NUMBER_END.match(text, start).end(), NUMBER):
        raise _Hedge
    return number


def number_after(text: str, start: int) -> str | None:
    """The normalised number that is the token at `text[start:]` (after spaces, ":", "$" or "*"), or None, a hedge
    ("18 or 19") included: what follows an answer marker. Never raises."""
    try:
        return _number_at(text, start)
    except _Hedge:
        return None


def boxed_number(text: str) -> str | None:
    """The normalised number that is the whole content of the last `\\boxed{}` of `text`, or None (None too for a
    hedge: another candidate on the box's line, `_hedge.hedged`)."""
    try:
        return _boxed_number(text)
    except _Hedge:
        return None


def _boxed_number(text: str) -> str | None:
    """`boxed_number`, raising _Hedge for a hedge."""
    span = last_boxed_span(text)
    if span is None or len(span[0]) > 4 * _MAX_NUMBER_CHARS:
        return None
    number = normalize_number(_BOX_DECORATION.sub("", span[0].replace("{,}", ",")))
    if number is not None and hedged(text, span[2], NUMBER, box_start=span[1]):
        raise _Hedge
    return number


def extract_number(completion: str, lenient: bool = False) -> str | None:
    """The answer number of a free-text solution, by the module's documented rule order; never raises."""
    if not isinstance(completion, str):
        return None
    try:
        return _extract(completion[-_MAX_CHARS:], lenient)
    except _Hedge:
        return None


def _extract(text: str, lenient: bool) -> str | None:
    i = text.rfind("####")
    if i >= 0 and (number := _number_at(text, i + 4)) is not None:
        return number
    if (number := _boxed_number(text)) is not None:
        return number
    said = None
    for said in _ANSWER_IS.finditer(text):  # noqa: B007 (keeps the last match)
        pass
    if said is not None and (number := _number_at(text, said.end())) is not None:
        return number
    return last_number(text) if lenient else None


def last_number(text: str) -> str | None:
    """The normalised last number of `text` (rule 4, "lenient"), or None when it holds none. Never raises."""
    numbers = _NUMBER.findall(text) if isinstance(text, str) else []
    return normalize_number(numbers[-1]) if numbers else None


class GSM8K(Task):
    """GSM8K word problems (splits "train": 7473, "test": 1319). Examples are shuffled by `seed`; ids are
    `gsm8k-<split>-<row index in the file>` and do not depend on the seed. `lenient=True` adds extraction rule 4
    (the last number anywhere) to evaluation; the training reward never uses it. `protocol` is "strict" (the
    rules above) or "artifact" (the artifact's reward and evaluation, `artifact_grading`; `lenient` unused)."""

    name = "gsm8k"
    stop = None
    max_new_tokens = 512

    def __init__(self, path: str | None = None, *, lenient: bool = False, protocol: str = "strict",
                 shaping: RewardShaping = RewardShaping()):
        super().__init__(shaping)
        if not isinstance(lenient, bool):
            raise ValueError(f"lenient must be True or False, got {lenient!r}")
        if protocol not in ("strict", "artifact"):
            raise ValueError(f"protocol must be 'strict' or 'artifact', got {protocol!r}")
        self.path, self.lenient, self.protocol = path, lenient, protocol
        self._rows: dict[str, list[Example]] = {}

    def _load(self, split: str) -> list[Example]:
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        if split not in self._rows:
            fields = {"question": (str,), "answer": (str,)}
            out = []
            for i, (where, row) in enumerate(dataset_rows(self.path, "gsm8k", split, "openai/gsm8k", "main", fields)):
                mark = row["answer"].rfind("####")
                gold = _number_at(row["answer"], mark + 4) if mark >= 0 else None
                if gold is None:
                    tail = row["answer"][-80:]
                    raise ValueError(f"{where}: field 'answer' does not end in a '#### N' line: {tail!r}")
                out.append(
                    {"id": f"gsm8k-{split}-{i}", "question": row["question"], "answer": gold, "solution": row["answer"]}
                )
            self._rows[split] = out
        return self._rows[split]

    def examples(self, split: str = "test", n: int | None = None, seed: int = 0) -> list[Example]:
        """Keys `id`, `question`, `answer` (normalised gold number string), `solution` (reference text)."""
        return shuffled_prefix(self._load(split), n, seed, self.name, split)

    def prompt(self, example: Example, tokenizer: Any = None) -> str:
        """Plain "Question: ...\nAnswer:" text, or a chat; both ask for the final answer in \\boxed{} (what the
        training reward reads). The chat is one user turn (the question, then `ARTIFACT_SYSTEM`), or with the
        artifact protocol the artifact's (`es_reproduction.prompts`): `ARTIFACT_SYSTEM` as the system turn and
        the stripped question as the user turn, so no default system prompt of the template is added."""
        q = example["question"]
        plain = f"Question: {q}\nSolve step by step and put the final answer within \\boxed{{}}.\nAnswer:"
        if self.protocol == "artifact":
            return render_prompt(plain, q.strip(), tokenizer, system=ARTIFACT_SYSTEM)
        return render_prompt(plain, f"{q}\n{ARTIFACT_SYSTEM}", tokenizer)

    @total(None)
    def extract_answer(self, completion: str) -> str | None:
        """The normalised answer number by the evaluation rules (module docstring), or None; with the artifact
        protocol, its regex fallback's answer (`artifact_grading.regex_prediction`)."""
        if self.protocol == "artifact":
            return artifact_grading.regex_prediction(completion)
        return extract_number(completion, self.lenient)

    @total(False)
    def is_correct(self, completion: str, example: Example) -> bool:
        """The extracted number equals the gold answer exactly (as Decimals); with the artifact protocol, the
        artifact's evaluation verdict (`artifact_grading.gsm8k_correct`)."""
        if self.protocol == "artifact":
            return isinstance(completion, str) and artifact_grading.gsm8k_correct(
                completion, artifact_grading.artifact_gold(example))
        return _same_number(self.extract_answer(completion), example)

    @total(False)
    def is_well_formed(self, completion: str, example: Example) -> bool:
        """A non-empty `\\boxed{}` exists (artifact protocol: a `\\boxed{...}` that closes, even empty): the 0.1
        tier of the training reward."""
        if self.protocol == "artifact":
            return artifact_grading.boxed_content(completion) is not None
        return last_boxed(completion) is not None

    def reward(self, completion: str, example: Example) -> float:
        """The paper's training reward: correct when the last `\\boxed{}` holds the gold number, formatted when
        a boxed answer exists but is not that, invalid otherwise. Never raises."""
        try:
            if self.protocol == "artifact":
                tier = artifact_grading.gsm8k_tier(completion, artifact_grading.artifact_gold(example))
                return getattr(self.shaping, tier)
            if _same_number(boxed_number(completion[-_MAX_CHARS:]), example):
                return self.shaping.correct
            return self.shaping.formatted if self.is_well_formed(completion, example) else self.shaping.invalid
        except Exception:
            return self.shaping.invalid


@total(False)
def _same_number(answer: str | None, example: Example) -> bool:
    """Whether the normalised `answer` equals `example`'s gold exactly; False on anything unusable."""
    gold = normalize_number(str(example["answer"]))
    return answer is not None and gold is not None and Decimal(answer) == Decimal(gold)
