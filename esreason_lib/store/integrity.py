"""What keeps the run store trustworthy: atomic writes that follow the umask, sealed (hashed, identified) files,
content digests of saved models, readers of JSON files and metrics lines that warn (`RunStoreWarning`) instead
of raising, and the per-directory lock a training process holds.

A sealed file is `MAGIC`, one JSON header line {"sha256", "size", **identity}, then the payload bytes. `unseal`
returns the payload only when the magic, the size, the sha256 and every identity field agree, so a flipped byte,
a truncated or zero-filled file, or a file sealed for another run is refused (`CorruptFileError`, naming why).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
import warnings
from pathlib import Path
from typing import Callable

MAGIC = b"ESREASON-SEALED-1\n"
"""First bytes of every sealed file (checkpoints)."""


class RunStoreWarning(UserWarning):
    """A file of the run store was skipped or distrusted (corrupt, foreign, torn); the message names it."""


def warn_store(message: str) -> None:
    """Warn (`RunStoreWarning`) about a file of the store that is skipped or distrusted."""
    warnings.warn(message, RunStoreWarning, stacklevel=3)


class NotARegularFile(ValueError):
    """A path of the run store holds something other than a regular file (a FIFO, a socket, a device)."""


def check_regular(path: Path) -> None:
    """Raise `NotARegularFile` naming `path` when it exists and is not a regular file (reading a FIFO would block
    forever); `os.stat` never blocks. Nothing happens for an absent path or a regular file."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file"
        raise NotARegularFile(f"{path} is {kind}, not a regular file; move it away")


def read_json(path: Path) -> dict | None:
    """The JSON object in `path`; None when it is absent, or (with a warning) unreadable or not an object;
    `NotARegularFile` when it is a FIFO or another non-regular file."""
    check_regular(path)
    try:
        data = json.loads(path.read_bytes())
    except (FileNotFoundError, NotADirectoryError):  # absent (a parent that is a file: Run.open says so)
        return None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as err:
        warn_store(f"{path}: unreadable ({type(err).__name__}: {err}); ignored")
        return None
    if not isinstance(data, dict):
        warn_store(f"{path}: expected a JSON object, got a {type(data).__name__}; ignored")
        return None
    return data


def metric_record(line: bytes):
    """The record of one metrics.jsonl line, or None unless it is a JSON object with an int (non-bool) "step"."""
    try:
        record = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    step = record.get("step") if isinstance(record, dict) else None
    return record if isinstance(step, int) and not isinstance(step, bool) else None


def read_metric_lines(path: Path) -> tuple[list[dict], int, str]:
    """The lines of a metrics.jsonl at `path`: (valid records, the consistent step, why it ends there), where the
    consistent step is the largest s such that the valid lines above the first bad one log every step 1..s.
    Warns once per bad line, naming the file and its 1-based line; `NotARegularFile` for a FIFO."""
    check_regular(path)
    try:
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        return [], 0, "metrics.jsonl is missing"
    records, trusted = [], None
    for number, line in enumerate(lines, start=1):
        record = metric_record(line)
        if record is None:
            if line.strip():
                warn_store(f"{path}:{number}: not a JSON object with an integer 'step' (torn or corrupt); skipped")
                trusted = len(records) if trusted is None else trusted
            continue
        records.append(record)
    steps = {r["step"] for r in records[:trusted]}
    consistent = 0
    while consistent + 1 in steps:
        consistent += 1
    why = (f"metrics.jsonl has a bad line after step {consistent}" if trusted is not None and
           consistent == max(steps, default=0) else f"metrics.jsonl lacks step {consistent + 1}")
    return records, consistent, why


