"""Multiple-choice tasks (CommonsenseQA, GPQA): one prompt layout and one letter extraction for both.

An example holds `question`, `choices` (a list of `[letter, text]` pairs in display order) and `answer` (the gold
letter). The prompt lists the choices as "A. text" lines and asks for the letter in `\\boxed{}`.

Extraction (`extract_letter`, evaluation and training alike), the first rule that finds a letter wins; letters are
the task's labels, upper case only; the completion's last 100,000 characters are read, each rule in linear time:
  1. the content of the last `\\boxed{}` when it is one choice letter, optionally in parentheses or `\\text{}` and
     optionally followed by its text: `\\boxed{B}`, `\\boxed{(B)}`, `\\boxed{\\text{B}}`, `\\boxed{B. river}`;
  2. the letter right after the last "answer is" or "answer:" (the word case-insensitive), past spaces, "*", ":"
     and "(": "The answer is (B)", "Answer: B", "**Answer:** C", "the answer is: D".
A letter followed by another letter or a digit is no answer ("Answer: Bob"). A hedge is no answer (`_hedge.hedged`,
the rule of every task): another choice letter standing alone, or a boxed value, anywhere on the answer's line
after it, whatever stands between (`\\boxed{B or C}`, "Answer: B, C", "(B) (C)", "B、C", "B unless C", `\\boxed{B}
or C`), or a control character, NUL or lone surrogate there, gives None, whatever other rule might have found.
Nothing else counts: never the last capital letter anywhere. Well-formed (the 0.1 reward tier) = a letter was
extracted; correct = it is the gold.
"""

from __future__ import annotations

from typing import Any

from ._common import FileTask, after_answer_marker, render_prompt, unwrap_tex_text
from ._hedge import hedged, letter_candidate
from .base import Example, total
from .math_task import last_boxed_span

__all__ = ["MultipleChoiceTask", "extract_letter"]

_MAX_CHARS = 100_000
"""Completions are cut to their last this-many characters before extraction."""


class _Hedge(Exception):
    """The answer names several letters: no answer at all."""


def _letter_at(text: str, i: int, letters: str) -> str | None:
    """The letter at `text[i]` when it is one of `letters` and no letter or digit follows it, else None; raises
    _Hedge when another candidate follows it on its line (`_hedge.hedged`: "B or C", "(B) (C)", "B unless C")."""
    if i < len(text) and text[i] in letters and not (i + 1 < len(text) and text[i + 1].isalnum()):
        end = i + 2 if text.startswith(")", i + 1) else i + 1
        if hedged(text, end, letter_candidate(letters)):
            raise _Hedge
        return text[i]
    return None


def extract_letter(completion: Any, letters: str) -> str | None:
    """The choice letter (one of `letters`) the completion gives, by the module's rules, or None. Never raises."""
    if not isinstance(completion, str):
        return None
    try:
        return _extract(completion[-_MAX_CHARS:], letters)
    except _Hedge:
        return None


def _extract(text: str, letters: str) -> str | None:
    span = last_boxed_span(text)
    if span is not None:
        content = unwrap_tex_text(span[0])
        if (letter := _letter_at(content, 1 if content.startswith("(") else 0, letters)) is not None:
            if hedged(text, span[2], letter_candidate(letters), box_start=span[1]):
                raise _Hedge
            return letter
    start = after_answer_marker(text)
    if start is None:
        return None
    return _letter_at(text, start + 1 if text.startswith("(", start) else start, letters)


class MultipleChoiceTask(FileTask):
    """A multiple-choice task read from `path` (see `_common.local_file`) or the hub; subclasses set `name` and
    `letters` and implement `_read(split)`. Example keys: `id`, `question`, `choices` ([[letter, text], ...]),
    `answer` (the gold letter)."""

    letters: str = "ABCD"
    """The choice labels this task's answers may use."""
    stop = None
    max_new_tokens = 512

    def prompt(self, example: Example, tokenizer: Any = None) -> str:
        """The question, one "X. text" line per choice and the instruction to box the letter; plain text ending
        in "Answer:" or a chat turn."""
        body = example["question"].strip() + "\n" + "\n".join(f"{k}. {t}" for k, t in example["choices"])
        plain = f"Question: {body}\nAnswer with the letter of the correct choice in \\boxed{{}}.\nAnswer:"
        instruction = (f"{body}\n\nThink step by step, then give the letter of the correct choice in \\boxed{{}}, "
                       "e.g. \\boxed{A}.")
        return render_prompt(plain, instruction, tokenizer)

    @total(None)
    def extract_answer(self, completion: str) -> str | None:
        """The choice letter the completion gives (module rules), or None."""
        return extract_letter(completion, self.letters)

    @total(False)
    def is_correct(self, completion: str, example: Example) -> bool:
        """The extracted letter equals the gold letter."""
        letter = self.extract_answer(completion)
        return letter is not None and letter == example["answer"]


def check_choices(where: str, field: str, choices: list, answer: Any, letters: str) -> None:
    """ValueError naming `where` and `field` unless `choices` are [letter, non-empty text] pairs with distinct
    letters from `letters` and `answer` is one of them."""
    labels = [label for label, _ in choices]
    if len(labels) < 2 or len(set(labels)) != len(labels) or not all(isinstance(x, str) and len(x) == 1 and
                                                                       x in letters for x in labels):
        raise ValueError(f"{where}: field {field!r} must have 2 or more distinct labels from {letters!r}, "
                         f"got {labels!r:.120}")
    empty = [label for label, text in choices if not (isinstance(text, str) and text.strip())]
    if empty:
        raise ValueError(f"{where}: field {field!r} has choices without text: {empty!r}")
    if answer not in labels:
        raise ValueError(f"{where}: the answer {answer!r:.40} is not one of the labels {labels!r}")
