"""The README's command line against the same command under `make`'s environment (a script, not a test):

    .venv/bin/python benchmarks/bench_cli.py cli     # `esreason train es --preset tiny --set iterations=6`, both ways
    .venv/bin/python benchmarks/bench_cli.py error   # seconds from a bad command line to its one error line

The README runs `esreason ...` in the user's shell, with no thread variables set, and lets the library pick the
thread count (`esreason_lib/threads.py`); the Makefile exports OMP_NUM_THREADS=1 and MKL_NUM_THREADS=1. Each run is a
fresh process with a fresh run store ($ESREASON_HOME in a temporary directory, so nothing is reused; the zoo bases
ship with the checkout), the two environments alternated within each round, and the wall time (what a user waits,
start-up and imports included) kept as the median of `--repeats` rounds. The ratio is README / make; on a loaded
machine (another process busy on each core) it should stay near 1.

`error` times what a user waits for the answer to bad input (`ERRORS`: a misspelt `--set` field, a setting of the
other method, bad values, a missing model directory, an unknown preset, a missing bundle folder): each command's
`check` runs before torch loads (`esreason_lib.cli.main`; values: `training.early_checks`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMAND = ("train", "es", "--preset", "tiny", "--set", "iterations=6")
"""The README's command (`esreason train es --preset tiny --set iterations=6`), as `python -m esreason_lib` args."""
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "ESREASON_THREADS")
"""What decides the thread count besides `--threads`: unset for the README's run, the Makefile's for make's."""
GOALS = {"cli": "<= 1.3", "error": "< 2 s"}
ERRORS = (("train", "es", "--set", "sigam=1"), ("train", "es", "--set", "grpo.lr=1"),
          ("train", "es", "--set", "population_size=-3"), ("train", "grpo", "--set", "group_size=1"),
          ("train", "es", "--set", "model=/nonexistent/model"), ("train", "es", "--preset", "tinny"),
          ("import-results", "/nonexistent/bundle"))
"""Bad command lines `error` times, each answered by one `esreason: error:` line and exit status 2."""


def environments(base: dict[str, str]) -> dict[str, dict[str, str]]:
    """The two environments compared, from `base` (this process's): "readme" without any thread variable, "make" with
    the Makefile's OMP_NUM_THREADS=1 and MKL_NUM_THREADS=1; both import this checkout's `esreason_lib`."""
    clean = {k: v for k, v in base.items() if k not in THREAD_VARIABLES} | {"PYTHONPATH": str(ROOT)}
    return {"readme": clean, "make": clean | {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}}


def timed_run(env: dict[str, str]) -> float:
    """Wall seconds of one `python -m esreason_lib <COMMAND>` in `env` with a fresh, then deleted, run store;
    RuntimeError with the command's last stderr line when it fails."""
    with tempfile.TemporaryDirectory(prefix="esreason-bench-cli-") as home:
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "esreason_lib", *COMMAND], env=env | {"ESREASON_HOME": home},
                              capture_output=True, text=True)
        seconds = time.perf_counter() - t0
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["(no stderr)"])[-1]
        raise RuntimeError(f"`esreason {' '.join(COMMAND)}` failed ({done.returncode}): {last}")
    return seconds


def cli(args) -> list[str]:
    """The README's command without thread variables against make's environment, alternated, median of repeats."""
    envs = environments(dict(os.environ))
    times = {k: [] for k in envs}
    for _ in range(args.repeats):
        for name, env in envs.items():
            times[name].append(timed_run(env))
    med = {k: statistics.median(v) for k, v in times.items()}
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "?"
    return [f"| cli | `esreason {' '.join(COMMAND)}` as the README runs it / under make's OMP_NUM_THREADS=1 "
            f"(fresh store each, median of {args.repeats}; load {load} at the end) | "
            f"{med['readme']:.1f} s / {med['make']:.1f} s | **{med['readme'] / med['make']:.2f}x** | {GOALS['cli']} |"]


def time_to_error(argv: tuple[str, ...], env: dict[str, str]) -> float:
    """Wall seconds from starting `python -m esreason_lib <argv>` to its exit; RuntimeError unless it exits 2 with
    one `esreason: error:` line."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "esreason_lib", *argv], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    lines = done.stderr.strip().splitlines()
    if done.returncode != 2 or len(lines) != 1 or not lines[0].startswith("esreason: error: "):
        raise RuntimeError(f"`esreason {' '.join(argv)}`: expected one error line and exit 2, got "
                           f"{done.returncode}: {done.stderr.strip()[-200:]}")
    return seconds


def error(args) -> list[str]:
    """The slowest of `ERRORS`' median times to the error line, over `--repeats` rounds."""
    env = environments(dict(os.environ))["readme"]
    times = {argv: statistics.median(time_to_error(argv, env) for _ in range(args.repeats)) for argv in ERRORS}
    slowest = max(times, key=times.get)
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "?"
    return [f"| error | bad input to its one error line: {len(ERRORS)} command lines, the slowest "
            f"`esreason {' '.join(slowest)}` (median of {args.repeats}; load {load} at the end) | "
            f"{times[slowest]:.2f} s | **{times[slowest]:.2f} s** | {GOALS['error']} |"]


BENCHMARKS = {"cli": cli, "error": error}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("which", choices=sorted(BENCHMARKS))
    ap.add_argument("--repeats", type=int, default=3)
    return ap


def main(argv=None) -> None:
    from bench_es import print_rows

    print_rows(BENCHMARKS, parser().parse_args(argv))


if __name__ == "__main__":
    main()
