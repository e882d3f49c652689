"""MBPP: loader, code extraction, entry points, and the sandbox on good and hostile programs (loops, early exits,
memory and output blow-ups, network, process creation), each bounded in time. Data files are written here in
MBPP's layout; the hub is never read. Forged verdicts and sandbox escapes (issue 24) are in test_tasks_sandbox.py."""

from __future__ import annotations

import json
import re
import time

import pytest

from esreason_lib.tasks import MBPP, get_task
from esreason_lib.tasks._sandbox import TAIL_BYTES, run_tests
from esreason_lib.tasks.mbpp import compiles, entry_points, extract_code

ROW = {"task_id": 11, "text": "Write a python function to remove first and last occurrence of a given character "
       "from the string.", "code": "def remove_Occ(s,ch): \r\n    for i in range(len(s)): \r\n        if (s[i] == ch): "
       "\r\n            s = s[0 : i] + s[i + 1:] \r\n            break\r\n    for i in range(len(s) - 1,-1,-1):  \r\n"
       "        if (s[i] == ch): \r\n            s = s[0 : i] + s[i + 1:] \r\n            break\r\n    return s ",
       "test_list": ["assert remove_Occ(\"hello\",\"l\") == \"heo\"", "assert remove_Occ(\"abcda\",\"a\") == \"bcd\"",
                     "assert remove_Occ(\"PHP\",\"P\") == \"H\""],
       "test_setup_code": "", "challenge_test_list": []}
MATH_ROW = {"task_id": 82, "text": "Write a function to find the volume of a sphere.",
            "code": "import math\ndef volume_sphere(r):\n  volume=(4/3)*math.pi*r*r*r\n  return volume",
            "test_list": ["assert math.isclose(volume_sphere(10), 4188.790204786391, rel_tol=0.001)"]}
TIMEOUT_S = 2.0


@pytest.fixture
def task(tmp_path):
    path = tmp_path / "mbpp.jsonl"
    path.write_text(json.dumps(ROW) + "\n" + json.dumps(MATH_ROW) + "\n")
    return MBPP(path=path, timeout_s=TIMEOUT_S)


def _example(task, task_id):
    return next(e for e in task.examples("test") if e["id"] == f"mbpp-{task_id}")


def test_loader_and_reference_solutions_pass(task):
    ex, sphere = _example(task, 11), _example(task, 82)
    assert ex["entry_points"] == ["remove_Occ"] and sphere["entry_points"] == ["volume_sphere"]  # not isclose
    assert ex["test_setup_code"] == "" and len(ex["test_list"]) == 3
    for e in (ex, sphere):
        assert task.is_correct(e["code"], e) and task.reward(e["code"], e) == 1.0
        assert task.is_correct(f"Here you go:\n```python\n{e['code']}\n```\nIt loops twice.", e)


def test_wrong_and_malformed_programs(task):
    ex = _example(task, 11)
    every = "def remove_Occ(s, ch):\n    return s.replace(ch, '')"  # removes every occurrence, not first and
    assert task.is_correct(every, ex)  # last, yet passes MBPP's three asserts: the asserts decide
    first = "def remove_Occ(s, ch):\n    return s.replace(ch, '', 1)"  # "hello" -> "helo", not "heo"
    assert not task.is_correct(first, ex) and task.reward(first, ex) == pytest.approx(0.1)
    off = "def remove_Occ(s, ch):\n    return s"
    assert not task.is_correct(off, ex) and task.reward(off, ex) == pytest.approx(0.1)  # compiles: well-formed
    assert task.reward("def remove_Occ(s, ch) return s", ex) == 0.0  # a syntax error: not even well-formed
    assert task.reward("def other(s, ch):\n    return s", ex) == pytest.approx(0.1)  # never mentions remove_Occ


def test_loader_errors(tmp_path, monkeypatch):
    bad = tmp_path / "bad.jsonl"
    for row, message in [
        ({**ROW, "test_list": []}, "line 2: field 'test_list' must be a non-empty list of strings"),
        ({**ROW, "test_list": ["assert f(1) == 1", 3]}, "line 2: field 'test_list' must be a non-empty list"),
        ({**ROW, "test_list": "assert f(1) == 1"}, "line 2: field 'test_list' must be list, got str"),
        ({**ROW, "test_list": ["assert f(1) =="]}, "line 2: field 'test_list' holds a line that is not Python"),
        ({**ROW, "test_setup_code": 5}, "line 2: field 'test_setup_code' must be str"),
        ({k: v for k, v in ROW.items() if k != "text"}, "line 2: field 'text' is missing"),
    ]:
        bad.write_text(json.dumps(ROW) + "\n" + json.dumps(row) + "\n")
        with pytest.raises(ValueError, match=re.escape(f"{bad}, {message}")):
            MBPP(path=bad).examples("test")
    (tmp_path / "mbpp").mkdir()
    (tmp_path / "mbpp" / "train.jsonl").write_text(json.dumps({k: v for k, v in ROW.items() if k != "task_id"}) + "\n")
    monkeypatch.setenv("ESREASON_DATA", str(tmp_path))
    assert get_task("mbpp").examples("train")[0]["id"] == "mbpp-train-0"
    for bad_timeout in (0, -1, 61, True, "5"):
        with pytest.raises(ValueError, match="timeout_s must be a number of seconds in \\(0, 60\\]"):
            MBPP(timeout_s=bad_timeout)


