"""One hedge rule for every task (issues 35 and 47, `tasks._hedge`): an allow-list after the answer. The probes'
strings and their variants score wrong in GSM8K, MATH, Countdown, CommonsenseQA and GPQA; single answers with
trailing words, or with other numbers on later lines, still score right, and so does every gold answer of GSM8K
and MATH-500 in ../shared/data."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from esreason_lib.tasks._hedge import boxed_hedge, hedged, letter_candidate, rest_of_line, untrusted
from esreason_lib.tasks.commonsenseqa import CommonsenseQA
from esreason_lib.tasks.countdown import Countdown
from esreason_lib.tasks.gpqa import GPQA
from esreason_lib.tasks.gsm8k import GSM8K, extract_number
from esreason_lib.tasks.math_task import MathTask

REPO = Path(__file__).resolve().parents[1]

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
                 "#### 18\x1c", "#### 18 \x00",
                 # issue 47: outside any list of separators
                 "#### 18 *or* 19", "#### 18 but it could be 19", "#### 18 oder 19", "#### 18 \\textsf{or} 19",
                 "#### 18 ⋁ 19", "The answer is 18 ⋁ 19",
                 # and variants of this project's own
                 "#### 18 ou 19", "#### 18 或 19", "#### 18 or nineteen", "#### 18 (maybe １９)", "#### 18 or ¹⁹",
                 "#### 18 – nah, 19", "#### 18 (alternatively: 19)", "#### 18 ⁄ 19", "#### 18 \\text{or} \\; 19",
                 "\\boxed{18} or 19", "\\boxed{18}, though 19 is possible", "\\boxed{18} \\boxed{19}",
                 "The answer is \\boxed{19} or \\boxed{18}", "#### 18 or ١٩", "#### 18\nor maybe 19",
                 "The answer is 18, and Tom keeps 3", "The answer is 18. 19 was wrong.", "#### 18 (since 6 + 12 = 18)"]
LETTER_HEDGES = ["\\boxed{B \\vee C}", "\\boxed{B \\cup C}", "\\boxed{B~or~C}", "\\boxed{B\\,\\text{or}\\,C}",
                 "\\boxed{B (or C)}", "\\boxed{B + C}", "\\boxed{B or, if not, C}", "\\boxed{B\x00}", "Answer: B\x00",
                 "\\boxed{B\ud800}", "Answer: B\ud800", "\\boxed{B \\lor C}", "\\boxed{B \\wedge C}",
                 "\\boxed{B \\land C}", "\\boxed{B ∨ C}", "\\boxed{B ∪ C}", "\\boxed{B \\mathrm{ or } C}",
                 "\\boxed{B \\text{ OR } C}", "Answer: B – C", "Answer: B — or C", "Answer: B - C",
                 "The answer is B vs C", "Answer: B or possibly C", "\\boxed{B \\textrm{or} C}",
                 "\\boxed{B\\;\\text{or}\\;C}", "Answer: B (or maybe C)", "\\boxed{B \\cap C}", "Answer: B\x07",
                 "Answer: B\u200e", "Answer: (B)\x00", "\\boxed{B\\quad or\\quad C}", "Answer: B\u00a0or\u00a0C",
                 # issue 47
                 "Answer: B、C", "Answer: (B) (C)", "Answer: B unless C", "\\boxed{B、C}", "\\boxed{B unless C}",
                 # variants
                 "Answer: B oder C", "\\boxed{B}, or maybe C", "Answer: B (C if not)", "Answer: B or Ｃ",
                 "Answer: B; otherwise D", "\\boxed{B} \\boxed{C}", "The answer is \\boxed{C} or \\boxed{B}",
                 "Answer: B, because C is wrong", "Answer: B\nor C"]


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
                                  "The answer is 18 (the eggs sold).", "The answer is 18, and Tom keeps some",
                                  "#### 18 dollars or so", "#### 18\t", "#### 18\r\n", "#### 18 to the store",
                                  "The answer is 18.\n19 was wrong.", "#### 18 (since she sells the rest)",
                                  "\\boxed{18}\n\n19 is not it", "#### 18 \n19", "\\boxed{18}.", "$\\boxed{18}$.",
                                  "#### 18!", "#### 18\n\nQuestion: what is 19 - 1?"])
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
        for text in ("\\boxed{B}", "Answer: B", "\\boxed{B. river}", "Answer: B, because the river is near",
                     "The answer is (B) (the river)", "Answer: B\n\nC is wrong", "\\boxed{\\text{B}}",
                     "$\\boxed{B}$.", "\\boxed{B}\nC was close"):
            assert task.is_correct(text, ex), (task.name, text)


def test_hedged_by_hand():
    number = re.compile(r"\d")
    assert hedged("18 ± 1", 2, number) and hedged("18 \\cup 1", 2, number) and hedged("18 (or 19)", 2, number)
    assert hedged("18 19", 2, number) and hedged("18 whatever 19", 2, number) and hedged("18 \\boxed{x}", 2, number)
    assert not hedged("18\n19", 2, number) and hedged("18\n or 19", 2, number)  # a lower-case line continues
    assert hedged("18\x00", 2, number) and hedged("18 \ud800", 2, number) and not hedged("18\n", 2, number)
    assert not hedged("18 or Tom", 2, number) and not hedged("18.", 2, number)
    assert hedged("x \\boxed{1} or \\boxed{2}", 27, number, box_start=17)  # a box earlier on the line
    assert not hedged("\\boxed{1}\n\\boxed{2}", 19, number, box_start=10)
    assert not hedged("1" + " ," * 50_000 + "x", 1, number)  # one pass
    assert rest_of_line("18 a\nb c\nD e", 2) == " a\nb c" and rest_of_line("18", 2) == ""
    assert letter_candidate("ABC").search("x C.") and not letter_candidate("ABC").search("Cat, ABC, D")
    assert untrusted("\x00") and untrusted("\ud800") and untrusted("\u200b") and untrusted("\x1c")
    assert not untrusted("\n") and not untrusted("\t") and not untrusted(" ") and not untrusted("é")


def test_boxed_hedge_by_hand():
    for hedge in ("5\\ \\text{(or 6)}", "5 \\text{ or } 6", "5 oder 6", "5 or 6", "5 \\textsf{or} x", "5\\mbox{ or 6}"):
        assert boxed_hedge(hedge), hedge
    for single in ("\\text{(C)}", "864 \\mbox{ inches}^2", "\\frac{270}7\\text{ degrees}", "(3, \\frac{\\pi}{2})",
                   "\\text{Evelyn}", "x^2 + 2x", "10,\\!080"):
        assert not boxed_hedge(single), single


MATH_HEDGES = ["\\boxed{5\\ \\text{(or 6)}}", "\\boxed{5 \\text{ or } 6}", "\\boxed{5 oder 6}", "\\boxed{5} or 6",
               "$\\boxed{5}$, or possibly $6$", "\\boxed{5}\\text{ (or 6)}", "\\boxed{6} or \\boxed{5}",
               "\\boxed{5}\x00", "\\boxed{5} ou \\(6\\)"]


@pytest.mark.parametrize("text", MATH_HEDGES)
def test_math_hedges_score_wrong(text):
    task, ex = MathTask(path="unused"), {"id": "m", "problem": "p", "answer": "5"}
    assert task.extract_answer(text) is None and not task.is_correct(text, ex) and task.reward(text, ex) == 0.0


@pytest.mark.parametrize("text", ["<answer>3+5</answer> or 7+1", "<answer>3+5</answer>, or else 2*4",
                                  "<answer>3+5</answer>\x00", "<answer>3+5</answer> (or 2*4)"])
def test_countdown_hedges_score_wrong(text):
    task = Countdown()
    ex = {"numbers": [3, 5], "target": 8}
    assert task.extract_answer(text) is None and not task.is_correct(text, ex)
    assert task.is_correct("<answer>3+5</answer>", ex) and task.is_correct("<answer>3+5</answer>.\nDone in 2 s", ex)


def _rows(name, split="test"):
    path = REPO.parent / "shared" / "data" / name / f"{split}.jsonl"
    if not path.is_file():
        pytest.skip(f"{path} is not here")
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_every_gsm8k_gold_solution_stays_correct():
    task = GSM8K(path="unused")
    for split in ("test", "train"):
        rows = _rows("gsm8k", split)
        wrong = [r["answer"][-60:] for r in rows
                 if not task.is_correct(r["answer"], {"answer": r["answer"].rsplit("####", 1)[1].strip()})]
        assert wrong == [], (split, len(wrong), wrong[:3])


def test_every_math500_gold_answer_stays_correct():
    task = MathTask(path="unused")
    frames = ("\\boxed{{{}}}", "The answer is $\\boxed{{{}}}$.", "So $x = \\boxed{{{}}}$.\n\nCheck: 1 + 1 = 2")
    wrong = [(frame, r["answer"]) for r in _rows("math500") for frame in frames
             if task.extract_answer(frame.format(r["answer"])) != r["answer"].strip()]
    assert wrong == []
