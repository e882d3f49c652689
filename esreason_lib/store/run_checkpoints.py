"""A run's checkpoints (`RunCheckpoints`, a base of `store.runs.Run`): the files under its checkpoints/ folder,
sealed with the run's identity, and the newest one a resume may use.

Each is `checkpoints/step-XXXXXX.pt` (`store.checkpoints`: tensors and plain data only, sealed with its sha256 and the
run's kind/config hash/step; atomic); the last 2 are kept. The trust rules (which checkpoint a resume uses) are in
`store.runs`' module docstring.
"""

from __future__ import annotations

import re
from pathlib import Path

from esreason_lib.store.checkpoints import read_checkpoint, write_checkpoint
from esreason_lib.store.integrity import CorruptFileError, check_regular, warn_store

_CKPT = re.compile(r"^step-(\d+)\.pt$")
_KEEP_CHECKPOINTS = 2


class RunCheckpoints:
    """The checkpoint methods of a `store.runs.Run`, which holds the run's `path` and `kind` and reads its metric lines
    (`Run._metric_lines`)."""

    def _checkpoints(self) -> list[tuple[int, Path]]:
        folder = self.path / "checkpoints"
        if not folder.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _CKPT.match(p.name))]
        for _, p in found:
            check_regular(p)
        return sorted(found)

    def _identity(self, step: int) -> dict:
        return {"kind": self.kind, "config_hash": self.path.name.rsplit("-", 1)[1], "step": int(step)}

    def save_checkpoint(self, step: int, state: dict) -> Path:
        """Save `state` (tensors, numbers, strings and containers of them), sealed with its sha256 and this run's
        identity, atomically to checkpoints/step-XXXXXX.pt without copying it in memory
        (`store.checkpoints.write_checkpoint`), and keep only the last 2 checkpoints."""
        if int(step) < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        path = self.checkpoint_path(step)
        write_checkpoint(path, state, self._identity(step))
        for _, old in self._checkpoints()[:-_KEEP_CHECKPOINTS]:
            old.unlink(missing_ok=True)
        return path

    def checkpoint_path(self, step: int) -> Path:
        """Where this run's checkpoint of `step` lives (checkpoints/step-XXXXXX.pt)."""
        return self.path / "checkpoints" / f"step-{int(step):06d}.pt"

    def read_checkpoint(self, step: int, path: Path) -> dict:
        """The state of this run's checkpoint of `step` read from `path`, another process's copy of the same run
        (process 0's under torchrun, `grpo.distributed.shared_checkpoint`), its seal checked against this run's
        identity (kind, config hash, step)."""
        return read_checkpoint(Path(path), self._identity(step))

    def latest_checkpoint(self) -> tuple[int, dict] | None:
        """(step, state) of the newest checkpoint whose seal checks and whose step s has every step 1..s logged in
        metrics.jsonl (see `store.runs`' module docstring), or None. Each checkpoint skipped is named in a
        `RunStoreWarning`; one holding more than tensors and plain data raises `UnsafeCheckpointError`."""
        _, consistent, why = self._metric_lines()
        for step, path in reversed(self._checkpoints()):
            if step > consistent:
                warn_store(f"{path} skipped: {why}; resuming from an earlier point")
                continue
            try:
                return step, read_checkpoint(path, self._identity(step))
            except (CorruptFileError, OSError, RuntimeError, EOFError) as err:
                warn_store(f"{path} skipped: {err}")
        return None
