"""HotpotQA (Yang et al. 2018): multi-hop factoid questions with short free-text answers, a held-out task of the
paper's forgetting study, asked closed-book (the question alone, no supporting paragraphs: what the model knows is
what forgetting could erase).

Data: a jsonl with `question` and `answer` strings (`id` / `_id`, `type` and `level` are kept when present) read
from `path`, else `$ESREASON_DATA/hotpotqa/<split>.jsonl` or `<repo>/../shared/data/hotpotqa/<split>.jsonl` when
present, else `datasets.load_dataset("hotpotqa/hotpot_qa", "distractor")`. The hub's test split has no answers, so
this task's "test" split is the hub's "validation" split (7,405 questions). A bad row is a ValueError naming the
file, the line and the field.

Extraction (the last 100,000 characters, linear time), the first rule that finds a non-empty answer wins:
  1. the content of the last `\\boxed{}` (a `\\text{...}` wrapper removed);
  2. the rest of the line after the last "answer is" / "answer:" (the word case-insensitive), without
     surrounding spaces, "*" and a final ".".
Scoring is SQuAD's (Rajpurkar et al. 2016) as HotpotQA's official script applies it: `normalize_answer`
lower-cases and drops punctuation, the articles a/an/the and extra whitespace; `exact_match` compares the
normalised strings; `token_f1` is the F1 of their bag-of-tokens overlap, 0 when either is "yes", "no" or
"noanswer" and they differ. `is_correct` is exact match; `f1(completion, example)` is the metric function.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Any

from ._common import FileTask, after_answer_marker, dataset_rows, render_prompt, unwrap_tex_text
from .base import Example, total
from .math_task import last_boxed

__all__ = ["HotpotQA", "exact_match", "normalize_answer", "token_f1"]

_MAX_CHARS = 100_000
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_YES_NO = ("yes", "no", "noanswer")
HUB_SPLITS = {"train": "train", "test": "validation"}
"""This task's split -> the hub split it reads."""


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower case, no punctuation, no articles (a, an, the), single spaces."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION)).split())


def exact_match(prediction: Any, gold: Any) -> bool:
    """Whether the normalised strings are equal (False for a non-string). Never raises."""
    if not (isinstance(prediction, str) and isinstance(gold, str)):
        return False
    return normalize_answer(prediction) == normalize_answer(gold)


def token_f1(prediction: Any, gold: Any) -> float:
    """Bag-of-tokens F1 of the normalised strings (HotpotQA's rule for yes/no/noanswer); 0.0 for a non-string."""
    if not (isinstance(prediction, str) and isinstance(gold, str)):
        return 0.0
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    if (pred in _YES_NO or ref in _YES_NO) and pred != ref:
        return 0.0
    same = sum((Counter(pred.split()) & Counter(ref.split())).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred.split()), same / len(ref.split())
    return 2 * precision * recall / (precision + recall)


def extract_short_answer(completion: Any) -> str | None:
    """The answer text by the module's rules, or None when there is none. Never raises."""
    if not isinstance(completion, str):
        return None
    text = completion[-_MAX_CHARS:]
    boxed = last_boxed(text)
    if boxed is not None and (content := unwrap_tex_text(boxed)):
        return content
    start = after_answer_marker(text)
    if start is None:
        return None
    end = text.find("\n", start)
    answer = text[start: len(text) if end < 0 else end].strip().strip("*").strip()
    answer = answer[:-1].rstrip() if answer.endswith(".") else answer
    return answer or None


class HotpotQA(FileTask):
    """HotpotQA questions, closed-book; ids are the dataset's `id` / `_id` when present, else
    `hotpotqa-<split>-<row index>`. Example keys: `id`, `question`, `answer` (gold text), plus `type` / `level`
    when the data has them."""

    name = "hotpotqa"
    stop = None
    max_new_tokens = 512

    def _read(self, split: str) -> list[Example]:
        out = []
        for i, (_, row) in enumerate(dataset_rows(self.path, self.name, split, "hotpotqa/hotpot_qa", "distractor",
                                                  {"question": (str,), "answer": (str,)},
                                                  hub_split=HUB_SPLITS[split])):
            given = row.get("id", row.get("_id"))
            ex = {"id": given if isinstance(given, str) and given else f"{self.name}-{split}-{i}",
                  "question": row["question"], "answer": row["answer"]}
            ex.update({k: row[k] for k in ("type", "level") if isinstance(row.get(k), str)})
            out.append(ex)
        return out

    def prompt(self, example: Example, tokenizer: Any = None) -> str:
        """Plain "Question: ...\\nAnswer:" text, or a chat turn; both ask for a short answer in \\boxed{}."""
        q = example["question"].strip()
        plain = f"Question: {q}\nGive a short answer (a name, a date, a number, yes or no) in \\boxed{{}}.\nAnswer:"
        instruction = (f"{q}\n\nThink step by step, then give a short final answer (a name, a date, a number, "
                       "yes or no) in \\boxed{}.")
        return render_prompt(plain, instruction, tokenizer)

    @total(None)
    def extract_answer(self, completion: str) -> str | None:
        """The answer text by the module's rules, or None."""
        return extract_short_answer(completion)

    @total(False)
    def is_correct(self, completion: str, example: Example) -> bool:
        """Normalised exact match of the extracted answer with the gold."""
        return exact_match(self.extract_answer(completion), example["answer"])

    @total(0.0)
    def f1(self, completion: str, example: Example) -> float:
        """Token F1 of the extracted answer against the gold (0.0 when there is none). Never raises."""
        return token_f1(self.extract_answer(completion), example["answer"])
