"""The artifact grading protocols: GSM8K(protocol="artifact") and Countdown(protocol="tinyzero"), hand-computed."""

from __future__ import annotations

import os
import time

import pytest

from esreason_lib.es.config import ESConfig
from esreason_lib.store.identity import config_hash
from esreason_lib.tasks import Countdown, get_task
from esreason_lib.tasks import artifact_grading as ag
from esreason_lib.tasks._math_worker import MathWorker
from esreason_lib.training.inputs import config_task

GOLD = {"id": "g", "question": "q", "answer": "18", "solution": "6*3=18\n#### 18"}
CD = {"id": "c", "numbers": [80, 81, 71], "target": 72}


def test_boxed_content():
    assert ag.boxed_content("so \\boxed{1} then \\boxed { \\frac{1}{2} } ") == "\\frac{1}{2}"
    assert ag.boxed_content("\\boxed{}") == ""
    assert ag.boxed_content("\\boxed{18") is None  # never closes
    assert ag.boxed_content("\\boxed{18} and \\boxed 5") is None  # the last \boxed has no brace
    assert ag.boxed_content("\\fbox{18}") is None and ag.boxed_content("no box") is None


@pytest.mark.parametrize("raw, normal", [
    ("18", "18"), ("\\$18", "18"), ("18\\%", "18"), ("$18", "$18"), ("18%", "18%"), ("18.0", "18.0"),
    ("1,080", "1,080"), ("3/4", "\\frac{3}{4}"), ("x = 3/4", "\\frac{3}{4}"), ("0.5", "\\frac{1}{2}"),
    (".5", "\\frac{1}{2}"), ("\\dfrac12", "\\frac{1}{2}"), ("\\frac1{2}", "\\frac{1}{2}"), ("\\frac1", "\\frac1"),
    ("\\sqrt2", "\\sqrt{2}"), ("18 \\text{ apples}", "18"), ("\\left( 1, 2 \\right)", "(1,2)"), ("90^\\circ", "90"),
    ("", ""), ("a\\\\b", "a\\b"), ("2\\!3", "23"),
])
def test_normalize_latex(raw, normal):
    assert ag.normalize_latex(raw) == normal


def test_artifact_gold():
    assert ag.artifact_gold({"answer": "1080", "solution": "x\n#### 1,080"}) == "1080"
    assert ag.artifact_gold({"answer": "7", "solution": "#### 5 then #### 7"}) == "5"  # the first, as the artifact
    assert ag.artifact_gold({"answer": "18"}) == "18"


@pytest.mark.parametrize("completion, tier", [
    ("\\boxed{18}", "correct"), ("\\boxed{\\$18}", "correct"), ("\\boxed{18 \\text{ apples}}", "correct"),
    ("\\boxed{18.0}", "formatted"), ("\\boxed{$18}", "formatted"), ("\\boxed{18%}", "formatted"),
    ("\\boxed{}", "formatted"), ("\\boxed{17}", "formatted"), ("\\fbox{18}", "invalid"), ("#### 18", "invalid"),
    ("\\boxed{18", "invalid"),
])
def test_gsm8k_tier(completion, tier):
    assert ag.gsm8k_tier(completion, "18") == tier


def test_regex_prediction():
    assert ag.regex_prediction("#### 1,080. and #### 12.") == "12"
    assert ag.regex_prediction("#### x \\boxed{1,2}") == "12"  # no number after ####: the box
    assert ag.regex_prediction("\\boxed{$18.}") == "$18"
    assert ag.regex_prediction("The Answer is 18. The result = -3") == "-3"
    assert ag.regex_prediction("answer: 18") is None and ag.regex_prediction("") is None


def test_numeric_form():
    assert ag.numeric_form("18.0") == "18" and ag.numeric_form(" 1,080 ") == "1080" and ag.numeric_form("2.5") == "2.5"
    assert ag.numeric_form("\\$18") == "18" and ag.numeric_form("$18") == "$18" and ag.numeric_form("1e3") == "1000"
    assert (ag.numeric_form("0.5") == "\\frac{1}{2}" and ag.numeric_form("inf") == "inf"
            and ag.numeric_form("AB") == "ab")


def test_gsm8k_correct_math_verify_then_fallback():
    assert ag.gsm8k_correct("\\boxed{18}", "18") and ag.gsm8k_correct("so $18$ apples", "18")
    assert not ag.gsm8k_correct("\\fbox{18}", "18") and ag.gsm8k_correct("\\boxed{\\frac{36}{2}}", "18")
    assert not ag.gsm8k_correct("\\boxed{17}", "18") and not ag.gsm8k_correct("nothing", "18")
    assert not ag.gsm8k_correct("\\boxed{}", "0")  # math-verify extracts nothing; the fallback's "" is no number


def test_gsm8k_correct_overrun_falls_back(monkeypatch):
    def overrun(*args):
        raise TimeoutError("overran")

    monkeypatch.setattr(ag._WORKER, "call", overrun)
    assert ag.gsm8k_correct("#### 18.0", "18") and not ag.gsm8k_correct("\\boxed{$18}", "18")


