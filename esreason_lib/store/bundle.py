"""Result bundles: a run store's tables without its weights, small enough to commit, so that `make figures`
redraws every figure and the claims on a fresh clone without training.

`export_results(out, home)` writes `<out>/runs.tar.xz` and its sha256 beside it (`<out>/runs.tar.xz.sha256`, for
`make figures` to check the committed bundle): first a bundle manifest (`bundle.json`: the format and every
member's sha256 and size), then for every complete run of the store its config.json, manifest.json (marked
`"results_only": true`), metrics.jsonl and results/*.csv, plus the finding records under findings/; never model
weights, snapshots or checkpoints, and no zoo run (`UNBUNDLED_KINDS`). Only plain files inside the store are
exported: a symbolic link, a FIFO or a device is refused naming it. `claims` writes each committed bundle's sha256
into papers/claims.md's header (`reviewed_lines`), so that a changed bundle shows in the reviewed diff.

`import_results(out, home)` treats a bundle as data from outside. It is refused, in one line and before anything
reaches the store, when it is empty, truncated or not xz; when (`require_digest`, `make figures`) its sha256 is
not the one beside it or the one papers/claims.md names for it; when it has no bundle manifest or a member differs
from it; when a member is anything but a plain file of a run's tables or a finding record
`findings/[<preset>/]<id>.json` (links, devices, absolute or `..` paths, model/, checkpoints/, zoo runs, deeper
folders); when a member is over `MAX_MEMBER_BYTES` or all are over `MAX_TOTAL_BYTES` (checked from the headers
before a byte is unpacked); or when a run's config does not hash to its directory's name. Each run is unpacked
into a temporary folder and renamed into place whole (a killed import leaves no half run; the next import
completes it and collects the leftovers; two at once both complete); a run directory or record that exists is
never overwritten. Imported manifests are written by the importer, marked `"results_only"` and `"imported"`
whatever the bundle said: such a run is complete only for reading stored results (`$ESREASON_STORED_ONLY`, `make
figures`; `Run.is_complete`), never a trained model for `train` nor a computed evaluation for `train --eval`.
Imported finding records are marked `"imported": true`; a redraw of one must be it (`paper.provenance`).
"""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import os
import re
import shutil
import stat
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

from esreason_lib.paths import CLAIMS_PATH, REPO_ROOT, run_store_root
from esreason_lib.store.identity import RUN_DIR, config_hash
from esreason_lib.store.integrity import atomic_write_bytes, collect_stale, read_json, sha256_file
from esreason_lib.store.runs import RESULTS_ONLY, Run

RESULTS_DIR = REPO_ROOT / "papers" / "results"
"""Where the committed bundles live (`make results`, `make figures`)."""
ARCHIVE = "runs.tar.xz"
"""The bundle's file name inside its folder (e.g. papers/results/powered/runs.tar.xz)."""
DIGEST = ARCHIVE + ".sha256"
"""The file beside the bundle that holds its sha256 (`make figures` refuses a bundle that does not match it)."""
MANIFEST = "bundle.json"
"""The bundle's first member: {"format": FORMAT, "files": {member: {"sha256", "size"}}}."""
FORMAT = 2
"""The bundle format this module writes and reads (1: no bundle manifest, refused)."""
IMPORTED = "imported"
"""The key marking an imported run's manifest and an imported finding record."""
MAX_MEMBER_BYTES = 64 << 20
"""The largest member an import unpacks (the committed bundle's largest table: ~1.7 MiB)."""
MAX_TOTAL_BYTES = 1 << 30
"""The most bytes an import unpacks in all (the committed bundle: ~435 MiB, 39 MiB as xz)."""
STALE_IMPORT_S = 3600.0
"""A temporary run folder (`.import-<pid>-*`) whose import process is gone, or older than this, is removed."""
UNBUNDLED_KINDS = ("zoo",)
"""Run kinds a bundle never carries (a zoo base is its weights: its tables serve no figure); the importer refuses
them."""
REVIEWED_LINE = "Result bundle `{name}`: sha256 `{digest}`"
"""The line naming a bundle's sha256 in the tracked file a reviewer reads (papers/claims.md's header, written by
`claims`): `import_results(require_digest=True)` refuses a bundle whose sha256 it does not name."""
_RUN_MEMBER = re.compile(r"[^/]+/(?:config\.json|manifest\.json|metrics\.jsonl|results/[^/]+\.csv)")
_RECORD = re.compile(r"findings/(?:[^/.][^/]*/)?[^/.][^/]*\.json")
"""`findings/<id>.json` (the default preset) or `findings/<preset>/<id>.json`: nothing deeper."""


