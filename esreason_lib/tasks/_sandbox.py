"""Run model-written Python against test asserts in a confined child; the verdict is decided outside it, from values.

`run_tests(code, tests, setup)` splits each assert line into *probes* and a *judge* (`split_assert`): a probe is a
smallest sub-expression that needs the tested code (`add(1, 2)` in `assert add(1, 2) == 3`), the judge is the rest
with the probes as placeholders (`_probe_0 == 3`). Only the probes' source goes to the child; the child returns
their values as type-tagged JSON (`_harness.encode`: plain builtin values of exact types only); the judge
(`_judge.verdict`: in this process for results up to `INLINE_JUDGE_BYTES`, else in a second child, `python -I -S`,
no tested code in it, bounded by `timeout_s` of wall-clock time too) decodes them
(`decode`, as strictly) and evaluates each judge on them with the real builtins and standard-library modules. A
run passes when every probe reported a value, in order, and every judge holds.

Guaranteed here, whatever the tested code does: the verdict is not forgeable by printing, exiting early, `atexit`,
a lying `__eq__` or `__bool__` (no object of the tested code ever reaches the judge: a subclass of int is refused),
or by writing the results file: the child never sees the expected values, so to pass it must produce them, which
is what a solution does. (Code that hard-codes the answers to the visible asserts passes, as in MBPP itself.)

The child (`_harness.py`, `python -I -S`: standard library only, empty environment, a fresh temporary directory as
working directory and `TMPDIR`, its own session and process group) runs under `unshare -rnp --fork` when this
machine allows (`namespaces()`, probed once: new user, network and PID namespaces: no network but loopback, no
process outside is visible or signalable, and every process of the run dies with it) and confines itself in
layers (Landlock, seccomp on x86_64, an audit hook: see `_harness`): no writes outside its directory, no reads
outside it and the standard library, no new processes or programs, no sockets, no signals or tracing outside
it. The tested code's parent is a supervisor process of the sandbox, not this one. Resource limits: address space
`memory_mb`, CPU `timeout_s + 1` s, each written file `output_bytes` (the limit kills a writer past it), 64 open
files, no core files. After the run (`timeout_s` of wall-clock time at most) its whole process group is killed.
Not guaranteed: where Landlock or seccomp are missing (old kernels, other CPUs) only the audit hook remains, which
ctypes-free code cannot pass but which is no security boundary; the tested code may still read the standard
library and its own directory, burn its CPU and memory limits, and print up to `output_bytes`. Values that are
costly to judge (30,000 ints colliding in their hash turned into a set) stop the judge's child at `timeout_s`
(status "timeout"): a run takes at most about twice `timeout_s`. Short results are judged here unbounded: a
dataset assert that feeds a short returned value into costly arithmetic (`pow(2, f(3))` with f returning 10**100)
would stall it (no MBPP assert does).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ._judge import decode, split_assert, verdict

__all__ = ["ExecResult", "decode", "namespaces", "run_tests", "split_assert"]

TAIL_BYTES = 4096
"""How much of the end of a run's output `ExecResult.output` keeps."""
_HARNESS = str(Path(__file__).with_name("_harness.py"))
_JUDGE = str(Path(__file__).with_name("_judge.py"))
INLINE_JUDGE_BYTES = 1024
"""Results up to this long are judged in this process: too few values for a costly comparison (a child costs ~0.1 s
per run on a loaded 2-core machine, measured); longer ones in the bounded child."""
JUDGE_TIMEOUT = "timeout: the judge ran past the time limit"
"""The failure of a run whose values took longer than `timeout_s` to judge (status "timeout")."""


@dataclass(frozen=True)
class ExecResult:
    """The outcome of one sandboxed run."""

    passed: bool
    """Every probe reported a plain value and every assert held on those values."""
    status: str
    """"passed", "failed" (an exception, a failed assert, an early exit, a refused value or a limit's signal),
    "timeout", or "unavailable" (the child could not be started)."""
    output: str
    """The last `TAIL_BYTES` of the combined stdout/stderr (decoded with replacement), then the first failed
    assert when the judge failed one."""
    seconds: float
    """Wall-clock time of the run."""