def test_prompt(task, chat_tok):
    ex = _example(task, 11)
    plain = task.prompt(ex)
    assert plain.startswith("You are an expert Python programmer, and here is your task: Write a python function")
    assert plain.endswith('assert remove_Occ("PHP","P") == "H"\n```python\n')
    assert task.prompt(ex, chat_tok).endswith("in a single ```python code block.<|assistant|>")


@pytest.mark.parametrize("text, code", [
    ("```python\ndef f():\n    return 1\n```\nDone.", "def f():\n    return 1"),
    ("Sure.\n```Python\ndef f(): pass\n```\n```python\nprint(f())\n```", "def f(): pass"),  # the first block
    ("```\ndef f(): pass\n```", "def f(): pass"),  # an untagged block at the start
    ("def f(): pass\n```\n\nThis defines f.", "def f(): pass"),  # the plain prompt opened the fence
    ("def f(): pass", "def f(): pass"),
    ("<think>```python\ndraft()\n```</think>\n```python\ndef g(): pass\n```", "def g(): pass"),
    ("```python\ndef f(): pass", "def f(): pass"),  # cut off before the closing fence
    ("```python\n```", None), ("   \n", None), (None, None),
])
def test_extract_code(text, code):
    assert extract_code(text) == code


def test_entry_points_and_compiles():
    assert entry_points(["assert set(similar_elements((3, 4),(5, 4))) == set((4,))"]) == ("similar_elements",)
    assert entry_points(["assert math.isclose(area(2), 4.0)", "assert b(a(1)) == 2"]) == ("a", "area", "b")
    assert entry_points(["assert 1 == 1"]) == ()
    with pytest.raises(SyntaxError):
        entry_points(["assert f(1) =="])
    assert compiles("x = 1") and not compiles("x = ") and not compiles("x = '\0'\n\0")
    assert not compiles("-" * 100_000 + "1") and not compiles("x = 1\n" * 4_000)  # over MAX_CODE_CHARS
    assert compiles("x = 1 is 1")  # a SyntaxWarning is no error


TESTS = ["assert add(1, 2) == 3"]


@pytest.mark.parametrize("code, status", [
    ("def add(a, b):\n    return a + b", "passed"),
    ("def add(a, b):\n    return a - b", "failed"),
    ("import sys\ndef add(a, b): return a + b\nsys.exit(0)", "failed"),  # exits before the asserts
    ("import os\nos._exit(0)", "failed"),
    ("def add(a, b):\n    while True: pass", "timeout"),
    ("x = bytearray(4 << 30)", "failed"),  # over the 1 GiB address space
    ("while True: print('x' * 10_000)", "failed"),  # over the output limit
    ("import socket\nsocket.create_connection(('1.1.1.1', 53))", "failed"),
    ("import socket\nsocket.socket()", "failed"),
    ("import subprocess\nsubprocess.run(['true'])", "failed"),
    ("import os\nos.system('true')", "failed"),
    ("import os\nos.fork()", "failed"),
    ("import numpy", "failed"),  # the standard library only
    ("def add(a, b): return a + b\nimport os\nos.remove('harness.py')", "failed"),
])
def test_sandbox_outcomes(code, status):
    t0 = time.perf_counter()
    result = run_tests(code, TESTS, timeout_s=TIMEOUT_S)
    assert (result.status, result.passed) == (status, status == "passed"), result.output
    assert time.perf_counter() - t0 < TIMEOUT_S + 5.0 and len(result.output) <= TAIL_BYTES


def test_sandbox_output_is_bounded():
    result = run_tests("def add(a, b):\n    print('y' * 100_000)\n    return a + b", TESTS)
    assert result.passed and len(result.output) == TAIL_BYTES and set(result.output.strip()) == {"y"}
    failed = run_tests("def add(a, b):\n    print('hi')\n    return 0", TESTS)
    assert not failed.passed and failed.output.startswith("hi\n") and "AssertionError" in failed.output


def test_sandbox_runs_setup_code_and_never_raises():
    assert run_tests("def add(a, b): return a + b + K", TESTS, setup="K = 0").passed
    assert not run_tests("def add(a, b): return a + b + K", TESTS).passed  # K undefined
    assert run_tests("\ud800", TESTS).status == "failed"  # a lone surrogate: no crash in the parent


def test_verdict_cache(task):
    ex = _example(task, 11)
    slow = "import time\ndef remove_Occ(s, ch):\n    time.sleep(0.5)\n    return 'x'"
    assert not task.is_correct(slow, ex)
    t0 = time.perf_counter()
    assert not task.is_correct(slow, ex) and task.reward(slow, ex) == pytest.approx(0.1)
    assert time.perf_counter() - t0 < 0.1  # cached: no second run
