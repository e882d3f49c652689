import pytest

from esreason_lib.tasks.base import total


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
