"""Run the jupytext notebooks with papermill: `make reproduce`, `make figures` and the notebook smoke tests.

Scheduling (which notebooks run side by side, which bases are pretrained first) is the Makefile's.

The notebooks live in `notebooks/NN_name.py` (jupytext percent format, one cell tagged `parameters`). Each is
converted in memory, executed by papermill in the repository's Python (kernel `python3` of this interpreter)
and written, executed, to `build/notebooks/NN_name.ipynb`. Heavy work inside a notebook is cached in the run
store, so re-running a notebook only redraws what is already computed.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from esreason_lib.paths import BUILD_DIR, NOTEBOOK_DIR, REPO_ROOT


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


class NotebookError(RuntimeError):
    """A notebook raised; the message is the notebook's name and its own error line (`ename: evalue`)."""


def run_notebook(source: str | Path, *, parameters: dict | None = None, out_dir: str | Path = BUILD_DIR,
                 kernel_name: str = "python3", progress: bool = True, timeout: int | None = None) -> Path:
    """Execute one jupytext notebook with papermill; returns the executed `.ipynb` path.

    `parameters` override the cell tagged `parameters` (papermill injects a cell after it). The notebook runs
    with the repository root as working directory, so relative paths resolve the same as in `make reproduce`.
    A notebook that raises is a `NotebookError` carrying its own error line, and leaves no executed notebook in
    `out_dir` (nor the staged input).
    """
    import jupytext
    import papermill
    from papermill.exceptions import PapermillExecutionError

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
    except PapermillExecutionError as err:
        output.unlink(missing_ok=True)
        raise NotebookError(f"notebook {source.name} failed in cell {err.exec_count}: {err.ename}: "
                            f"{(str(err.evalue).strip().splitlines() or [''])[-1]}") from None
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
