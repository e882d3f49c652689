"""Fuzzing: no verifier of any task ever raises or stalls, whatever the completion, and rewards stay in tier.

`test_adversarial_corpus` runs every verifier of every task on the same 10,000 adversarial strings (fixed seed:
random unicode, huge repeats of "#### " / "answer is" / "\\boxed{", deep nesting, exponent towers, long digit
strings, backslash runs, ...), timing each call; it prints, per task, the calls, the max and the p99 ms.
"""

from __future__ import annotations

import random
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import esreason_lib.tasks.artifact_grading as ag
import esreason_lib.tasks.math_task as mt
from esreason_lib.tasks import TASK_NAMES, get_task
from esreason_lib.tasks.countdown import Countdown, evaluate_expression, solve
from esreason_lib.tasks.gsm8k import extract_number, normalize_number

EXAMPLES = {
    "countdown": {"id": "c", "numbers": [3, 12, 7], "target": 22},
    "addition": {"id": "a", "a": 347, "b": 86},
    "sorting": {"id": "s", "digits": "53819"},
    "multistep": {"id": "ms", "expression": "48 + 27 - 19", "answer": 56},
    "gsm8k": {"id": "g", "question": "q", "answer": "18", "solution": "#### 18"},
    "math": {"id": "m", "problem": "p", "answer": "\\frac{1}{2}"},
    "commonsenseqa": {"id": "q", "question": "q", "choices": [[k, k.lower()] for k in "ABCDE"], "answer": "B"},
    "gpqa": {"id": "p", "question": "q", "choices": [[k, k.lower()] for k in "ABCD"], "answer": "C"},
    "hotpotqa": {"id": "h", "question": "q", "answer": "the 18 apples"},
    # "pi" occurs in about 20 distinct corpus strings that compile: the sandbox runs them (and times out on none)
    "mbpp": {"id": "b", "text": "t", "code": "def pi():\n    return 3", "test_list": ["assert pi() == 3"],
             "test_setup_code": "", "entry_points": ["pi"]},
}
MATH_TIMEOUT_S = MBPP_TIMEOUT_S = ARTIFACT_TIMEOUT_S = 2.0
TIMEOUTS = {"math": MATH_TIMEOUT_S, "mbpp": MBPP_TIMEOUT_S}
TASKS = {name: get_task(name, **({"timeout_s": TIMEOUTS[name]} if name in TIMEOUTS else {})) for name in TASK_NAMES}
PROTOCOLS = {"gsm8k-artifact": get_task("gsm8k", protocol="artifact"),
             "countdown-tinyzero": get_task("countdown", protocol="tinyzero")}
"""The artifact grading protocols, fuzzed like the tasks (`EXAMPLES` by the task name before the "-")."""
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
    assert task.score(text, example) == (task.reward(text, example), correct)  # one verification, same verdict


@pytest.mark.parametrize("name", [n for n in TASK_NAMES if n != "math"] + ["countdown-tinyzero"])
@FAST
@given(text=anything)
def test_verifiers_never_raise(name, text):
    _check_total((TASKS | PROTOCOLS)[name], text, EXAMPLES[name.split("-")[0]])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=anything)
def test_artifact_gsm8k_never_raises(text):  # fewer examples: each evaluation is a math-verify worker call
    _check_total(PROTOCOLS["gsm8k-artifact"], text, EXAMPLES["gsm8k"])


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


@pytest.mark.parametrize("name", TASK_NAMES + tuple(PROTOCOLS))
def test_non_string_completions(name):
    task, ex = (TASKS | PROTOCOLS)[name], EXAMPLES[name.split("-")[0]]
    for junk in (None, 12, b"bytes", ["x"], float("nan")):
        assert task.reward(junk, ex) == 0.0 and not task.is_correct(junk, ex) and task.score(junk, ex) == (0.0, False)


CORPUS_SIZE, CORPUS_SEED = 10_000, 0
PER_CALL_LIMIT_S = {name: 2.0 for name in TASK_NAMES + tuple(PROTOCOLS)} | {
    "math": MATH_TIMEOUT_S + 10.0, "mbpp": MBPP_TIMEOUT_S + 5.0, "gsm8k-artifact": ARTIFACT_TIMEOUT_S + 10.0}
"""Bound on one verifier call (generous for a loaded 2-core machine); MATH's and the GSM8K artifact protocol's
allow one worker restart, MBPP's a sandbox start and kill."""
ARTIFACT_CORPUS = 400
"""The GSM8K artifact protocol runs math-verify (in its worker) on every string: only this prefix of the corpus
(issue strings included) is timed for it."""
PER_TASK_LIMIT_S = 60.0
"""Bound on one task's whole corpus (5 calls per string); measured 1-4 s per task, 11-17 s for MATH, under load."""
PIECES = ["<answer>", "</answer>", "\\boxed{", "\\boxed ", "\\fbox{", "}", "{", "####", "#### ", "$", "\\$", "=",
          ">", "\n", "(", ")", "+", "-", "*", "/", "**", "^", "^{", "3", "7", "12", "18", "0", ",", ".", " ", "e5", "%",
          "The answer is", "the answer is: ", "\\frac{", "\\sqrt{", "\\int", "\\sum", "\\left(", "\\right)", "x",
          "\\", "\\text{ apples}", "1,800", "0.5", "\\pi", "!", "_", "\\!", "\\,"]


def _huge(rng: random.Random) -> int:
    """A repeat count: mostly small, sometimes huge (a completion of about 100,000 characters)."""
    return rng.choice((1, 2, 10, 40, 300)) if rng.random() < 0.97 else rng.choice((5_000, 25_000))


