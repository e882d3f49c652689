"""Addition and sorting (held-out synthetic tasks) and the shared helpers in tasks/_common."""

from __future__ import annotations

import json

import numpy as np
import pytest

from esreason_lib.tasks import BINARY, get_task
from esreason_lib.tasks._common import (
    answer_span,
    check_fraction,
    check_split,
    data_root,
    dataset_rows,
    has_chat_template,
    hub_rows,
    local_file,
    read_jsonl,
    render_prompt,
    sample_distinct,
    shuffled_prefix,
    split_of,
)
from esreason_lib.tasks.addition import Addition
from esreason_lib.tasks.sorting import Sorting


# ------------------------------------------------------------------------------------------------ addition
def test_addition_examples_prompt_and_demo(chat_tok):
    task = get_task("addition")
    assert isinstance(task, Addition)
    exs = task.examples("test", n=100)
    assert exs == task.examples("test", n=100) and len({e["id"] for e in exs}) == 100
    assert task.examples("test", n=10, seed=3) != exs[:10]
    assert task.digits == 2 and task.prompt({"id": "addition-47-6", "a": 47, "b": 6}) == "A47+06="
    ex = {"id": "addition-347-86", "a": 347, "b": 86}
    assert Addition(digits=3).prompt(ex) == "A347+086=" and task.demonstration(ex) == "433"
    assert len({len(task.prompt(e)) for e in exs}) == 1
    assert all(task.reward(task.demonstration(e, np.random.default_rng(0)), e) == 1.0 for e in exs)
    assert Addition(digits=5).prompt({"a": 1, "b": 2}) == "A00001+00002="
    chat = task.prompt(ex, chat_tok)
    assert chat.startswith("<|user|>") and "347 + 86" in chat and "<answer>" in chat
    assert len(task.examples("train")) == 5000 and task.max_new_tokens == task.digits + 3 == 5 and task.stop is None


def test_addition_disjoint_splits():
    task = Addition(digits=2)
    key = lambda e: (min(e["a"], e["b"]), max(e["a"], e["b"]))  # noqa: E731
    test = {key(e) for e in task.examples("test", n=300)}
    train = {key(e) for e in task.examples("train", n=3000)}
    assert not (test & train)


def test_addition_extract_and_reward_tiers():
    task = Addition()
    ex = {"id": "a", "a": 347, "b": 86}
    assert task.extract_answer("433") == "433" and task.extract_answer("0433\nxyz") == "433"
    assert task.extract_answer("6+7=13;=433") == "433" and task.extract_answer("<answer> 433 </answer>") == "433"
    for none in ["", "abc", "-433", "4 33", "4.3", "1" * 21, "433=", "\u0664\u0663\u0663", None]:
        assert task.extract_answer(none) is None, none
    assert task.is_correct("433", ex) and task.is_correct("<answer>433</answer>", ex)
    assert [task.reward(c, ex) for c in ("433", "434", "x")] == [1.0, 0.1, 0.0]
    assert Addition(shaping=BINARY).reward("434", ex) == 0.0
    assert task.canonical_answer("0433", ex) == "433"
    assert task.is_well_formed("12", ex) and not task.is_well_formed("", ex)
    assert not task.is_correct("433", {"id": "broken"})


def test_addition_validation():
    for kwargs in ({"digits": 0}, {"digits": 10}, {"test_fraction": 0.0}):
        with pytest.raises(ValueError):
            Addition(**kwargs)


# ------------------------------------------------------------------------------------------------- sorting
def test_sorting_examples_prompt_and_demo(chat_tok):
    task = get_task("sorting", length=4)
    assert isinstance(task, Sorting)
    ex = {"id": "sorting-5381", "digits": "5381"}
    assert task.prompt(ex) == "S5381>" and task.demonstration(ex) == "1358"
    exs = task.examples("test", n=100, seed=2)
    assert exs == task.examples("test", n=100, seed=2) and len({e["digits"] for e in exs}) == 100
    assert all(len(e["digits"]) == 4 and task.reward(task.demonstration(e), e) == 1.0 for e in exs)
    test = {e["digits"] for e in task.examples("test", n=300)}
    train = {e["digits"] for e in task.examples("train", n=3000)}
    assert not (test & train)
    chat = task.prompt(ex, chat_tok)
    assert "5381" in chat and "<answer>" in chat
    assert task.max_new_tokens == 6 and Sorting().length == 5


def test_sorting_extract_and_reward_tiers():
    task = Sorting(length=4)
    ex = {"id": "s", "digits": "5381"}
    assert task.extract_answer("1358") == "1358" and task.extract_answer("S5381>1358") == "1358"
    assert task.extract_answer("<answer>1358</answer>") == "1358"
    for none in ["", "1 3 5 8", "13a8", "-1", None, "9" * 65]:
        assert task.extract_answer(none) is None
    assert [task.reward(c, ex) for c in ("1358", "1385", "135", "abc")] == [1.0, 0.1, 0.1, 0.0]
    assert task.is_correct("1358", ex) and not task.is_correct("8531", ex)
    assert task.canonical_answer("1358", ex) == "1358"
    for kwargs in ({"length": 1}, {"length": 21}, {"test_fraction": 1.0}):
        with pytest.raises(ValueError):
            Sorting(**kwargs)


def test_letters_make_mixture_unambiguous():
    firsts = {name: get_task(name).prompt(get_task(name).examples("test", n=1)[0])[0] for name in
              ("countdown", "addition", "sorting")}
    assert firsts["addition"] == "A" and firsts["sorting"] == "S" and firsts["countdown"].isdigit()


