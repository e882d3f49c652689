"""The one "reuse the stored result or compute and store it" rule of the studies.

`cached(kind, config, compute, seed=...)` opens the run of (kind, config) in the run store; when it is complete its
tables are read back, otherwise `compute()` runs, its tables are written and the run is marked complete (manifest
last, so an interrupted computation is never taken for a result). Under `ESREASON_STORED_ONLY=1` (`make figures`)
a missing result raises `MissingResult` naming the run, before anything is computed.
"""

from __future__ import annotations

from typing import Callable, Mapping

import pandas as pd

from esreason_lib.store.runs import Run


def cached(kind: str, config, names: tuple[str, ...], compute: Callable[[], Mapping[str, pd.DataFrame]], *,
           seed: int, home=None, lock: bool = True) -> dict[str, pd.DataFrame]:
    """The tables `names` of run (kind, config): read when the run is complete, else `compute()` ({name: table},
    exactly `names`), stored, and the run finished. With `lock`, two processes never compute one run at once (the
    second waits, then reads). ValueError when a complete run lacks one of the tables."""
    run = Run.open(kind, config, seed=seed, home=home, lock=lock)
    if run.is_complete():
        tables = {name: run.read_table(name) for name in names}
        missing = sorted(name for name, table in tables.items() if table is None)
        if missing:
            raise ValueError(f"{run.path} is complete but lacks the table(s) {missing}: move it away to recompute")
        return tables
    try:
        tables = dict(compute())
        if sorted(tables) != sorted(names):
            raise ValueError(f"{kind}: compute() returned the tables {sorted(tables)}, expected {sorted(names)}")
        for name in names:
            run.write_table(name, tables[name])
        run.finish()
    finally:
        run.release()
    return tables