class CorruptFileError(ValueError):
    """A sealed file failed its checks; the message says which check."""


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` via a fsynced temporary file and `os.replace` (`atomic_write`)."""
    atomic_write(path, lambda fh: fh.write(data))


def atomic_write(path: Path, write: Callable) -> None:
    """Call `write(fh)` on a temporary file beside `path`, fsync it and `os.replace` it onto `path`; mode 0o666
    minus the umask (not the 0o600 of `mkstemp`). The temporary file is removed on any failure (e.g. ENOSPC),
    leaving `path` as it was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def collect_stale(folder: Path, prefix: str, max_age_s: float) -> None:
    """Remove the temporary folders `<folder>/<prefix><pid>-*` of writers that were killed: those whose process is
    gone, or older than `max_age_s` (a killed build or import never cleans up after itself)."""
    for temp in folder.glob(f"{prefix}*"):
        pid = temp.name[len(prefix):].split("-")[0]
        try:
            alive = pid.isdigit() and os.kill(int(pid), 0) is None
        except ProcessLookupError:
            alive = False
        except PermissionError:  # a process of another user holds that pid
            alive = True
        try:
            old = time.time() - temp.stat().st_mtime > max_age_s
        except FileNotFoundError:
            continue
        if not alive or old:
            shutil.rmtree(temp, ignore_errors=True)


def sha256_file(path: Path) -> str:
    """Hex sha256 of the file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


_DIGESTS: dict[tuple, str] = {}
"""sha256 of files hashed before, by (resolved path, size, mtime_ns, ctime_ns, inode) (`file_digest`)."""

_SETTLED_NS = 2_000_000_000
"""A file is remembered only once its last write is this much older than the hash (the clock that stamps mtime
ticks in milliseconds, so a rewrite within the tick of the previous one could leave size and mtime unchanged)."""


def file_digest(path: Path) -> str:
    """`sha256_file(path)`, hashed once per version of the file: the digest is remembered by (resolved path, size,
    mtime_ns, ctime_ns, inode), and any write, replacement or `utime` changes ctime or the inode. Opening a complete
    run checks its model files several times (`run_exists`, `Run.open`, the trainer); this hashes them once."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    digest = _DIGESTS.get(key)
    if digest is None:
        digest = sha256_file(path)
        if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) > _SETTLED_NS:
            _DIGESTS[key] = digest
    return digest


def tree_digest(folder: Path) -> dict[str, str]:
    """{path relative to `folder` (posix): sha256} for every file under `folder` (sorted); {} if it is absent."""
    if not folder.is_dir():
        return {}
    return {p.relative_to(folder).as_posix(): sha256_file(p) for p in sorted(folder.rglob("*")) if p.is_file()}


def follow_umask(folder: Path) -> None:
    """Give every file under `folder` mode 0o666 minus the umask (safetensors writes model files 0o600)."""
    if folder.is_dir():
        mode = 0o666 & ~_umask()
        for p in folder.rglob("*"):
            if p.is_file():
                os.chmod(p, mode)


def tree_mismatch(folder: Path, expected: dict[str, str]) -> str | None:
    """Why `folder` does not hold exactly the files of `expected` ({relative path: sha256}); None when it does.
    Each version of a file is hashed once per process (`file_digest`)."""
    for rel, digest in expected.items():
        path = folder / rel
        check_regular(path)
        if not path.is_file():
            return f"{path} is missing"
        if file_digest(path) != digest:
            return f"{path} does not match its recorded sha256 (truncated or modified)"
    return None


def seal(payload: bytes, identity: dict) -> bytes:
    """`payload` with a header recording its size, sha256 and the JSON-serialisable `identity`."""
    header = {"sha256": hashlib.sha256(payload).hexdigest(), "size": len(payload), **identity}
    return MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + payload


def check_header(header, identity: dict, size: int) -> None:
    """CorruptFileError unless `header` is a dict that matches `identity` and records a payload of `size` bytes."""
    if not isinstance(header, dict):
        raise CorruptFileError("unreadable header")
    for key, value in identity.items():
        if header.get(key) != value:
            raise CorruptFileError(f"it belongs to {key}={header.get(key)!r}, not {value!r}")
    if header.get("size") != size:
        raise CorruptFileError(f"payload is {size} bytes, the header says {header.get('size')!r} (truncated?)")


def unseal(data: bytes, identity: dict) -> bytes:
    """The payload of sealed `data`, checked against its header and against `identity`; else CorruptFileError."""
    if not data.startswith(MAGIC):
        raise CorruptFileError("not a sealed esreason file (no header)")
    header_line, sep, payload = data[len(MAGIC):].partition(b"\n")
    try:
        header = json.loads(header_line) if sep else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        header = None
    check_header(header, identity, len(payload))
    if hashlib.sha256(payload).hexdigest() != header.get("sha256"):
        raise CorruptFileError("payload does not match its sha256 (modified or corrupted)")
    return payload


_HELD: dict[str, "DirectoryLock"] = {}
"""The locks this process holds, by lock-file path (so that a trainer that raised can be rerun in-process)."""


class DirectoryLock:
    """An exclusive `flock` on `<folder>/.lock`, which records the holder's PID. Held until `release` (or until
    the process exits: the kernel drops it, so a killed trainer never leaves a stale lock). Locking a folder this
    process already holds takes the lock over from the earlier holder (a trainer that raised and left its `Run`
    in a traceback), instead of waiting for itself."""

    def __init__(self, folder: Path, *, timeout: float | None = None, poll_s: float = 0.1):
        """Acquire the lock, waiting (with one warning naming the holder's PID) up to `timeout` seconds (None:
        forever); past it, raise BlockingIOError naming the lock file and the PID that holds it."""
        self.path = Path(folder) / ".lock"
        """The lock file."""
        stale = _HELD.pop(str(self.path.resolve()), None)
        if stale is not None:
            stale.release()
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666 & ~_umask())
        deadline = None if timeout is None else time.monotonic() + timeout
        warned = False
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = self.holder()
                if deadline is not None and time.monotonic() >= deadline:
                    self.release()
                    raise BlockingIOError(errno.EWOULDBLOCK, f"{self.path.parent} is being written by another "
                                          f"process (PID {holder}, lock file {self.path}); "
                                          f"waited {timeout} s") from None
                if not warned:
                    warnings.warn(f"{self.path.parent} is locked by PID {holder}; waiting for it to finish",
                                  RunStoreWarning, stacklevel=3)
                    warned = True
                time.sleep(poll_s)
        os.ftruncate(self._fd, 0)
        os.write(self._fd, f"{os.getpid()}\n".encode())
        _HELD[str(self.path.resolve())] = self

    def holder(self) -> str:
        """The PID recorded in the lock file ("?" if unreadable)."""
        try:
            return self.path.read_text().strip() or "?"
        except OSError:
            return "?"

    def release(self) -> None:
        """Drop the lock (idempotent)."""
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None
        if _HELD.get(str(self.path.resolve())) is self:
            del _HELD[str(self.path.resolve())]
