"""Run every speed benchmark of `bench_es.py` and `bench_fast.py` in one process and print one table; `--write` also writes
`benchmarks/RESULTS.md` (machine, versions, date, the table).

    ESREASON_HOME=/tmp/bench-home .venv/bin/python benchmarks/run_all.py --write
"""

from __future__ import annotations

import argparse
import datetime
import platform
import subprocess
import sys
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_es  # noqa: E402
import bench_fast  # noqa: E402


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "?"


def _machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    return (f"{cpu}, {torch.get_num_threads()} torch thread(s) of {subprocess.os.cpu_count()} cores, "
            f"load average {_load()} at the start")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write benchmarks/RESULTS.md")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    header = [f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
              f"- machine: {_machine()}",
              f"- python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}",
              f"- command: `python benchmarks/run_all.py{' --write' if args.write else ''} --repeats {args.repeats}` (each row: "
              "`python benchmarks/bench_es.py <benchmark>` or `bench_fast.py <benchmark>`)", "", ""]
    print("\n".join(header) + bench_es.HEADER, flush=True)
    rows = []
    for module in (bench_es, bench_fast):
        for name, fn in module.BENCHMARKS.items():
            for line in fn(module.parser().parse_args([name, "--repeats", str(args.repeats)])):
                print(line, flush=True)
                rows.append(line)
    end = f"\nLoad average at the end: {_load()} (on {subprocess.os.cpu_count()} cores)."
    print(end)
    if args.write:
        text = ("# Speed benchmarks\n\nWritten by `benchmarks/run_all.py --write` from its own output; ratios are "
                "measured side by side in one run (alternating the compared paths, best of the repeats).\n\n"
                + "\n".join(header) + bench_es.HEADER + "\n" + "\n".join(rows) + "\n" + end + "\n")
        (Path(__file__).resolve().parent / "RESULTS.md").write_text(text)


if __name__ == "__main__":
    main()
