"""Countdown: exact parser, canonical forms, solver, generator, prompts and reward tiers."""

from __future__ import annotations

import time
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest

from esreason_lib.tasks import BINARY, TASK_NAMES, RewardShaping, Task, get_task
from esreason_lib.tasks._arith import (
    MAX_CHARS,
    canonical_form,
    combine,
    evaluate_tree,
    leaves,
    parse_expression,
    reachable_values,
    render,
)
from esreason_lib.tasks.countdown import Countdown, evaluate_expression, solve

EX = {"id": "countdown-3-12-7-22", "numbers": [3, 12, 7], "target": 22}


def test_registry():
    assert TASK_NAMES == ("countdown", "addition", "sorting", "multistep", "gsm8k", "math", "commonsenseqa", "gpqa",
                          "hotpotqa", "mbpp")
    task = get_task("countdown", num_count=4, high=9)
    assert isinstance(task, Countdown) and isinstance(task, Task) and task.num_count == 4
    with pytest.raises(ValueError, match="nope.*countdown"):
        get_task("nope")


@pytest.mark.parametrize(
    "text,value",
    [("(3+12)+7", 22), ("6/4*2", 3), (" 1 + 2 * 3 ", 7), ("(1+2)*3", 9), ("10-2-3", 5), ("8/2/2", 2),
     ("((((5))))", 5), ("7/3", Fraction(7, 3)), ("0", 0)],
)
def test_evaluate_expression_exact(text, value):
    assert evaluate_expression(text) == value


@pytest.mark.parametrize(
    "text",
    ["__import__('os')", "9**9**9", "2**3", "1/0", "3/(2-2)", "(1+2", "1+2)", ")(", "-3+4", "3*-4", "+3", "03+1",
     "1 2", "", "   ", "1+", "()", "3.5+1", "1e3", "\u0663+1", "x", "1+2=3", "1" * (MAX_CHARS + 1),
     "(" * 40 + "1" + ")" * 40, None, 42],
)
def test_evaluate_expression_rejects(text):
    t0 = time.perf_counter()
    assert evaluate_expression(text) is None
    assert time.perf_counter() - t0 < 0.05


def test_parse_leaves_tree_and_canonical_forms():
    tree = parse_expression("(3+12)*7")
    assert tree == ("*", ("+", 3, 12), 7) and leaves(tree) == [3, 12, 7] and evaluate_tree(tree) == 105
    assert evaluate_tree(parse_expression("1/(2-2)")) is None
    same = ["3+12+7", "7+(12+3)", "(3+12)+7", "12+(7+3)"]
    assert len({canonical_form(parse_expression(s)) for s in same}) == 1
    assert canonical_form(parse_expression("12-(3-7)")) == canonical_form(parse_expression("12-3+7"))
    assert canonical_form(parse_expression("8/(4/2)")) == canonical_form(parse_expression("8*2/4"))
    assert canonical_form(parse_expression("12-3-7")) == canonical_form(parse_expression("12-(3+7)"))
    assert canonical_form(parse_expression("(3+12)*7")) != canonical_form(parse_expression("3+12*7"))
    a, b = (0, 3), (0, 12)
    assert combine("+", a, b) == combine("+", b, a) == (1, ((0, 3), (0, 12)), ())
    assert combine("/", a, b) == (2, ((0, 3),), ((0, 12),))


@pytest.mark.parametrize("text", ["3+7+12", "(2+5)*(7-3)/4", "12-3*4/(1+1)", "2*(3+4)-5/6", "1-2-3", "8/(4/2)"])
def test_render_round_trips(text):
    form = canonical_form(parse_expression(text))
    out = render(form)
    assert canonical_form(parse_expression(out)) == form
    assert evaluate_expression(out) == evaluate_expression(text)


