"""`make reproduce` wall time from a fresh clone with an empty run store (a script, not a test):

    .venv/bin/python benchmarks/bench_reproduce.py tiny powered     # tiny, then powered on the store tiny left
    .venv/bin/python benchmarks/bench_reproduce.py tiny-exact
    .venv/bin/python benchmarks/bench_reproduce.py frontier         # a design: `make reproduce-design`

The presets run one after the other in one clone of this checkout's HEAD (committed files only) and one run store,
so a later preset reuses what an earlier one computed (`powered` reuses tiny's runs for notebooks 01, 03 and 04;
measured alone it also pays for them). The clone uses this checkout's virtual environment (`.venv`), so nothing
is installed; the shipped zoo models come with the clone, as on a user's fresh clone. Each row is one `make
reproduce PRESET=<preset>` (pretraining of missing bases, the prefill, the notebooks and the claims), or for a
multi-setting design's name (`presets.DESIGNS`) one `make reproduce-design DESIGN=<design>` (all its settings);
the machine should be otherwise idle.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

from esreason_lib.paper.studies.presets import DESIGNS

ROOT = Path(__file__).resolve().parents[1]
GOALS = {"tiny": "<= 15 min", "frontier": "<= 3 h"}


def reproduce(presets: list[str], keep: Path | None = None) -> list[str]:
    """One table row per preset: the wall time of `make reproduce PRESET=<preset>` in a fresh clone (made under
    `keep`, and left there with its store and log, when given: to compare its results with the committed ones)."""
    rows = []
    place = tempfile.TemporaryDirectory(prefix="esreason-reproduce-") if keep is None else nullcontext(str(keep))
    with place as tmp:
        Path(tmp).mkdir(parents=True, exist_ok=True)
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        (clone / ".venv").symlink_to(ROOT / ".venv")
        os.utime(clone / "pyproject.toml", (0, 0))  # older than .venv/.installed: make does not reinstall
        env = {**os.environ, "PYTHONPATH": str(clone), "ESREASON_HOME": str(Path(tmp) / "store")}
        log = Path(tmp) / "reproduce.log"
        for i, preset in enumerate(presets):
            command = (["make", "reproduce-design", f"DESIGN={preset}"] if preset in DESIGNS
                       else ["make", "reproduce", f"PRESET={preset}"])
            t0 = time.perf_counter()
            with log.open("a") as out:
                done = subprocess.run(command, cwd=clone, env=env, stdout=out, stderr=subprocess.STDOUT)
            minutes = (time.perf_counter() - t0) / 60
            if done.returncode:
                sys.exit(f"{' '.join(command)} failed ({done.returncode}); its log:\n"
                         + "\n".join(log.read_text().splitlines()[-30:]))
            where = "from an empty store" if i == 0 else f"after {', '.join(presets[:i])} in the same store"
            rows.append(f"| reproduce | `{' '.join(command)}` in a fresh clone, {where} | "
                        f"{minutes * 60:.0f} s | **{minutes:.1f} min** | {GOALS.get(preset, 'none (a cost)')} |")
    return rows


def main(argv=None) -> None:
    from bench_es import HEADER

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("presets", nargs="+", help="presets (or designs) in the order they run (one store)")
    ap.add_argument("--keep", type=Path, help="make the clone, store and log here and leave them")
    args = ap.parse_args(argv)
    print(HEADER)
    for line in reproduce(args.presets, args.keep):
        print(line, flush=True)


if __name__ == "__main__":
    main()