def _plain(path: Path) -> Path:
    """`path` when it is a regular file (not followed through a link); ValueError naming it otherwise."""
    mode = os.lstat(path).st_mode
    if not stat.S_ISREG(mode):
        kind = "a symbolic link" if stat.S_ISLNK(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
        raise ValueError(f"export: {path} is {kind}; only plain files inside the store are exported")
    return path


def _tables(path: Path) -> list[Path]:
    """The plain files of run directory `path` that a bundle carries (config, metrics, results/*.csv)."""
    results = path / "results"
    if results.is_symlink():
        raise ValueError(f"export: {results} is a symbolic link; only plain files inside the store are exported")
    names = [path / n for n in ("config.json", "metrics.jsonl") if os.path.lexists(path / n)]
    return [_plain(p) for p in names + sorted(results.glob("*.csv"))]


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0  # no times: the same store gives the same bytes
    tar.addfile(info, io.BytesIO(data))


def export_results(out: str | Path, home: str | Path | None = None) -> Path:
    """Write the bundle of the store `home` (default `$ESREASON_HOME` / `<repo>/runs`) to `<out>/runs.tar.xz` and
    its sha256 to `<out>/runs.tar.xz.sha256` (module docstring); returns the bundle's path. ValueError when the
    store holds no complete run, or names a link, FIFO or other non-regular file in it."""
    root = Path(home if home is not None else run_store_root())
    members: dict[str, bytes] = {}
    entries = sorted(p for p in root.iterdir() if _bundled_run(p.name)) if root.is_dir() else []
    for path in entries:
        if path.is_symlink():
            raise ValueError(f"export: {path} is a symbolic link; only plain files inside the store are exported")
        if not path.is_dir() or not os.path.lexists(path / "manifest.json"):
            continue
        manifest = read_json(_plain(path / "manifest.json"))
        if isinstance(manifest, dict) and manifest.get("status") == "complete" and (
                manifest.get(RESULTS_ONLY) or Run(path, path.name[:-11], manifest.get("config"), 0).is_complete()):
            for table in _tables(path):
                members[table.relative_to(root).as_posix()] = table.read_bytes()
            members[f"{path.name}/manifest.json"] = (json.dumps({**manifest, RESULTS_ONLY: True}, indent=2,
                                                                sort_keys=True) + "\n").encode()
    if not members:
        raise ValueError(f"export: the run store {root} holds no complete run")
    findings = root / "findings"
    if findings.is_symlink():
        raise ValueError(f"export: {findings} is a symbolic link; only plain files inside the store are exported")
    for record in sorted(findings.rglob("*.json")):
        members[record.relative_to(root).as_posix()] = _plain(record).read_bytes()
    index = {name: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)} for name, data in members.items()}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz", preset=9) as tar:  # xz: ~3.5x smaller than gzip on these tables
        _add(tar, MANIFEST, (json.dumps({"format": FORMAT, "files": index}, indent=0, sort_keys=True) + "\n").encode())
        for name, data in members.items():  # each run's manifest after its tables
            _add(tar, name, data)
    target = Path(out) / ARCHIVE
    atomic_write_bytes(target, buffer.getvalue())
    atomic_write_bytes(target.parent / DIGEST, f"{sha256_file(target)}  {ARCHIVE}\n".encode())
    return target


def _bundled_run(name: str) -> bool:
    """Whether `name` is a run directory of a kind a bundle carries (not `UNBUNDLED_KINDS`)."""
    return RUN_DIR.match(name) is not None and name[:-11] not in UNBUNDLED_KINDS


def shown_name(archive: str | Path) -> str:
    """How `archive` is named in its `REVIEWED_LINE`: relative to the repository when inside it, else absolute."""
    path = Path(archive).resolve()
    return (path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path).as_posix()


