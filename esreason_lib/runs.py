"""The run store: one directory per (kind, config), resumable, with a manifest written last.

Layout of `<home>/<kind>-<config_hash>/`:
    config.json        canonical config (written at open)
    started.json       kind, hash, seed, first start time (+ resume times)
    metrics.jsonl      one JSON line per `log` call: {"step": ..., "<namespace>/<name>": ...}
    checkpoints/       step-XXXXXX.pt (torch.save, atomic; the last 2 kept)
    results/<name>.csv tidy tables (atomic)
    model/             save_pretrained target (`Run.model_dir`)
    manifest.json      written last and atomically by `finish`; its presence with status "complete" marks done
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import hashlib
import importlib.metadata
import io
import json
import os
import platform
import re
import subprocess
import tempfile
from pathlib import Path, PurePath

import numpy as np
import pandas as pd
import torch

from .paths import REPO_ROOT, run_store_root

_SLUG = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_TABLE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_CKPT = re.compile(r"^step-(\d+)\.pt$")
_KEEP_CHECKPOINTS = 2
_RESERVED = {"kind", "config", "config_hash", "seed", "versions", "git_sha", "started", "ended", "status"}


STORED_ONLY = "ESREASON_STORED_ONLY"
"""Environment variable: when set (non-empty), `Run.open` only reopens complete runs (`make figures`)."""


class MissingResult(RuntimeError):
    """A result that `$ESREASON_STORED_ONLY` forbids computing is not in the run store."""


def _jsonable(obj, where: str = "config"):
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        for key in obj:
            if not isinstance(key, str):
                raise TypeError(f"{where}: keys must be strings, got {key!r}")
        return {k: _jsonable(v, f"{where}.{k}") for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v, f"{where}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, enum.Enum):
        return _jsonable(obj.value, where)
    if isinstance(obj, PurePath):
        return str(obj)
    if isinstance(obj, np.generic):
        return obj.item()
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"{where}: cannot store {type(obj).__name__} value {obj!r} in a run config")


def canonical_config(config) -> dict:
    """A dataclass or dict as plain JSON data (tuples -> lists, Paths -> str, numpy scalars -> Python)."""
    if not (isinstance(config, dict) or (dataclasses.is_dataclass(config) and not isinstance(config, type))):
        raise TypeError(f"config must be a dataclass instance or a dict, got {type(config).__name__}")
    return _jsonable(config)


def _canonical_json(config) -> str:
    return json.dumps(canonical_config(config), sort_keys=True, separators=(",", ":"), allow_nan=True)


def config_hash(config) -> str:
    """10 hex chars of sha256 over the canonical JSON (sorted keys) of a dataclass or dict."""
    return hashlib.sha256(_canonical_json(config).encode()).hexdigest()[:10]


def _strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)


def with_zoo_versions(cfg: dict) -> dict:
    """`cfg` plus `"zoo_versions": {name: hash of its ZooSpec}` for every zoo model name among its string values.

    A run that starts from a zoo model by name must not be reused once that model's recipe changes (a new
    habit fraction, step budget, ...), so the spec's hash joins the run's identity."""
    from esreason_lib.zoo import ZOO

    names = sorted({s for s in _strings(cfg) if s in ZOO})
    return {**cfg, "zoo_versions": {n: config_hash(ZOO[n]) for n in names}} if names else cfg


def _check_kind(kind) -> str:
    if not isinstance(kind, str) or not _SLUG.match(kind):
        raise ValueError(f"kind must be a simple slug (lowercase letters, digits, '-', '_'; starts with a "
                         f"letter or digit; at most 64 chars), got {kind!r}")
    return kind


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_json(path: Path, data: dict) -> None:
    _atomic_write_bytes(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def package_versions() -> dict[str, str | None]:
    """Versions of python, torch, transformers, numpy, esreason (None where not installed)."""
    from esreason_lib import __version__

    out: dict[str, str | None] = {"python": platform.python_version(), "esreason": __version__}
    for name in ("torch", "transformers", "numpy"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_sha() -> str | None:
    """`git rev-parse HEAD` of the repository holding this package, or None if unavailable."""
    try:
        res = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True,
                             timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    sha = res.stdout.strip()
    return sha if res.returncode == 0 and re.fullmatch(r"[0-9a-f]{40,64}", sha) else None


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


class Run:
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

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r})"

    @classmethod
    def open(cls, kind: str, config, *, seed: int, home: Path | None = None) -> "Run":
        """Create (or reopen, never wiping) the directory for (kind, config); records the start in started.json.

        Raises ValueError if the config has a top-level "seed" different from `seed`, or if the directory
        was started with another seed or config; raises `MissingResult` when `$ESREASON_STORED_ONLY` is set
        (`make figures`) and the run is not complete, so that nothing is computed."""
        kind = _check_kind(kind)
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise ValueError(f"seed must be an int, got {seed!r}")
        seed = int(seed)
        cfg = json.loads(_canonical_json(config))
        if kind != "zoo":
            cfg = with_zoo_versions(cfg)
        if "seed" in cfg and cfg["seed"] != seed:
            raise ValueError(f"seed={seed} disagrees with config seed={cfg['seed']!r}")
        path = Path(home if home is not None else run_store_root()) / f"{kind}-{config_hash(cfg)}"
        if os.environ.get(STORED_ONLY) and (_read_json(path / "manifest.json") or {}).get("status") != "complete":
            raise MissingResult(f"{STORED_ONLY} is set, and the {kind} run {path} is not complete: nothing is "
                                f"computed in this mode; run `make reproduce` first (config: "
                                f"{_canonical_json(cfg)[:300]})")
        path.mkdir(parents=True, exist_ok=True)
        stored = _read_json(path / "config.json")
        if stored is not None and stored != cfg:
            raise ValueError(f"{path} holds a different config (hash collision?): {stored!r}")
        if stored is None:
            _write_json(path / "config.json", cfg)
        started = _read_json(path / "started.json")
        if started is None:
            started = {"kind": kind, "config_hash": path.name.rsplit("-", 1)[1], "seed": seed,
                       "started": _now(), "resumed": []}
        elif started.get("seed") != seed:
            raise ValueError(f"{path} was started with seed={started.get('seed')!r}, not seed={seed}")
        else:
            started.setdefault("resumed", []).append(_now())
        _write_json(path / "started.json", started)
        return cls(path, kind, cfg, seed)

    # ------------------------------------------------------------------------------------ state
    @property
    def model_dir(self) -> Path:
        """`path / "model"`: the save_pretrained target."""
        return self.path / "model"

    def manifest(self) -> dict | None:
        """The parsed manifest.json, or None before `finish`."""
        return _read_json(self.path / "manifest.json")

    def is_complete(self) -> bool:
        """True when manifest.json exists with status "complete"."""
        manifest = self.manifest()
        return manifest is not None and manifest.get("status") == "complete"

    # ------------------------------------------------------------------------------------ metrics
    def log(self, step: int, metrics: dict) -> None:
        """Append {"step": step, **metrics} as one JSON line to metrics.jsonl (flushed and fsynced)."""
        if "step" in metrics:
            raise ValueError("metrics must not contain the key 'step' (pass it as the step argument)")
        record = {"step": int(step), **{str(k): _scalar(k, v) for k, v in metrics.items()}}
        with open(self.path / "metrics.jsonl", "a+b") as fh:
            torn = fh.tell() > 0 and (fh.seek(-1, os.SEEK_END), fh.read(1))[1] != b"\n"
            fh.write((("\n" if torn else "") + json.dumps(record) + "\n").encode())
            fh.flush()
            os.fsync(fh.fileno())

    def _metric_records(self) -> list[dict]:
        try:
            lines = (self.path / "metrics.jsonl").read_text().splitlines()
        except FileNotFoundError:
            return []
        records = []
        for line in lines:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line torn by a crash mid-write
        return records

    def metrics(self) -> pd.DataFrame:
        """metrics.jsonl as a table, one row per logged line (empty DataFrame with a 'step' column if none)."""
        records = self._metric_records()
        return pd.DataFrame.from_records(records) if records else pd.DataFrame({"step": []})

    def truncate_metrics(self, step: int) -> None:
        """Drop metric lines with step > `step` (and torn lines), rewriting metrics.jsonl atomically."""
        if not (self.path / "metrics.jsonl").exists():
            return
        keep = [r for r in self._metric_records() if r.get("step", 0) <= step]
        _atomic_write_bytes(self.path / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in keep).encode())

    # ------------------------------------------------------------------------------------ checkpoints
    def _checkpoints(self) -> list[tuple[int, Path]]:
        folder = self.path / "checkpoints"
        if not folder.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _CKPT.match(p.name))]
        return sorted(found)

    def save_checkpoint(self, step: int, state: dict) -> Path:
        """torch.save `state` atomically to checkpoints/step-XXXXXX.pt and keep only the last 2 checkpoints."""
        if int(step) < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        buffer = io.BytesIO()
        torch.save(state, buffer)
        path = self.path / "checkpoints" / f"step-{int(step):06d}.pt"
        _atomic_write_bytes(path, buffer.getvalue())
        for _, old in self._checkpoints()[:-_KEEP_CHECKPOINTS]:
            old.unlink(missing_ok=True)
        return path

    def latest_checkpoint(self) -> tuple[int, dict] | None:
        """(step, state) of the newest loadable checkpoint, or None."""
        for step, path in reversed(self._checkpoints()):
            try:
                return step, torch.load(path, map_location="cpu", weights_only=False)
            except Exception:  # noqa: BLE001 - an unreadable file falls back to the previous checkpoint
                continue
        return None

    # ------------------------------------------------------------------------------------ tables
    def _table_path(self, name: str) -> Path:
        if not isinstance(name, str) or not _TABLE.match(name) or name.endswith(".csv"):
            raise ValueError(f"table name must be a simple file stem without '.csv', got {name!r}")
        return self.path / "results" / f"{name}.csv"

    def write_table(self, name: str, df: pd.DataFrame) -> Path:
        """Write `df` to results/<name>.csv atomically (no index column)."""
        path = self._table_path(name)
        _atomic_write_bytes(path, df.to_csv(index=False).encode())
        return path

    def read_table(self, name: str) -> pd.DataFrame | None:
        """results/<name>.csv as a DataFrame, or None if it was never written."""
        path = self._table_path(name)
        return pd.read_csv(path) if path.exists() else None

    # ------------------------------------------------------------------------------------ finish
    def finish(self, status: str = "complete", **extra) -> None:
        """Write manifest.json last and atomically: kind, config, config_hash, seed, versions, git_sha,
        started, ended, status, plus any JSON-serialisable `extra` fields."""
        clash = _RESERVED & set(extra)
        if clash:
            raise ValueError(f"extra manifest fields clash with reserved keys: {sorted(clash)}")
        started = _read_json(self.path / "started.json") or {}
        manifest = {"kind": self.kind, "config": self.config, "config_hash": self.path.name.rsplit("-", 1)[1],
                    "seed": self.seed, "versions": package_versions(), "git_sha": git_sha(),
                    "started": started.get("started"), "ended": _now(), "status": str(status),
                    **_jsonable(extra, "extra")}
        _write_json(self.path / "manifest.json", manifest)


def run_exists(kind: str, config, *, home: Path | None = None) -> bool:
    """True when the run for (kind, config) under `home` is complete (manifest status "complete")."""
    path = Path(home if home is not None else run_store_root()) / f"{_check_kind(kind)}-{config_hash(config)}"
    manifest = _read_json(path / "manifest.json")
    return manifest is not None and manifest.get("status") == "complete"
