"""Pretraining a zoo model from scratch on a synthetic stream of task demonstrations.

The stream mixes Countdown (`prompt + demonstration + <eos>`, the demonstration a uniformly random valid
solution from the task's solver, or with probability `habit_fraction` the task's `habit_answer`) with the
held-out families (addition, sorting). Problems come only from each task's *train* split, so Countdown test
problems are never seen. The loss is next-token cross-entropy on the completion tokens only (prompt and
padding masked). AdamW, linear warm-up then cosine decay over exactly `spec.steps` steps, at one thread
(`torch.set_num_threads(1)` while training, restored afterwards), with every random draw derived from the spec's
seed by name: the same spec gives the same weights bit for bit on one machine kind, and the manifest records
their `weights_sha256`. The model and tokenizer are saved with `save_pretrained` into the run store
(`Run.open("zoo", spec)`); a finished run is found and reused, never retrained.

The repository ships the weights of the preset zoo models in `SHIPPED_ZOO` (this module's own output): `pretrain`
returns a shipped directory, without training, when its recorded config hash is the spec's own, and checks its
`weights_sha256` first. `ship` (re)writes an entry from a fresh pretraining; `benchmarks/zoo_weights.py` and
`make zoo-check` rebuild entries and compare the hashes.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from esreason_lib.guards import check_finite_metrics
from esreason_lib.models.zoo import ZooSpec, build_char_tokenizer, get_spec, num_parameters, quiet_transformers
from esreason_lib.paths import REPO_ROOT
from esreason_lib.progress import progress_bar
from esreason_lib.seeding import derive_seed, numpy_rng

SHIPPED_ZOO = REPO_ROOT / "zoo"
"""The shipped zoo: `<name>/` (`save_pretrained` output) per model and `manifest.json` ({name: record})."""
IGNORE_INDEX = -100
FAMILIES = ("countdown", "addition", "sorting")
_POOL_SIZE = 16384
_CHUNK = 2048


class CorpusStream:
    """An endless, seeded stream of `(prompt, completion)` pairs drawn from the tasks' train splits.

    Each family gets a fixed pool of `pool_size` train examples (default: 16384, or fewer when the step budget
    sees fewer examples), drawn once as chunks of
    `examples("train", n=2048, seed=...)` under growing derived seeds (chunks may repeat a problem, e.g. in
    another number order), then cycled in a fresh random order every epoch. Countdown numbers are shown in
    a fresh uniformly random order each time (the generator's own prompt order is random too, and the split
    depends only on the multiset and the target), which multiplies the distinct prompts seen ~6x and stops
    the model from memorising prompt strings (with 3 numbers in 1..15 the train split has only ~9.5k
    problems). Drawing and solving Countdown
    problems costs ~0.5 ms each, so a fixed pool keeps data generation far below the model's step time.
    Only train splits are touched: Countdown test problems never enter the stream.
    """

    def __init__(self, spec: ZooSpec, pool_size: int | None = None):
        from esreason_lib.tasks import get_task

        if pool_size is None:  # no bigger than one pass over the step budget needs
            pool_size = min(_POOL_SIZE, spec.steps * spec.batch_size)
        if pool_size < 1:
            raise ValueError(f"pool_size must be >= 1, got {pool_size!r}")
        self.spec = spec
        self.pool_size = pool_size
        weights = np.array([spec.countdown_weight, spec.addition_weight, spec.sorting_weight], dtype=float)
        self.families = [f for f, w in zip(FAMILIES, weights) if w > 0]
        self.probs = weights[weights > 0] / weights[weights > 0].sum()  # [F]
        self.tasks = {f: get_task(f, **spec.task_kwargs()) if f == "countdown" else get_task(f)
                      for f in self.families}
        self.rng = numpy_rng(spec.seed, "pretrain", "corpus")
        self._pools: dict[str, list] = {}
        self._order: dict[str, list[int]] = {f: [] for f in self.families}

    def _pool(self, family: str) -> list:
        if family not in self._pools:
            pool: list = []
            chunk = 0
            while len(pool) < self.pool_size:
                seed = derive_seed(self.spec.seed, "pretrain", family, chunk) % (2**31)
                n = min(_CHUNK, self.pool_size - len(pool))
                got = self.tasks[family].examples("train", n=n, seed=seed)
                if not got:
                    raise RuntimeError(f"task {family!r} returned no train examples")
                pool.extend(got)
                chunk += 1
            self._pools[family] = pool
        return self._pools[family]

    def _next_example(self, family: str) -> dict:
        pool = self._pool(family)
        order = self._order[family]
        if not order:
            order.extend(self.rng.permutation(len(pool)).tolist())
        return pool[order.pop()]

    def sample_records(self, n: int) -> list[tuple[str, dict, str, str]]:
        """`n` draws as `(family, example, prompt, completion)` (completion without EOS)."""
        picks = self.rng.choice(len(self.families), size=n, p=self.probs)  # [n]
        records = []
        for k in picks:
            family = self.families[k]
            task = self.tasks[family]
            example = self._next_example(family)
            if family == "countdown":
                numbers = [example["numbers"][i] for i in self.rng.permutation(len(example["numbers"]))]
                example = {**example, "numbers": numbers}
            if family == "countdown" and self.spec.habit_fraction > 0 and self.rng.random() < self.spec.habit_fraction:
                completion = task.habit_answer(example)
            else:
                completion = task.demonstration(example, self.rng)
            records.append((family, example, task.prompt(example), completion))
        return records

    def sample(self, n: int) -> tuple[list[str], list[str]]:
        """`n` prompts and their completions (without EOS)."""
        records = self.sample_records(n)
        return [r[2] for r in records], [r[3] for r in records]


def build_batch(tokenizer, prompts: list[str], completions: list[str], *,
                max_length: int | None = None) -> dict[str, torch.Tensor]:
    """Right-padded `prompt + completion + <eos>` rows with labels only on the completion (and its EOS).

    Returns `input_ids` [B, T], `attention_mask` [B, T] and `labels` [B, T] (IGNORE_INDEX on prompt and
    padding positions; `labels[b, t]` is the token at position t, shifted inside `completion_loss`).
    """
    if len(prompts) != len(completions):
        raise ValueError(f"got {len(prompts)} prompts but {len(completions)} completions")
    p_ids = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    c_ids = tokenizer(completions, add_special_tokens=False)["input_ids"]
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    rows = [p + c + [eos] for p, c in zip(p_ids, c_ids)]
    width = max(len(r) for r in rows)
    if max_length is not None and width > max_length:
        i = max(range(len(rows)), key=lambda j: len(rows[j]))
        raise ValueError(f"sequence of {width} tokens exceeds max_length={max_length}: "
                         f"{prompts[i]!r} + {completions[i]!r}")
    input_ids = np.full((len(rows), width), pad, dtype=np.int64)  # [B, T]
    labels = np.full((len(rows), width), IGNORE_INDEX, dtype=np.int64)  # [B, T]
    mask = np.zeros((len(rows), width), dtype=bool)  # [B, T]
    for b, (row, p) in enumerate(zip(rows, p_ids)):
        input_ids[b, : len(row)] = row
        mask[b, : len(row)] = True
        labels[b, len(p): len(row)] = row[len(p):]
    return {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(mask).long(),
            "labels": torch.from_numpy(labels)}


def completion_loss(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean next-token cross-entropy over the labelled (completion) positions of `batch`."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits  # [B, T, V]
    targets = batch["labels"][:, 1:]  # [B, T-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), targets.reshape(-1),
                           ignore_index=IGNORE_INDEX)


def weights_sha256(model_dir: Path | str) -> str:
    """sha256 over the tensors of `model_dir/model.safetensors`: name, dtype, shape and bytes, in name order.

    Independent of the file's header layout and metadata, so it names the weights themselves."""
    from safetensors import safe_open

    digest = hashlib.sha256()
    with safe_open(Path(model_dir) / "model.safetensors", framework="pt") as fh:
        for name in sorted(fh.keys()):
            tensor = fh.get_tensor(name).contiguous()
            digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
            digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


