"""Run the jupytext notebooks with papermill: `make reproduce`, `make figures` and the notebook smoke tests.

The notebooks live in `notebooks/NN_name.py` (jupytext percent format, one cell tagged `parameters`). Each is
converted in memory, executed by papermill in the repository's Python (kernel `python3` of this interpreter)
and written, executed, to `build/notebooks/NN_name.ipynb`. Heavy work inside a notebook is cached in the run
store, so re-running a notebook only redraws what is already computed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from .paths import BUILD_DIR, NOTEBOOK_DIR, REPO_ROOT


def list_notebooks(directory: Path = NOTEBOOK_DIR) -> list[Path]:
    """The numbered notebook sources `NN_*.py` in execution order."""
    return sorted(p for p in Path(directory).glob("[0-9][0-9]_*.py"))


def _parameters_cell(notebook, name: str):
    cells = [c for c in notebook.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    if not cells:
        raise ValueError(f"notebook {name!r} has no cell tagged 'parameters'")
    return cells[0]


def notebook_parameters(source: str | Path) -> dict:
    """The defaults set by a notebook's cell tagged `parameters` (what papermill would override)."""
    import jupytext

    cell = _parameters_cell(jupytext.read(Path(source)), Path(source).name)
    namespace: dict = {}
    exec(compile(cell.source, f"{Path(source).name}:parameters", "exec"), namespace)
    return {k: v for k, v in namespace.items() if not k.startswith("__")}


def run_notebook(source: str | Path, *, parameters: dict | None = None, out_dir: str | Path = BUILD_DIR,
                 kernel_name: str = "python3", progress: bool = True, timeout: int | None = None) -> Path:
    """Execute one jupytext notebook with papermill; returns the executed `.ipynb` path.

    `parameters` override the cell tagged `parameters` (papermill injects a cell after it). The notebook runs
    with the repository root as working directory, so relative paths resolve the same as in `make reproduce`.
    """
    import jupytext
    import papermill

    source = Path(source)
    if not source.is_file():
        raise FileNotFoundError(f"notebook source {str(source)!r} does not exist")
    notebook = jupytext.read(source)
    _parameters_cell(notebook, source.name)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    staged = out_dir / f"{source.stem}.input.ipynb"
    jupytext.write(notebook, staged, fmt="ipynb")
    output = out_dir / f"{source.stem}.ipynb"
    try:
        papermill.execute_notebook(
            str(staged), str(output), parameters=parameters or {}, kernel_name=kernel_name,
            progress_bar=progress, cwd=str(REPO_ROOT), execution_timeout=timeout,
        )
    finally:
        staged.unlink(missing_ok=True)
    return output


def run_notebooks(sources: list[str | Path], *, parameters: dict | None = None, out_dir: str | Path = BUILD_DIR,
                  progress: bool = True) -> dict[str, float]:
    """Execute notebooks in order, printing each one's wall time; returns {name: seconds}."""
    timings: dict[str, float] = {}
    for source in sources:
        start = time.perf_counter()
        print(f"[reproduce] running {Path(source).name} ...", file=sys.stderr, flush=True)
        run_notebook(source, parameters=parameters, out_dir=out_dir, progress=progress)
        timings[Path(source).stem] = time.perf_counter() - start
        print(f"[reproduce] {Path(source).name} done in {timings[Path(source).stem]:.0f} s", file=sys.stderr,
              flush=True)
    total = sum(timings.values())
    print(f"[reproduce] {len(timings)} notebooks in {total / 60:.1f} min (cpu count {os.cpu_count()})",
          file=sys.stderr, flush=True)
    return timings


LANES: tuple[tuple[str, ...], ...] = (("01", "03", "04", "05"), ("00", "02", "06"))
"""Notebook numbers that `run_notebooks_parallel` runs side by side, one lane per process: 03-05 reuse 01's
training runs, so they share a lane; 00, 02 and 06 train and evaluate only their own runs (00 and 06 share
the larger zoo models, built by 00). Notebooks in no lane run first, alone."""


def _prelude_models(preset_names: set[str]) -> list[str]:
    from .presets import get_preset
    from .zoo import ZOO

    presets = [get_preset(name) for name in sorted(preset_names)]
    return sorted({m for p in presets for m in (p.base_model, p.control_model) if m in ZOO})


def _wait_all(procs: list[tuple[list[str], subprocess.Popen]], what: str) -> None:
    failed = [names for names, proc in procs if proc.wait() != 0]
    if failed:
        raise RuntimeError(f"{what} failed: {failed}")


def run_notebooks_parallel(sources: list[str | Path], *, parameters: dict | None = None,
                           out_dir: str | Path = BUILD_DIR) -> dict[str, float]:
    """`run_notebooks`, with the `LANES` in separate processes of one thread each (tiny models do not get
    faster with a second thread, but two processes use both cores). First the preset's base and control zoo
    models, which every lane loads, are pretrained side by side, so no two lanes build the same run.
    Returns {name: seconds} of the notebooks run in this process, plus "wall"."""
    sources = [Path(s) for s in sources]
    lanes = [[s for s in sources if s.name[:2] in lane] for lane in LANES]
    first = [s for s in sources if not any(s in lane for lane in lanes)]
    start = time.perf_counter()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    override = (parameters or {}).get("preset")  # else each notebook's own default
    models = _prelude_models({override} if override else {notebook_parameters(s)["preset"] for s in sources})
    print(f"[reproduce] pretraining {models} side by side", file=sys.stderr, flush=True)
    _wait_all([([m], subprocess.Popen([sys.executable, "-m", "esreason_lib", "pretrain", m], env=env,
                                      cwd=REPO_ROOT, stderr=subprocess.DEVNULL)) for m in models], "pretraining")
    timings = run_notebooks(first, parameters=parameters, out_dir=out_dir, progress=False) if first else {}
    procs = []
    for lane in (lane for lane in lanes if lane):
        cmd = [sys.executable, "-m", "esreason_lib", "reproduce", "--no-claims", "--out-dir", str(out_dir),
               *(["--preset", override] if override else []),
               *map(str, lane)]
        procs.append(([s.name for s in lane], subprocess.Popen(cmd, env=env, cwd=REPO_ROOT)))
    _wait_all(procs, f"notebook lane(s) (executed notebooks in {out_dir})")
    wall = time.perf_counter() - start
    print(f"[reproduce] {len(sources)} notebooks in {wall / 60:.1f} min wall ({len(procs)} lanes)",
          file=sys.stderr, flush=True)
    return {**timings, "wall": wall}
