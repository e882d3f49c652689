"""A run store moved to another folder (a copy, another machine, an unpacked archive) keeps its results.

A run that reads another run's output (an evaluation of a trained model, a sequence's second stage) names it in its
config. Runs stored before `identity.portable_paths` named it by absolute path, so their identity (and directory
name) depends on where the store lay when they were written: a moved store recomputes them. `relocate` renames such
directories to their portable identity (`run:<kind>-<hash>/...`), following renamed runs through the references of
the runs that read them, and rewrites their config.json and manifest to match. Stores written since keep their
identities wherever they lie and need no relocation; relocating one changes nothing.
"""

from __future__ import annotations

from pathlib import Path

from esreason_lib.paths import run_store_root
from esreason_lib.store.identity import RUN_DIR, RUN_REF, config_hash, portable_paths
from esreason_lib.store.integrity import read_json
from esreason_lib.store.runs import _write_json


def _follow(cfg, renamed: dict[str, str]):
    """`cfg` with every `run:<old>/...` reference to a renamed run pointing to its new name."""
    if isinstance(cfg, dict):
        return {k: _follow(v, renamed) for k, v in cfg.items()}
    if isinstance(cfg, list):
        return [_follow(v, renamed) for v in cfg]
    if isinstance(cfg, str) and cfg.startswith(RUN_REF):
        head, sep, rest = cfg[len(RUN_REF):].partition("/")
        return RUN_REF + renamed.get(head, head) + sep + rest
    return cfg


JOURNAL = ".relocate.json"
"""{old name: new name} of the renames a `relocate` has begun, in the store's root until it finishes: a killed
relocate is completed by the next one (renames it began, configs it had not rewritten yet)."""


def relocate(home: str | Path | None = None) -> dict[str, str]:
    """Give every run directory of the store `home` (default `$ESREASON_HOME` / `<repo>/runs`) its portable name;
    returns {old name: new name}. A directory whose portable name is already taken is left as it is (the one
    under the portable name is the run the store serves). Idempotent, and resumable: each rename is journaled
    (`JOURNAL`) before the directory is renamed, then its config.json and manifest are rewritten inside it, so a
    kill at any point leaves either the old directory or the renamed one, which the next call completes."""
    root = Path(home if home is not None else run_store_root())
    journal = read_json(root / JOURNAL) or {}
    renamed: dict[str, str] = {}
    for old, name in journal.items():  # a killed relocate: finish its renames
        if (root / old).is_dir() and not (root / name).exists():
            (root / old).rename(root / name)
        renamed[old] = name
    changed = True
    while changed:  # a rename can change the identity of the runs that read the renamed one
        changed = False
        for path in sorted(p for p in root.iterdir() if p.is_dir() and RUN_DIR.match(p.name)):
            cfg = read_json(path / "config.json")
            if not isinstance(cfg, dict):
                continue
            new = _follow(portable_paths(cfg), renamed)
            if new == cfg:
                continue
            name = f"{path.name[:-11]}-{config_hash(new)}"
            if name != path.name:
                if (root / name).exists():
                    continue
                journal[path.name] = name
                _write_json(root / JOURNAL, journal)
                path.rename(root / name)
                renamed[path.name] = name
            manifest = read_json(root / name / "manifest.json")
            if isinstance(manifest, dict):
                _write_json(root / name / "manifest.json", {**manifest, "config": new, "config_hash": name[-10:]})
            _write_json(root / name / "config.json", new)  # last: a config still to rewrite marks unfinished work
            changed = True
    (root / JOURNAL).unlink(missing_ok=True)
    return renamed
