"""Run model-written Python against test asserts in a child process: bounded in time, memory, output and reach.

`run_tests(code, tests)` writes a harness to a fresh temporary directory and runs it as
`[unshare -rn] <python> -I -S harness.py` with an empty environment, that directory as working directory and its
own process group. The harness
  - sets resource limits (address space `memory_mb`, CPU seconds `timeout_s + 1`, files written at most
    `output_bytes` each, no core files), then reads a random token from stdin;
  - disables the network in-process (socket creation, connection and name lookup raise), in addition to
    `unshare -rn` (a new user and network namespace: no interface but loopback) when this machine allows it
    (`network_namespace()`; probed once);
  - replaces process creation, signalling and file removal/renaming (`os.system`, `os.fork`, `os.kill`,
    `subprocess.Popen`, `os.remove`, `shutil.rmtree`, ...) with functions that raise PermissionError;
  - executes the code, then the setup code and the asserts, in one `__main__` namespace, and only then prints the
    token. A run passes when the token is the last line of its output and the exit status is 0, so a program that
    exits early (`sys.exit(0)`, `os._exit(0)`) before the asserts fails.
stdout and stderr go to one file in the directory (at most `output_bytes`: the limit kills a writer past it); only
its last `TAIL_BYTES` are read back. On timeout the whole process group is killed; it is killed after every run
anyway. `python -I -S` sees neither PYTHONPATH, user site nor site-packages: the standard library only.
This guards against the accidents of model-written code (loops, memory blow-ups, stray writes, network calls); it
is not a security boundary against code written to escape it.
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ExecResult", "network_namespace", "run_tests"]

TAIL_BYTES = 4096
"""How much of the end of a run's output `ExecResult.output` keeps."""

_HARNESS = '''\
import resource, sys
for _k, _v in ((resource.RLIMIT_AS, {memory}), (resource.RLIMIT_CPU, {cpu}), (resource.RLIMIT_FSIZE, {fsize}),
               (resource.RLIMIT_CORE, 0)):
    resource.setrlimit(_k, (_v, _v))
_token = sys.stdin.readline().strip()
import os, shutil, socket, subprocess, _socket


def _denied(*args, **kwargs):
    raise PermissionError("disabled in the test sandbox")


class _NoSocket(socket.socket):
    def __init__(self, *args, **kwargs):
        raise PermissionError("network access is disabled in the test sandbox")


socket.socket = socket.SocketType = _socket.socket = _NoSocket
for _name in ("create_connection", "create_server", "socketpair", "fromfd", "getaddrinfo", "gethostbyname"):
    setattr(socket, _name, _denied)
for _name in ("system", "popen", "fork", "forkpty", "kill", "killpg", "execv", "execve", "execl", "execlp",
              "execvp", "execvpe", "spawnv", "spawnl", "posix_spawn", "posix_spawnp", "remove", "unlink", "rmdir",
              "removedirs", "rename", "renames", "replace", "truncate", "chmod", "chown"):
    if hasattr(os, _name):
        setattr(os, _name, _denied)
subprocess.Popen = shutil.rmtree = shutil.move = shutil.chown = _denied
_scope = {{"__name__": "__main__", "__builtins__": __builtins__}}
exec(compile({code!r}, "solution.py", "exec"), _scope)
exec(compile({tests!r}, "tests.py", "exec"), _scope)
sys.stdout.flush()
sys.stdout.write("\\n" + _token + "\\n")
sys.stdout.flush()
'''


@dataclass(frozen=True)
class ExecResult:
    """The outcome of one sandboxed run."""

    passed: bool
    """Every assert ran and held (the token was printed last, exit status 0)."""
    status: str
    """"passed", "failed" (an exception, a failed assert, an early exit or a limit's signal), "timeout", or
    "unavailable" (the child could not be started)."""
    output: str
    """The last `TAIL_BYTES` of the combined stdout/stderr (decoded with replacement), token excluded."""
    seconds: float
    """Wall-clock time of the run."""


@functools.cache
def network_namespace() -> tuple[str, ...]:
    """The command prefix that runs a program without network (`unshare -rn`), or () when unavailable here."""
    path = shutil.which("unshare")
    if path is None:
        return ()
    try:
        ok = subprocess.run([path, "-rn", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return (path, "-rn") if ok else ()


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_tests(code: str, tests: list[str] | tuple[str, ...], setup: str = "", *, timeout_s: float = 5.0,
              memory_mb: int = 1024, output_bytes: int = 1 << 20) -> ExecResult:
    """Run `code`, then `setup` and the assert lines `tests`, in a sandboxed child (module docstring), within
    `timeout_s` seconds of wall-clock time (plus process start and clean-up). Never raises."""
    start = time.perf_counter()
    try:
        token = secrets.token_hex(16)
        program = _HARNESS.format(memory=int(memory_mb) << 20, cpu=int(timeout_s) + 1, fsize=int(output_bytes),
                                  code=str(code), tests="\n".join([str(setup), *map(str, tests)]))
        with tempfile.TemporaryDirectory(prefix="esreason-sandbox-", ignore_cleanup_errors=True) as tmp:
            Path(tmp, "harness.py").write_text(program, encoding="utf-8")
            out_path = Path(tmp, "output.txt")
            with open(out_path, "wb") as out:
                proc = subprocess.Popen([*network_namespace(), sys.executable, "-I", "-S", "harness.py"], cwd=tmp,
                                        env={}, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
                                        start_new_session=True)
                try:
                    proc.communicate((token + "\n").encode(), timeout=timeout_s)
                    timed_out = False
                except subprocess.TimeoutExpired:
                    timed_out = True
                finally:
                    _kill_group(proc.pid)
                    proc.wait()
            with open(out_path, "rb") as fh:
                fh.seek(max(0, out_path.stat().st_size - TAIL_BYTES - len(token) - 2))
                tail = fh.read().decode("utf-8", errors="replace")
    except Exception as err:  # noqa: BLE001 (no temp dir, no process, ...: the run could not happen)
        return ExecResult(False, "unavailable", f"{type(err).__name__}: {err}", time.perf_counter() - start)
    lines = tail.rstrip("\n").rsplit("\n", 1)
    passed = not timed_out and proc.returncode == 0 and lines[-1] == token
    body = lines[0] if passed and len(lines) == 2 else ("" if passed else tail)
    status = "passed" if passed else "timeout" if timed_out else "failed"
    return ExecResult(passed, status, body[-TAIL_BYTES:], time.perf_counter() - start)