def reviewed_lines(folder: str | Path = RESULTS_DIR) -> list[str]:
    """One `REVIEWED_LINE` per bundle under `folder` that has its sha256 file beside it (sorted by path), with the
    digest that file holds: what papers/claims.md's header shows."""
    out = []
    for digest in sorted(Path(folder).rglob(DIGEST)):
        want = digest.read_text().split()[:1]
        if want:
            out.append(REVIEWED_LINE.format(name=shown_name(digest.parent / ARCHIVE), digest=want[0]))
    return out


def check_reviewed(archive: Path, reviewed: Path) -> None:
    """ValueError (one line) unless the tracked file `reviewed` names `archive`'s sha256 in its `REVIEWED_LINE`."""
    line = REVIEWED_LINE.format(name=shown_name(archive), digest=sha256_file(archive))
    text = reviewed.read_text() if reviewed.is_file() else ""
    if line not in text.splitlines():
        named = next((x for x in text.splitlines() if x.startswith(line.split(": sha256")[0])), None)
        raise ValueError(f"import: {archive}'s sha256 is not the one {reviewed} names for it "
                         f"({'it names none' if named is None else named.split()[-1]}): a bundle changed without "
                         "the reviewed claims file; refused")


def check_digest(archive: Path) -> None:
    """ValueError (one line) unless `archive` matches the sha256 recorded beside it in `runs.tar.xz.sha256`."""
    digest = archive.parent / DIGEST
    if not digest.is_file():
        raise ValueError(f"import: {archive} has no {DIGEST} beside it to check it against")
    want = digest.read_text().split()[:1]
    if want != [sha256_file(archive)]:
        raise ValueError(f"import: {archive} does not match the sha256 in {digest} (modified, truncated or "
                         "replaced); refused")


def _read_members(archive: Path, root: Path, present: set[str], temps: dict[str, Path]) -> dict[str, bytes]:
    """Check every member of `archive` against the module's rules while streaming it; the files of runs not in
    `present` go to temporary folders in `root` (`temps`, by run); returns the finding records' bytes."""
    records: dict[str, bytes] = {}
    index, total = None, 0
    with tarfile.open(archive, mode="r:xz") as tar:
        for m in tar:
            name, parts = m.name, PurePosixPath(m.name).parts
            if index is None:
                if name != MANIFEST or not m.isfile() or m.size > MAX_MEMBER_BYTES:
                    raise ValueError(f"import: {archive} does not begin with a {MANIFEST} (format {FORMAT}); re-export "
                                     "it with `esreason export-results`")
                index = json.loads(tar.extractfile(m).read())
                if not (isinstance(index, dict) and index.get("format") == FORMAT and isinstance(index.get("files"),
                                                                                                  dict)):
                    raise ValueError(f"import: {archive}'s {MANIFEST} is not a format-{FORMAT} bundle manifest")
                index = index["files"]
                continue
            safe = (m.isfile() and not PurePosixPath(name).is_absolute() and ".." not in parts and
                    (_bundled_run(parts[0]) and _RUN_MEMBER.fullmatch(name) or _RECORD.fullmatch(name)))
            if not safe:
                raise ValueError(f"import: {archive} holds {name!r}, not a plain file of a run's tables or "
                             f"findings/[<preset>/]<id>.json (never a {'/'.join(UNBUNDLED_KINDS)} run)")
            total += m.size
            if m.size > MAX_MEMBER_BYTES or total > MAX_TOTAL_BYTES:
                raise ValueError(f"import: {archive} holds {name!r} of {m.size} bytes, over the limit of "
                                 f"{MAX_MEMBER_BYTES} per member or {MAX_TOTAL_BYTES} in all")
            expected = index.get(name)
            data = tar.extractfile(m).read()
            if not isinstance(expected, dict) or expected.get("sha256") != hashlib.sha256(data).hexdigest():
                raise ValueError(f"import: {archive} holds {name!r}, which its {MANIFEST} does not list with this "
                                 "sha256 (modified or added); refused")
            index[name] = None  # seen (a second member of that name is refused)
            if parts[0] == "findings":
                records[name] = data
            elif parts[0] not in present:
                if parts[0] not in temps:
                    temps[parts[0]] = Path(tempfile.mkdtemp(prefix=f".import-{os.getpid()}-", dir=root))
                (temps[parts[0]] / name).parent.mkdir(parents=True, exist_ok=True)
                (temps[parts[0]] / name).write_bytes(data)
    missing = [n for n, v in (index or {}).items() if v is not None]
    if index is None or missing:
        raise ValueError(f"import: {archive} lacks {missing[0]!r}, listed in its {MANIFEST} (truncated)" if missing
                         else f"import: {archive} is empty")
    return records


