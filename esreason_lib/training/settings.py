"""The config fields every training run has (`RunSettings`, which `ESConfig` and `GRPOConfig` extend), the names
they take (dtypes, prompt orders, the default base), and which train examples each iteration draws
(`prompt_indices`). No model code: importing a config loads no transformers."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from esreason_lib.seeding import numpy_rng
from esreason_lib.store.identity import ADDED_OPTION, execution
from esreason_lib.store.reporting import report_targets
from esreason_lib.tasks.base import freeze_task_kwargs
from esreason_lib.validation import (
    check_bool,
    check_choice,
    check_finite_float,
    check_int,
    check_nonempty_str,
    check_nonnegative_int,
    check_optional_positive_int,
)

DEFAULT_BASE = "qwen2-s"
"""The default base model of the CPU studies (a name of `esreason_lib.models.zoo.ZOO`)."""

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
"""Model parameter dtypes by the name a config gives (`ESConfig.dtype`, `GRPOConfig.dtype`)."""


PROMPT_ORDERS = ("random", "epoch")
"""How an iteration's train prompts are drawn (`ESConfig.prompt_order`, `GRPOConfig.prompt_order`)."""


@dataclass(frozen=True)
class RunSettings:
    """The fields every training config shares (`ESConfig` and `GRPOConfig` extend it): the base model, the task
    and its reward, the train split and how prompts are drawn, checkpoints, device, dtype and seed."""

    model: str = DEFAULT_BASE
    """Base model: a zoo name (`esreason_lib.models.zoo.ZOO`, or a pretrained base of `zoo.PRETRAINED` such as
    "smollm2-135m"), a local directory, or a hub id."""
    task: str = "countdown"
    """Task name for `esreason_lib.tasks.get_task`."""
    task_kwargs: tuple = ()
    """Extra `get_task` keyword arguments as sorted (key, value) pairs; a dict is accepted and converted
    (reward shaping is set by the `reward_*` fields instead)."""
    max_new_tokens: int | None = None
    """Generation budget in tokens; None uses the task's `max_new_tokens`."""
    reward_correct: float = 1.0
    """Reward for a verified-correct completion."""
    reward_formatted: float = 0.1
    """Reward for a well-formed but wrong completion."""
    reward_invalid: float = 0.0
    """Reward for a completion with no extractable answer."""
    train_size: int | None = None
    """Number of train-split examples to draw prompts from (None = the whole split)."""
    prompt_order: str = "random"
    """How each iteration's prompts are drawn (`prompt_indices`): "random" (a fresh draw per iteration) or
    "epoch" (every train example once per epoch, reshuffled per epoch)."""
    checkpoint_every: int = field(default=25, metadata=execution())
    """Save a resumable checkpoint every this many iterations (0 = never)."""
    snapshot_every: int = field(default=0, metadata=ADDED_OPTION)
    """Keep the model's weights every this many iterations under `snapshots/step-XXXXXX/` (save_pretrained; never
    deleted, unlike checkpoints), for evaluation along the training path (notebook 01's frontier); 0 = none."""
    keep_checkpoints: bool = field(default=False, metadata=ADDED_OPTION)
    """Keep the last checkpoints once the run is complete (default: only the final weights under model/ stay)."""
    device: str = "auto"
    """Torch device ("cpu", "cuda", "cuda:1", ...); "auto" picks cuda when available."""
    dtype: str = "float32"
    """Model parameter dtype: "float32" or "bfloat16" (ES: perturb/restore stays bit-exact in both; GRPO: the
    optimiser keeps fp32 master weights)."""
    seed: int = 0
    """Run seed; every random stream of the run derives from it by name (`esreason_lib.seeding`)."""
    report_to: tuple = field(default=(), metadata=execution(added=True))
    """Where each metrics record also goes, as TRL's `report_to` (`store.reporting.REPORTERS`): "tensorboard"
    (`$ESREASON_TENSORBOARD` or `<store>/tensorboard`), "wandb" (when installed); a name or a list is accepted,
    "none" or () reports nowhere. Not part of the run's identity."""

    def __post_init__(self):
        object.__setattr__(self, "task_kwargs", freeze_task_kwargs(self.task_kwargs, type(self).__name__))
        check_nonempty_str(self, "model", "task", "device")
        check_optional_positive_int(self, "max_new_tokens", "train_size")
        check_finite_float(self, "reward_correct", "reward_formatted", "reward_invalid")
        check_choice(self, "prompt_order", PROMPT_ORDERS)
        check_nonnegative_int(self, "checkpoint_every", "snapshot_every")
        check_bool(self, "keep_checkpoints")
        check_choice(self, "dtype", DTYPES)
        check_int(self, "seed")
        object.__setattr__(self, "report_to", report_targets(self.report_to, type(self).__name__))


def prompt_indices(n_examples: int, per_step: int, iteration: int, seed: int, method: str,
                   order: str = "random") -> np.ndarray:
    """Indices [per_step] into the train examples for `iteration` (0-based) of a `method` ("es"/"grpo") run.

    "random": a fresh draw per iteration from the stream (seed, method, "prompts", iteration), without
    replacement when per_step <= n_examples (with replacement otherwise); examples may repeat across
    iterations and some may never be drawn. "epoch": the iterations read consecutive positions of one long
    sequence made of per-epoch permutations, epoch e's from the stream (seed, method, "epoch", e), so every
    example is drawn exactly once per epoch (a batch that crosses an epoch boundary ends one epoch and starts
    the next). Both are pure functions of their arguments, so a resumed run draws the same prompts.
    """
    if order not in PROMPT_ORDERS:
        raise ValueError(f"order must be one of {PROMPT_ORDERS}, got {order!r}")
    if n_examples < 1 or per_step < 1 or iteration < 0:
        raise ValueError(f"need n_examples >= 1, per_step >= 1, iteration >= 0, got {n_examples!r}, "
                         f"{per_step!r}, {iteration!r}")
    if order == "random":
        rng = numpy_rng(seed, method, "prompts", iteration)
        return rng.choice(n_examples, size=per_step, replace=per_step > n_examples)  # [per_step]
    positions = np.arange(iteration * per_step, (iteration + 1) * per_step)  # [per_step]
    epochs = positions // n_examples  # [per_step]
    perms = {int(e): numpy_rng(seed, method, "epoch", int(e)).permutation(n_examples) for e in np.unique(epochs)}
    return np.array([perms[int(e)][p % n_examples] for e, p in zip(epochs, positions)], dtype=np.int64)
