"""What `train_es` and `train_grpo` share: the registry of trained methods, the dtype names a config may use,
the device, and the model, tokenizer, task and train examples a run starts from."""

from __future__ import annotations

import torch

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
