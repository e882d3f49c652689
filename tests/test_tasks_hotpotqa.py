"""HotpotQA: loader, SQuAD normalisation, exact match and token F1 on hand-computed cases, answer extraction.
Data files are written here in the dataset's layout; the hub is never read."""

from __future__ import annotations

import json
import re

import pytest

from esreason_lib.tasks import HotpotQA, get_task
from esreason_lib.tasks.hotpotqa import exact_match, extract_short_answer, normalize_answer, token_f1

ROWS = [{"id": "5a8b57f25542995d1e6f1371", "question": "Were Scott Derrickson and Ed Wood of the same nationality?",
         "answer": "yes", "type": "comparison", "level": "hard"},
        {"id": "5a8c7595554299585d9e36b6", "question": "What government position was held by the woman who "
         "portrayed Corliss Archer in the film Kiss and Tell?", "answer": "Chief of Protocol", "type": "bridge",
         "level": "hard"},
        {"question": "Which city is the capital of France?", "answer": "Paris"}]


@pytest.fixture
def task(tmp_path):
    path = tmp_path / "hotpot.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return HotpotQA(path=path)


def test_loader_keeps_ids_and_metadata(task):
    exs = {e["question"][:5]: e for e in task.examples("test")}
    assert exs["Were "]["id"] == "5a8b57f25542995d1e6f1371" and exs["Were "]["type"] == "comparison"
    assert exs["Which"]["id"] == "hotpotqa-test-2" and "type" not in exs["Which"]  # no id in the row: its index
    assert task.examples("test", n=2, seed=3) == task.examples("test", n=2, seed=3)


def test_loader_errors_and_data_root(tmp_path, monkeypatch):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(ROWS[0]) + "\n" + json.dumps({"question": "q", "answer": 3}) + "\n")
    with pytest.raises(ValueError, match=re.escape(f"{bad}, line 2: field 'answer' must be str, got int")):
        HotpotQA(path=bad).examples("test")
    (tmp_path / "hotpotqa").mkdir()
    (tmp_path / "hotpotqa" / "train.jsonl").write_text(json.dumps(ROWS[2]) + "\n")
    monkeypatch.setenv("ESREASON_DATA", str(tmp_path))
    assert get_task("hotpotqa").examples("train")[0]["answer"] == "Paris"


@pytest.mark.parametrize("text, want", [
    ("The Eiffel Tower!", "eiffel tower"), ("  A  cat, an  owl and THE dog. ", "cat owl and dog"),
    ("Theater", "theater"), ("1,000", "1000"), ("", ""),
])
def test_normalize_answer(text, want):
    assert normalize_answer(text) == want


def test_exact_match_and_f1_by_hand():
    assert exact_match("the Chief of Protocol.", "Chief of Protocol") and not exact_match("Chief", "Chief of Protocol")
    # pred "chief protocol officer" vs gold "chief of protocol": common {chief, protocol} = 2;
    # precision 2/3, recall 2/3, F1 2/3
    assert token_f1("Chief protocol officer", "Chief of Protocol") == pytest.approx(2 / 3)
    # pred "paris" vs gold "paris france": precision 1, recall 1/2, F1 2/3
    assert token_f1("Paris", "Paris, France") == pytest.approx(2 / 3)
    assert token_f1("the Paris", "Paris") == 1.0 and token_f1("London", "Paris") == 0.0
    assert token_f1("yes it is", "yes") == 0.0 and token_f1("no", "no") == 1.0  # HotpotQA's yes/no rule
    assert token_f1(None, "x") == 0.0 and not exact_match(3, "3")


@pytest.mark.parametrize("text, want", [
    ("... so \\boxed{Chief of Protocol}", "Chief of Protocol"), ("\\boxed{\\text{Paris}}", "Paris"),
    ("The answer is Paris.\nMore text", "Paris"), ("Answer: **yes**", "yes"), ("answer is: 1990s", "1990s"),
    ("\\boxed{}\nthe answer is Lyon", "Lyon"), ("I am not sure", None), ("Answer:   \n", None), (None, None),
])
def test_extraction(text, want):
    assert extract_short_answer(text) == want


def test_verifier_and_reward(task):
    ex = next(e for e in task.examples("test") if e["answer"] == "Chief of Protocol")
    assert task.is_correct("She was \\boxed{the chief of protocol}", ex)
    assert not task.is_correct("\\boxed{Chief of Protocol of the United States}", ex)
    assert task.f1("\\boxed{Chief of Protocol of the United States}", ex) == pytest.approx(2 * 0.5 * 1 / 1.5)
    assert task.f1("no answer given", ex) == 0.0
    assert task.reward("\\boxed{chief of protocol}", ex) == 1.0
    assert task.reward("\\boxed{ambassador}", ex) == pytest.approx(0.1) and task.reward("hmm", ex) == 0.0
    plain = task.prompt(ex)
    assert plain.startswith("Question: What") and plain.endswith("yes or no) in \\boxed{}.\nAnswer:")
