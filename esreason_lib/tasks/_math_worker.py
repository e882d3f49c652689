"""A math_verify check with a hard time limit: a persistent child process, killed and restarted on overrun.

A Python thread running sympy cannot be stopped (a runaway `10**10**10` never returns and keeps its thread),
so `MathWorker.check` sends each (gold, answer) pair to one long-lived child interpreter over a pipe and waits
at most `timeout_s`. When the child overruns (or dies), it is killed and a fresh one is started at once, in the
background, so that the next check finds it importing already. The child counts as no answer on anything that
goes wrong (parse failure, exception, MemoryError under its address-space cap): it answers "0".

The child runs this file as a script (`python -I <this file> <parent sys.path as JSON>`), so it imports neither
the package nor the caller's `__main__`; it needs only the standard library and math_verify. Protocol: the child
prints "ready" once imported, then for each request line `[id, [gold, answer]]` (JSON) one line "<id> 1" or
"<id> 0", and for each `[id, {"file", "function", "args"}]` (`MathWorker.call`) one line "<id> [result]" (JSON)
or "<id> error". POSIX only (the wait uses `select` on the pipe). Checks from several threads are serialised, so a
caller may also wait for the checks queued before its own.

Guarantee: a verdict always answers its own question. Every request carries a fresh id and a reply with another
id is discarded (a stale reply never answers a later check); and when anything interrupts a check (an exception,
KeyboardInterrupt), the child is killed and restarted before the exception reaches the caller, so no reply is
left in the pipe. `timeout_s` must be a finite number of seconds in (0, `MAX_TIMEOUT_S`] (`base.check_seconds`).

Correctness rules beyond `math_verify.verify(gold, answer)` (gold first), both against lenient false positives:
  - floats are compared at the precision the answer states (`float_rounding` = its longest run of decimals,
    at least 6, no upper clamp), so 0.50000001 and 0.5000000000000001 are not 1/2 while 0.5 and 0.333333 still
    equal 1/2 and 1/3;
  - an answer that is a relation (`a=1/2`, `x<3`) never equals a gold that is not one.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import threading
import time

MAX_TIMEOUT_S = 3600.0
"""The longest `timeout_s` a check accepts (select() overflows on huge values; an hour is no verifier bound)."""
STARTUP_TIMEOUT_S = 120.0
"""Longest wait for a (re)started child to import math_verify before a check gives up (counted as no result)."""
MEMORY_CAP_BYTES = 4 * 2**30
"""The child's address-space limit (RLIMIT_AS): a runaway allocation raises MemoryError there, not here."""

_DECIMALS = re.compile(r"\.(\d+)")


def float_rounding(answer: str) -> int:
    """The decimal places at which floats are compared: `answer`'s longest run of decimals, at least 6."""
    return max(6, max((len(m.group(1)) for m in _DECIMALS.finditer(answer)), default=0))


class WorkerUnavailable(RuntimeError):
    """The child could not be started or did not become ready within `STARTUP_TIMEOUT_S`."""