def _length(rng: random.Random) -> int:
    """A string length: mostly short, sometimes huge."""
    return rng.choice((3, 20, 65, 300)) if rng.random() < 0.97 else rng.choice((5_000, 100_000))


def adversarial(rng: random.Random) -> str:
    """One adversarial completion (see the module docstring)."""
    kind = rng.randrange(10)
    if kind == 0:  # random unicode, control characters and astral planes included
        return "".join(chr(rng.choice((rng.randrange(32, 127), rng.randrange(0, 32), rng.randrange(0x80, 0x3000),
                                       rng.randrange(0x1F300, 0x1FAFF)))) for _ in range(rng.randrange(300)))
    if kind == 1:  # huge repeats of the extraction markers
        unit = rng.choice(("#### ", "####", "answer is ", "the answer is", " ", "\\boxed{", "<answer>", "1,"))
        return rng.choice(("", "x", "18 ")) + unit * _huge(rng) + rng.choice(("", "x", "18", " 18e5"))
    if kind == 2:  # deep \boxed nesting, closed, half closed or open
        depth = _huge(rng)
        inner = rng.choice(("18", "1/2", "x", "", "10^{10}"))
        return "\\boxed{" * depth + inner + "}" * rng.choice((0, depth, depth // 2))
    if kind == 3:  # exponent towers
        base, height = rng.choice(("10", "2", "x", "9", "e")), rng.choice((1, 2, 3, 4, 8, 50))
        tower = base + "".join("^{" + base for _ in range(height)) + "}" * height
        return rng.choice(("\\boxed{%s}", "#### %s", "<answer>%s</answer>", "the answer is %s")) % tower
    if kind == 4:  # long digit strings with commas and points
        digits = "".join(rng.choices("0123456789,.", weights=[5] * 10 + [1, 1], k=_length(rng)))
        return rng.choice(("\\boxed{%s}", "#### %s", "%s", "<answer>%s</answer>", "x=%s", "the answer is %s")) % digits
    if kind == 5:  # backslash runs and LaTeX commands
        return "".join(rng.choices(("\\", "\\\\", "\\frac", "\\boxed", "{", "}", "\\left", "\\right", "^", "_", "1"),
                                   k=rng.randrange(1, 200)))
    if kind == 6:  # boxed answers that look like math
        return "\\boxed{" + "".join(rng.choices(PIECES[14:], k=rng.randrange(1, 12))) + "}"
    if kind == 7:  # answer tags around arithmetic (the synthetic tasks' format)
        return "<answer>" + "".join(rng.choices("0123456789+-*/() ", k=rng.randrange(60))) + "</answer>"
    return "".join(rng.choices(PIECES, k=rng.randrange(40)))  # any mix of the pieces


ISSUE_STRINGS = ["answer is" + " " * 800 + "x", "answer is" + " " * 1_800 + "x", "#### " + " " * 99_991 + "x",
                 "\\boxed{10^{10^{10^{10}}}}", "\\boxed{\\int_0^\\infty e^{-x^2}\\,dx}", "#### 18e5", "#### 1,8",
                 "\\boxed{18^{2}}", "\\boxed{0.50000001}", "\\boxed{a=1/2}"]
"""The strings issue 14 reports as stalls or false positives."""


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    rng = random.Random(CORPUS_SEED)
    return ISSUE_STRINGS + [adversarial(rng) for _ in range(CORPUS_SIZE)]


@pytest.mark.parametrize("name", TASK_NAMES + tuple(PROTOCOLS))
def test_adversarial_corpus(name, corpus, monkeypatch):
    task, example = (TASKS | PROTOCOLS)[name], EXAMPLES[name.split("-")[0]]
    shaping, worker = task.shaping, ag._WORKER if name == "gsm8k-artifact" else mt._WORKER
    if name == "math":
        assert mt.math_equal("\\frac{1}{2}", "2^{-1}", 60.0)  # start the worker outside the timed calls
    if name == "gsm8k-artifact":
        monkeypatch.setattr(ag, "WORKER_TIMEOUT_S", ARTIFACT_TIMEOUT_S)
        assert ag.gsm8k_correct("\\boxed{18}", "18", 60.0)  # start the worker outside the timed calls
        corpus = corpus[:ARTIFACT_CORPUS]
    checks, restarts = worker.checks, worker.restarts
    seconds = []
    t_task = time.perf_counter()
    for text in corpus:
        t0 = time.perf_counter()
        extracted = task.extract_answer(text)
        t1 = time.perf_counter()
        correct = task.is_correct(text, example)
        t2 = time.perf_counter()
        formed = task.is_well_formed(text, example)
        t3 = time.perf_counter()
        key = task.canonical_answer(text, example)
        t4 = time.perf_counter()
        reward = task.reward(text, example)
        t5 = time.perf_counter()
        seconds += [t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4]
        assert extracted is None or isinstance(extracted, str)
        assert isinstance(correct, bool) and isinstance(formed, bool) and (key is None or isinstance(key, str))
        assert reward in (shaping.correct, shaping.formatted, shaping.invalid)
        assert max(seconds[-5:]) < PER_CALL_LIMIT_S[name], (name, text[:200])
    total = time.perf_counter() - t_task
    ms = np.array(seconds) * 1e3
    print(f"\nfuzz {name}: {ms.size} calls on {len(corpus)} strings, max {ms.max():.1f} ms, "
          f"p99 {np.percentile(ms, 99):.3f} ms, total {total:.1f} s, worker checks {worker.checks - checks}, "
          f"restarts {worker.restarts - restarts}")
    assert ms.size >= 5 * min(len(corpus), CORPUS_SIZE) and total < PER_TASK_LIMIT_S
