"""GRPO at paper scale on TRL's `GRPOTrainer` (`GRPOConfig.engine = "trl"`, extra `trl`): accelerate with DeepSpeed
ZeRO-3 or FSDP (configs/accelerate/), rollouts from the model's `generate` or vLLM (colocate or server), the task's
verifier as the reward function, checkpoints and final weights in the run store. The native loop (`grpo.loop`) stays
the miniature's; launch lines in docs/gpus.md ("GRPO past 1.5B").

How `GRPOConfig` maps onto `trl.GRPOConfig` (`trl_arguments`), with P = prompts_per_step, G = group_size,
m = minibatch_size (None: P), W = processes:
- group_size -> num_generations; one iteration is one generation batch of P * G completions, the dataset being the
  native loop's prompt sequence (`prompt_indices`, shuffle_dataset=False), so iteration i sees the same prompts.
- minibatch_size -> one optimiser step per m * G completions: per_device_train_batch_size = micro_batch_size (None:
  m * G / W), gradient_accumulation_steps = m * G / (W * per-device), steps_per_generation = that * P / m.
- ppo_epochs -> num_iterations; iterations -> max_steps = iterations * (P / m) * ppo_epochs optimiser steps;
  metrics are logged once per iteration (logging_steps = (P / m) * ppo_epochs), step = the iteration.
- lr, weight_decay, max_grad_norm (None -> 0, off) -> AdamW's; lr_scheduler_type "constant", no warm-up (the
  native loop's constant rate).
- clip_eps -> epsilon (= epsilon_high: symmetric); beta -> beta with use_bias_correction_kl=False (the plain k3
  term; TRL's default multiplies it by the ratio).
- aggregation "seq-mean-token-mean" -> loss_type "grpo"; "token-mean" -> loss_type "dapo"; scale -> scale_rewards.
- temperature, top_p -> the same (top_k 0: off); max_new_tokens (None: the task's) -> max_completion_length.
- backend "vllm" -> use_vllm (vllm_mode "colocate" unless overridden: "server" with `trl vllm-serve`);
  engine_sleep -> vllm_enable_sleep_mode; gpu_memory_utilization (None: 0.5) -> vllm_gpu_memory_utilization.
- logit_chunk is not used: TRL computes a micro-batch's completion logits at once (per_device_train_batch_size
  rows; lower micro_batch_size for memory).
- gradient_checkpointing -> the same; dtype "bfloat16" -> bf16; seed -> seed and data_seed; checkpoint_every ->
  save_steps (in iterations, under the run's checkpoints/; 0: none).
Deviations from the native loop (why a "trl" run has its own identity):
- Advantages: TRL divides by the group's std with Bessel's correction (ddof=1) plus 1e-4; the native loop by the
  population std (ddof=0) plus 1e-6: TRL's group-scaled advantages are sqrt((G-1)/G) times the native ones.
- Loss normalisation: "grpo" averages the per-sequence token means over each micro-batch (an empty completion
  counts as 0; the native loop leaves it out) and divides by the accumulation steps; "dapo" divides the token sum by
  the generation batch's mean tokens per optimiser step, the native "token-mean" by the minibatch's own tokens (the
  same when P = m). Each process's micro-batch is a mean of its own, so equal only for equal micro-batch sizes.
- pi_old: with one optimiser step per generation the ratio is exactly 1 in both; otherwise TRL computes pi_old per
  generation batch as the native loop does. Identical rows are forwarded each time (the native loop merges them).
- Sampling: the rows sample from `generate` (or vLLM) with TRL's seeds, not the library's sampler; without vLLM
  no stop string ends a completion: the reward scores it cut at the task's stop (`cut_at_stop`), as the native loop
  would, but its later tokens stay in the loss. With vLLM the stop string is passed to the engine.
- Weight decay skips biases and norm weights (transformers' Trainer); the optimiser is Trainer's AdamW (under
  DeepSpeed its own), bf16 by mixed precision, not the native fp32-master AdamW.
- Checkpoints are the Trainer's folders (optimizer, scheduler, RNG, DeepSpeed shards), resumed with the Trainer.
- Every process loads the whole base (`training_inputs`, onto its own GPU: accelerate sets the device per process)
  before DeepSpeed or FSDP shards it; TRL rebuilds the reference model from the base's directory.
"""

from __future__ import annotations

import math
from pathlib import Path

from esreason_lib.grpo.config import GRPOConfig
from esreason_lib.models.generation import cut_at_stop
from esreason_lib.models.zoo import quiet_transformers
from esreason_lib.store.identity import locate
from esreason_lib.store.runs import Run, run_exists
from esreason_lib.tasks.base import score_completion
from esreason_lib.training.inputs import training_inputs
from esreason_lib.training.run_entry import open_training_run, run_identity
from esreason_lib.training.settings import prompt_indices

LOSS_TYPES = {"seq-mean-token-mean": "grpo", "token-mean": "dapo"}
"""TRL's `loss_type` for each `GRPOConfig.aggregation` (see the module docstring for where they differ)."""

