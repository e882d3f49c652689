"""Where a run's metric records go besides metrics.jsonl, as TRL's `report_to` (`RunSettings.report_to`):
"tensorboard" (event files, `store.tensorboard`) and "wandb" (Weights & Biases, when installed). metrics.jsonl stays
the record of truth: a report is a view, never read back. `ESREASON_TENSORBOARD` still turns TensorBoard on for
every run; `report_to` turns it on for one run's config, into that folder or else `<store>/tensorboard`.
"""

from __future__ import annotations

import os

from esreason_lib.store.tensorboard import mirror, scalars, tensorboard_dir

REPORTERS = ("tensorboard", "wandb")
"""The values `report_to` may hold ("none", or an empty tuple, reports nowhere)."""

WANDB_PROJECT = "WANDB_PROJECT"
"""The environment variable naming the Weights & Biases project (unset: "esreason"), as TRL reads it."""

_WANDB: dict[str, object] = {}  # run directory name -> its wandb run, open for the process's life


def report_targets(value, owner: str = "RunSettings") -> tuple[str, ...]:
    """`value` (a name, "none", or a list or tuple of names) as a sorted tuple of `REPORTERS`; ValueError naming
    `<owner>.report_to` and the value otherwise."""
    names = (value,) if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{owner}.report_to={value!r}: must be a name or a list of names of {REPORTERS}")
    unknown = [n for n in names if n not in (*REPORTERS, "none")]
    if unknown:
        raise ValueError(f"{owner}.report_to={value!r}: {unknown[0]!r} is not one of {REPORTERS} (or 'none')")
    return tuple(sorted({n for n in names if n != "none"}))


def report(run, record: dict) -> None:
    """Send `record` (a metrics.jsonl record, with its "step") to `run.report_to`'s reporters and, when
    `ESREASON_TENSORBOARD` is set, to TensorBoard; `run` is a `store.runs.Run`."""
    board = tensorboard_dir()
    if board is None and "tensorboard" in run.report_to:
        board = run.path.parent / "tensorboard"
    if board is not None:
        mirror(run.path.name, record["step"], record, board)
    if "wandb" in run.report_to:
        _wandb_run(run).log(scalars(record), step=int(record["step"]))


def _wandb_run(run):
    handle = _WANDB.get(run.path.name)
    if handle is None:
        try:
            import wandb
        except ImportError as err:
            raise ImportError("report_to includes 'wandb' but Weights & Biases is not installed: pip install wandb, "
                              "or leave it out of report_to") from err
        handle = _WANDB[run.path.name] = wandb.init(
            project=os.environ.get(WANDB_PROJECT) or "esreason", name=run.path.name, id=run.path.name,
            resume="allow", config=run.config, dir=str(run.path), reinit="create_new")  # reinit: wandb >= 0.19.10
    return handle
