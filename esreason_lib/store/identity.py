"""A run's identity: its config as canonical JSON and the hash that names its directory (`locate`: where a config's
run lies in a store, earlier identities included), the zoo-spec versions a config depends on, and the package
versions and git sha a manifest records."""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import importlib.metadata
import json
import platform
import re
import subprocess
import sys
from pathlib import Path, PurePath
from typing import Callable, Mapping

from esreason_lib.paths import REPO_ROOT, run_store_root

ADDED_OPTION = {"identity": "omit_default"}
"""`dataclasses.field(metadata=ADDED_OPTION)` marks a config field added after runs were stored: at its default
(which must reproduce the behaviour from before the field existed) it is left out of the canonical config, so
every stored run keeps its identity; any other value is part of it."""


def execution(exact=None, *, added: bool = False) -> dict:
    """`dataclasses.field(metadata=execution(...))` marks an execution setting: how a run is computed, not what it
    computes (`checkpoint_every`, Ray `workers`, a population backend among those with bit-identical results). It
    is left out of the run's identity, so a stored run is found whichever setting trained it; with `exact`, only
    when the field's value is one of `exact` (the others change the results and stay in the identity). With
    `added` (a setting added after execution settings left the identity) it is left out of the legacy identity too,
    so the runs stored before it keep theirs."""
    return {"identity": "execution", "exact": None if exact is None else tuple(exact), "added": bool(added)}


def _left_out(f: dataclasses.Field, value, legacy: bool) -> bool:
    kind = f.metadata.get("identity")
    if kind == "omit_default":
        return value == f.default
    if kind == "execution" and (not legacy or f.metadata.get("added")):
        exact = f.metadata["exact"]
        return exact is None or value in exact
    return False


def _identity_fields(obj, legacy: bool = False) -> dict:
    """A dataclass's {name: value}, without `ADDED_OPTION` fields that hold their default and (unless `legacy`,
    the identity of runs stored before execution settings left it) without `execution` settings."""
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)
            if not _left_out(f, getattr(obj, f.name), legacy)}


def jsonable(obj, where: str = "config", *, legacy: bool = False):
    """`obj` (dataclasses, dicts with str keys, lists/tuples, enums, paths, numpy scalars, JSON scalars) as plain
    JSON data; TypeError naming the path `where` of the first value that cannot be stored. `ADDED_OPTION` fields
    at their default and `execution` settings (kept with `legacy`) are left out of a dataclass."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = _identity_fields(obj, legacy)
    if isinstance(obj, dict):
        for key in obj:
            if not isinstance(key, str):
                raise TypeError(f"{where}: keys must be strings, got {key!r}")
        return {k: jsonable(v, f"{where}.{k}", legacy=legacy) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v, f"{where}[{i}]", legacy=legacy) for i, v in enumerate(obj)]
    if isinstance(obj, enum.Enum):
        return jsonable(obj.value, where, legacy=legacy)
    if isinstance(obj, PurePath):
        return str(obj)
    numpy = sys.modules.get("numpy")  # a numpy scalar exists only once numpy is imported: the package stays light
    if numpy is not None and isinstance(obj, numpy.generic):
        return obj.item()
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"{where}: cannot store {type(obj).__name__} value {obj!r} in a run config")


def canonical_config(config, *, legacy: bool = False) -> dict:
    """A dataclass or dict as plain JSON data (tuples -> lists, Paths -> str, numpy scalars -> Python)."""
    if not (isinstance(config, dict) or (dataclasses.is_dataclass(config) and not isinstance(config, type))):
        raise TypeError(f"config must be a dataclass instance or a dict, got {type(config).__name__}")
    return jsonable(config, legacy=legacy)


def canonical_json(config, *, legacy: bool = False) -> str:
    """The compact, key-sorted JSON text of `canonical_config(config)` (what `config_hash` hashes); `legacy` keeps
    the execution settings, as run identities did before they left it."""
    return json.dumps(canonical_config(config, legacy=legacy), sort_keys=True, separators=(",", ":"),
                      allow_nan=True)


RUN_DIR = re.compile(r"^[a-z0-9][a-z0-9_-]*-[0-9a-f]{10}$")
"""A run directory's name: `<kind>-<10 hex of its config hash>`."""
RUN_REF = "run:"
"""Prefix of a portable reference into the run store: `run:<kind>-<hash>/<path inside the run>`."""


