"""What `train_es` and `train_grpo` share: the registry of trained methods, the dtype names a config may use,
the device, the model, tokenizer, task and train examples a run starts from, and which train examples each
iteration draws."""

from __future__ import annotations

import numpy as np
import torch

from esreason_lib.seeding import numpy_rng

METHODS = ("es", "grpo")
"""The trained methods; `trainer(method)` is each one's `train_*` function (`config, *, home, resume, progress`)."""


def trainer(method: str):
    """`es.train_es` or `grpo.train_grpo` for `method`, one of `METHODS`."""
    if method not in METHODS:
        raise ValueError(f"method {method!r} is not one of {METHODS}")
    from esreason_lib import es, grpo  # here: es and grpo import this module

    return {"es": es.train_es, "grpo": grpo.train_grpo}[method]


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
"""Model parameter dtypes by the name a config gives (`ESConfig.dtype`, `GRPOConfig.dtype`)."""


PROMPT_ORDERS = ("random", "epoch")
"""How an iteration's train prompts are drawn (`ESConfig.prompt_order`, `GRPOConfig.prompt_order`)."""


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


def resolve_device(name: str) -> torch.device:
    """"auto" -> cuda when available, else cpu; any other name as given."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def training_inputs(config, *, model=None, tokenizer=None, task=None, home=None, progress: bool = True,
                    caller: str = "train"):
    """`(model, tokenizer, task, examples)` for a training run of `config` (an `ESConfig` or `GRPOConfig`).

    The model is `config.model` loaded into `home` unless one is passed (then `tokenizer` is required), and is
    moved to `config.device` / `config.dtype` either way. The task is `get_task(config.task, ...)` with the
    config's `reward_*` shaping unless one is passed; `examples` are its train split (`config.train_size`,
    seed 0), and must not be empty. `caller` names the trainer in errors.
    """
    from esreason_lib.models import load_model
    from esreason_lib.tasks import RewardShaping, get_task

    device, dtype = resolve_device(config.device), DTYPES[config.dtype]
    if model is None:
        model, loaded_tok = load_model(config.model, device=device, dtype=dtype, home=home, progress=progress)
        tokenizer = tokenizer or loaded_tok
    elif tokenizer is None:
        raise ValueError(f"{caller}: a tokenizer is required when a model is passed")
    model.to(device=device, dtype=dtype)
    if task is None:
        shaping = RewardShaping(config.reward_correct, config.reward_formatted, config.reward_invalid)
        task = get_task(config.task, shaping=shaping, **dict(config.task_kwargs))
    examples = task.examples("train", n=config.train_size, seed=0)
    if not examples:
        raise ValueError(f"task {config.task!r} has no train examples (train_size={config.train_size!r})")
    return model, tokenizer, task, examples
