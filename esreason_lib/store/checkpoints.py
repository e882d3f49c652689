"""Checkpoint files: a sealed (`integrity.seal` layout) `torch.save` archive that holds tensors, numbers, strings
and containers of them only, written and read without a copy of the whole state in memory.

Guarantees. `write_checkpoint` serialises the state straight to a temporary file (the tensors are not cloned,
neither on the device nor on the host), hashes it in blocks and streams it behind the seal header into the final
file, atomically (`integrity.atomic_write`; nothing is left behind on failure). `read_checkpoint` checks the seal
in blocks, then loads the payload with `torch.load(weights_only=True)`: a payload that would build any other
object (a pickled callable, a class instance) is refused with `UnsafeCheckpointError` before any of it runs. The
seal is a plain sha256, so it only detects damage; `weights_only` is what makes a tampered checkpoint harmless.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import shutil
import tempfile
from pathlib import Path

import torch

from esreason_lib.store.integrity import MAGIC, CorruptFileError, atomic_write, check_header, check_regular

_BLOCK = 1 << 20


class UnsafeCheckpointError(ValueError):
    """A checkpoint whose seal checks holds more than tensors and plain data (a pickled object); never loaded."""


def _digest(fh, size: int) -> str:
    digest, left = hashlib.sha256(), size
    while left > 0:
        block = fh.read(min(_BLOCK, left))
        if not block:
            break
        digest.update(block)
        left -= len(block)
    return digest.hexdigest()


def write_checkpoint(path: Path, state: dict, identity: dict) -> None:
    """`torch.save(state)` sealed with its size, sha256 and `identity`, atomically at `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, raw = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".raw", dir=path.parent)
    try:
        with os.fdopen(fd, "w+b") as payload:
            torch.save(state, payload)
            size = payload.tell()
            payload.seek(0)
            header = {"sha256": _digest(payload, size), "size": size, **identity}
            payload.seek(0)

            def write(fh):
                fh.write(MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n")
                shutil.copyfileobj(payload, fh, _BLOCK)

            atomic_write(path, write)
    finally:
        Path(raw).unlink(missing_ok=True)


class _Window(io.RawIOBase):
    """The bytes of `fh` from `offset` on, as a seekable file of their own (what `torch.load` reads)."""

    def __init__(self, fh, offset: int, size: int):
        self._fh, self._offset, self._size = fh, offset, size
        fh.seek(offset)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, pos: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self.tell(), os.SEEK_END: self._size}[whence]
        return self._fh.seek(self._offset + base + pos) - self._offset

    def tell(self) -> int:
        return self._fh.tell() - self._offset

    def readinto(self, buffer) -> int:
        return self._fh.readinto(buffer)


def read_checkpoint(path: Path, identity: dict) -> dict:
    """The state sealed in `path` for `identity`. `CorruptFileError` (naming the check) when the header, the size,
    the sha256 or an identity field disagrees; `UnsafeCheckpointError` when the payload holds anything but tensors
    and plain data; `NotARegularFile` for a FIFO or another non-regular file."""
    check_regular(path)
    with open(path, "rb") as fh:
        if fh.read(len(MAGIC)) != MAGIC:
            raise CorruptFileError("not a sealed esreason file (no header)")
        try:
            header = json.loads(fh.readline(1 << 16))
        except (json.JSONDecodeError, UnicodeDecodeError):
            header = None
        offset = fh.tell()
        size = os.fstat(fh.fileno()).st_size - offset
        check_header(header, identity, size)
        if _digest(fh, size) != header.get("sha256"):
            raise CorruptFileError("payload does not match its sha256 (modified or corrupted)")
        try:
            state = torch.load(io.BufferedReader(_Window(fh, offset, size)), map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as err:
            lines = [x for x in str(err).splitlines() if "GLOBAL" in x or "Unsupported" in x]
            raise UnsafeCheckpointError(
                f"{path} holds more than tensors and plain data and was not loaded (nothing in it ran): "
                f"{lines[0].strip() if lines else type(err).__name__}; delete it to resume from an earlier "
                f"checkpoint") from None
    if not isinstance(state, dict):
        raise CorruptFileError(f"it holds a {type(state).__name__}, not a dict")
    return state