# -------------------------------------------------------------------------------------------------- common
def test_check_split_fraction_and_split_of():
    assert check_split("train") == "train"
    with pytest.raises(ValueError, match="'dev'"):
        check_split("dev")
    assert check_fraction(0.25) == 0.25
    with pytest.raises(ValueError, match="test_fraction"):
        check_fraction(0)
    assigned = [split_of("t", str(i), 0.1) for i in range(5000)]
    assert assigned == [split_of("t", str(i), 0.1) for i in range(5000)]
    assert 0.07 < assigned.count("test") / 5000 < 0.13


def test_answer_span():
    assert answer_span("a\nb") == "a" and answer_span(" x ") == "x" and answer_span(None) == ""
    assert answer_span("<answer>1</answer><answer>2</answer>") == "2"
    assert answer_span("r <answer> 7 ") == "7" and answer_span("<answer></answer>") == ""


def test_render_prompt_and_chat_detection(chat_tok):
    assert not has_chat_template(None) and not has_chat_template(object()) and has_chat_template(chat_tok)

    class Empty:
        chat_template = None

    assert not has_chat_template(Empty())
    assert render_prompt("plain", "instr", None) == "plain"
    assert render_prompt("plain", "instr", chat_tok) == "<|user|>instr<|assistant|>"


def test_sample_distinct():
    def draw(rng, split):
        k = int(rng.integers(5))
        return (k, {"id": str(k)}) if k != 4 else None

    out = sample_distinct("toy", "train", 4, 0, draw)
    assert sorted(e["id"] for e in out) == ["0", "1", "2", "3"]
    assert sample_distinct("toy", "train", 2, 0, draw) == out[:2]
    assert sample_distinct("toy", "train", 0, 0, draw) == []
    with pytest.raises(ValueError, match="only 4"):
        sample_distinct("toy", "train", 5, 0, draw, max_misses=200)
    with pytest.raises(ValueError, match="n must"):
        sample_distinct("toy", "train", 1.5, 0, draw)


def test_sample_distinct_memoised_and_copied():
    calls = []

    def draw(rng, split):
        calls.append(1)
        k = int(rng.integers(1000))
        return k, {"id": str(k), "numbers": [k]}

    first = sample_distinct("toy-memo", "test", 3, 7, draw)
    n_calls = len(calls)
    first[0]["numbers"].append(-1)  # a caller mutating its copy
    again = sample_distinct("toy-memo", "test", 3, 7, draw)
    assert len(calls) == n_calls  # served from the cache: no new draws
    assert again[0]["numbers"] == [int(again[0]["id"])] and [e["id"] for e in again] == [e["id"] for e in first]
    assert sample_distinct("toy-memo", "test", 3, 8, draw) != again  # another seed is another stream


def test_data_files(tmp_path, monkeypatch):
    f = tmp_path / "train.jsonl"
    f.write_text(json.dumps({"a": 1}) + "\n\n" + json.dumps({"a": 2}) + "\n")
    assert read_jsonl(f) == [(1, {"a": 1}), (3, {"a": 2})]  # 1-based line numbers, blank lines skipped
    assert local_file(f, "x", "test") == f and local_file(tmp_path, "x", "train") == f
    with pytest.raises(FileNotFoundError, match="test.jsonl"):
        local_file(tmp_path, "x", "test")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        local_file(tmp_path / "missing", "x", "train")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "test.jsonl").write_text("{}\n")
    monkeypatch.setenv("ESREASON_DATA", str(tmp_path))
    assert data_root() == tmp_path and local_file(None, "sub", "test") == tmp_path / "sub" / "test.jsonl"
    assert local_file(None, "sub", "train") is None
    monkeypatch.delenv("ESREASON_DATA")
    root = data_root()
    assert root is None or root.name == "data"


def test_hub_rows_without_datasets(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(ValueError, match=r"`datasets` is not installed: `pip install 'datasets>=3.0'`"):
        hub_rows("openai/gsm8k", "main", "test")


def test_hub_rows_offline_is_one_line(monkeypatch):
    import sys
    import types

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (LocalEntryNotFoundError)\nmore detail")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=offline))
    with pytest.raises(ValueError) as err:
        hub_rows("openai/gsm8k", "main", "test")
    assert "\n" not in str(err.value) and "ConnectionError: Couldn't reach 'openai/gsm8k'" in str(err.value)
    assert "ESREASON_DATA" in str(err.value)
    rows = [{"question": "q", "answer": "#### 1"}, {"question": "q", "answer": None}]
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=lambda *a, **k: rows))
    monkeypatch.setenv("ESREASON_DATA", "/nonexistent")
    with pytest.raises(ValueError, match=r"openai/gsm8k split 'test', row 2: field 'answer' is null"):
        dataset_rows(None, "gsm8k", "test", "openai/gsm8k", "main", {"answer": (str,)})


def test_shuffled_prefix():
    rows = [{"i": i} for i in range(10)]
    a = shuffled_prefix(rows, None, 0, "x")
    assert sorted(r["i"] for r in a) == list(range(10)) and a != rows
    assert shuffled_prefix(rows, 3, 0, "x") == a[:3] and shuffled_prefix(rows, 3, 1, "x") != a[:3]
    with pytest.raises(ValueError):
        shuffled_prefix(rows, -2, 0)
