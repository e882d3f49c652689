"""Run the jupytext notebooks with papermill: `make reproduce`, `make figures` and the notebook smoke tests.

Scheduling (which notebooks run side by side, which bases are pretrained first) is the Makefile's.

The notebooks live in `notebooks/NN_name.py` (jupytext percent format, one cell tagged `parameters`). Each is
converted in memory, executed by papermill in the repository's Python (kernel `python3` of this interpreter)
and written, executed, to `build/notebooks/NN_name.ipynb` (`build/notebooks/<preset>/` for a preset other than tiny:
`paths.executed_dir`). Heavy work inside a notebook is cached in the run store, so re-running a notebook only
redraws what is already computed. A notebook executes into a temporary file renamed when it completes, so an
interrupted or failed run leaves no half-executed notebook behind, and the paths papermill records in the executed
notebook's metadata are the source's and the output's relative to the repository (`portable_path`), not the
temporary files' absolute ones, so an executed notebook names no folder of the machine that ran it. `figure_names`
reads the figures a notebook saves from its source: the one list of figure names (papers/claims.md's figure column).
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

from esreason_lib.paths import NOTEBOOK_DIR, REPO_ROOT, executed_dir

KERNEL_ARGUMENTS = ("--IPKernelApp.log_level=ERROR",)
"""Passed to each kernel: its start-up warning (a local kernel "running over TCP without encryption") is silenced;
errors still show."""
_SAVE_FIGURE = re.compile(r"save_figure\(\s*\w+\s*,\s*(?:\"([^\"]*)\"|([^,)]*))")


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


def figure_names(source: str | Path) -> tuple[str, ...]:
    """The figure stems a notebook saves, in source order: the name argument of each `save_figure(fig, "NAME", ...)`
    call. ValueError naming the notebook for a call whose name is not a string literal (it could not be listed)."""
    names = []
    for literal, other in _SAVE_FIGURE.findall(Path(source).read_text()):
        if other:
            raise ValueError(f"notebook {Path(source).name!r} saves a figure named by {other.strip()!r}, not a "
                             f"string literal: write the name out so that the claims table can list it")
        names.append(literal)
    return tuple(names)


def portable_path(path: str | Path) -> str:
    """`path` relative to the repository root (POSIX), or its file name alone when it lies outside the repository:
    what an executed notebook records of where it came from and went."""
    path = Path(path).resolve()
    return path.relative_to(REPO_ROOT).as_posix() if path.is_relative_to(REPO_ROOT) else path.name


def record_origin(executed: Path, source: Path, output: Path) -> None:
    """Rewrite papermill's `input_path` and `output_path` in the executed notebook at `executed` (the temporary
    files' absolute paths) as `source` and `output`, `portable_path`s."""
    import nbformat

    notebook = nbformat.read(executed, as_version=4)
    notebook.metadata.papermill.update(input_path=portable_path(source), output_path=portable_path(output))
    nbformat.write(notebook, executed)


class NotebookError(RuntimeError):
    """A notebook raised; the message is the notebook's name and its own error line (`ename: evalue`)."""


def run_notebook(source: str | Path, *, parameters: dict | None = None, out_dir: str | Path | None = None,
                 kernel_name: str = "python3", progress: bool = False, timeout: int | None = None) -> Path:
    """Execute one jupytext notebook with papermill; returns the executed `.ipynb` path.

    `parameters` override the cell tagged `parameters` (papermill injects a cell after it). `out_dir` defaults
    to the executed notebooks' folder of the preset it runs at (`paths.executed_dir`: the `preset` parameter, else
    the notebook's own). The notebook runs with the repository root as working directory, so relative paths
    resolve the same as in `make reproduce`. `progress` draws papermill's cell bar on stderr (off by default: two
    notebooks run side by side would interleave theirs). The notebook executes into a temporary file in `out_dir`,
    renamed to `<stem>.ipynb` when it completes: a notebook that raises is a `NotebookError` carrying the first
    line of its own error, and it or an interrupt (Ctrl-C) leaves no executed notebook in `out_dir` (nor the
    staged input). The executed notebook records `source` and its own path relative to the repository
    (`record_origin`).
    """
    import jupytext
    import papermill
    from papermill.exceptions import PapermillExecutionError

    source = Path(source)
    if not source.is_file():
        raise FileNotFoundError(f"notebook source {str(source)!r} does not exist")
    notebook = jupytext.read(source)
    _parameters_cell(notebook, source.name)
    if out_dir is None:
        out_dir = executed_dir({**notebook_parameters(source), **(parameters or {})}.get("preset"))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    output = out_dir / f"{source.stem}.ipynb"
    output.unlink(missing_ok=True)  # a stale one would pass for this run's if this one fails
    staged, partial = (out_dir / f".{source.stem}.{os.getpid()}.{part}.ipynb" for part in ("input", "partial"))
    jupytext.write(notebook, staged, fmt="ipynb")
    try:
        papermill.execute_notebook(
            str(staged), str(partial), parameters=parameters or {}, kernel_name=kernel_name,
            progress_bar=progress, cwd=str(REPO_ROOT), execution_timeout=timeout,
            extra_arguments=list(KERNEL_ARGUMENTS),
        )
        record_origin(partial, source, output)
        os.replace(partial, output)
    except PapermillExecutionError as err:
        raise NotebookError(f"notebook {source.name} failed in cell {err.exec_count}: {err.ename}: "
                            f"{(str(err.evalue).strip().splitlines() or [''])[0]}") from None
    finally:
        staged.unlink(missing_ok=True)
        partial.unlink(missing_ok=True)
    return output


def run_notebooks(sources: list[str | Path], *, parameters: dict | None = None, out_dir: str | Path | None = None,
                  progress: bool = False) -> dict[str, float]:
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
