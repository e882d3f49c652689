"""Result bundles: a run store's tables without its weights, small enough to commit, so that `make figures`
redraws every figure and the claims on a fresh clone without training.

`export_results(out, home)` writes `<out>/runs.tar.xz`: for every complete run of the store its config.json,
manifest.json (marked `"results_only": true`), metrics.jsonl and results/*.csv, plus the finding records under
findings/; never model weights, snapshots or checkpoints. `import_results(out, home)` unpacks it into a store,
never overwriting a run directory that exists there (a trained run stays as it is). An imported run is complete
only for reading stored results (`$ESREASON_STORED_ONLY`, `make figures`; `Run.is_complete`): a training or
evaluation run that needs it recomputes it.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path, PurePosixPath

from esreason_lib.paths import run_store_root
from esreason_lib.store.identity import RUN_DIR
from esreason_lib.store.integrity import atomic_write_bytes, read_json
from esreason_lib.store.runs import RESULTS_ONLY, Run

ARCHIVE = "runs.tar.xz"
"""The bundle's file name inside its folder (e.g. papers/results/powered/runs.tar.xz)."""
_FILES = ("config.json", "metrics.jsonl")


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0  # no times: the same store gives the same bytes
    tar.addfile(info, io.BytesIO(data))


def export_results(out: str | Path, home: str | Path | None = None) -> Path:
    """Write the bundle of the store `home` (default `$ESREASON_HOME` / `<repo>/runs`) to `<out>/runs.tar.xz`
    (module docstring); returns its path. ValueError when the store holds no complete run."""
    root = Path(home if home is not None else run_store_root())
    runs = []
    for path in sorted(p for p in root.iterdir() if p.is_dir() and RUN_DIR.match(p.name)) if root.is_dir() else []:
        manifest = read_json(path / "manifest.json")
        if isinstance(manifest, dict) and manifest.get("status") == "complete" and (
                manifest.get(RESULTS_ONLY) or Run(path, path.name[:-11], manifest.get("config"), 0).is_complete()):
            runs.append((path, manifest))
    if not runs:
        raise ValueError(f"export: the run store {root} holds no complete run")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz", preset=9) as tar:  # xz: ~3.5x smaller than gzip on these tables
        for path, manifest in runs:
            for name in _FILES:
                if (path / name).is_file():
                    _add(tar, f"{path.name}/{name}", (path / name).read_bytes())
            for table in sorted((path / "results").glob("*.csv")):
                _add(tar, f"{path.name}/results/{table.name}", table.read_bytes())
            _add(tar, f"{path.name}/manifest.json", (json.dumps({**manifest, RESULTS_ONLY: True}, indent=2,
                                                               sort_keys=True) + "\n").encode())  # last
        for record in sorted((root / "findings").rglob("*.json")):
            _add(tar, record.relative_to(root).as_posix(), record.read_bytes())
    target = Path(out) / ARCHIVE
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(target, buffer.getvalue())
    return target


def _safe(name: str) -> bool:
    parts = PurePosixPath(name).parts
    return bool(parts) and not PurePosixPath(name).is_absolute() and ".." not in parts and (
        RUN_DIR.match(parts[0]) is not None or parts[0] == "findings")


def import_results(out: str | Path, home: str | Path | None = None) -> int:
    """Unpack `<out>/runs.tar.xz` into the store `home`: run directories that do not exist there, and finding
    records that do not; returns the number of run directories added. ValueError naming the member for an
    archive entry outside a run directory or findings/ (an absolute path, '..', a link)."""
    root = Path(home if home is not None else run_store_root())
    archive = Path(out) / ARCHIVE
    if not archive.is_file():
        raise ValueError(f"import: no result bundle at {archive}")
    added: set[str] = set()
    with tarfile.open(archive, mode="r:xz") as tar:
        members = tar.getmembers()
        for m in members:
            if not (m.isfile() and _safe(m.name)):
                raise ValueError(f"import: {archive} holds {m.name!r}, not a file of a run directory or findings/")
        present = {m.name.split("/", 1)[0] for m in members if (root / m.name.split("/", 1)[0]).exists()}
        for m in members:
            top = m.name.split("/", 1)[0]
            target = root / m.name
            if top in present and (top != "findings" or target.exists()):
                continue
            data = tar.extractfile(m).read()
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(target, data)
            if top != "findings":
                added.add(top)
    return len(added)