def test_solve_hand_checked_cases():
    assert solve([1, 2, 3], 6) == ["1*2*3", "1+2+3", "2*3/1"]
    assert solve([2, 2, 2], 6) == ["2+2*2", "2+2+2"]
    assert solve([3, 12, 7], 22) == ["3+7+12"]
    assert solve([1, 1], 5) == []
    assert solve([5], 5) == ["5"]
    assert solve([], 5) == []


def test_solve_correct_distinct_and_complete():
    rng = np.random.default_rng(0)
    for _ in range(15):
        nums = [int(x) for x in rng.integers(1, 16, size=int(rng.choice([3, 4])))]
        targets = sorted(int(v) for v in reachable_values(tuple(sorted(nums))) if v.denominator == 1 and 0 < v < 1000)
        target = targets[int(rng.integers(len(targets)))]
        sols = solve(nums, target)
        assert sols and sols == sorted(sols)
        forms = [canonical_form(parse_expression(s)) for s in sols]
        assert len(set(forms)) == len(sols)
        for s in sols:
            assert Counter(leaves(parse_expression(s))) == Counter(nums)
            assert evaluate_expression(s) == target
    # completeness on a small case: every distinct form found by brute force over all trees is in solve()
    nums = [2, 3, 5]
    found = set()
    for x, y, z in {(2, 3, 5), (2, 5, 3), (3, 2, 5), (3, 5, 2), (5, 2, 3), (5, 3, 2)}:
        for o1 in "+-*/":
            for o2 in "+-*/":
                for s in (f"({x}{o1}{y}){o2}{z}", f"{x}{o1}({y}{o2}{z})"):
                    if evaluate_expression(s) == 10:
                        found.add(render(canonical_form(parse_expression(s))))
    assert sorted(found) == solve(nums, 10)


def test_solver_is_fast():
    t0 = time.perf_counter()
    sols = solve([13, 4, 9, 7], 24)
    assert time.perf_counter() - t0 < 0.25 and all(evaluate_expression(s) == 24 for s in sols)
    t0 = time.perf_counter()
    solve([11, 2, 14], 3)
    assert time.perf_counter() - t0 < 0.05


def test_reachable_values():
    vals = reachable_values((2, 3))
    assert vals == {5, -1, 1, 6, Fraction(2, 3), Fraction(3, 2)}


def test_examples_deterministic_distinct_and_well_formed():
    task = Countdown()
    a, b = task.examples("test", n=200, seed=0), task.examples("test", n=200, seed=0)
    assert a == b and len(a) == 200 and len({e["id"] for e in a}) == 200
    assert task.examples("test", n=20, seed=0) == a[:20]
    assert task.examples("test", n=20, seed=1) != a[:20]
    assert len({(tuple(sorted(e["numbers"])), e["target"]) for e in a}) == 200
    for e in a:
        assert len(e["numbers"]) == 3 and all(1 <= x <= 15 for x in e["numbers"]) and 1 <= e["target"] <= 999
        assert solve(e["numbers"], e["target"]) and task.split_of(e["numbers"], e["target"]) == "test"
    assert len(task.examples("train")) == 5000 and len(task.examples()) == 200
    with pytest.raises(ValueError, match="split"):
        task.examples("valid", n=3)
    with pytest.raises(ValueError, match="n must"):
        task.examples("test", n=-1)


def test_train_test_disjoint_across_seeds():
    task = Countdown()
    key = lambda e: (tuple(sorted(e["numbers"])), e["target"])  # noqa: E731
    test = {key(e) for s in range(3) for e in task.examples("test", n=200, seed=s)}
    train = {key(e) for s in range(3) for e in task.examples("train", n=2000, seed=s)}
    assert test and train and not (test & train)


def test_exhausted_split_raises():
    task = Countdown(num_count=2, low=1, high=2, max_target=9)
    with pytest.raises(ValueError, match="distinct"):
        task.examples("train", n=50)