def portable_paths(cfg):
    """`cfg` (plain JSON data) with every absolute path into a run directory (`/.../<kind>-<hash>/<rest>`, e.g. a
    trained run's `model/` or a snapshot) written as `run:<kind>-<hash>/<rest>`: a run that reads another run's
    output is then named the same wherever the store lies (a moved or imported store keeps its identities)."""
    if isinstance(cfg, dict):
        return {k: portable_paths(v) for k, v in cfg.items()}
    if isinstance(cfg, list):
        return [portable_paths(v) for v in cfg]
    if isinstance(cfg, str) and cfg.startswith("/"):
        parts = PurePath(cfg).parts
        for i in range(len(parts) - 1, 0, -1):
            if RUN_DIR.match(parts[i]):
                return RUN_REF + "/".join(parts[i:])
    return cfg


def resolve_run_ref(ref, home=None):
    """A `run:<kind>-<hash>/<rest>` reference as the path under the run store `home` (default
    `$ESREASON_HOME` / `<repo>/runs`); anything else unchanged."""
    if isinstance(ref, str) and ref.startswith(RUN_REF):
        return str(Path(home if home is not None else run_store_root()) / ref[len(RUN_REF):])
    return ref


def config_hash(config) -> str:
    """10 hex chars of sha256 over the canonical JSON (sorted keys) of a dataclass or dict."""
    return hashlib.sha256(canonical_json(config).encode()).hexdigest()[:10]


def _strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)


_ZOO_VERSIONS: list[Callable[[], Mapping[str, str]]] = []
"""The model zoo's `{name: version}` provider (`register_zoo_versions`): the package registers
`models.zoo.zoo_versions` when it is imported (`esreason_lib/__init__.py`), so that this module, below the models,
imports no model code."""


def register_zoo_versions(versions: Callable[[], Mapping[str, str]]) -> None:
    """Make `versions()` (`{zoo model name: hash of its spec}`, called at every use) the zoo that
    `with_zoo_versions` consults; a second registration replaces the first."""
    _ZOO_VERSIONS[:] = [versions]


def with_zoo_versions(cfg: dict) -> dict:
    """`cfg` plus `"zoo_versions": {name: hash of its ZooSpec}` for every zoo model name among its string values.

    A run that starts from a zoo model by name must not be reused once that model's recipe changes (a new
    habit fraction, step budget, ...), so the spec's hash joins the run's identity. RuntimeError when no zoo is
    registered (an identity computed without it could name another run)."""
    if not _ZOO_VERSIONS:
        raise RuntimeError("a run's identity needs the model zoo's versions, and none is registered "
                           "(`store.identity.register_zoo_versions`; importing esreason_lib registers the zoo's)")
    zoo = _ZOO_VERSIONS[0]()
    names = sorted({s for s in _strings(cfg) if s in zoo})
    return {**cfg, "zoo_versions": {n: zoo[n] for n in names}} if names else cfg


def stored_config(kind: str, config, legacy: bool = False, portable: bool = True) -> dict:
    """The config as `Run.open` stores (and hashes) it: canonical JSON with paths into run directories made
    portable (`identity.portable_paths`; not for `portable=False`, the identity of runs stored before), plus
    `zoo_versions` unless kind is "zoo"."""
    cfg = json.loads(canonical_json(config, legacy=legacy))
    cfg = portable_paths(cfg) if portable else cfg
    return cfg if kind == "zoo" else with_zoo_versions(cfg)


def locate(kind: str, config, home: Path | None) -> tuple[Path, dict]:
    """The directory and stored config of (kind, config): `<home>/<kind>-<config hash>`, or, when only that one
    exists, the directory of a run stored under an earlier identity: with absolute paths into run directories
    (before `identity.portable_paths`), then also with the execution settings (before `identity.execution`)."""
    root = Path(home if home is not None else run_store_root())
    cfg = stored_config(kind, config)
    path = root / f"{kind}-{config_hash(cfg)}"
    if not path.exists():
        for legacy in (False, True):
            old = stored_config(kind, config, legacy=legacy, portable=False)
            old_path = root / f"{kind}-{config_hash(old)}"
            if old != cfg and old_path.is_dir():
                return old_path, old
    return path, cfg


def package_versions() -> dict[str, str | None]:
    """Versions of python, torch, transformers, numpy, esreason (None where not installed)."""
    from esreason_lib.version import __version__

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
