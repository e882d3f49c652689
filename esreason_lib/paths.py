"""Where things live on disk: the repository, the run store, the finding records, the figures, the notebooks.

Two environment variables move the writable places (tests and scratch runs use them): `ESREASON_HOME` (the run
store, default `<repo>/runs`; finding records live in its `findings/`) and `ESREASON_FIGURES` (default
`<repo>/figures`).

Each preset owns its figures, finding records and executed notebooks: the default preset (`DEFAULT_PRESET`, whose
results are the committed ones) at the top of each place, any other in a sub-folder named after it
(`figures/smoke/`, `findings/powered/`, `build/notebooks/smoke/`), so a run at one preset never changes another's.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
"""The repository root: the parent of the `esreason_lib` package."""
NOTEBOOK_DIR = REPO_ROOT / "notebooks"
"""The jupytext notebook sources `NN_name.py`."""
BUILD_DIR = REPO_ROOT / "build" / "notebooks"
"""Where executed notebooks (`NN_name.ipynb`) of the default preset are written (`executed_dir`)."""
CLAIMS_PATH = REPO_ROOT / "papers" / "claims.md"
"""The generated findings table."""
README_PATH = REPO_ROOT / "README.md"
"""The README, whose findings block `paper.claims.write_claims` replaces."""
DEFAULT_PRESET = "tiny"
"""The preset whose figures, records and executed notebooks sit at the top of their folders (the committed ones)."""


def preset_folder(root: str | Path, preset: str | None = None) -> Path:
    """`root` for the default preset (None or `DEFAULT_PRESET`), `root/<preset>` for any other."""
    if preset is not None and (not isinstance(preset, str) or not preset or "/" in preset or preset.startswith(".")):
        raise ValueError(f"preset must be a plain preset name, got {preset!r}")
    return Path(root) if preset in (None, DEFAULT_PRESET) else Path(root) / preset


def run_store_root() -> Path:
    """$ESREASON_HOME if set, else `<repo root>/runs`."""
    env = os.environ.get("ESREASON_HOME")
    return Path(env).expanduser() if env else REPO_ROOT / "runs"


def findings_dir(home: str | Path | None = None, preset: str | None = None) -> Path:
    """Where the finding records of `preset` live: `<home or run_store_root()>/findings`, in `preset`'s sub-folder
    for a preset other than the default (`preset_folder`)."""
    return preset_folder((Path(home) if home is not None else run_store_root()) / "findings", preset)


def figures_dir(preset: str | None = None) -> Path:
    """Where the figures of `preset` are saved: `$ESREASON_FIGURES` or `<repo>/figures`, in `preset`'s sub-folder
    for a preset other than the default (`preset_folder`)."""
    return preset_folder(os.environ.get("ESREASON_FIGURES", REPO_ROOT / "figures"), preset)


def executed_dir(preset: str | None = None) -> Path:
    """Where the executed notebooks of `preset` are written: `BUILD_DIR`, in `preset`'s sub-folder for a preset
    other than the default (`preset_folder`)."""
    return preset_folder(BUILD_DIR, preset)