def _seal_run(temp: Path, name: str) -> None:
    """Check the unpacked run `name` in `temp` (config hashes to its name) and write its manifest as imported."""
    folder = temp / name
    config = read_json(folder / "config.json")
    manifest = read_json(folder / "manifest.json")
    if not isinstance(config, dict) or config_hash(config) != name[-10:]:
        raise ValueError(f"import: the config of {name} does not hash to its name (modified); refused")
    if not isinstance(manifest, dict) or manifest.get("config", config) != config:
        raise ValueError(f"import: the manifest of {name} is missing or names another config; refused")
    manifest = {**manifest, "config_hash": name[-10:], RESULTS_ONLY: True, IMPORTED: True}
    manifest.pop("model_files", None)
    atomic_write_bytes(folder / "manifest.json", (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())


def _place(folder: Path, target: Path) -> None:
    """Rename the unpacked run `folder` to `target` (whole runs only); a `target` that another import placed first
    (the same bundle imported twice at once) is kept, and `folder` is left to be removed."""
    try:
        os.rename(folder, target)
    except OSError:
        if not (target / "manifest.json").is_file():
            raise


def _marked(record: bytes) -> bytes:
    """A finding record's bytes with `"imported": true` added (as they are when it is no JSON object: `claims`
    skips such a record with a warning)."""
    try:
        body = json.loads(record)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return record
    return (json.dumps({**body, IMPORTED: True}, indent=1) + "\n").encode() if isinstance(body, dict) else record


def import_results(out: str | Path, home: str | Path | None = None, *, require_digest: bool = False,
                   reviewed: str | Path | None = None) -> int:
    """Unpack `<out>/runs.tar.xz` into the store `home` (module docstring): run directories that do not exist
    there, and finding records that do not; returns the number of run directories added. With `require_digest`
    (`make figures`) the bundle must first match `<out>/runs.tar.xz.sha256` and the sha256 the tracked file
    `reviewed` names for it (`check_reviewed`; default papers/claims.md for a bundle inside the repository, none
    outside it). ValueError (one line) for any bundle the module's rules refuse; nothing of a refused bundle
    reaches the store. Two imports of one bundle at once both succeed (a run the other placed first is kept)."""
    root = Path(home if home is not None else run_store_root())
    archive = Path(out) / ARCHIVE
    if not archive.is_file():
        raise ValueError(f"import: no result bundle at {archive}")
    if require_digest:
        check_digest(archive)
        if reviewed is None and archive.resolve().is_relative_to(REPO_ROOT):
            reviewed = CLAIMS_PATH
        if reviewed is not None:
            check_reviewed(archive, Path(reviewed))
    root.mkdir(parents=True, exist_ok=True)
    collect_stale(root, ".import-", STALE_IMPORT_S)
    present = {p.name for p in root.iterdir()}
    temps: dict[str, Path] = {}
    try:
        try:
            records = _read_members(archive, root, present, temps)
        except (tarfile.TarError, lzma.LZMAError, EOFError, json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ValueError(f"import: {archive} is not a readable result bundle (empty, truncated or not xz: "
                             f"{type(err).__name__}: {' '.join(str(err).split())})") from None
        for name, temp in temps.items():
            _seal_run(temp, name)
        for name, temp in temps.items():
            _place(temp / name, root / name)
        for name, data in records.items():
            target = root / name
            if not target.exists():
                atomic_write_bytes(target, _marked(data))
    finally:
        for temp in temps.values():
            shutil.rmtree(temp, ignore_errors=True)
    return len(temps)
