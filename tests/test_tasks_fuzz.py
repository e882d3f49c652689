"""Property tests: no verifier of any task ever raises, whatever the completion, and rewards stay in tier."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from esreason_lib.tasks import TASK_NAMES, get_task
from esreason_lib.tasks.countdown import Countdown, evaluate_expression, solve
from esreason_lib.tasks.gsm8k import extract_number, normalize_number
from esreason_lib.tasks.math_task import last_boxed

EXAMPLES = {
    "countdown": {"id": "c", "numbers": [3, 12, 7], "target": 22},
    "addition": {"id": "a", "a": 347, "b": 86},
    "sorting": {"id": "s", "digits": "53819"},
    "gsm8k": {"id": "g", "question": "q", "answer": "18", "solution": "#### 18"},
    "math": {"id": "m", "problem": "p", "answer": "\\frac{1}{2}"},
}
TASKS = {name: get_task(name, **({"timeout_s": 2.0} if name == "math" else {})) for name in TASK_NAMES}
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

pieces = st.sampled_from(["<answer>", "</answer>", "\\boxed{", "}", "{", "\\fbox", "####", "$", "=", ">", "\n",
                          "(", ")", "+", "-", "*", "/", "**", "3", "7", "12", "0", ",", ".", " ", "The answer is"])
tricky = st.lists(st.one_of(pieces, st.text(max_size=6)), max_size=25).map("".join)
anything = st.one_of(st.text(max_size=300), tricky)


def _check_total(task, text, example):
    shaping = task.shaping
    extracted = task.extract_answer(text)
    assert extracted is None or isinstance(extracted, str)
    correct, formed = task.is_correct(text, example), task.is_well_formed(text, example)
    assert isinstance(correct, bool) and isinstance(formed, bool) and (formed or not correct)
    key = task.canonical_answer(text, example)
    assert key is None or isinstance(key, str)
    assert task.reward(text, example) in (shaping.correct, shaping.formatted, shaping.invalid)


@pytest.mark.parametrize("name", [n for n in TASK_NAMES if n != "math"])
@FAST
@given(text=anything)
def test_verifiers_never_raise(name, text):
    _check_total(TASKS[name], text, EXAMPLES[name])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=anything)
def test_math_verifier_never_raises(text):
    _check_total(TASKS["math"], text, EXAMPLES["math"])
    assert last_boxed(text) is None or isinstance(last_boxed(text), str)


@FAST
@given(text=st.text(alphabet="0123456789+-*/() ", max_size=60))
def test_expression_parser_total_and_exact(text):
    value = evaluate_expression(text)
    if value is not None:
        assert value.denominator >= 1
        assert TASKS["countdown"].is_well_formed(text, EXAMPLES["countdown"])


@FAST
@given(text=st.text(max_size=80))
def test_number_helpers_never_raise(text):
    for out in (normalize_number(text), extract_number(text)):
        assert out is None or isinstance(out, str)


@settings(max_examples=40, deadline=None)
@given(nums=st.lists(st.integers(1, 15), min_size=3, max_size=3), seed=st.integers(0, 10**6))
def test_solver_solutions_verify(nums, seed):
    task = Countdown()
    rng = np.random.default_rng(seed)
    for target in rng.integers(1, 60, size=3):
        example = {"id": "x", "numbers": nums, "target": int(target)}
        for s in solve(nums, int(target)):
            assert task.is_correct(s, example) and task.canonical_answer(s, example) == s


@pytest.mark.parametrize("name", TASK_NAMES)
def test_non_string_completions(name):
    task, ex = TASKS[name], EXAMPLES[name]
    for junk in (None, 12, b"bytes", ["x"], float("nan")):
        assert task.reward(junk, ex) == 0.0 and not task.is_correct(junk, ex)
