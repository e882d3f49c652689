"""GSM8K: loader, gold answers, extraction order, number normalisation and reward tiers."""

from __future__ import annotations

import json
import re

import pytest

from esreason_lib.tasks import get_task
from esreason_lib.tasks.gsm8k import GSM8K, extract_number, normalize_number


@pytest.fixture
def gsm_test(shared_data):
    return GSM8K(path=shared_data / "gsm8k" / "test.jsonl")


def test_every_gold_solution_scores_correct_and_a_changed_number_wrong(gsm_test):
    exs = gsm_test.examples("test")
    assert len(exs) == 1319 and len({e["id"] for e in exs}) == 1319
    for e in exs:
        assert gsm_test.is_correct(e["solution"], e), e["id"]
        assert gsm_test.reward(e["solution"], e) == 1.0
        changed = re.sub(r"####.*$", f"#### {int(e['answer']) + 1}", e["solution"])
        assert not gsm_test.is_correct(changed, e) and gsm_test.reward(changed, e) == pytest.approx(0.1), e["id"]


def test_loader_ids_order_and_sources(shared_data, monkeypatch):
    by_dir = GSM8K(path=shared_data / "gsm8k")
    first = by_dir.examples("test", n=5, seed=0)
    assert first == by_dir.examples("test", n=5, seed=0) and first != by_dir.examples("test", n=5, seed=1)
    assert all(re.fullmatch(r"gsm8k-test-\d+", e["id"]) for e in first)
    row0 = next(e for e in by_dir.examples("test") if e["id"] == "gsm8k-test-0")
    assert row0["answer"] == "18" and row0["question"].startswith("Janet")
    assert len(by_dir.examples("train")) == 7473
    monkeypatch.setenv("ESREASON_DATA", str(shared_data))
    assert get_task("gsm8k").examples("test", n=3) == by_dir.examples("test", n=3)
    with pytest.raises(ValueError, match="split"):
        by_dir.examples("dev")


def test_loader_errors(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError):
        GSM8K(path=tmp_path / "nope.jsonl").examples("test")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "q", "answer": "no final line"}) + "\n")
    with pytest.raises(ValueError, match="####"):
        GSM8K(path=bad).examples("test")
    import sys

    monkeypatch.setenv("ESREASON_DATA", str(tmp_path))  # a root without gsm8k/ -> hub -> datasets missing
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(ImportError, match="hub"):
        GSM8K().examples("test")


@pytest.mark.parametrize(
    "text,want",
    [("18", "18"), ("18.00", "18"), ("$1,000", "1000"), ("7.", "7"), ("-3", "-3"), ("0.50", "0.5"), ("-0", "0"),
     ("1,234,567.0", "1234567"), ("abc", None), ("", None), (".5", "0.5"), ("NaN", None), ("inf", None),
     ("1" * 70, None), (None, None), ("123456789012345678901234567890123", "123456789012345678901234567890123")],
)
def test_normalize_number(text, want):
    assert normalize_number(text) == want


@pytest.mark.parametrize(
    "text,want",
    [("so 3 + 4 = 7\n#### 7", "7"), ("#### $1,200.", "1200"), ("#### 5 then \\boxed{6}", "5"),
     ("x = 4, \\boxed{\\$18.00} and 99", "18"), ("\\boxed{12 \\text{ apples}}", "12"),
     ("The answer is: $42. Then 7 more", "42"), ("the Answer is 3", "3"), ("I got 3, then 5 and finally 8.", "8"),
     ("no numbers here", None), ("", None), ("####", None), ("\\boxed{x} 12", "12")],
)
def test_extraction_order(text, want):
    assert extract_number(text) == want
    assert GSM8K(path="unused").extract_answer(text) == want


def test_reward_tiers_and_prompts(chat_tok):
    task = GSM8K(path="unused")
    ex = {"id": "gsm8k-test-0", "question": "How many?", "answer": "18", "solution": "... #### 18"}
    assert [task.reward(c, ex) for c in ("#### 18", "The answer is 18.00", "\\boxed{17}", "none")] == [1, 1, 0.1, 0]
    assert task.is_well_formed("it is 3", ex) and not task.is_well_formed("none", ex)
    assert task.canonical_answer("\\boxed{1,000}", ex) == "1000"
    assert not task.is_correct(None, ex) and task.reward(12345, ex) == 0.0
    plain = task.prompt(ex)
    assert plain.startswith("Question: How many?") and "####" in plain and plain.endswith("Answer:")

    chat = task.prompt(ex, chat_tok)
    assert chat.startswith("<|user|>How many?") and "\\boxed{}" in chat
