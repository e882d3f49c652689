"""CommonsenseQA (Talmor et al. 2019): five-way multiple-choice commonsense questions, a held-out task of the
paper's forgetting study.

Data: a jsonl read from `path`, else `$ESREASON_DATA/commonsenseqa/<split>.jsonl` or
`<repo>/../shared/data/commonsenseqa/<split>.jsonl` when present, else `datasets.load_dataset("tau/commonsense_qa")`.
The hub's test split has no answers, so this task's "test" split is the hub's "validation" split (1,221 questions;
"train": 9,741). Two row layouts are read:
  - the official release: `{"id", "answerKey": "B", "question": {"stem": str, "choices": [{"label": "A",
    "text": str}, ...]}}`;
  - the hub's: `{"id", "answerKey": "B", "question": str, "choices": {"label": [...], "text": [...]}}`.
A bad row (a missing field, labels that are not distinct letters A-E, an answer key that is no label) is a
ValueError naming the file, the line and the field. Prompt, extraction and verifier: `_choice` (letters A-E).
"""

from __future__ import annotations

from ._choice import MultipleChoiceTask, check_choices
from ._common import dataset_rows
from .base import Example

__all__ = ["CommonsenseQA"]

HUB_SPLITS = {"train": "train", "test": "validation"}
"""This task's split -> the hub split it reads."""


def _choices(where: str, field: str, value) -> list[list]:
    """`[[label, text], ...]` from the official (list of {label, text}) or hub ({label: [...], text: [...]})
    layout; a ValueError naming `where` and `field` otherwise."""
    if isinstance(value, list) and all(isinstance(c, dict) and {"label", "text"} <= set(c) for c in value):
        return [[c["label"], c["text"]] for c in value]
    if (isinstance(value, dict) and isinstance(value.get("label"), list) and isinstance(value.get("text"), list)
            and len(value["label"]) == len(value["text"])):
        return [list(pair) for pair in zip(value["label"], value["text"])]
    raise ValueError(f"{where}: field {field!r} must be a list of {{label, text}} objects or {{label: [...], "
                     f"text: [...]}} of equal lengths, got {value!r:.120}")


class CommonsenseQA(MultipleChoiceTask):
    """CommonsenseQA questions with choices A-E; ids are `commonsenseqa-<split>-<row index>`."""

    name = "commonsenseqa"
    letters = "ABCDE"

    def _read(self, split: str) -> list[Example]:
        rows = dataset_rows(self.path, self.name, split, "tau/commonsense_qa", None,
                            {"answerKey": (str,), "question": (str, dict)}, hub_split=HUB_SPLITS[split])
        out = []
        for i, (where, row) in enumerate(rows):
            question = row["question"]
            if isinstance(question, dict):  # the official layout
                stem, field, raw = question.get("stem"), "question.choices", question.get("choices")
                if not isinstance(stem, str) or not stem.strip():
                    raise ValueError(f"{where}: field 'question.stem' must be a non-empty string, got {stem!r:.80}")
            else:
                stem, field, raw = question, "choices", row.get("choices")
            choices = _choices(where, field, raw)
            check_choices(where, field, choices, row["answerKey"], self.letters)
            out.append({"id": f"{self.name}-{split}-{i}", "question": stem, "choices": choices,
                        "answer": row["answerKey"]})
        return out