class MathWorker:
    """One child process serving math_verify checks, one at a time (a lock serialises callers' threads)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._owner = 0
        """pid of the process that started `_proc` (a forked copy of this object starts its own child)."""
        self._ready = False
        self._buf = b""
        self.checks = 0
        """How many checks reached a child (for tests and diagnostics)."""
        self.restarts = 0
        """How many times a child was killed for overrunning or found dead (for tests and diagnostics)."""

    def check(self, gold: str, answer: str, timeout_s: float) -> bool:
        """Whether `answer` equals `gold` per the module's rules; False when the child takes over `timeout_s`
        seconds (it is then killed and restarted). Raises WorkerUnavailable when no child could be made ready,
        ValueError on a bad `timeout_s`; any exception or interrupt kills the child before it propagates (the next
        check starts a fresh one)."""
        from .base import check_seconds  # noqa: PLC0415 (this file also runs as a script, without its package)

        timeout_s = check_seconds(timeout_s, "timeout_s", MAX_TIMEOUT_S)
        return self._ask([gold, answer], timeout_s) == b"1"

    def call(self, module_file: str, function: str, args: list, timeout_s: float):
        """`function(*args)` of the module file `module_file` (stdlib and math_verify imports only: the child
        loads the file by itself, outside any package), run in the child; its result must be JSON. Raises
        TimeoutError when the child takes over `timeout_s` seconds (it is then killed and restarted) or the call
        raised, WorkerUnavailable when no child could be made ready; interrupts as in `check`."""
        from .base import check_seconds  # noqa: PLC0415

        timeout_s = check_seconds(timeout_s, "timeout_s", MAX_TIMEOUT_S)
        reply = self._ask({"file": module_file, "function": function, "args": args}, timeout_s)
        if reply is None or not reply.startswith(b"["):
            raise TimeoutError(f"{function} did not return within {timeout_s} s in the math_verify worker")
        return json.loads(reply)[0]

    def _ask(self, payload, timeout_s: float) -> bytes | None:
        """The body of the child's reply to `payload` (matched by a fresh request id); None (after a restart) on
        overrun or death. Any exception or interrupt kills the child before it propagates."""
        with self._lock:
            try:
                return self._exchange(payload, timeout_s)
            except BaseException:  # the request may be in flight: its reply must never answer a later one
                self._kill()
                raise

    def _exchange(self, payload, timeout_s: float) -> bytes | None:
        if self._proc is None or self._owner != os.getpid() or self._proc.poll() is not None:
            self._start()
        if not self._ready:
            if self._read_line(time.monotonic() + STARTUP_TIMEOUT_S) != b"ready":
                self._kill()
                raise WorkerUnavailable("the math_verify worker process did not start (is math-verify installed?)")
            self._ready = True
        self.checks += 1
        request = self.checks
        try:
            self._proc.stdin.write(json.dumps([request, payload]).encode() + b"\n")
            self._proc.stdin.flush()
        except OSError:  # the child died between requests
            self._restart()
            return None
        deadline = time.monotonic() + timeout_s
        while (reply := self._read_line(deadline)) is not None:
            ident, _, body = reply.partition(b" ")
            if ident == str(request).encode():
                return body
        self._restart()  # overran, or died mid-request
        return None

    def close(self) -> None:
        """Stop the child (it also exits by itself when this process closes its stdin)."""
        with self._lock:
            self._kill()

    def pid(self) -> int | None:
        """The running child's process id, or None."""
        return None if self._proc is None else self._proc.pid

    def _start(self) -> None:
        self._kill()
        cmd = [sys.executable, "-I", os.path.abspath(__file__), json.dumps(sys.path)]
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, close_fds=True)
        self._owner, self._ready, self._buf = os.getpid(), False, b""

    def _restart(self) -> None:
        self.restarts += 1
        self._start()

    def _kill(self) -> None:
        if self._proc is not None and self._owner == os.getpid():
            self._proc.kill()
            self._proc.wait()
            self._proc.stdin.close()
            self._proc.stdout.close()
        self._proc = None

    def _read_line(self, deadline: float) -> bytes | None:
        """The child's next output line (without the newline), or None at `deadline` or end of file."""
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line


# ------------------------------------------------------------------------------------------ the child side
def _serve() -> None:  # pragma: no cover (runs in the child process; covered through MathWorker's tests)
    sys.path[:] = json.loads(sys.argv[1])
    out = os.fdopen(os.dup(1), "wb")  # replies only; anything a library prints goes to stderr (discarded)
    os.dup2(2, 1)
    try:
        import resource  # noqa: PLC0415 (POSIX only)

        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP_BYTES, MEMORY_CAP_BYTES))
    except (ImportError, ValueError, OSError):
        pass
    import importlib.util  # noqa: PLC0415
    import logging  # noqa: PLC0415
    from functools import lru_cache  # noqa: PLC0415

    logging.disable(logging.CRITICAL)  # math_verify warns on every call that its own timeouts are off
    from math_verify import parse, verify  # noqa: PLC0415
    from sympy.core.relational import Relational  # noqa: PLC0415

    @lru_cache(maxsize=4096)
    def parsed(latex: str) -> list:
        return parse(f"\\boxed{{{latex}}}", parsing_timeout=None)

    def is_relation(exprs: list) -> bool:
        return bool(exprs) and isinstance(exprs[0], Relational)

    def equal(gold: str, answer: str) -> bool:
        g, p = parsed(gold), parsed(answer)
        if not g or not p or (is_relation(p) and not is_relation(g)):
            return False
        return bool(verify(g, p, float_rounding=float_rounding(answer), timeout_seconds=None))

    out.write(b"ready\n")
    out.flush()
    modules = {}

    def call(file: str, function: str, args: list) -> bytes:
        if file not in modules:
            spec = importlib.util.spec_from_file_location(f"_worker_module_{len(modules)}", file)
            modules[file] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(modules[file])
        return json.dumps([getattr(modules[file], function)(*args)]).encode()

    for line in sys.stdin.buffer:
        request, payload = None, None
        try:
            request, payload = json.loads(line)
            if isinstance(payload, dict):
                body = call(payload["file"], payload["function"], payload["args"])
            else:
                body = b"1" if equal(*payload) else b"0"
        except BaseException:  # noqa: BLE001 (MemoryError, RecursionError, sympy's own errors: all mean "no")
            body = b"error" if isinstance(payload, dict) else b"0"
        out.write(f"{request} ".encode() + body + b"\n")
        out.flush()

if __name__ == "__main__":
    _serve()
