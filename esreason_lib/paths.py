"""Where things live on disk: the repository, the run store, the finding records, the figures, the notebooks.

Two environment variables move the writable places (tests and scratch runs use them): `ESREASON_HOME` (the run
store, default `<repo>/runs`; finding records live in its `findings/`) and `ESREASON_FIGURES` (default
`<repo>/figures`).
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
"""The repository root: the parent of the `esreason_lib` package."""
NOTEBOOK_DIR = REPO_ROOT / "notebooks"
"""The jupytext notebook sources `NN_name.py`."""
BUILD_DIR = REPO_ROOT / "build" / "notebooks"
"""Where executed notebooks (`NN_name.ipynb`) are written."""
CLAIMS_PATH = REPO_ROOT / "papers" / "claims.md"
"""The generated findings table."""
README_PATH = REPO_ROOT / "README.md"
"""The README, whose findings block `paper.claims.write_claims` replaces."""


def run_store_root() -> Path:
    """$ESREASON_HOME if set, else `<repo root>/runs`."""
    env = os.environ.get("ESREASON_HOME")
    return Path(env).expanduser() if env else REPO_ROOT / "runs"


def findings_dir(home: str | Path | None = None) -> Path:
    """Where finding records live: `<home or run_store_root()>/findings`."""
    return (Path(home) if home is not None else run_store_root()) / "findings"


def figures_dir() -> Path:
    """`$ESREASON_FIGURES` or `<repo>/figures`."""
    return Path(os.environ.get("ESREASON_FIGURES", REPO_ROOT / "figures"))
