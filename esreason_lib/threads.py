"""How many threads a process's torch and OpenMP use: the cores it may run on, shared with whatever else is running.

`choose_threads` picks the count and `use_threads` applies it; the command line calls both once at start (`--threads`).
A tiny model gains from a second thread only when the core is free (measured in `benchmarks/RESULTS.md`, `threads`:
1.45-1.9x on an idle 2-core machine), and loses when it competes with another busy process, which torch's default (a
thread per core) does on a loaded machine. The thread count also changes float rounding where torch splits a
reduction across threads (GRPO's gradients: measured up to 1e-5 apart at 1 and 2 threads; ES's greedy forwards and
`generate`'s samples came out equal), so `make reproduce` keeps every process on one thread (the Makefile's
`OMP_NUM_THREADS=1`), and a run to be compared bit for bit with its results should use `--threads 1`.
"""

from __future__ import annotations

import os

THREADS_ENV = "ESREASON_THREADS"
"""The environment variable that sets the thread count when `--threads` is not given: an integer >= 1 or "auto"."""
AUTO = "auto"
"""The cores this process may use that other processes leave idle (at least 1)."""


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity; the machine's count where affinity is unknown)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def idle_cores(cores: int, load: float) -> int:
    """Of `cores` usable cores, those a 1-minute load average of `load` leaves free (at least 1): runs alone on an
    idle machine get every core, one beside busy processes gets one."""
    return max(1, min(cores, cores - int(round(load))))


def parse_threads(value, field: str) -> int | str:
    """`value` (an int, a numeric string or "auto") as an int >= 1 or `AUTO`; a one-line ValueError naming `field`
    and the value otherwise."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    try:
        count = int(value) if not isinstance(value, bool) and str(value).strip().isdigit() else None
    except (TypeError, ValueError):
        count = None
    if count is None or count < 1:
        raise ValueError(f"{field} must be a positive integer or 'auto', got {value!r}")
    return count


def choose_threads(requested=None, environ=None) -> int:
    """The thread count (at most the usable cores): `requested` (the `--threads` flag) when given, else
    `$ESREASON_THREADS`, else `$OMP_NUM_THREADS` (what the Makefile sets), else "auto": `idle_cores` of the usable
    cores at the current load."""
    environ = os.environ if environ is None else environ
    if requested is not None:
        choice = parse_threads(requested, "--threads")
    elif environ.get(THREADS_ENV):
        choice = parse_threads(environ[THREADS_ENV], THREADS_ENV)
    elif environ.get("OMP_NUM_THREADS"):
        choice = parse_threads(environ["OMP_NUM_THREADS"], "OMP_NUM_THREADS")
    else:
        choice = AUTO
    if choice == AUTO:
        return idle_cores(usable_cores(), os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0)
    return min(choice, usable_cores())


def use_threads(count: int) -> None:
    """Run torch on `count` threads in this process, and tell the processes it starts (notebook kernels, Ray
    workers, compilers) the same through OMP_NUM_THREADS and MKL_NUM_THREADS."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"thread count must be a positive int, got {count!r}")
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(count)
    import torch

    torch.set_num_threads(count)
