"""Run every speed benchmark of `bench_es.py`, `bench_fast.py`, `bench_speed.py` and `bench_cli.py` in one process
and print one table; `--write` also writes `benchmarks/RESULTS.md` (machine, versions, date, the table).
`--reproduce tiny powered` first times `make reproduce` for those presets in a fresh clone (`bench_reproduce.py`: tens
of minutes).

    ESREASON_HOME=/tmp/bench-home .venv/bin/python benchmarks/run_all.py --write --reproduce tiny powered
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
import bench_cli  # noqa: E402
import bench_es  # noqa: E402
import bench_fast  # noqa: E402
import bench_reproduce  # noqa: E402
import bench_speed  # noqa: E402
from sweep_tiny import write_between_markers  # noqa: E402


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
    ap.add_argument("--reproduce", nargs="*", default=[], metavar="PRESET",
                    help="also time `make reproduce` for these presets, in this order, in one fresh clone")
    ap.add_argument("--keep-clone", type=Path, help="make that clone (with its store and log) here and leave it")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    header = [f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
              f"- machine: {_machine()}",
              f"- python {platform.python_version()}, torch {torch.__version__}, "
              f"transformers {transformers.__version__}",
              f"- command: `python benchmarks/run_all.py{' --write' if args.write else ''} --repeats {args.repeats}"
              f"{' --reproduce ' + ' '.join(args.reproduce) if args.reproduce else ''}` (each row: "
              "`python benchmarks/bench_es.py <benchmark>`, `bench_fast.py <benchmark>`, `bench_speed.py <benchmark>`, "
              "`bench_cli.py <benchmark>` or `bench_reproduce.py`)",
              "", ""]
    print("\n".join(header) + bench_es.HEADER, flush=True)
    rows = bench_reproduce.reproduce(args.reproduce, args.keep_clone) if args.reproduce else []
    for line in rows:
        print(line, flush=True)
    for module in (bench_es, bench_fast, bench_speed, bench_cli):
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
        write_speed_block(rows, header[0][len("- date: "):], SPEED_DOC)


SPEED_DOC = Path(__file__).resolve().parents[1] / "docs" / "speed.md"
"""Where the headline rows go (between its `speed` markers); the README links to it."""


HEADLINE = ("reproduce", "cli", "fast", "flops", "overhead", "grpo", "snapshots", "ratio")
"""The benchmarks whose rows with a goal docs/speed.md shows (`fast` at N = 32 only; `grpo` and `snapshots` on the
tiny preset's path only; `ratio` for the tiny preset's `fast` population; every `make reproduce` row); the others
stay in RESULTS.md."""


def _headline(c: list[str]) -> bool:
    """Whether the row of cells `c` is a headline row (`HEADLINE`)."""
    name, what = c[0].strip(), c[1]
    if name not in HEADLINE or (name != "reproduce" and c[4].strip() in ("none (a cost)", "none (an ablation)")):
        return False
    if name == "fast":
        return "N=8," not in what and "N=16," not in what
    if name in ("grpo", "snapshots"):
        return "(tiny's path)" in what
    return name != "ratio" or "/ fast population step" in what


def write_speed_block(rows: list[str], date: str, doc: Path) -> None:
    """Replace the block between the `speed` markers of `doc` (`SPEED_DOC`) with the headline rows' benchmark, what,
    ratio and goal columns (the measured seconds and the other rows stay in RESULTS.md) and the run's date."""
    cells = [c for c in (row.strip("|").split(" | ") for row in rows) if _headline(c)]
    table = ["| benchmark | what | ratio | goal |", "|---|---|---:|---|",
             *(f"| {c[0].strip()} | {c[1]} | {c[3]} | {c[4].strip()} |" for c in cells),
             "", f"Measured {date} (`benchmarks/RESULTS.md` has the machine, load and seconds)."]
    write_between_markers(doc, "speed", "\n".join(table))


if __name__ == "__main__":
    main()
