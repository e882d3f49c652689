"""CommonsenseQA and GPQA: loaders (both CommonsenseQA layouts, GPQA's columns), the seeded GPQA shuffle, letter
extraction and the verifier. Data files are written here in each dataset's own layout; the hub is never read."""

from __future__ import annotations

import json
import re
import sys

import pytest

from esreason_lib.tasks import GPQA, CommonsenseQA, get_task
from esreason_lib.tasks._choice import extract_letter
from esreason_lib.tasks.gpqa import shuffled_choices

OFFICIAL = {"id": "075e483d21c29a511267ef62bedc0461", "answerKey": "A",
            "question": {"question_concept": "punishing", "stem": "The sanctions against the school were a "
                         "punishing blow, and they seemed to what the efforts the school had made to change?",
                         "choices": [{"label": "A", "text": "ignore"}, {"label": "B", "text": "enforce"},
                                     {"label": "C", "text": "authoritarian"}, {"label": "D", "text": "yell at"},
                                     {"label": "E", "text": "avoid"}]}}
HUB = {"id": "1afa02df02c908a558b4036e80242fac", "question": "Where would you find magazines along side many "
       "other printed works?", "question_concept": "magazines",
       "choices": {"label": ["A", "B", "C", "D", "E"], "text": ["doctor", "bookstore", "market", "train station",
                                                                 "mortuary"]}, "answerKey": "B"}
GPQA_ROW = {"Record ID": "rec1", "Question": "Which particle mediates the electromagnetic force?",
            "Correct Answer": "photon ", "Incorrect Answer 1": "gluon", "Incorrect Answer 2": "W boson\n",
            "Incorrect Answer 3": "graviton"}


def _write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_commonsenseqa_reads_both_layouts(tmp_path):
    task = CommonsenseQA(path=_write(tmp_path / "csqa.jsonl", [OFFICIAL, HUB]))
    first, second = sorted(task.examples("test"), key=lambda e: e["id"])
    assert (first["id"], second["id"]) == ("commonsenseqa-test-0", "commonsenseqa-test-1")
    assert first["question"].startswith("The sanctions") and first["answer"] == "A"
    assert first["choices"] == [["A", "ignore"], ["B", "enforce"], ["C", "authoritarian"], ["D", "yell at"],
                                ["E", "avoid"]]
    assert second["choices"][1] == ["B", "bookstore"] and second["answer"] == "B"
    assert task.is_correct("The answer is (B).", second) and not task.is_correct("The answer is (B).", first)
    assert task.reward("\\boxed{A}", first) == 1.0 and task.reward("\\boxed{C}", first) == pytest.approx(0.1)
    assert task.reward("I think it is the bookstore", second) == 0.0


def test_commonsenseqa_prompt(tmp_path, chat_tok):
    task = CommonsenseQA(path=_write(tmp_path / "csqa.jsonl", [HUB]))
    ex = task.examples("test")[0]
    plain = task.prompt(ex)
    assert plain == ("Question: Where would you find magazines along side many other printed works?\nA. doctor\n"
                     "B. bookstore\nC. market\nD. train station\nE. mortuary\n"
                     "Answer with the letter of the correct choice in \\boxed{}.\nAnswer:")
    chat = task.prompt(ex, chat_tok)
    assert chat.startswith("<|user|>Where would you find") and "E. mortuary\n\nThink step by step" in chat
    assert chat.endswith("e.g. \\boxed{A}.<|assistant|>")


def test_commonsenseqa_local_folder_and_data_root(tmp_path, monkeypatch):
    root = tmp_path / "data"
    (root / "commonsenseqa").mkdir(parents=True)
    _write(root / "commonsenseqa" / "train.jsonl", [OFFICIAL])
    _write(root / "commonsenseqa" / "test.jsonl", [HUB, OFFICIAL])
    monkeypatch.setenv("ESREASON_DATA", str(root))
    task = get_task("commonsenseqa")
    assert len(task.examples("train")) == 1 and len(task.examples("test")) == 2
    assert task.examples("test", n=1, seed=0) == task.examples("test", n=1, seed=0)
    assert len(CommonsenseQA(path=root / "commonsenseqa").examples("test")) == 2
    with pytest.raises(ValueError, match="split must be one of"):
        task.examples("validation")