def test_constructor_validation():
    for kwargs in ({"num_count": 7}, {"low": 0}, {"low": 5, "high": 3}, {"max_target": 0}, {"test_fraction": 1.5}):
        with pytest.raises(ValueError):
            Countdown(**kwargs)
    assert Countdown(num_count=4).max_new_tokens == 32 and Countdown().max_new_tokens == 24


def test_prompt_plain_and_chat(chat_tok):
    task = Countdown()
    assert task.prompt(EX) == "03 12 07>022="
    assert Countdown(high=150, max_target=99).prompt(EX) == "003 012 007>22="
    assert len({len(task.prompt(e)) for e in task.examples("test", n=50)}) == 1
    chat = task.prompt(EX, chat_tok)
    assert chat.startswith("<|user|>") and "[3, 12, 7]" in chat and "22" in chat and "<answer>" in chat
    assert task.stop == "</answer>"


def test_extract_answer():
    task = Countdown()
    assert task.extract_answer("(3+12)+7") == "(3+12)+7"
    assert task.extract_answer(" 3+7+12 \nmore") == "3+7+12"
    assert task.extract_answer("think...<answer>1+2</answer> then <answer> 3*4 </answer>") == "3*4"
    assert task.extract_answer("reasoning <answer>3+7+12") == "3+7+12"  # generation stopped on </answer>
    assert task.extract_answer("<answer>3+7+12 = 22</answer>") is None
    assert task.extract_answer("") is None and task.extract_answer("abc") is None
    assert task.extract_answer("1" * 500) is None and task.extract_answer(None) is None


def test_is_correct_and_reward_tiers():
    task = Countdown()
    assert task.is_correct("3+7+12", EX) and task.is_correct("(12+3)+7", EX)
    assert task.is_correct("<answer>7+(3+12)</answer>", EX)
    for wrong in ["3+12", "3+12+7+0", "3+3+12+4", "312+7", "3+12*7", "37+12", "22"]:
        assert not task.is_correct(wrong, EX), wrong
        assert task.is_well_formed(wrong, EX) and task.reward(wrong, EX) == pytest.approx(0.1)
    for bad in ["__import__('os')", "9**9**9", "(3+12+7", "3+12+7)", "-3+12+7+6", "3/0+12+7", "x"]:
        assert not task.is_correct(bad, EX) and task.reward(bad, EX) == (0.1 if bad == "3/0+12+7" else 0.0), bad
    assert task.reward("3+7+12", EX) == 1.0
    binary = Countdown(shaping=BINARY)
    assert binary.reward("3+12", EX) == 0.0 and binary.reward("3+7+12", EX) == 1.0
    custom = Countdown(shaping=RewardShaping(correct=2.0, formatted=0.5, invalid=-1.0))
    assert [custom.reward(c, EX) for c in ("12+7+3", "3*7", "oops")] == [2.0, 0.5, -1.0]


def test_hostile_inputs_are_fast_and_zero():
    task = Countdown()
    hostile = ["__import__('os').system('ls')", "9**9**9**9", "1/0", "(" * 10_000, "1+" * 100_000, "9" * 1_000_000,
               "<answer>" * 10_000, "((((((((((((((((((((((((((((((((((((((1))))))))))))))))))))))))))))))))))))))",
               "3+3+12", "\x00\n\r", "<answer>" + "(" * 150 + "</answer>"]
    t0 = time.perf_counter()
    for text in hostile:
        assert task.reward(text, EX) in (0.0, 0.1) and not task.is_correct(text, EX)
        task.canonical_answer(text, EX)
    assert time.perf_counter() - t0 < 1.0


def test_canonical_answer_counts_distinct_solutions():
    task = Countdown()
    ex = {"id": "x", "numbers": [1, 2, 3], "target": 6}
    comps = ["1+2+3", "3+(2+1)", "(1+2)+3", "1*2*3", "3*2*1", "2*3/1", "3/(1/2)", "nope"]
    keys = {task.canonical_answer(c, ex) for c in comps if task.is_correct(c, ex)}
    assert keys == set(solve([1, 2, 3], 6))
    assert task.canonical_answer("nope", ex) is None and task.canonical_answer("1+1", ex) == "1+1"


