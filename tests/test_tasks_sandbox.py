"""The MBPP sandbox against issue 24: verdicts the tested code cannot forge, and escapes that do not escape.
Every target lies under pytest's tmp_path; kill attempts aim at a decoy process (and at the sandbox's parent);
the harmful programs are refused, never run against this machine."""

from __future__ import annotations

import ast
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from esreason_lib.tasks import _sandbox
from esreason_lib.tasks._sandbox import decode, run_tests, split_assert

TESTS = ["assert add(1, 2) == 3"]
WRONG = "def add(a, b):\n    return 0\n"


@pytest.mark.parametrize("line, judge, probes", [
    ("assert add(1, 2) == 3", "_probe_0 == 3", ["add(1, 2)"]),
    ("assert math.isclose(volume_sphere(10), 4188.79, rel_tol=0.001)", "math.isclose(_probe_0, 4188.79, rel_tol=0.001)",
     ["volume_sphere(10)"]),
    ("assert set(f((3, 4), (5, 4))) == set((4,))", "set(_probe_0) == set((4,))", ["f((3, 4), (5, 4))"]),
    ("assert b(a(1)) == a(2)", "_probe_0 == _probe_1", ["b(a(1))", "a(2)"]),
    ("assert all(f(x) for x in range(3))", "all(_probe_0)", ["(f(x) for x in range(3))"]),
    ("assert K + 1 == 2", "_probe_0 + 1 == 2", ["K"]),  # a name from the setup code or the solution
    ("assert 1 == 1", "1 == 1", []),
])
def test_split_assert(line, judge, probes):
    got, got_probes = split_assert(line)
    assert (ast.unparse(got), got_probes) == (judge, probes)


def test_split_assert_leaves_other_statements_to_the_child():
    assert split_assert("import math") == (None, [])
    with pytest.raises(SyntaxError):
        split_assert("assert f(1) ==")


@pytest.mark.parametrize("encoded, value", [
    (["n"], None), (["b", True], True), (["i", "12"], 12), (["f", "0.5"], 0.5), (["f", "inf"], float("inf")),
    (["c", "1.0", "-2.0"], 1 - 2j), (["s", "heo"], "heo"), (["y", "6869"], b"hi"),
    (["l", [["i", "1"], ["s", "a"]]], [1, "a"]), (["t", [["i", "4"]]], (4,)), (["S", [["i", "4"]]], {4}),
    (["F", []], frozenset()), (["d", [[["s", "k"], ["l", []]]]], {"k": []}),
])
def test_decode_plain_values(encoded, value):
    got = decode(encoded)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("encoded", [["b", 1], ["i", 3], ["s", 3], ["x", "1"], [], "s", ["n", 1], ["l", "ab"],
                                     ["d", [[["l", []], ["n"]]]], ["i", "1" * 5000], ["l"] + [[]] * 2])
def test_decode_refuses_anything_else(encoded):
    with pytest.raises((ValueError, TypeError)):
        decode(encoded)


@pytest.mark.parametrize("code", [
    # the harness's old token, printed by the code itself, then an early exit
    WRONG + "import sys, os\nsys.stdout.write('\\n' + getattr(sys.modules['__main__'], '_token', 'x') + '\\n')\n"
            "sys.stdout.flush()\nos._exit(0)",
    WRONG + "import atexit, os, sys\natexit.register(lambda: (sys.stdout.write('\\nx\\n'), os._exit(0)))",
    "class Yes:\n    def __eq__(self, other):\n        return True\n    __hash__ = None\n"
    "def add(a, b):\n    return Yes()",
    "class Three(int):\n    def __eq__(self, other):\n        return True\ndef add(a, b):\n    return Three(0)",
    "class Truthy:\n    def __bool__(self):\n        return True\ndef add(a, b):\n    return [Truthy()]",
    WRONG + "open('results.jsonl', 'w').write('[0, [\"b\", true]]\\n[0, [\"i\", \"3\"]]\\n')\nimport os\nos._exit(0)",
    WRONG + "open('results.jsonl', 'w').write('garbage\\n')\nimport os\nos._exit(0)",
])
def test_a_wrong_function_cannot_forge_a_pass(code):
    result = run_tests(code, TESTS, timeout_s=5.0)
    assert (result.passed, result.status) == (False, "failed"), result.output


def test_plain_values_are_judged_by_the_real_builtins():
    assert run_tests("def add(a, b):\n    return a + b", TESTS).passed
    assert run_tests("def add(a, b):\n    return 3.0", TESTS).passed  # as Python's own assert: 3.0 == 3
    assert run_tests("def f(x):\n    return [x, x]", ["assert set(f(4)) == {4}", "assert f(1) == [1, 1]"]).passed
    assert not run_tests("def f(x):\n    return [x, x]", ["assert f(1) == [1, 2]"]).passed
    assert run_tests("def f():\n    return K", ["assert f() == 7"], setup="K = 7").passed