@pytest.mark.parametrize("row, message", [
    ({**HUB, "answerKey": "F"}, "line 2: the answer 'F' is not one of the labels"),
    ({**HUB, "answerKey": None}, "line 2: field 'answerKey' is null"),
    ({k: v for k, v in HUB.items() if k != "question"}, "line 2: field 'question' is missing"),
    ({**HUB, "choices": {"label": ["A", "B"], "text": ["x"]}}, "line 2: field 'choices' must be a list of"),
    ({**HUB, "choices": {"label": ["A", "A"], "text": ["x", "y"]}}, "line 2: field 'choices' must have 2 or more "
                                                                     "distinct labels"),
    ({**HUB, "choices": {"label": ["A", "B"], "text": ["x", " "]}}, "line 2: field 'choices' has choices without"),
    ({**OFFICIAL, "question": {**OFFICIAL["question"], "stem": ""}}, "line 2: field 'question.stem' must be"),
    ({**OFFICIAL, "question": {"stem": "q", "choices": [{"label": "a", "text": "x"}, {"label": "b", "text": "y"}]}},
     "line 2: field 'question.choices' must have 2 or more distinct labels from 'ABCDE'"),
    ("{oops", "line 2: not valid JSON"),
])
def test_commonsenseqa_bad_rows_name_file_line_and_field(tmp_path, row, message):
    bad = _write(tmp_path / "bad.jsonl", [OFFICIAL, row])
    with pytest.raises(ValueError, match=re.escape(f"{bad}, {message}")):
        CommonsenseQA(path=bad).examples("test")


def test_gpqa_shuffle_is_seeded_by_the_question(tmp_path):
    answers = ("right", "wrong 1", "wrong 2", "wrong 3")
    choices, gold = shuffled_choices("Q?", answers)
    assert sorted(t for _, t in choices) == sorted(answers) and [k for k, _ in choices] == list("ABCD")
    assert dict(choices)[gold] == "right"
    assert shuffled_choices("Q?", answers) == (choices, gold)  # a function of the question alone
    golds = {shuffled_choices(f"question {i}", answers)[1] for i in range(40)}
    assert golds == set("ABCD")  # the correct answer is not always in one place


def test_gpqa_loads_the_dataset_columns(tmp_path):
    other = {**GPQA_ROW, "Record ID": "rec2", "Question": "Another question?"}
    task = GPQA(path=_write(tmp_path / "gpqa.jsonl", [GPQA_ROW, other]))
    ex = next(e for e in task.examples("test") if e["id"] == "gpqa-test-0")
    assert ex["record_id"] == "rec1" and ex["question"] == GPQA_ROW["Question"]
    assert sorted(t for _, t in ex["choices"]) == ["W boson", "gluon", "graviton", "photon"]  # stripped
    assert (ex["choices"], ex["answer"]) == shuffled_choices(GPQA_ROW["Question"], ("photon", "gluon", "W boson",
                                                                                   "graviton"))
    assert dict(ex["choices"])[ex["answer"]] == "photon"
    wrong = next(k for k, t in ex["choices"] if t == "gluon")
    assert task.is_correct(f"Answer: {ex['answer']}", ex) and not task.is_correct(f"Answer: {wrong}", ex)
    assert task.reward("Answer: E", ex) == 0.0  # E is no GPQA letter: not even well-formed
    # the same file under another name, another row order: the same choice order and gold
    again = GPQA(path=_write(tmp_path / "copy.jsonl", [other, GPQA_ROW])).examples("test")
    assert next(e for e in again if e["question"] == GPQA_ROW["Question"])["choices"] == ex["choices"]


