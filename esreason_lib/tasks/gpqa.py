"""GPQA-Diamond (Rein et al. 2023): 198 graduate-level four-way multiple-choice science questions, a held-out task
of the paper's forgetting study.

Data: a jsonl with the dataset's own columns `Question`, `Correct Answer`, `Incorrect Answer 1`, `Incorrect
Answer 2`, `Incorrect Answer 3` (strings; `Record ID` is kept when present) read from `path`, else
`$ESREASON_DATA/gpqa/test.jsonl` or `<repo>/../shared/data/gpqa/test.jsonl` when present, else
`datasets.load_dataset("Idavidrein/gpqa", "gpqa_diamond")` (a gated dataset: log in to the hub first), whose only
split "train" is this task's "test" split. GPQA is an evaluation set: there is no train split (unless `path` or
the data folder provides one). A bad row is a ValueError naming the file, the line and the field.

Choice order. The file holds the correct answer apart from the three incorrect ones, so they are shuffled: the
four answers (stripped) are put in the order of `numpy_rng(0, "gpqa-choices", question)`'s permutation of
(correct, incorrect 1, incorrect 2, incorrect 3), a seed derived from the question text alone. The order, hence
the gold letter, is the same in every run, under every `seed` and whatever the row order or file copy.
Prompt, extraction and verifier: `_choice` (letters A-D).
"""

from __future__ import annotations

from ..seeding import numpy_rng
from ._choice import MultipleChoiceTask, check_choices
from ._common import dataset_rows, local_file
from .base import Example

__all__ = ["GPQA", "shuffled_choices"]

ANSWER_FIELDS = ("Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")
"""The columns holding the four answers, the correct one first."""


def shuffled_choices(question: str, answers: tuple[str, str, str, str]) -> tuple[list[list[str]], str]:
    """(`[[letter, text], ...]` for A-D, gold letter): `answers` (correct first) in the order of the permutation
    seeded by `question` (module docstring)."""
    order = numpy_rng(0, "gpqa-choices", question).permutation(4)
    choices = [[letter, answers[j].strip()] for letter, j in zip("ABCD", order)]
    return choices, "ABCD"[list(order).index(0)]


class GPQA(MultipleChoiceTask):
    """GPQA-Diamond questions with choices A-D; ids are `gpqa-<split>-<row index>`."""

    name = "gpqa"
    letters = "ABCD"

    def _read(self, split: str) -> list[Example]:
        if split == "train" and local_file(self.path, self.name, split) is None:
            raise ValueError("GPQA-Diamond is an evaluation set: it has no 'train' split (pass path= to a file "
                             "to use one)")
        fields = {name: (str,) for name in ("Question", *ANSWER_FIELDS)}
        out = []
        for i, (where, row) in enumerate(dataset_rows(self.path, self.name, split, "Idavidrein/gpqa",
                                                      "gpqa_diamond", fields, hub_split="train")):
            choices, gold = shuffled_choices(row["Question"], tuple(row[f] for f in ANSWER_FIELDS))
            check_choices(where, "Correct Answer / Incorrect Answer 1-3", choices, gold, self.letters)
            texts = [text for _, text in choices]
            if len(set(texts)) < 4:
                raise ValueError(f"{where}: fields {ANSWER_FIELDS} must hold four different answers, "
                                 f"got {texts!r:.200}")
            ex = {"id": f"{self.name}-{split}-{i}", "question": row["Question"].strip(), "choices": choices,
                  "answer": gold}
            if isinstance(row.get("Record ID"), str):
                ex["record_id"] = row["Record ID"]
            out.append(ex)
        return out