def test_tinyzero_equation():
    assert ag.tinyzero_equation("<answer>1</answer> <answer> 2+3 </answer>") == "2+3"
    assert ag.tinyzero_equation("<answer>1</answer>\nthen nothing") is None  # only the last line counts
    assert (ag.tinyzero_equation("<answer>a</answer></answer>") == "a"
            and ag.tinyzero_equation("<answer></answer>") == "")
    assert ag.tinyzero_equation("<answer><answer>x</answer>") == "<answer>x" and ag.tinyzero_equation("1+2") is None


@pytest.mark.parametrize("completion, tier", [
    ("<answer>-80 + 81 + 71</answer>", "correct"), ("<answer>81+71-80</answer>", "correct"),
    ("<answer>(81+71-80)**1.</answer>", "formatted"),  # "1" is no given number
    ("<answer>(81.0+71-80)</answer>", "formatted"), ("<answer>- - 81 + 71 - 80</answer>", "correct"),
    ("<answer>" + "-" * 1500 + "81+71-80</answer>", "correct"),  # eval too takes 1,500 signs
    ("<answer>" + "-" * 3000 + "81+71-80</answer>", "formatted"),  # and refuses 3,000 (RecursionError)
    ("<answer>80 + 81 - 71</answer>", "formatted"), ("<answer>80+81</answer>", "formatted"),
    ("<answer>80/(81-81)+71</answer>", "formatted"), ("<answer>80 81 71</answer>", "formatted"),
    ("<answer>()</answer>", "formatted"), ("<answer>x</answer>", "formatted"), ("-80+81+71", "invalid"),
    ("<answer>81+71-80", "invalid"),
])
def test_countdown_tier(completion, tier):
    assert ag.countdown_tier(completion, [80, 81, 71], 72) == tier


def test_countdown_tier_python_arithmetic_and_power_bound():
    assert ag.countdown_tier("<answer>2**3*9</answer>", [2, 3, 9], 72) == "correct"
    assert ag.countdown_tier("<answer>(9//2)*3</answer>", [2, 3, 9], 12) == "correct"
    assert ag.countdown_tier("<answer>(-8)**(1/3)</answer>", [8, 1, 3], 1) == "formatted"  # complex, not 1
    t0 = time.perf_counter()
    assert ag.countdown_tier("<answer>99**99**99</answer>", [99, 99, 99], 1) == "formatted"
    assert time.perf_counter() - t0 < 1.0


def test_protocol_field_validated_and_passed_by_get_task():
    with pytest.raises(ValueError, match="protocol must be 'strict' or 'artifact', got 'tinyzero'"):
        get_task("gsm8k", protocol="tinyzero")
    with pytest.raises(ValueError, match="protocol must be 'strict' or 'tinyzero', got 'artifact'"):
        Countdown(protocol="artifact")
    assert get_task("gsm8k").protocol == "strict" and get_task("countdown").protocol == "strict"
    task = config_task(ESConfig(task="gsm8k", task_kwargs={"protocol": "artifact"}))
    assert task.protocol == "artifact"
    assert (config_hash(ESConfig(task="gsm8k"))
            != config_hash(ESConfig(task="gsm8k", task_kwargs={"protocol": "artifact"})))
    assert ESConfig(task="gsm8k").task_kwargs == ()  # the default adds nothing to a run's identity


def test_gsm8k_artifact_protocol_methods():
    task = get_task("gsm8k", protocol="artifact")
    assert task.reward("\\boxed{18}", GOLD) == 1.0 and task.reward("\\boxed{18.0}", GOLD) == 0.1
    assert task.reward("\\boxed{}", GOLD) == 0.1 and task.reward("\\fbox{18}", GOLD) == 0.0
    assert task.is_well_formed("\\boxed{}", GOLD) and not task.is_well_formed("\\fbox{18}", GOLD)
    assert task.is_correct("\\boxed{18.0}", GOLD) and task.extract_answer("#### 1,080") == "1080"
    assert task.reward(None, GOLD) == 0.0 and not task.is_correct(None, GOLD) and task.extract_answer(None) is None


def test_countdown_tinyzero_protocol_methods():
    task = Countdown(protocol="tinyzero")
    assert task.reward("<answer>-80 + 81 + 71</answer>", CD) == 1.0 and task.reward("-80+81+71", CD) == 0.0
    assert task.reward("<answer>80+81</answer>", CD) == 0.1 and task.is_well_formed("<answer>x</answer>", CD)
    assert task.extract_answer("<answer> 81+71-80 </answer>") == "81+71-80"
    assert task.canonical_answer("<answer>81+71-80</answer>", CD) == "71+81-80"  # the strict parser's form
    assert task.canonical_answer("<answer>-80 + 81 + 71</answer>", CD) == "-80+81+71"
    assert task.reward(None, CD) == 0.0 and task.canonical_answer(None, CD) is None


def test_worker_call_result_error_and_overrun(tmp_path):
    module = tmp_path / "plugin.py"
    module.write_text("import time\n\ndef add(a, b):\n    return a + b\n\ndef nap(s):\n    time.sleep(s)\n")
    worker = MathWorker()
    try:
        assert worker.call(os.fspath(module), "add", [2, 3], 60.0) == 5
        with pytest.raises(TimeoutError):
            worker.call(os.fspath(module), "missing", [], 10.0)  # an error in the child, no restart
        assert worker.restarts == 0
        with pytest.raises(TimeoutError):
            worker.call(os.fspath(module), "nap", [30], 0.5)
        assert worker.restarts == 1 and worker.check("1/2", "0.5", 60.0)
    finally:
        worker.close()