def test_demonstration_uniform_over_solutions_and_habit():
    task = Countdown()
    ex = {"id": "x", "numbers": [1, 2, 3], "target": 6}
    assert task.solutions(ex) == solve([1, 2, 3], 6)
    rng = np.random.default_rng(0)
    counts = Counter(task.demonstration(ex, rng) for _ in range(600))
    assert set(counts) == set(solve([1, 2, 3], 6)) and min(counts.values()) > 150
    for e in task.examples("test", n=30):
        assert task.is_correct(task.demonstration(e, rng), e)
        assert len(task.prompt(e) + task.demonstration(e, rng)) <= 13 + task.max_new_tokens
    assert task.habit_answer(EX) == "3+12+7" and task.is_well_formed(task.habit_answer(EX), EX)
    with pytest.raises(ValueError, match="no solution"):
        task.demonstration({"id": "z", "numbers": [1, 1], "target": 5}, rng)


def test_four_numbers():
    task = Countdown(num_count=4)
    exs = task.examples("test", n=20)
    rng = np.random.default_rng(1)
    for e in exs:
        assert len(e["numbers"]) == 4 and task.reward(task.demonstration(e, rng), e) == 1.0
    assert task.prompt(exs[0]).count(" ") == 3


def test_num_count_beyond_four_fails_fast_naming_the_field():
    import pytest as _pytest

    from esreason_lib.tasks import get_task

    for bad in (1, 5, 6):
        with _pytest.raises(ValueError, match=f"num_count must be 2, 3 or 4.*got {bad}"):
            get_task("countdown", num_count=bad)


def test_one_verifier_call_chain_parses_a_completion_once(monkeypatch):
    """`reward` (is_correct, then is_well_formed), `score` and evaluation's verdict parse each completion once;
    the next completion is parsed afresh, and the verdicts are those of a fresh task."""
    import esreason_lib.tasks.countdown as countdown
    from esreason_lib.evaluation import _verdict

    calls = []
    monkeypatch.setattr(countdown, "parse_expression", lambda text: calls.append(text) or parse_expression(text))
    task, fresh = Countdown(), Countdown()
    for text in ["3+7+12", "3+12", "oops", "3+7+12"]:
        for chain in (lambda: task.reward(text, EX), lambda: task.score(text, EX), lambda: _verdict(task, text, EX)):
            calls.clear()
            task._last_tree = None  # a chain that starts on another completion
            chain()
            assert len(calls) == (text != "oops"), (text, calls)  # "oops" has no answer to parse
        expected = (fresh.reward(text, EX), fresh.is_correct(text, EX))
        assert task.score(text, EX) == expected
        assert _verdict(task, text, EX) == (*expected, fresh.extract_answer(text),
                                             fresh.canonical_answer(text, EX) if expected[1] else None)
    calls.clear()
    task._last_tree = None
    task.score("3+7+12", EX), task.score("12+7+3", EX), task.score("3+7+12", EX)  # each new text: one parse
    assert calls == ["3+7+12", "12+7+3", "3+7+12"]


def test_min_solutions_draws_problems_with_several_distinct_answers_and_keeps_the_default_draws():
    from esreason_lib.tasks import get_task

    several = get_task("countdown", min_solutions=3).examples("test", n=20, seed=0)
    task = get_task("countdown", min_solutions=3)
    assert all(len(task.solutions(ex)) >= 3 for ex in several)
    assert get_task("countdown").examples("test", n=5, seed=0) == get_task("countdown", min_solutions=1).examples(
        "test", n=5, seed=0)
    with pytest.raises(ValueError, match="min_solutions"):
        get_task("countdown", min_solutions=0)