def lr_factor(spec: ZooSpec, step: int, progress: float) -> float:
    """Learning-rate multiplier: linear warm-up over `warmup` steps times a cosine over `progress` in [0, 1]."""
    warm = min(1.0, (step + 1) / max(1, spec.warmup))
    p = min(1.0, max(0.0, progress))
    cosine = spec.min_lr_ratio + (1.0 - spec.min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * p))
    return warm * cosine


def make_optimizer(model: torch.nn.Module, spec: ZooSpec) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (norm weights and biases are not decayed)."""
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": spec.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=spec.lr, betas=(0.9, 0.98))


def train_step(model, optimizer, batch: dict[str, torch.Tensor], lr: float) -> float:
    """One optimizer step at learning rate `lr`; returns the loss."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    loss = completion_loss(model, batch)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return float(loss.detach())


def shipped_manifest() -> dict[str, dict]:
    """The shipped zoo's records, {name: {"config_hash", "weights_sha256", "steps_done", ...}} ({} if none)."""
    path = SHIPPED_ZOO / "manifest.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def cpu_platform() -> str:
    """The CPU vendor and torch's CPU capability, e.g. "AuthenticAMD AVX512". One spec gives the same weights bit
    for bit on one platform; float kernels (and so the bits of a pretraining) differ between platforms."""
    vendor = "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        vendor = next((line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                       if line.startswith("vendor_id")), vendor)
    return f"{vendor} {torch.backends.cpu.get_cpu_capability()}"


def rebuild_sha256(name: str) -> str:
    """The `weights_sha256` a fresh pretraining of shipped model `name` gives on this `cpu_platform()`: the one
    measured here when the manifest records it (`rebuilds`), else the shipped weights' own hash (the platform they
    were built on)."""
    record = shipped_manifest()[name]
    return record.get("rebuilds", {}).get(cpu_platform(), record["weights_sha256"])