@pytest.fixture
def decoy():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def test_no_signal_reaches_the_parent_or_any_other_process(decoy):
    for code in (f"import posix, signal\nposix.kill({decoy.pid}, signal.SIGKILL)",
                 "import posix, signal\nposix.kill(posix.getppid(), signal.SIGKILL)",
                 f"import ctypes\nctypes.CDLL(None).kill({decoy.pid}, 9)",
                 "import posix, signal\nposix.killpg(posix.getpgid(0), signal.SIGKILL)\nposix.kill(-1, 9)"):
        assert run_tests(WRONG + code, TESTS).status == "failed"
        assert decoy.poll() is None  # the decoy, and this test process, are alive


def _harness_processes() -> list[int]:
    """Live processes running this checkout's sandbox harness."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and _sandbox._HARNESS.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            pass
    return found


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")
def test_no_process_outlives_the_run():
    code = ("import posix, time\ntry:\n    if posix.fork() == 0:\n        posix.setsid()\n        time.sleep(60)\n"
            "except OSError as err:\n    print('fork refused:', err)\n")
    result = run_tests(code, TESTS)
    assert result.status == "failed" and "fork refused" in result.output
    time.sleep(0.2)
    assert _harness_processes() == []


def test_no_program_runs(tmp_path):
    marker = tmp_path / "pwned"
    for code in (f"import posix\nposix.execv('/bin/sh', ['sh', '-c', 'touch {marker}'])",
                 f"import posix\nposix.system('touch {marker}')",
                 f"import posix\nposix.posix_spawn('/bin/sh', ['sh', '-c', 'touch {marker}'], {{}})"):
        assert run_tests(WRONG + code, TESTS).status == "failed"
    assert not marker.exists()


def test_nothing_outside_its_directory_is_written(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    for code in (f"import posix\nposix.unlink({str(victim)!r})",
                 f"open({str(victim)!r}, 'w')",
                 f"import os\nos.truncate({str(victim)!r}, 0)",
                 f"import os\nos.rename({str(victim)!r}, 'stolen.txt')",
                 f"open({str(tmp_path / 'big')!r}, 'wb').write(b'x' * (20 << 20))",
                 f"import os\nos.symlink({str(victim)!r}, 'link')\nopen('link', 'w').write('gone')"):
        assert run_tests(WRONG + code, TESTS).status == "failed"
    assert victim.read_text() == "keep me" and sorted(p.name for p in tmp_path.iterdir()) == ["victim.txt"]


def test_no_host_socket_is_reached(tmp_path):
    path = str(tmp_path / "host.sock")
    with socket.socket(socket.AF_UNIX) as server, socket.socket(socket.AF_UNIX) as abstract:
        server.bind(path)
        abstract.bind(b"\0esreason-sandbox-test-%d" % os.getpid())
        for s in (server, abstract):
            s.listen(1)
            s.setblocking(False)
        for target in (repr(path), repr(b"\0esreason-sandbox-test-%d" % os.getpid())):
            code = f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({target})\ns.sendall(b'hi')"
            assert run_tests(WRONG + code, TESTS).status == "failed"
        for s in (server, abstract):
            with pytest.raises(BlockingIOError):
                s.accept()


@pytest.mark.skipif(platform.machine() != "x86_64" or sys.platform != "linux", reason="seccomp layer: x86_64 only")
def test_kernel_layers_hold_without_the_audit_hook(tmp_path):
    """Landlock and seccomp alone (no audit hook, as if code had bypassed it) refuse the same escapes."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    probe = (f"import ctypes, os, socket, sys\nsys.path.insert(0, {str(Path(_sandbox._HARNESS).parent)!r})\n"
             "import _harness as h\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
             "print('landlock', h.landlock(libc, os.getcwd(), []) > 0, 'seccomp', h.seccomp(libc))\n"
             "for name, act in [('kill', lambda: os.kill(os.getppid(), 0)), ('fork', os.fork),\n"
             "                  ('exec', lambda: os.execv('/bin/true', ['true'])), ('setsid', os.setsid),\n"
             f"                  ('unlink', lambda: os.unlink({str(victim)!r})),\n"
             f"                  ('write', lambda: open({str(victim)!r}, 'w')),\n"
             "                  ('socket', lambda: socket.socket(socket.AF_UNIX))]:\n"
             "    try:\n        act()\n        print(name, 'allowed')\n"
             "    except OSError:\n        print(name, 'refused')\n")
    work = tmp_path / "work"
    work.mkdir()
    out = subprocess.run([sys.executable, "-I", "-S", "-c", probe], cwd=work, capture_output=True, text=True,
                         timeout=30).stdout
    if "landlock True" not in out:
        pytest.skip(f"Landlock is not available here: {out!r}")
    assert "seccomp True" in out and "allowed" not in out, out
    assert victim.read_text() == "keep me"


def test_values_costly_to_judge_stop_at_the_time_limit():
    """Issue 47: 30,000 ints that collide in their hash, returned as a list and turned into a set by the dataset's
    assert, made the judge quadratic in the caller (59 s against a 5 s limit); it now runs in a child bounded by
    `timeout_s`, and the run is a timeout."""
    code = "def f():\n    return [i * (2**61 - 1) for i in range(30000)]\n"
    result = run_tests(code, ["assert len(set(f())) == 1"], timeout_s=1.0)
    assert not result.passed and result.status == "timeout" and "the judge ran past" in result.output
    assert run_tests("def f():\n    return [1, 1]\n", ["assert len(set(f())) == 1"], timeout_s=5.0).passed