METRICS = {"reward": "reward/mean", "reward_std": "reward/std", "correct_frac": "reward/correct_frac",
           "entropy": "policy/entropy", "kl": "policy/kl", "clip_ratio/region_mean": "policy/clip_frac",
           "loss": "loss/policy", "grad_norm": "policy/grad_norm", "frac_reward_zero_std": "grpo/zero_std_frac",
           "completions/mean_length": "completion/length"}
"""The run store's metric key for each key of TRL's log (others are not stored)."""


def steps_per_iteration(config: GRPOConfig) -> int:
    """Optimiser steps per iteration: (prompts_per_step / minibatch_size) * ppo_epochs."""
    return config.prompts_per_step // (config.minibatch_size or config.prompts_per_step) * config.ppo_epochs


def trl_arguments(config: GRPOConfig, output_dir, *, max_new_tokens: int, stop: str | None = None,
                  world_size: int = 1, **overrides):
    """`config` as a `trl.GRPOConfig` for `world_size` processes writing checkpoints into `output_dir` (the mapping
    is the module docstring's); `overrides` (trl.GRPOConfig fields, e.g. vllm_mode="server") replace the mapped
    values. ValueError naming `micro_batch_size` when a minibatch's rows do not split into equal micro-batches over
    the processes."""
    c, spi = config, steps_per_iteration(config)
    rows = (c.minibatch_size or c.prompts_per_step) * c.group_size  # completions per optimiser step
    if rows % world_size:
        raise ValueError(f"GRPOConfig: a minibatch's {rows} rows do not split over {world_size} processes")
    per_device = c.micro_batch_size or rows // world_size
    if rows % (per_device * world_size):
        raise ValueError(f"GRPOConfig.micro_batch_size={c.micro_batch_size!r}: a minibatch's {rows} rows do not "
                         f"split into micro-batches of {per_device} over {world_size} processes")
    accumulation = rows // (per_device * world_size)
    args = dict(
        output_dir=str(output_dir), num_generations=c.group_size, per_device_train_batch_size=per_device,
        gradient_accumulation_steps=accumulation, steps_per_generation=accumulation * spi // c.ppo_epochs,
        num_iterations=c.ppo_epochs, max_steps=c.iterations * spi, logging_steps=spi,
        learning_rate=c.lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=c.weight_decay,
        max_grad_norm=c.max_grad_norm or 0.0, epsilon=c.clip_eps, beta=c.beta, use_bias_correction_kl=False,
        loss_type=LOSS_TYPES[c.aggregation], scale_rewards=c.scale, temperature=c.temperature, top_p=c.top_p,
        top_k=0, max_completion_length=max_new_tokens, shuffle_dataset=False, remove_unused_columns=False,
        use_vllm=c.backend == "vllm", vllm_mode="colocate", vllm_enable_sleep_mode=c.engine_sleep,
        vllm_gpu_memory_utilization=c.gpu_memory_utilization or 0.5,
        generation_kwargs={"stop": [stop]} if c.backend == "vllm" and stop else None,
        bf16=c.dtype == "bfloat16", seed=c.seed,
        data_seed=c.seed, save_strategy="steps" if c.checkpoint_every else "no",
        save_steps=max(c.checkpoint_every, 1) * spi, report_to="none", use_cpu=c.device == "cpu",
        disable_tqdm=True, **({"gradient_checkpointing": True} if c.gradient_checkpointing else {}))
    args.update(overrides)
    from trl import GRPOConfig as TRLConfig

    return TRLConfig(**args)


def task_reward(task, examples: list):
    """TRL's reward function for `task`: `reward(prompts, completions, example_index, **kwargs) -> [float]`, each
    completion cut at the task's stop and scored by its verifier against `examples[example_index]`
    (`tasks.base.score_completion`); the share verified correct goes to TRL's log as "correct_frac"."""

    def reward(prompts, completions, example_index, log_metric=None, **_):
        scored = [score_completion(task, cut_at_stop(text, task.stop), examples[int(i)])
                  for text, i in zip(completions, example_index)]
        if log_metric is not None and scored:
            log_metric("correct_frac", sum(bool(ok) for _, ok in scored) / len(scored))
        return [float(r) for r, _ in scored]

    reward.__name__ = "verifier"  # TRL's log names a reward function's metrics by it
    return reward


def prompt_dataset(config: GRPOConfig, prompts: list[str]):
    """A `datasets.Dataset` of the run's prompts in the native loop's order: iteration i's `prompt_indices`, one row
    each (columns "prompt", "example_index"), for every iteration."""
    from datasets import Dataset

    order = [int(i) for it in range(config.iterations)
             for i in prompt_indices(len(prompts), config.prompts_per_step, it, config.seed, "grpo",
                                     config.prompt_order)]
    return Dataset.from_dict({"prompt": [prompts[i] for i in order], "example_index": order})


