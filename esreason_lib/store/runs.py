"""The run store: one directory per (kind, config), resumable, with a manifest written last.

Layout of `<home>/<kind>-<config_hash>/`:
    config.json        canonical config (written at open)
    started.json       kind, hash, seed, first start time (+ resume times)
    metrics.jsonl      one JSON line per `log` call: {"step": ..., "<namespace>/<name>": ...}
    checkpoints/       step-XXXXXX.pt (`store.checkpoints`: tensors and plain data only, sealed with its sha256
                       and the run's kind/config hash/step; atomic; the last 2 kept, all removed when the run
                       completes unless its config sets keep_checkpoints)
    results/<name>.csv tidy tables (atomic)
    model/             save_pretrained target (`Run.model_dir`)
    manifest.json      written last and atomically by `finish`; status "complete" marks done, "failed" a run
                       stopped by an error; it records the sha256 of every file under model/
    .lock              flock held by the process training the run (`Run.open(..., lock=True)`)

Trust rules. A run is complete only while its manifest says so and every file under model/ still matches the
recorded sha256 (else a `RunStoreWarning` and it is not complete: the trainer resumes from its last checkpoint
and rewrites model/). A checkpoint is used only when its seal checks (sha256, kind, config hash, step); a bad one
is skipped with a warning naming it and the reason, and the next older one (or the base) is used. A line of
metrics.jsonl that is not a JSON object with an integer "step" is skipped with a warning naming the file and its
1-based line. A checkpoint at step s is used only when the valid lines above the first bad one log every step
1..s (the trainers log each iteration before checkpointing it), so a metrics file that lost lines rewinds the
run to an older checkpoint (or the base) and no logged step is ever missing: the steps after it are recomputed.
A manifest is checked against the files: a complete es/grpo/zoo run must record its model files. A FIFO or any
other non-regular file at a store path is refused (`NotARegularFile`, naming it) instead of blocking a reader.
A complete run is opened without writing anything (a read-only store serves it).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from esreason_lib.store.identity import canonical_json, git_sha, jsonable, locate, package_versions
from esreason_lib.store.integrity import (
    DirectoryLock,
    atomic_write_bytes,
    check_regular,
    follow_umask,
    read_json,
    read_metric_lines,
    tree_digest,
    tree_mismatch,
    warn_store,
)
from esreason_lib.store.reporting import report
from esreason_lib.store.run_checkpoints import RunCheckpoints

_SLUG = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_TABLE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
MODEL_KINDS = ("es", "grpo", "zoo")
"""Run kinds that end by saving a model under model/: their manifest must record at least one model file."""
_RESERVED = {"kind", "config", "config_hash", "seed", "versions", "git_sha", "started", "ended", "status",
             "model_files"}


RESULTS_ONLY = "results_only"
"""Manifest key of a run imported from a result bundle (`store.bundle`): its tables are there, its weights not."""
STORED_ONLY = "ESREASON_STORED_ONLY"
"""Environment variable: when set (non-empty), `Run.open` only reopens complete runs (`make figures`)."""


class MissingResult(RuntimeError):
    """A result that `$ESREASON_STORED_ONLY` forbids computing is not in the run store."""


def _check_kind(kind) -> str:
    if not isinstance(kind, str) or not _SLUG.match(kind):
        raise ValueError(f"kind must be a simple slug (lowercase letters, digits, '-', '_'; starts with a "
                         f"letter or digit; at most 64 chars), got {kind!r}")
    return kind


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _write_json(path: Path, data: dict) -> None:
    atomic_write_bytes(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())


def _scalar(key: str, value):
    if torch.is_tensor(value):
        if value.numel() != 1:
            raise ValueError(f"metric {key!r} must be a scalar, got a tensor of shape {tuple(value.shape)}")
        value = value.item()
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise ValueError(f"metric {key!r} must be a number, got {type(value).__name__} {value!r}")


class Run(RunCheckpoints):
    """One run directory `<home>/<kind>-<config_hash>`; create or reopen with `Run.open`."""

    def __init__(self, path: Path, kind: str, config: dict, seed: int):
        self.path = Path(path)
        """The run directory."""
        self.kind = kind
        """The run kind (a slug such as "es", "grpo", "eval")."""
        self.config = config
        """The canonical (JSON-normalised) config."""
        self.seed = seed
        """The run seed (every random stream derives from it)."""
        self.lock: DirectoryLock | None = None
        """The directory lock while this process trains the run (`open(..., lock=True)`), else None."""
        self._distrusted: set[str] = set()
        """Reasons `is_complete` already warned about (each is warned once per `Run`)."""
        self.report_to: tuple[str, ...] = ()
        """Where `log` also sends each record (`store.reporting`; a trainer sets its config's `report_to`)."""

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r})"

    @classmethod
    def open(cls, kind: str, config, *, seed: int, home: Path | None = None, lock: bool = False,
             lock_timeout: float | None = None) -> "Run":
        """Create (or reopen, never wiping) the directory for (kind, config); records the start in started.json.

        A complete run is returned without writing anything. With `lock` (a trainer), an incomplete run is
        locked for this process first (`DirectoryLock`: waits for another holder, up to `lock_timeout` s).
        Raises ValueError if the config has a top-level "seed" different from `seed`, if the directory was
        started with another seed or config, or if one of its sub-folders is not a directory; OSError (naming
        the path) when the store cannot be created; `MissingResult` when `$ESREASON_STORED_ONLY` is set
        (`make figures`) and the run is not complete, so that nothing is computed."""
        kind = _check_kind(kind)
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise ValueError(f"seed must be an int, got {seed!r}")
        seed = int(seed)
        path, cfg = locate(kind, config, home)
        if "seed" in cfg and cfg["seed"] != seed:
            raise ValueError(f"seed={seed} disagrees with config seed={cfg['seed']!r}")
        if os.environ.get(STORED_ONLY) and not cls(path, kind, cfg, seed).is_complete():
            raise MissingResult(f"{STORED_ONLY} is set, and the {kind} run {path} is not complete: nothing is "
                                f"computed in this mode; compute it first with `make reproduce PRESET=<its preset>` "
                                f"(`make reproduce-design DESIGN=<design>` for a design's settings; config: "
                                f"{canonical_json(cfg)[:300]})")
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise type(err)(err.errno, f"cannot create the run directory {path} ({err.strerror}); "
                                       f"check ESREASON_HOME / home") from None
        for sub in ("checkpoints", "results", "model", "metrics.jsonl", "manifest.json"):
            want_dir = "." not in sub
            if (path / sub).exists() and (path / sub).is_dir() != want_dir:
                raise ValueError(f"{path / sub} must be a {'directory' if want_dir else 'file'}; move it away")
        for name in ("metrics.jsonl", "config.json", "started.json"):
            check_regular(path / name)
        stored = read_json(path / "config.json")
        if stored is not None and stored != cfg:
            raise ValueError(f"{path} holds a different config (hash collision?): {stored!r}")
        run = cls(path, kind, cfg, seed)
        if stored is not None and run.is_complete():
            return run  # nothing to record: a read-only store serves complete runs
        if lock:
            run.lock = DirectoryLock(path, timeout=lock_timeout)
            if run.is_complete():  # finished by the process we waited for
                run.release()
                return run
        try:
            run._record_start(stored is None)
        except BaseException:
            run.release()
            raise
        return run

    def _record_start(self, write_config: bool) -> None:
        """Write config.json (when new) and record this start (or resume) in started.json."""
        path, cfg, kind, seed = self.path, self.config, self.kind, self.seed
        if write_config:
            _write_json(path / "config.json", cfg)
        started = read_json(path / "started.json")
        if started is None:
            started = {"kind": kind, "config_hash": path.name.rsplit("-", 1)[1], "seed": seed,
                       "started": _now(), "resumed": []}
        elif started.get("seed") != seed:
            raise ValueError(f"{path} was started with seed={started.get('seed')!r}, not seed={seed}")
        else:
            started.setdefault("resumed", []).append(_now())
        _write_json(path / "started.json", started)

    def release(self) -> None:
        """Drop this process's lock on the run directory (no-op without one)."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    # ------------------------------------------------------------------------------------ state
    @property
    def model_dir(self) -> Path:
        """`path / "model"`: the save_pretrained target."""
        return self.path / "model"

    def manifest(self) -> dict | None:
        """The parsed manifest.json, or None before `finish`."""
        return read_json(self.path / "manifest.json")

    def is_complete(self) -> bool:
        """True when manifest.json has status "complete", records model files when the run's kind saves a model
        (`MODEL_KINDS`), and every file it records under model/ still has its sha256 (anything else warns and
        counts as not complete). A run imported from a result bundle (`store.bundle`, no weights) is complete
        only for reading its results under `$ESREASON_STORED_ONLY` (`make figures`)."""
        manifest = self.manifest()
        if manifest is None or manifest.get("status") != "complete":
            return False
        if manifest.get(RESULTS_ONLY):
            return bool(os.environ.get(STORED_ONLY))
        files = manifest.get("model_files", {})
        if not isinstance(files, dict):
            why = "model_files is not a mapping"
        elif not files and self.kind in MODEL_KINDS:
            why = f"its manifest records no model files (a {self.kind} run saves a model under model/)"
        else:
            why = tree_mismatch(self.model_dir, files)
        if why is not None and why not in self._distrusted:
            self._distrusted.add(why)
            warn_store(f"{self.path} is marked complete but {why}; it is not trusted (training resumes from its "
                       f"last good checkpoint)")
        return why is None

    # ------------------------------------------------------------------------------------ metrics
    def log(self, step: int, metrics: dict) -> None:
        """Append {"step": step, **metrics} as one JSON line to metrics.jsonl (flushed and fsynced), then send it to
        `report_to`'s reporters and, with `ESREASON_TENSORBOARD` set, to TensorBoard (`store.reporting`)."""
        if "step" in metrics:
            raise ValueError("metrics must not contain the key 'step' (pass it as the step argument)")
        record = {"step": int(step), **{str(k): _scalar(k, v) for k, v in metrics.items()}}
        check_regular(self.path / "metrics.jsonl")
        with open(self.path / "metrics.jsonl", "a+b") as fh:
            torn = fh.tell() > 0 and (fh.seek(-1, os.SEEK_END), fh.read(1))[1] != b"\n"
            fh.write((("\n" if torn else "") + json.dumps(record) + "\n").encode())
            fh.flush()
            os.fsync(fh.fileno())
        report(self, record)

    def _metric_lines(self) -> tuple[list[dict], int, str]:
        """`integrity.read_metric_lines` of this run's metrics.jsonl."""
        return read_metric_lines(self.path / "metrics.jsonl")

    def _metric_records(self) -> list[dict]:
        return self._metric_lines()[0]

    def metrics(self) -> pd.DataFrame:
        """metrics.jsonl as a table, one row per logged line (empty DataFrame with a 'step' column if none)."""
        records = self._metric_records()
        return pd.DataFrame.from_records(records) if records else pd.DataFrame({"step": []})

    def truncate_metrics(self, step: int) -> None:
        """Drop metric lines with step > `step` (and torn lines), rewriting metrics.jsonl atomically."""
        if not (self.path / "metrics.jsonl").exists():
            return
        keep = [r for r in self._metric_records() if r["step"] <= step]
        atomic_write_bytes(self.path / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in keep).encode())

    # ------------------------------------------------------------------------------------ tables
    def _table_path(self, name: str) -> Path:
        if not isinstance(name, str) or not _TABLE.match(name) or name.endswith(".csv"):
            raise ValueError(f"table name must be a simple file stem without '.csv', got {name!r}")
        return self.path / "results" / f"{name}.csv"

    def write_table(self, name: str, df: pd.DataFrame) -> Path:
        """Write `df` to results/<name>.csv atomically (no index column)."""
        path = self._table_path(name)
        atomic_write_bytes(path, df.to_csv(index=False).encode())
        return path

    def read_table(self, name: str) -> pd.DataFrame | None:
        """results/<name>.csv as a DataFrame, or None if it was never written."""
        path = self._table_path(name)
        return pd.read_csv(path) if path.exists() else None

    # ------------------------------------------------------------------------------------ finish
    def finish(self, status: str = "complete", **extra) -> None:
        """Write manifest.json last and atomically: kind, config, config_hash, seed, versions, git_sha,
        started, ended, status, model_files ({path under model/: sha256}), plus any JSON-serialisable `extra`
        fields; then, for a complete run whose config does not set `keep_checkpoints`, delete its checkpoints
        (the final weights are under model/); then release this process's lock. ValueError when a complete
        run of a `MODEL_KINDS` kind has no model files."""
        clash = _RESERVED & set(extra)
        if clash:
            raise ValueError(f"extra manifest fields clash with reserved keys: {sorted(clash)}")
        started = read_json(self.path / "started.json") or {}
        follow_umask(self.model_dir)
        files = tree_digest(self.model_dir)
        if status == "complete" and self.kind in MODEL_KINDS and not files:
            raise ValueError(f"{self.path}: a complete {self.kind} run must save its model under model/ first")
        manifest = {"kind": self.kind, "config": self.config, "config_hash": self.path.name.rsplit("-", 1)[1],
                    "seed": self.seed, "versions": package_versions(), "git_sha": git_sha(),
                    "started": started.get("started"), "ended": _now(), "status": str(status),
                    "model_files": files, **jsonable(extra, "extra")}
        _write_json(self.path / "manifest.json", manifest)
        if status == "complete" and not self.config.get("keep_checkpoints"):
            shutil.rmtree(self.path / "checkpoints", ignore_errors=True)
        self.release()

    def fail(self, error: str) -> None:
        """Mark the run failed (manifest status "failed" with the `error` message) and release the lock."""
        self.finish(status="failed", error=str(error))


def run_exists(kind: str, config, *, home: Path | None = None) -> bool:
    """True when the run `Run.open(kind, config, home=home)` opens is complete (`Run.is_complete`: manifest
    status "complete" and model/ matching its recorded hashes); reads only."""
    kind = _check_kind(kind)
    path, cfg = locate(kind, config, home)
    return Run(path, kind, cfg, 0).is_complete()
