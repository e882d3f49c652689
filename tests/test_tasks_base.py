import re

import pytest

from esreason_lib.tasks._hedge import hedged
from esreason_lib.tasks.base import check_seconds, total


def test_total_returns_the_default_instead_of_raising():
    @total(None)
    def first_char(text):
        """doc kept"""
        return text[0]

    assert first_char("ab") == "a"
    assert first_char("") is None  # IndexError inside
    assert first_char(None) is None  # TypeError inside
    assert first_char.__doc__ == "doc kept" and first_char.__name__ == "first_char"

    class Verifier:
        @total(False)
        def is_correct(self, completion, example):
            return int(completion) == example["answer"]

    v = Verifier()
    assert v.is_correct("3", {"answer": 3}) is True
    assert v.is_correct("x" * 10_000, {"answer": 3}) is False
    assert v.is_correct("3", {}) is False  # a malformed example too


def test_total_does_not_swallow_interrupts():
    @total(False)
    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        interrupted()


def test_file_task_reads_each_split_once_and_shuffles_by_seed():
    from esreason_lib.tasks._common import FileTask

    class Rows(FileTask):
        name = "rows"
        reads = 0

        def _read(self, split):
            Rows.reads += 1
            return [{"id": f"{split}-{i}", "q": i} for i in range(10)]

        def prompt(self, example, tokenizer=None):
            return str(example["q"])

        def extract_answer(self, completion):
            return completion

        def is_correct(self, completion, example):
            return completion == str(example["q"])

    task = Rows(path="unused.jsonl")
    first = task.examples("train", n=4, seed=1)
    assert len(first) == 4 and task.examples("train", n=4, seed=1) == first and Rows.reads == 1
    assert sorted(e["id"] for e in task.examples("train", seed=2)) == sorted(f"train-{i}" for i in range(10))
    task.examples("test")
    assert Rows.reads == 2 and task.path == "unused.jsonl"
    with pytest.raises(ValueError, match="split"):
        task.examples("valid")


def test_hedged_finds_a_second_candidate_on_the_answers_line():
    number = re.compile(r"\d")
    assert hedged("18 or 19", 2, number) and hedged("18, 19", 2, number) and hedged("18 and 20", 2, number)
    assert hedged("18/19", 2, number) and hedged("18 to 20", 2, number) and hedged("18 \\text{ or } 19", 2, number)
    assert hedged("18, and Tom had 3", 2, number) and hedged("18. 19", 2, number)  # whatever stands between
    assert not hedged("18 dollars", 2, number) and not hedged("18", 2, number) and not hedged("18.\n19", 2, number)
    assert not hedged("1" + " ," * 50_000 + "x", 1, number)  # one pass over the line


def test_check_seconds_names_the_field_and_value():
    assert check_seconds(5, "timeout_s", 60) == 5.0 and check_seconds(60, "timeout_s", 60) == 60.0
    for bad in (0, -1, 61, float("inf"), float("nan"), True, "5", None):
        with pytest.raises(ValueError, match=r"^timeout_s must be a number of seconds in \(0, 60\], got "):
            check_seconds(bad, "timeout_s", 60)