def store_logger(run: Run | None, per_iteration: int):
    """A `TrainerCallback` that appends TRL's log, every `per_iteration` optimiser steps, to `run`'s metrics as
    step = iteration (`METRICS` keys; non-finite values left out); it writes nothing when `run` is None (a process
    other than the main one)."""
    from transformers import TrainerCallback

    class StoreLog(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if run is None or not logs or state.global_step % per_iteration:
                return
            record = {METRICS[k]: float(v) for k, v in logs.items()
                      if k in METRICS and isinstance(v, (int, float)) and math.isfinite(v)}
            if record:  # the Trainer's closing log (train_runtime, ...) has none of them
                run.log(state.global_step // per_iteration, record)

    return StoreLog()


def _named_base(model, tokenizer, folder: Path, write: bool) -> None:
    """Give `model` a directory to be rebuilt from (TRL builds the reference model from `config._name_or_path`): its
    own when it was loaded from one, else `folder / "base"`, which `write` saves it into."""
    if Path(model.name_or_path or "/nonexistent").is_dir():
        return
    if write:
        with quiet_transformers():
            model.save_pretrained(folder / "base")
            tokenizer.save_pretrained(folder / "base")
    model.config._name_or_path = str(folder / "base")


def _last_checkpoint(folder: Path, resume: bool) -> str | None:
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(str(folder)) if resume and folder.is_dir() else None


def grpo_trainer(config: GRPOConfig, model, tokenizer, task, examples: list, folder: Path, *, run: Run | None = None,
                 world_size: int = 1, progress: bool = False, **overrides):
    """TRL's `GRPOTrainer` for `config` on `model` (its reference model is rebuilt from `model.name_or_path`, a
    directory), `task`'s verifier as reward over `examples` (`task_reward`, `prompt_dataset`), checkpoints into
    `folder`, its log into `run` (`store_logger`; None: not stored); the Trainer prints its log only with
    `progress`."""
    from transformers import PrinterCallback
    from trl import GRPOTrainer

    args = trl_arguments(config, folder, max_new_tokens=config.max_new_tokens or task.max_new_tokens,
                         stop=task.stop, world_size=world_size, **overrides)
    trainer = GRPOTrainer(model=model, reward_funcs=task_reward(task, examples), args=args,
                          train_dataset=prompt_dataset(config, [task.prompt(ex, tokenizer) for ex in examples]),
                          processing_class=tokenizer, callbacks=[store_logger(run, steps_per_iteration(config))])
    if not progress:
        trainer.remove_callback(PrinterCallback)
    return trainer


def train_grpo_trl(config: GRPOConfig, *, model=None, tokenizer=None, task=None, home=None, resume: bool = True,
                   progress: bool = True, **overrides) -> Run:
    """Train `config` with TRL's `GRPOTrainer` on every process of an accelerate launch (one process without one);
    the arguments are `train_grpo`'s, `overrides` go to `trl_arguments`. The main process opens the run (returned
    at once when complete), logs its metrics and writes model/ and the manifest; the others load the same inputs
    after it. Checkpoints are the Trainer's, under the run's checkpoints/ (resumed with `resume`, removed when the
    run completes unless `keep_checkpoints`). Returns the `Run` on every process."""
    from accelerate import PartialState

    state = PartialState(cpu=config.device == "cpu")  # on the CPU, the processes of a launch join over gloo
    identity = run_identity(config, task)
    if run_exists("grpo", identity, home=home):
        return Run.open("grpo", identity, seed=config.seed, home=home)
    run = inputs = None
    if state.is_main_process:
        run, inputs = open_training_run("grpo", config, model=model, tokenizer=tokenizer, task=task, home=home,
                                        progress=progress)
    if run is not None and inputs is not None:
        _named_base(inputs[0], inputs[1], run.path / "checkpoints", write=True)
    state.wait_for_everyone()  # the main process has fetched the base (a zoo model is trained once)
    if not state.is_main_process:
        inputs = None if run_exists("grpo", identity, home=home) else training_inputs(
            config, model=model, tokenizer=tokenizer, task=task, home=home, progress=False, caller="train_grpo")
    if inputs is None:
        return Run.open("grpo", identity, seed=config.seed, home=home)
    model, tokenizer, task, examples = inputs
    path = run.path if run is not None else locate("grpo", run_identity(config, task), home)[0]
    spi, folder = steps_per_iteration(config), path / "checkpoints"
    _named_base(model, tokenizer, folder, write=False)
    trainer = grpo_trainer(config, model, tokenizer, task, examples, folder, run=run, world_size=state.num_processes,
                           progress=progress and run is not None, **overrides)
    last = _last_checkpoint(folder, resume)
    if run is not None:
        run.truncate_metrics(int(Path(last).name.rsplit("-", 1)[1]) // spi if last else 0)
    trainer.train(resume_from_checkpoint=last)
    with quiet_transformers():
        trainer.save_model(str(path / "model"))  # every process (ZeRO-3 gathers the shards), the main one writes
        if run is not None:
            tokenizer.save_pretrained(run.model_dir)
    if run is not None:
        run.finish()
    state.wait_for_everyone()
    return run if run is not None else Run.open("grpo", identity, seed=config.seed, home=home)
