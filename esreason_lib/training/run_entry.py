"""A training run's entry in the run store: what names it (`run_identity`), how every trainer opens it
(`open_training_run`: reused when complete, else checked, loaded and locked), and the model snapshots it keeps
along the way (`save_snapshot`, `snapshot_refs`)."""

from __future__ import annotations

from esreason_lib.models.zoo import quiet_transformers
from esreason_lib.progress import say_reused
from esreason_lib.store.identity import canonical_config
from esreason_lib.store.runs import Run, run_exists
from esreason_lib.tasks import TASK_NAMES, task_names, task_version
from esreason_lib.training.inputs import check_inputs, check_training_config, config_task, training_inputs


def open_training_run(kind: str, config, *, model=None, tokenizer=None, task=None, home=None,
                      progress: bool = True):
    """How every trainer starts: a complete run is opened and returned as is; otherwise, before any run directory
    exists, check the config (`check_training_config`), gather `training_inputs` and check them against each other
    (`check_inputs`), then open and lock the `kind` run of `config` (reporting to `config.report_to`). An error on
    the way leaves no run directory.

    Returns `(run, None)` for a complete run, else `(run, (model, tokenizer, task, examples))`."""
    identity = run_identity(config, task)
    if run_exists(kind, identity, home=home):
        return _reused(Run.open(kind, identity, seed=config.seed, home=home, lock=True), progress), None
    check_training_config(kind, config, model=model, tokenizer=tokenizer, task=task)
    inputs = training_inputs(config, model=model, tokenizer=tokenizer, task=task, home=home, progress=progress,
                             caller=f"train_{kind}")
    check_inputs(config, *inputs)
    run = Run.open(kind, run_identity(config, inputs[2]), seed=config.seed, home=home, lock=True)
    if run.is_complete():  # finished by the process that held the lock
        return _reused(run, progress), None
    run.report_to = config.report_to  # `store.reporting`: its records also go there
    return run, inputs


def run_identity(config, task=None):
    """What names a training run of `config` (an `ESConfig` or `GRPOConfig`) in the run store: the config itself
    when its task is built in (the identity every stored run is found by), else its canonical form plus
    `task_version` (`tasks.task_version`: the task's code, or the version it declares), so that a run of an edited
    verifier is trained anew instead of served from the store. `task` is the task the run trains on (default:
    the one `config.task` names, e.g. added by `tasks.register_task`; an unknown name is left to the checks)."""
    if task is None and (config.task in TASK_NAMES or config.task not in task_names()):
        return config
    task = getattr(task, "task", task)  # a `tasks.contract.ContractTask` stands for the task it wraps
    version = task_version(task if task is not None else config_task(config))
    return config if version is None else {**canonical_config(config), "task_version": version}


def _reused(run, announce: bool):
    """`run` (complete, found in the store), after saying so when `announce` (`progress.say_reused`: one line on
    stderr in a terminal, one line per cell in a notebook)."""
    if announce:
        say_reused(run.path)
    return run


SNAPSHOTS = "snapshots"
"""The folder of a run that holds its `snapshot_every` model snapshots (`snapshots/step-XXXXXX/`)."""


def snapshot_steps(every: int, iterations: int) -> range:
    """The steps whose weights a run keeps as snapshots: every `every`-th before the last (the final model is
    `model/`); none when `every` is 0."""
    return range(every, iterations, every) if every > 0 else range(0)


def save_snapshot(run, config, step: int, model, tokenizer) -> None:
    """Keep the weights after iteration `step` under `run.path / snapshots / step-XXXXXX` when `step` is one of
    `snapshot_steps(config.snapshot_every, config.iterations)`."""
    if int(step) not in snapshot_steps(getattr(config, "snapshot_every", 0) or 0, config.iterations):
        return
    target = run.path / SNAPSHOTS / f"step-{int(step):06d}"
    with quiet_transformers():
        model.save_pretrained(target)
        tokenizer.save_pretrained(target)


def snapshot_refs(run) -> dict[int, str]:
    """{step: model reference} of a run's snapshots, in training order, then {iterations: run.model_dir}. The
    steps follow from its config (`snapshot_steps`), not from the folder, so a run imported without weights
    (`store.bundle`) names the same snapshots as the one trained."""
    iterations = int(run.config["iterations"])
    folder = run.path / SNAPSHOTS
    steps = snapshot_steps(int(run.config.get("snapshot_every") or 0), iterations)
    return {**{s: str(folder / f"step-{s:06d}") for s in steps}, iterations: str(run.model_dir)}
