"""MATH-500: loader errors, boxed extraction, guards, math_verify equivalence in a killable worker."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext

import pytest

import esreason_lib.tasks.math_task as mt
from esreason_lib.tasks import get_task
from esreason_lib.tasks._math_worker import MathWorker, WorkerUnavailable
from esreason_lib.tasks.math_task import MathTask, last_boxed, math_equal, refusal


@pytest.fixture
def math500(shared_data):
    return MathTask(path=shared_data / "math500" / "test.jsonl")


def test_every_gold_answer_boxed_verifies(math500):
    exs = math500.examples("test")
    assert len(exs) == 500 and len({e["id"] for e in exs}) == 500
    failed = [e["id"] for e in exs if not math500.is_correct(f"So the answer is $\\boxed{{{e['answer']}}}$.", e)]
    assert len(failed) <= 5, failed  # >= 99% (none fail with math-verify 0.9)


def test_gold_answers_rewritten_verify_in_the_worker(math500):
    """Gold answers with their spaces removed are no longer identical strings: math_verify decides them."""
    golds = [e["answer"] for e in math500.examples("test") if " " in e["answer"]][:12]
    assert len(golds) == 12
    checks = mt._WORKER.checks
    assert [g for g in golds if not math_equal(g, g.replace(" ", ""), 30.0)] == []
    assert mt._WORKER.checks - checks == 12


def test_wrong_answers_score_formatted_only(math500):
    exs = [e for e in math500.examples("test", n=60, seed=0) if e["answer"].strip().isdigit()][:15]
    assert exs
    for e in exs:
        wrong = f"\\boxed{{{int(e['answer']) + 1}}}"
        assert not math500.is_correct(wrong, e) and math500.reward(wrong, e) == pytest.approx(0.1)
        assert math500.reward("I don't know", e) == 0.0


def test_loader(shared_data, monkeypatch):
    task = MathTask(path=shared_data / "math500")
    exs = task.examples("test", n=4, seed=0)
    assert exs == task.examples("test", n=4, seed=0) and exs[0]["id"].startswith("math500-test-")
    assert {"problem", "answer", "solution", "subject", "level", "unique_id"} <= set(exs[0])
    monkeypatch.setenv("ESREASON_DATA", str(shared_data))
    assert get_task("math").examples("test", n=4) == exs
    with pytest.raises(ValueError, match="no split 'train'"):
        MathTask().examples("train")
    with pytest.raises(ValueError, match="dataset"):
        MathTask(dataset="aime")
    with pytest.raises(ValueError, match="timeout_s"):
        MathTask(timeout_s=0)
    with pytest.raises(ValueError, match="split"):
        task.examples("dev")


def test_loader_errors(tmp_path):
    bad = tmp_path / "x.jsonl"
    bad.write_text('{"question": "q"}\n')
    with pytest.raises(ValueError, match=r"x\.jsonl, line 1: field 'problem' is missing"):
        MathTask(path=bad).examples("train")
    bad.write_text('{"problem": "p", "answer": "1"}\n\n{"problem": "p", "answer": null}\n')
    with pytest.raises(ValueError, match=r"x\.jsonl, line 3: field 'answer' is null"):  # was silently "None"
        MathTask(path=bad).examples("train")
    bad.write_text('{"problem": "p", "answer": [1]}\n')
    with pytest.raises(ValueError, match=r"line 1: field 'answer' must be str or int or float, got list"):
        MathTask(path=bad).examples("train")
    ok = tmp_path / "train.jsonl"
    ok.write_text('{"problem": "1+1?", "answer": 2}\n')
    ex = MathTask(path=tmp_path, dataset="deepscaler").examples("train")[0]
    assert ex == {"id": "deepscaler-train-0", "problem": "1+1?", "answer": "2"}


@pytest.mark.parametrize(
    "text,want",
    [("\\boxed{5}", "5"), ("a \\boxed{1} b \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"), ("\\boxed 5$ end", "5"),
     ("\\boxed  {x}", "x"), ("\\fbox{7}", "7"), ("\\boxed{3} then \\fbox{4}", "4"), ("\\boxed{\\{1,2\\}}", "\\{1,2\\}"),
     ("\\boxed{a{b}c}", "a{b}c"), ("\\boxed{unclosed", None), ("\\boxed{}", None), ("\\boxed", None),
     ("no box", None), (None, None), ("\\boxedx", None)],
)
def test_last_boxed(text, want):
    assert last_boxed(text) == want
    hedge = text is not None and text.count("box") > 1  # another box on the answer's line (`_hedge`)
    assert MathTask().extract_answer(text) == (None if hedge else want)


def test_math_equal():
    assert math_equal("\\frac{1}{2}", "0.5") and math_equal("\\frac{\\pi}{2}", "\\pi/2")
    assert math_equal("(3, \\frac{\\pi}{2})", "\\left( 3, \\frac{\\pi}{2} \\right)")
    assert not math_equal("2", "3") and not math_equal("2", "") and not math_equal("2", "x" * 2000)
    assert not math_equal(None, "2") and not math_equal("2", 2)


@pytest.mark.parametrize("answer", ["\\frac{1}{2}", "0.5", "1/2", "\\dfrac{1}{2}", "\\frac{2}{4}", "2^{-1}",
                                    "\\frac{1}{2} ", "0.500", ".5"])
def test_true_positives_for_one_half(answer):
    assert math_equal("\\frac{1}{2}", answer)


@pytest.mark.parametrize("answer", ["0.5000000000000001", "0.50000000000000000001", "a=1/2", "x = \\frac{1}{2}", "0.49",
                                    "2", "\\frac{1}{3}", "1/2x", "0.5000001"])
def test_no_false_positives_for_one_half(answer):
    assert not math_equal("\\frac{1}{2}", answer)


def test_float_rule_in_process_matches_the_worker():
    """The in-process path for plain numbers decides as the worker does (decimals at the stated precision)."""
    worker = mt.MathWorker()
    try:
        for gold, answer in [("\\frac{1}{3}", "0.333333"), ("\\frac{1}{3}", "0.33"), ("\\frac{1}{2}", "0.50000001"),
                             ("\\frac{1}{2}", "0.5"), ("0.25", "1/4"), ("7", "7.0"), ("\\frac{2}{3}", "0.6666667"),
                             ("-3", "-3"), ("3", "-3"), ("\\frac{1}{8}", "0.125")]:
            in_process = mt._numbers_equal(mt._plain_number(gold), mt._plain_number(answer), answer,
                                           "." in gold or "." in answer)
            assert in_process == worker.check(gold, answer, 30.0), (gold, answer)
    finally:
        worker.close()


@pytest.mark.parametrize(
    "answer,reason",
    [("10^{10^{10^{10}}}", "exponent tower"), ("2^3^4", "exponent tower"), ("x^{y}^{z}", "exponent tower"),
     ("2**3**4", "exponent tower"), ("2^{99999}", "exponent over 4 digits"), ("2^123456", "exponent over 4 digits"),
     ("\\int_0^\\infty e^{-x^2}\\,dx", "integral"), ("\\sum_{n=1}^{10} n", "sum"), ("\\lim_{x\\to 0} x", "limit"),
     ("100000!", "factorial"), ("(3)!", "factorial"), ("(" * 5 + "1" + ")" * 5, "nested deeper than 4"),
     ("x" * 201, "longer than 200"), ("\u00bd", "non-ASCII"), ("1\x00", "control"), (None, "not a string"),
     ("2^{9999}", None), ("\\frac{\\pi^2}{8}", None), ("5!", None), ("e^{i\\pi}", None), ("10,\\!080", None)],
)
def test_refusal(answer, reason):
    got = refusal(answer)
    assert got is None if reason is None else reason in got


def test_every_gold_answer_passes_the_guards(math500):
    assert [e["answer"] for e in math500.examples("test") if refusal(e["answer"])] == []


def test_issue_strings_return_at_once():
    for boxed in ("\\boxed{10^{10^{10^{10}}}}", "\\boxed{\\int_0^\\infty e^{-x^2}\\,dx}"):
        t0 = time.perf_counter()
        assert MathTask().reward(boxed, {"id": "m", "problem": "p", "answer": "1"}) == pytest.approx(0.1)
        assert time.perf_counter() - t0 < 0.1


def test_worker_overrun_is_killed_and_restarted():
    worker = mt.MathWorker()
    try:
        assert worker.check("\\frac{1}{2}", "2^{-1}", 60.0)  # started and ready
        first = worker.pid()
        t0 = time.perf_counter()
        assert not worker.check("0", "(x+1)^{999}-(x-1)^{999}", 1.0)  # sympy expands for minutes: killed at 1 s
        assert time.perf_counter() - t0 < 2.0
        assert worker.restarts == 1 and worker.pid() != first
        assert worker.check("\\frac{1}{2}", "2^{-1}", 60.0)  # the fresh child answers
    finally:
        worker.close()
    assert worker.pid() is None


def test_unavailable_worker_counts_wrong_and_is_not_cached(monkeypatch):
    import sys

    monkeypatch.setattr(mt, "_WORKER", mt.MathWorker())
    monkeypatch.setattr(sys, "executable", "/bin/false")  # the child exits at once: never ready
    with pytest.raises(WorkerUnavailable):
        mt._WORKER.check("1", "1+0", 1.0)
    assert not math_equal("\\frac{3}{5}", "3 \\cdot 5^{-1}")
    monkeypatch.undo()
    assert math_equal("\\frac{3}{5}", "3 \\cdot 5^{-1}")


def test_works_off_main_thread():
    task = MathTask(timeout_s=30.0)
    ex = {"id": "t", "problem": "p", "answer": "\\frac{3}{4}"}
    completions = ["\\boxed{0.75}", "\\boxed{1}", "\\boxed{3 \\cdot 4^{-1}}", "\\boxed{\\frac{6}{8}}"]
    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(lambda c: task.is_correct(c, ex), completions)) == [True, False, True, True]


def test_reward_tiers_and_prompts(chat_tok):
    task = MathTask(path="unused")
    ex = {"id": "m", "problem": "What is $1+1$?", "answer": "2"}
    assert [task.reward(c, ex) for c in ("\\boxed{2}", "\\boxed{3}", "2")] == [1.0, 0.1, 0.0]
    assert task.canonical_answer("\\boxed{ 2 }", ex) == "2"
    plain = task.prompt(ex)
    assert plain.startswith("Problem: What is") and "\\boxed{}" in plain and plain.endswith("Solution:")

    assert task.prompt(ex, chat_tok).startswith("<|user|>What is") and task.name == "math"


@pytest.mark.parametrize("bad", [1e12, float("inf"), float("nan"), 0, -1, 3600.5, True, "5", None])
def test_timeout_out_of_range_is_a_config_error(bad):
    """Issue 24: timeout_s=1e12 made select() raise OverflowError inside a check, leaving the reply in the pipe."""
    message = "timeout_s must be a number of seconds in \\(0, 3600\\], got"
    for build in (lambda: get_task("math", timeout_s=bad), lambda: math_equal("1", "1", bad),
                  lambda: MathWorker().check("1", "1", bad)):
        with pytest.raises(ValueError, match=message):
            build()
    assert MathTask(timeout_s=3600).timeout_s == 3600.0


def _interrupt_once(monkeypatch, worker, error):
    """Make `worker`'s next wait for a reply raise `error` once the request is in the child's pipe."""
    real = worker._read_line
    state = {"armed": False}

    def read_line(deadline):
        if state["armed"]:
            state["armed"] = False
            raise error
        return real(deadline)

    monkeypatch.setattr(worker, "_read_line", read_line)
    return state


@pytest.mark.parametrize("error, caller_sees", [(KeyboardInterrupt(), pytest.raises(KeyboardInterrupt)),
                                                (OverflowError("timeout value is too large"), nullcontext())])
def test_interrupted_check_never_answers_the_next_question(monkeypatch, error, caller_sees):
    """Issue 24: an exception or interrupt mid-check left the reply ("1" for 1/2 = 2^{-1}) in the pipe, and the
    next check (cos(0)+y-y+7 against 1/2) read it as its own verdict, cached."""
    monkeypatch.setattr(mt, "_WORKER", MathWorker())
    mt._verdict.cache_clear()
    try:
        assert math_equal("\\frac{1}{3}", "3^{-1}", 60.0)  # the worker is up
        _interrupt_once(monkeypatch, mt._WORKER, error)["armed"] = True
        with caller_sees:  # KeyboardInterrupt is re-raised; any other exception is no verdict (False)
            assert not math_equal("\\frac{1}{2}", "2^{-1}", 60.0)
        assert mt._WORKER.pid() is None  # reset before the exception reached the caller
        assert not math_equal("\\frac{1}{2}", "\\cos(0)+y-y+7", 60.0)
        assert math_equal("\\frac{1}{2}", "2^{-1}", 60.0)  # nothing was cached for the interrupted check
    finally:
        mt._WORKER.close()
        mt._verdict.cache_clear()


def test_stale_reply_with_another_id_is_ignored():
    worker = MathWorker()
    try:
        assert worker.check("\\frac{1}{2}", "2^{-1}", 60.0)
        worker._buf += f"{worker.checks} 1\n0 1\ngarbage\n1\n".encode()  # stale replies of earlier requests
        assert not worker.check("\\frac{1}{2}", "\\cos(0)+y-y+7", 60.0)  # ... are never taken for this one
        assert worker.restarts == 0 and worker.check("2", "1+1", 60.0)
    finally:
        worker.close()
