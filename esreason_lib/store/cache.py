"""The one "reuse the stored result or compute and store it" rule of the studies.

`stored_run(kind, config, build, seed=...)` opens the run of (kind, config) in the run store, locked for this
process: a complete run is returned as it is; otherwise `build(run)` writes its results (tables, a model) and the
run is finished (manifest last, so an interrupted computation is never taken for a result). `cached(kind, config,
names, compute, ...)` is the same for a computation whose results are tables. Under `ESREASON_STORED_ONLY=1`
(`make figures`) a missing result raises `MissingResult` naming the run, before anything is computed.
"""

from __future__ import annotations

from typing import Callable, Mapping

import pandas as pd

from esreason_lib.store.runs import Run


def stored_run(kind: str, config, build: Callable[[Run], Mapping | None], *, seed: int, home=None) -> Run:
    """The complete run of (kind, config): found, or built by `build(run)` and finished with the manifest fields
    `build` returns (None: none). Two processes never build one run at once: the second waits, then finds it."""
    run = Run.open(kind, config, seed=seed, home=home, lock=True)
    if run.is_complete():
        return run
    try:
        extra = build(run)
        run.finish(**dict(extra or {}))
    finally:
        run.release()
    return run


def cached(kind: str, config, names: tuple[str, ...], compute: Callable[..., Mapping[str, pd.DataFrame]], *,
           seed: int, home=None, with_run: bool = False) -> dict[str, pd.DataFrame]:
    """The tables `names` of run (kind, config): read when the run is complete, else `compute()` ({name: table},
    exactly `names`) and stored. With `with_run`, `compute(run)` gets the unfinished run, for a long computation
    that checkpoints into it and resumes from its last checkpoint. ValueError when a complete run lacks one of the
    tables."""

    def build(run: Run) -> None:
        tables = dict(compute(run) if with_run else compute())
        if sorted(tables) != sorted(names):
            raise ValueError(f"{kind}: compute() returned the tables {sorted(tables)}, expected {sorted(names)}")
        for name in names:
            run.write_table(name, tables[name])

    run = stored_run(kind, config, build, seed=seed, home=home)
    tables = {name: run.read_table(name) for name in names}
    missing = sorted(name for name, table in tables.items() if table is None)
    if missing:
        raise ValueError(f"{run.path} is complete but lacks the table(s) {missing}: move it away to recompute")
    return tables