def test_gpqa_has_no_train_split_and_names_bad_fields(tmp_path, monkeypatch):
    monkeypatch.setenv("ESREASON_DATA", str(tmp_path))
    with pytest.raises(ValueError, match="GPQA-Diamond is an evaluation set: it has no 'train' split"):
        GPQA().examples("train")
    bad = _write(tmp_path / "bad.jsonl", [GPQA_ROW, {**GPQA_ROW, "Incorrect Answer 2": None}])
    with pytest.raises(ValueError, match=re.escape(f"{bad}, line 2: field 'Incorrect Answer 2' is null")):
        GPQA(path=bad).examples("test")
    bad = _write(tmp_path / "bad.jsonl", [{**GPQA_ROW, "Incorrect Answer 3": "photon"}])
    with pytest.raises(ValueError, match=re.escape(f"{bad}, line 1: fields") + ".*four different answers"):
        GPQA(path=bad).examples("test")
    monkeypatch.setitem(sys.modules, "datasets", None)  # no local file: the hub, through `datasets`
    with pytest.raises(ValueError, match="'Idavidrein/gpqa' \\(split 'train'\\).*`datasets` is not installed"):
        GPQA().examples("test")


@pytest.mark.parametrize("text, letter", [
    ("\\boxed{B}", "B"), ("so \\boxed{(C)}", "C"), ("\\boxed{\\text{D}}", "D"), ("\\boxed{B. a river}", "B"),
    ("\\boxed{ (E) mortuary }", "E"), ("The answer is (B).", "B"), ("the answer is: D", "D"), ("Answer: B", "B"),
    ("**Answer:** C", "C"), ("Final answer:\n\nA", "A"), ("The correct answer is **(A)**", "A"),
    ("The answer is B\n\\boxed{C}", "C"),  # the boxed letter wins
    ("\\boxed{42}\nAnswer: A", "A"),  # a boxed non-letter falls through to the marker
    ("answer is A. Wait, the answer is (D)", "D"),  # the last marker
    # no answer: never the last capital letter anywhere
    ("I pick B because A is wrong.", None), ("B", None), ("Answer: Bob", None), ("Answer: F", None),
    ("The answer is b", None), ("\\boxed{Banana}", None), ("Answer: B2", None), ("answers: C", None), ("", None),
    ("the answer is" + " " * 50_000 + "x", None), (None, None), (17, None),
    # hedges (issue 24): naming several letters is no answer
    ("\\boxed{B or C}", None), ("Answer: B, C", None), ("The answer is (B) or (C)", None), ("Answer: B/C", None),
    ("\\boxed{B \\text{ or } C}", None), ("Answer: B and D", None), ("\\boxed{(B), (C)}", None),
    ("Answer: B, because C is wrong", None), ("The answer is B. C is wrong.", None),  # issue 47: on its line
    ("Answer: B, because the rest is wrong", "B"), ("The answer is B.\nC is wrong.", "B"),
])
def test_extract_letter(text, letter):
    assert extract_letter(text, "ABCDE") == letter


def test_hedged_letters_score_wrong_in_both_tasks(tmp_path):
    csqa = CommonsenseQA(path=_write(tmp_path / "c.jsonl", [OFFICIAL]))
    gpqa = GPQA(path=_write(tmp_path / "g.jsonl", [GPQA_ROW]))
    for task in (csqa, gpqa):
        ex = {**task.examples("test")[0], "answer": "B"}
        assert task.is_correct("\\boxed{B}", ex) and task.is_correct("Answer: B", ex)
        for hedge in ("\\boxed{B or C}", "Answer: B, C", "\\boxed{B, C}", "The answer is B or C"):
            assert not task.is_correct(hedge, ex) and task.reward(hedge, ex) == 0.0, hedge