def shipped_model_dir(spec_or_name: ZooSpec | str) -> Path | None:
    """The shipped directory of this spec when the shipped record has its config hash, else None.

    Raises ValueError when the shipped weights do not hash to the recorded `weights_sha256` (a damaged file)."""
    from esreason_lib.store.identity import config_hash

    spec = get_spec(spec_or_name)
    record = shipped_manifest().get(spec.name)
    if record is None or record["config_hash"] != config_hash(spec):
        return None
    directory = SHIPPED_ZOO / spec.name
    found = weights_sha256(directory)
    if found != record["weights_sha256"]:
        raise ValueError(f"shipped zoo model {spec.name!r} at {directory}: weights_sha256 {found} differs from the "
                         f"recorded {record['weights_sha256']}; rebuild it with benchmarks/zoo_weights.py --ship")
    return directory


def ship(spec_or_name: ZooSpec | str, *, home: Path | str | None = None, progress: bool = True) -> dict:
    """Pretrain the spec (never from the shipped copy), copy it to `SHIPPED_ZOO/<name>` and record it; returns
    the record written into the shipped manifest."""
    from esreason_lib.store.identity import config_hash

    spec = get_spec(spec_or_name)
    directory = pretrain(spec, home=home, progress=progress, shipped=False)
    manifest = json.loads((directory.parent / "manifest.json").read_text())
    target = SHIPPED_ZOO / spec.name
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(directory, target)
    record = {"config_hash": config_hash(spec), "built_on": cpu_platform(), **{k: manifest[k] for k in (
        "weights_sha256", "steps_done", "seconds", "final_loss", "num_parameters", "versions")}}
    records = {**shipped_manifest(), spec.name: record}
    (SHIPPED_ZOO / "manifest.json").write_text(json.dumps(records, indent=2, sort_keys=True) + "\n")
    return record


def pretrain(spec_or_name: ZooSpec | str, *, home: Path | str | None = None, progress: bool = True,
             log_every: int = 10, shipped: bool = True) -> Path:
    """Train the zoo model `spec_or_name` (a name in `ZOO` or a `ZooSpec`) and return its model directory.

    With `shipped`, a shipped model of this very spec (`shipped_model_dir`) is returned as is, and nothing is
    written into the store. A complete run in the store is reused as is (no training). An incomplete one
    (interrupted) is retrained from scratch. Logs `train/loss`, `train/lr`, `time/step_s` and `time/elapsed_s` every
    `log_every` steps; the manifest records the steps done, the seconds taken (wall time, which depends on the machine's
    load; the weights do not), the parameter count, the final loss and `weights_sha256`.
    """
    from esreason_lib.store.runs import Run

    spec = get_spec(spec_or_name)
    if shipped and (directory := shipped_model_dir(spec)) is not None:
        return directory
    run = Run.open("zoo", spec, seed=spec.seed, home=None if home is None else Path(home), lock=True)
    if run.is_complete() and (run.model_dir / "config.json").exists():
        return run.model_dir
    run.truncate_metrics(-1)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # float reductions change order with the thread count
    try:
        model, loss, seconds = _train(spec, run, progress=progress, log_every=log_every)
    finally:
        torch.set_num_threads(threads)
    tokenizer = build_char_tokenizer()
    with quiet_transformers():
        model.save_pretrained(run.model_dir)
        tokenizer.save_pretrained(run.model_dir)
    run.finish(steps_done=spec.steps, seconds=round(seconds, 2), num_parameters=num_parameters(model),
               final_loss=loss, weights_sha256=weights_sha256(run.model_dir))
    return run.model_dir


def _train(spec: ZooSpec, run, *, progress: bool, log_every: int):
    """`(model in eval mode, last step's loss, seconds)` after `spec.steps` steps, logging into `run`."""
    tokenizer = build_char_tokenizer()
    model = spec.build(len(tokenizer)).train()
    optimizer = make_optimizer(model, spec)
    stream = CorpusStream(spec)
    start = time.perf_counter()
    window: list[float] = []
    loss = float("nan")
    bar = progress_bar(total=spec.steps, desc=f"pretrain {spec.name}", disable=not progress)
    for step in range(1, spec.steps + 1):
        t0 = time.perf_counter()
        prompts, completions = stream.sample(spec.batch_size)
        batch = build_batch(tokenizer, prompts, completions, max_length=spec.max_position_embeddings)
        lr = spec.lr * lr_factor(spec, step - 1, (step - 1) / spec.steps)
        loss = train_step(model, optimizer, batch, lr)
        check_finite_metrics({"loss/train": loss}, where=f"pretrain {spec.name} step {step}", run=run)
        window.append(loss)
        bar.update(1)
        if step % log_every == 0 or step == spec.steps:
            bar.set_postfix(loss=f"{np.mean(window):.3f}")
            run.log(step, {"train/loss": float(np.mean(window)), "train/lr": lr,
                           "time/step_s": time.perf_counter() - t0,
                           "time/elapsed_s": time.perf_counter() - start})
            window = []
    bar.close()
    return model.eval(), loss, time.perf_counter() - start
