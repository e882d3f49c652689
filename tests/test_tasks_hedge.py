"""One hedge rule for every task (issue 35, `tasks._hedge`): the probe's strings and their variants score wrong
in GSM8K, CommonsenseQA and GPQA; single answers with trailing text still score right."""

from __future__ import annotations

import json
import re

import pytest

from esreason_lib.tasks._hedge import hedged, untrusted
from esreason_lib.tasks.commonsenseqa import CommonsenseQA
from esreason_lib.tasks.gpqa import GPQA
from esreason_lib.tasks.gsm8k import GSM8K, extract_number

GOLD = {"id": "g", "question": "q", "answer": "18"}
SPACES = {"space": " ", "no-break": "\u00a0", "thin": "\u2009", "narrow no-break": "\u202f", "figure": "\u2007",
          "en quad": "\u2000", "hair": "\u200a", "ideographic": "\u3000", "tab": "\t", "medium math": "\u205f"}
NUMBER_HEDGES = ["#### 18 19", "#### 18 (or 19)", "#### 18 - 19", "#### 18 – 19", "#### 18 — or 19", "#### 18 ± 1",
                 "#### 18 +/- 1", "#### 18 or possibly 19", "#### 18 vs 19", "#### 18 vs. 19", "#### 18 VS 19",
                 "#### 18 versus 19", "#### 18 \\pm 1", "#### 18 \\mp 1", "#### 18 ∓ 1", "#### 18 −19",
                 "#### 18—19", "#### 18 -- 19", "#### 18 maybe 19", "#### 18 perhaps 19", "#### 18 (maybe 19)",
                 "#### 18 plus or minus 1", "#### 18 \\vee 19", "#### 18 \\text{or} 19", "#### 18 [or 19]",
                 "The answer is 18 or possibly 19", "the answer is 18 ± 2", "#### 18 & 19", "#### 18 + 1",
                 "#### 18 or, if not, 19", "#### 18 ∨ 19", "#### 18~or~19", "#### 18\\,\\text{or}\\,19",
                 "#### 18\nor 19", "#### 18\x00", "#### 18\ud800", "#### 18\x0b19", "#### 18\u200b",
                 "#### 18\x1c", "#### 18 \x00"]
LETTER_HEDGES = ["\\boxed{B \\vee C}", "\\boxed{B \\cup C}", "\\boxed{B~or~C}", "\\boxed{B\\,\\text{or}\\,C}",
                 "\\boxed{B (or C)}", "\\boxed{B + C}", "\\boxed{B or, if not, C}", "\\boxed{B\x00}", "Answer: B\x00",
                 "\\boxed{B\ud800}", "Answer: B\ud800", "\\boxed{B \\lor C}", "\\boxed{B \\wedge C}",
                 "\\boxed{B \\land C}", "\\boxed{B ∨ C}", "\\boxed{B ∪ C}", "\\boxed{B \\mathrm{ or } C}",
                 "\\boxed{B \\text{ OR } C}", "Answer: B – C", "Answer: B — or C", "Answer: B - C",
                 "The answer is B vs C", "Answer: B or possibly C", "\\boxed{B \\textrm{or} C}",
                 "\\boxed{B\\;\\text{or}\\;C}", "Answer: B (or maybe C)", "\\boxed{B \\cap C}", "Answer: B\x07",
                 "Answer: B\u200e", "Answer: (B)\x00", "\\boxed{B\\quad or\\quad C}", "Answer: B\u00a0or\u00a0C"]


@pytest.mark.parametrize("text", NUMBER_HEDGES)
def test_gsm8k_hedges_score_wrong(text):
    task = GSM8K(path="unused")
    assert extract_number(text) is None
    assert not task.is_correct(text, GOLD) and task.reward(text, GOLD) < 1.0


@pytest.mark.parametrize("name", sorted(SPACES))
@pytest.mark.parametrize("where", ["#### {}", "The answer is {}", "\\boxed{{{}}}"])
def test_a_number_split_by_any_space_is_never_its_first_group(name, where):
    text = where.format(f"18{SPACES[name]}000")
    assert extract_number(text) in (None, "18000")
    assert not GSM8K(path="unused").is_correct(text, GOLD)
    for boxed in ("\\boxed{18\\,000}", "\\boxed{18{,}000}"):  # TeX's thousands separators read as one number
        assert extract_number(boxed) == "18000"


@pytest.mark.parametrize("text", ["#### 18", "#### 18 dollars", "#### 18\n\nQuestion: Tom has 19 apples",
                                  "The answer is 18 (6 x 3).", "The answer is 18, and Tom keeps 3",
                                  "#### 18 dollars or so", "#### 18\t", "#### 18\r\n", "#### 18 to the store",
                                  "The answer is 18. 19 was wrong.", "#### 18 (since 6 + 12 = 18)",
                                  "\\boxed{18}\n\n19 is not it", "#### 18 \n19"])
def test_single_numbers_with_trailing_text_still_score_right(text):
    assert GSM8K(path="unused").is_correct(text, GOLD), text


def _tasks(tmp_path):
    csqa_row = {"id": "c1", "answerKey": "B", "question": {"stem": "Where?", "choices": [
        {"label": k, "text": t} for k, t in zip("ABCDE", ["bank", "river", "lake", "sea", "pond"])]}}
    gpqa_row = {"Question": "Which?", "Correct Answer": "photon", "Incorrect Answer 1": "gluon",
                "Incorrect Answer 2": "W boson", "Incorrect Answer 3": "graviton", "Record ID": "r1"}
    out = []
    for task, row in ((CommonsenseQA, csqa_row), (GPQA, gpqa_row)):
        path = tmp_path / f"{task.__name__}.jsonl"
        path.write_text(json.dumps(row) + "\n")
        t = task(path=str(path))
        out.append((t, {**t.examples("test")[0], "answer": "B"}))
    return out


def test_letter_hedges_score_wrong_in_both_tasks(tmp_path):
    for task, ex in _tasks(tmp_path):
        for text in LETTER_HEDGES:
            assert task.extract_answer(text) is None, (task.name, text)
            assert not task.is_correct(text, ex) and task.reward(text, ex) == 0.0, (task.name, text)
        for text in ("\\boxed{B}", "Answer: B", "\\boxed{B. river}", "Answer: B, because C is wrong",
                     "The answer is (B) (the river)", "Answer: B\n\nC is wrong", "\\boxed{\\text{B}}"):
            assert task.is_correct(text, ex), (task.name, text)


def test_hedged_reads_the_tables():
    number = re.compile(r"\d")
    assert hedged("18 ± 1", 2, number) and hedged("18 \\cup 1", 2, number) and hedged("18 (or 19)", 2, number)
    assert not hedged("18 19", 2, number) and hedged("18 19", 2, number, spaced=True)  # bare spaces: numbers only
    assert not hedged("18\n19", 2, number, spaced=True) and not hedged("18 (19)", 2, number, spaced=True)
    assert hedged("18\x00", 2, number) and hedged("18 \ud800", 2, number) and not hedged("18\n", 2, number)
    assert not hedged("18 or Tom", 2, number) and not hedged("18 organic 19", 2, number)
    assert not hedged("1" + " ," * 50_000 + "x", 1, number)  # possessive: one pass
    assert untrusted("\x00") and untrusted("\ud800") and untrusted("\u200b") and untrusted("\x1c")
    assert not untrusted("\n") and not untrusted("\t") and not untrusted(" ") and not untrusted("é")
