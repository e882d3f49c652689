"""Run model-written Python against test asserts in a confined child; the verdict is decided here, from values.

`run_tests(code, tests, setup)` splits each assert line into *probes* and a *judge* (`split_assert`): a probe is a
smallest sub-expression that needs the tested code (`add(1, 2)` in `assert add(1, 2) == 3`), the judge is the rest
with the probes as placeholders (`_probe_0 == 3`). Only the probes' source goes to the child; the child returns
their values as type-tagged JSON (`_harness.encode`: plain builtin values of exact types only); this process
decodes them (`decode`, as strictly) and evaluates each judge on them with the real builtins and standard-library
modules. A run passes when every probe reported a value, in order, and every judge holds.

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
library and its own directory, burn its CPU and memory limits, and print up to `output_bytes`. The judge runs in
this process without a time limit: a dataset assert that feeds a returned value into costly arithmetic
(`pow(2, f(3))` with f returning 10**100) would stall it (no MBPP assert does; the values are at most
`output_bytes` long).
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
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

__all__ = ["ExecResult", "decode", "namespaces", "run_tests", "split_assert"]

TAIL_BYTES = 4096
"""How much of the end of a run's output `ExecResult.output` keeps."""
_HARNESS = str(Path(__file__).with_name("_harness.py"))
_BUILTINS = frozenset(dir(builtins))
_BINDS = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.NamedExpr)
"""Nodes that bind names of their own: a probe takes them whole."""


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


def split_assert(line: str) -> tuple[ast.Expression | None, list[str]]:
    """(judge, probe sources) of one test line: for `assert E`, E with every smallest sub-expression that needs
    the tested code replaced by a placeholder `_probe_<k>` (k counting from 0 in this line), as a compiled-ready
    Expression; for any other statement, (None, []) (it runs in the child as setup). SyntaxError when `line` is not
    Python. A name needs the tested code when it is called and is no builtin, or used otherwise and is neither a
    builtin nor a standard-library module."""
    tree = ast.parse(line)
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        return None, []
    test = tree.body[0].test
    called = {n.func.id for n in ast.walk(test) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    user = {n.id for n in ast.walk(test) if isinstance(n, ast.Name) and n.id not in _BUILTINS and
            (n.id in called or n.id not in sys.stdlib_module_names)}
    probes: list[str] = []

    def needs_code(node: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and n.id in user for n in ast.walk(node))

    class Split(ast.NodeTransformer):
        def visit(self, node):
            if not needs_code(node):
                return node
            if isinstance(node, (ast.Name, *_BINDS)) or (isinstance(node, ast.Call) and needs_code(node.func)):
                probes.append(ast.unparse(node))
                return ast.copy_location(ast.Name(id=f"_probe_{len(probes) - 1}", ctx=ast.Load()), node)
            return self.generic_visit(node)

    judge = ast.fix_missing_locations(ast.Expression(body=Split().visit(test)))
    return judge, probes


def decode(value, depth: int = 0):
    """The plain value a type-tagged JSON value (`_harness.encode`) stands for; ValueError on anything malformed."""
    if depth > 64 or not isinstance(value, list) or not value or not isinstance(value[0], str):
        raise ValueError("malformed probe value")
    tag, args = value[0], value[1:]
    if tag == "n" and not args:
        return None
    if len(args) == 1 and type(args[0]) is {"b": bool, "s": str}.get(tag):
        return args[0]
    if len(args) == 1 and isinstance(args[0], str) and tag in ("i", "f", "y"):
        return {"i": int, "f": float, "y": bytes.fromhex}[tag](args[0])
    if tag == "c" and len(args) == 2 and all(isinstance(a, str) for a in args):
        return complex(float(args[0]), float(args[1]))
    if len(args) == 1 and isinstance(args[0], list) and tag in ("l", "t", "S", "F"):
        return {"l": list, "t": tuple, "S": set, "F": frozenset}[tag](decode(v, depth + 1) for v in args[0])
    if tag == "d" and len(args) == 1 and isinstance(args[0], list) and all(
            isinstance(kv, list) and len(kv) == 2 for kv in args[0]):
        return {decode(k, depth + 1): decode(v, depth + 1) for k, v in args[0]}
    raise ValueError("malformed probe value")


def _judge(judge: ast.Expression, values: list) -> bool:
    """Whether `judge` holds with `_probe_<k>` = values[k], the real builtins and the standard-library modules it
    names (imported here: the tests' text is the dataset's, never the model's)."""
    scope = {"__builtins__": builtins}
    scope.update((f"_probe_{k}", v) for k, v in enumerate(values))
    for name in {n.id for n in ast.walk(judge) if isinstance(n, ast.Name)} - _BUILTINS - set(scope):
        scope[name] = importlib.import_module(name)
    return bool(eval(compile(judge, "tests.py", "eval"), scope))


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


def run_tests(code: str, tests: list[str] | tuple[str, ...], setup: str = "", *, timeout_s: float = 5.0,
              memory_mb: int = 1024, output_bytes: int = 1 << 20) -> ExecResult:
    """Run `code` and `setup` in the sandboxed child, evaluate the probes of the assert lines `tests` there and
    judge them here (module docstring), within `timeout_s` seconds of wall-clock time (plus process start and
    clean-up). Never raises."""
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
    failure = "timeout" if timed_out else _verdict(split, lines)
    status = "passed" if failure is None else "timeout" if timed_out else "failed"
    output = tail if failure in (None, "timeout") else (tail + "\n" + failure).lstrip("\n")
    return ExecResult(failure is None, status, output[-TAIL_BYTES:], time.perf_counter() - start)


def _verdict(split: list, lines: list[str]) -> str | None:
    """None when the results `lines` hold one plain value per probe, in order, and every judge holds on them;
    else what failed first."""
    values = []
    for k, line in enumerate(lines):
        try:
            index, encoded = json.loads(line)
            if index != k:
                return f"the results are out of order at probe {k}"
            values.append(decode(encoded))
        except Exception as err:  # noqa: BLE001 (anything the child wrote is untrusted)
            return f"probe {k}: unreadable value ({type(err).__name__})"
    if len(values) != sum(len(ps) for _, _, ps in split):
        return f"only {len(values)} of the probes reported a value (an exception, an exit or a refused value)"
    for line, judge, probes in split:
        mine, values = values[:len(probes)], values[len(probes):]
        try:
            if judge is not None and not _judge(judge, mine):
                return f"AssertionError: {line}"
        except Exception as err:  # noqa: BLE001 (a judge that raises on the reported values: a failed assert)
            return f"{type(err).__name__} in {line}: {err}"[:500]
    return None