@functools.cache
def namespaces() -> tuple[str, ...]:
    """The command prefix that runs a program in new user, network and PID namespaces (`unshare -rnp --fork`), or
    with new user and network namespaces only (`unshare -rn`), or () when neither works here."""
    path = shutil.which("unshare")
    for flags in (("-rnp", "--fork"), ("-rn",)):
        try:
            if path and subprocess.run([path, *flags, "true"], capture_output=True, timeout=10).returncode == 0:
                return (path, *flags)
        except (OSError, subprocess.SubprocessError):
            pass
    return ()


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _spawn(job: dict, tmp: str, timeout_s: float) -> tuple[bool, str, list[str]]:
    """(timed out, output tail, results lines) of one run of the harness in `tmp`."""
    out_path, results_path = Path(tmp, "output.txt"), Path(tmp, "results.jsonl")
    with open(out_path, "wb") as out:
        proc = subprocess.Popen([*namespaces(), sys.executable, "-I", "-S", _HARNESS], cwd=tmp, env={"TMPDIR": tmp},
                                stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.communicate((json.dumps(job) + "\n").encode(), timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _kill_group(proc.pid)
            proc.wait()
    with open(out_path, "rb") as fh:
        fh.seek(max(0, out_path.stat().st_size - TAIL_BYTES))
        tail = fh.read().decode("utf-8", errors="replace")
    lines = results_path.read_text("utf-8", errors="replace").splitlines() if results_path.is_file() else []
    return timed_out, tail, lines


def _judged(tests: list[str], lines: list[str], timeout_s: float) -> str | None:
    """`_judge.verdict(tests, lines)`: here when the results are at most `INLINE_JUDGE_BYTES` long, else computed in
    a `python -I -S` child bounded by `timeout_s` seconds of wall-clock time (`JUDGE_TIMEOUT` past it)."""
    if sum(len(line) for line in lines) <= INLINE_JUDGE_BYTES:
        return verdict(tests, lines)
    job = json.dumps({"tests": tests, "lines": lines}) + "\n"
    try:
        done = subprocess.run([sys.executable, "-I", "-S", _JUDGE], input=job.encode(), capture_output=True,
                              timeout=timeout_s, env={})
    except subprocess.TimeoutExpired:
        return JUDGE_TIMEOUT
    try:
        return json.loads(done.stdout)["failure"]
    except (ValueError, KeyError, TypeError):
        return f"the judge failed ({done.stderr.decode('utf-8', 'replace').strip()[-200:]})"


def run_tests(code: str, tests: list[str] | tuple[str, ...], setup: str = "", *, timeout_s: float = 5.0,
              memory_mb: int = 1024, output_bytes: int = 1 << 20) -> ExecResult:
    """Run `code` and `setup` in the sandboxed child, evaluate the probes of the assert lines `tests` there and
    judge them in the judge's child (module docstring), each within `timeout_s` seconds of wall-clock time (plus
    process start and clean-up). Never raises."""
    start = time.perf_counter()
    try:
        split = [(str(line), *split_assert(str(line))) for line in tests]
        probes = [p for _, _, ps in split for p in ps]
        setup = "\n".join([str(setup), *(line for line, judge, _ in split if judge is None)])
        limits = {"memory": int(memory_mb) << 20, "cpu": int(timeout_s) + 1, "fsize": int(output_bytes)}
        job = {"code": str(code), "setup": setup, "probes": probes, "limits": limits}
        with tempfile.TemporaryDirectory(prefix="esreason-sandbox-", ignore_cleanup_errors=True) as tmp:
            timed_out, tail, lines = _spawn(job, tmp, timeout_s)
    except Exception as err:  # noqa: BLE001 (no temp dir, no process, an unparsable test: the run could not happen)
        return ExecResult(False, "unavailable", f"{type(err).__name__}: {err}", time.perf_counter() - start)
    try:
        failure = "timeout" if timed_out else _judged([line for line, _, _ in split], lines, timeout_s)
    except Exception as err:  # noqa: BLE001 (no judge process)
        return ExecResult(False, "unavailable", f"{type(err).__name__}: {err}", time.perf_counter() - start)
    timed_out = failure in ("timeout", JUDGE_TIMEOUT)
    status = "passed" if failure is None else "timeout" if timed_out else "failed"
    output = tail if failure in (None, "timeout") else (tail + "\n" + failure).lstrip("\n")
    return ExecResult(failure is None, status, output[-TAIL_BYTES:], time.perf_counter() - start)
