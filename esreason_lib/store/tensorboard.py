"""TensorBoard event files written from the very records the run store appends to metrics.jsonl (off by default).

Set `ESREASON_TENSORBOARD` to a folder and every `Run.log(step, metrics)` also writes the record's finite numbers
as TensorBoard scalars (tag = the metric key, e.g. `reward/mean`; global step = the record's step) into
`<folder>/<run directory name>`, so `tensorboard --logdir <folder>` shows every run of the store side by side, as the
artifact and TRL log. metrics.jsonl stays the record of truth: the event files are a view, never read back, and a
missing `tensorboard` package (torch's `SummaryWriter` needs it) is a one-line ImportError naming the setting.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

ENV = "ESREASON_TENSORBOARD"
"""The environment variable naming the TensorBoard folder (unset or empty: off)."""

_WRITERS: dict[str, object] = {}  # run directory name -> its SummaryWriter, open for the process's life


def tensorboard_dir() -> Path | None:
    """The folder `ESREASON_TENSORBOARD` names, or None when TensorBoard logging is off."""
    value = os.environ.get(ENV, "").strip()
    return Path(value).expanduser() if value else None


def scalars(record: dict) -> dict[str, float]:
    """The entries of a metrics record that TensorBoard can plot: finite ints and floats (not bools), without
    "step"."""
    return {k: float(v) for k, v in record.items() if k != "step" and isinstance(v, (int, float))
            and not isinstance(v, bool) and math.isfinite(v)}


def mirror(run_name: str, step: int, record: dict, folder: Path) -> None:
    """Write `record`'s `scalars` at `step` into `folder / run_name` (the writer is opened once per run)."""
    writer = _WRITERS.get(run_name)
    if writer is None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as err:
            raise ImportError(f"{ENV} is set but TensorBoard is not installed: pip install tensorboard, or unset "
                              f"{ENV}") from err
        writer = _WRITERS[run_name] = SummaryWriter(log_dir=str(folder / run_name))
    for key, value in scalars(record).items():
        writer.add_scalar(key, value, global_step=int(step))
    writer.flush()
