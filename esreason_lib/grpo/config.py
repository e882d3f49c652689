"""`GRPOConfig`: everything that defines a GRPO run (its hash names the run directory)."""

from __future__ import annotations

from dataclasses import dataclass, field

from esreason_lib.grpo.loss import AGGREGATIONS, SCALES
from esreason_lib.models.placement import check_memory_share
from esreason_lib.models.sampling import FORWARDS, SAMPLERS
from esreason_lib.store.identity import ADDED_OPTION, execution
from esreason_lib.training.settings import RunSettings
from esreason_lib.validation import (
    check,
    check_bool,
    check_choice,
    check_nonnegative_float,
    check_optional_positive_int,
    check_positive_float,
    check_positive_int,
    check_run_size,
    check_step_size,
    is_real,
)

ROLLOUT_BACKENDS = ("local", "vllm")
"""Values of `GRPOConfig.backend`: "local" samples with `generation.generate`; "vllm" with a vLLM engine that gets
the policy's weights after each iteration's optimizer steps (`models.rollouts_vllm.VLLMRollouts`, extra `vllm`)."""

ENGINES = ("native", "trl")
"""Values of `GRPOConfig.engine`: "native" (`grpo.loop`, the miniature) or "trl" (TRL's `GRPOTrainer` under
accelerate with DeepSpeed ZeRO-3 or FSDP, for bases past 1.5B: `grpo.trl_engine`, extra `trl`)."""

TRL_UNSUPPORTED = {"forward": "hf", "sampler": "multinomial", "share_prefixes": False, "shared_prompts": False}
"""The fields engine "trl" needs at these values (TRL samples and scores with the model's own modules)."""


@dataclass(frozen=True)
class GRPOConfig(RunSettings):
    """Everything that defines a GRPO run (its hash names the run directory). Defaults follow DeepSeekMath
    where they transfer (clip 0.2, beta 0.04, mu = 1) and are sized for the tiny CPU models otherwise."""

    group_size: int = 8
    """G: completions sampled per prompt; advantages are normalised within each group."""
    lr: float = 1e-4
    """AdamW learning rate (DeepSeekMath used 1e-6 for a 7B model; tiny models need far more)."""
    clip_eps: float = 0.2
    """PPO clip range epsilon: the ratio is clipped to [1 - eps, 1 + eps]."""
    beta: float = 0.04
    """Weight of the k3 KL penalty against the frozen base model; 0 disables it and the reference copy."""
    temperature: float = 1.0
    """Sampling temperature; the policy log-probs in the loss use the same temperature."""
    top_p: float = 1.0
    """Nucleus sampling threshold (1.0 = off)."""
    prompts_per_step: int = 8
    """Prompts drawn (without replacement when possible) from the train split per iteration."""
    ppo_epochs: int = 1
    """mu: passes over the same rollouts (each pass takes prompts_per_step / minibatch_size optimiser steps)."""
    minibatch_size: int | None = None
    """Prompts per optimiser step (with all their completions); must divide prompts_per_step. None = the
    whole batch (one step per pass, on-policy at ppo_epochs=1); the paper uses 32 of 64."""
    iterations: int = 100
    """Number of sample-score-update iterations (one `step` in the metrics log each)."""
    scale: str = "group"
    """Advantage scaling: "group" (divide by group std, DeepSeekMath) or "none" (Dr.GRPO)."""
    aggregation: str = "seq-mean-token-mean"
    """Loss aggregation: "seq-mean-token-mean" (DeepSeekMath) or "token-mean" (DAPO)."""
    weight_decay: float = 0.0
    """AdamW decoupled weight decay."""
    max_grad_norm: float | None = 1.0
    """Global gradient-norm clip; None disables clipping (the norm is still logged)."""
    micro_batch_size: int | None = None
    """Sequences per forward/backward chunk (exact gradient accumulation); None = the whole batch at once."""
    backend: str = field(default="local", metadata=ADDED_OPTION)
    """Rollout sampler (`ROLLOUT_BACKENDS`): "local" (the library's `generate`) or "vllm" (one vLLM engine synced
    with the policy before each rollout; its samples differ from "local"'s, see `models.rollouts_vllm`)."""
    gradient_checkpointing: bool = field(default=False, metadata=execution())
    """Recompute each decoder block in backward instead of keeping its activations (transformers' non-reentrant
    checkpointing): activation memory per micro-batch drops from ~layers x a block's to ~one block's."""
    logit_chunk: int | None = field(default=None, metadata=ADDED_OPTION)
    """Completion positions per output-head / log-softmax chunk in the update (`grpo.logprobs`): the logits never
    exceed rows x logit_chunk x V; None computes them for the whole completion at once."""
    shared_prompts: bool = field(default=False, metadata=ADDED_OPTION)
    """Forward each distinct prompt of the update once and every row's completion on its KV cache
    (`grpo.logprobs.shared_prompt_logprobs`) instead of every row's prompt and completion: the same loss and
    gradient up to float rounding (so part of the run's identity), ~1.6x faster updates at the tiny preset's
    shapes. Not with `gradient_checkpointing` (Hugging Face drops the KV cache under it) or `logit_chunk`."""
    forward: str = field(default="hf", metadata=ADDED_OPTION)
    """How backend "local" computes the rollouts' logits (`sampling.FORWARDS`): "hf" (the model's own modules),
    "fused" (`models.fused_qwen2`, float32 Qwen2 only) or "native" (that forward with `models.native`'s attention
    kernel). The samples equal "hf"'s up to float rounding (a draw can flip where a cumulative-probability boundary
    moves by ~1e-6), so it is part of the run's identity; the update's log-probs always use the model's modules."""
    sampler: str = field(default="multinomial", metadata=ADDED_OPTION)
    """How backend "local" draws the rollouts' tokens (`sampling.SAMPLERS`): "multinomial" (`torch.multinomial`)
    or "inverse-cdf" (one uniform per token: the same distribution, other samples, so part of the identity)."""
    share_prefixes: bool = field(default=False, metadata=ADDED_OPTION)
    """With forward "fused" or "native": the rollouts forward each distinct running prefix once per decode step
    (`generation.Forward.share_prefixes`; the same draws and samples wherever compared)."""
    gpu_memory_utilization: float | None = field(default=None, metadata=execution())
    """Share of the GPU's memory the vLLM rollout engine takes (backend "vllm"); None: 0.5. Placement only."""
    check_every: int = field(default=1, metadata=execution())
    """Compare the vLLM rollout engine's weight fingerprint with the policy's every this many rollouts (backend
    "vllm"; `models.weights.weights_fingerprint`, on the device); a difference raises."""
    engine_sleep: bool = field(default=False, metadata=ADDED_OPTION)
    """Put the vLLM rollout engine to sleep after each rollout (backend "vllm" on CUDA; vLLM's sleep mode, level 1:
    its weights to host memory, its KV cache freed) and wake it before the next weight copy, so the update's
    backward and optimiser step have the engine's share of the GPU (`grpo.memory` counts the share in the sampling
    phase only). The samples are unchanged; left out of the identity at its default only."""
    engine: str = field(default="native", metadata=ADDED_OPTION)
    """Who trains (`ENGINES`): "native" (`grpo.loop`: the miniature's loop, every preset's identity) or "trl"
    (TRL's `GRPOTrainer`, `grpo.trl_engine`: the same objective where its docstring says, other samples and
    rounding, so part of the identity)."""

    def __post_init__(self):
        super().__post_init__()
        check_positive_int(self, "group_size", "prompts_per_step", "ppo_epochs", "iterations", "check_every")
        check_run_size(self, "iterations", "prompts_per_step", "group_size")
        check(self, "group_size", self.group_size >= 2, "must be >= 2 (advantages are relative within a group)")
        check_optional_positive_int(self, "micro_batch_size", "minibatch_size")
        check(self, "minibatch_size", self.minibatch_size is None or self.prompts_per_step % self.minibatch_size == 0,
              f"must divide prompts_per_step={self.prompts_per_step}")
        check_positive_float(self, "temperature")
        check_step_size(self, "lr")
        check(self, "clip_eps", is_real(self.clip_eps) and 0 < self.clip_eps < 1, "must be in (0, 1)")
        check_nonnegative_float(self, "beta")
        check(self, "top_p", is_real(self.top_p) and 0 < self.top_p <= 1, "must be in (0, 1]")
        check_choice(self, "scale", SCALES)
        check_choice(self, "aggregation", AGGREGATIONS)
        check_choice(self, "backend", ROLLOUT_BACKENDS)
        check_choice(self, "forward", FORWARDS)
        check_choice(self, "sampler", SAMPLERS)
        check(self, "sampler", self.backend == "local" or self.sampler == "multinomial",
              f"must be 'multinomial' with backend={self.backend!r} (the engine draws its own samples)")
        check_bool(self, "share_prefixes")
        check(self, "share_prefixes", not self.share_prefixes or self.forward != "hf",
              "must be False with forward='hf' (the modules' KV cache rows are not selectable)")
        check(self, "forward", self.backend == "local" or self.forward == "hf",
              f"must be 'hf' with backend={self.backend!r} (the engine computes its own logits)")
        check(self, "forward", self.dtype == "float32" or self.forward == "hf",
              f"must be 'hf' with dtype={self.dtype!r} (the fused forward folds float32 Qwen2 weights)")
        check_memory_share("GRPOConfig", self.gpu_memory_utilization)
        check_bool(self, "gradient_checkpointing", "engine_sleep")
        check(self, "engine_sleep", not self.engine_sleep or self.backend == "vllm",
              f"needs backend='vllm' (the rollout engine sleeps), backend is {self.backend!r}")
        check_optional_positive_int(self, "logit_chunk")
        check_bool(self, "shared_prompts")
        check(self, "shared_prompts", not self.shared_prompts or (not self.gradient_checkpointing
                                                                  and self.logit_chunk is None),
              "must be False with gradient_checkpointing or logit_chunk (the prompts' KV cache is kept for backward)")
        check_nonnegative_float(self, "weight_decay")
        check_choice(self, "engine", ENGINES)
        for name, value in TRL_UNSUPPORTED.items():
            check(self, name, self.engine == "native" or getattr(self, name) == value,
                  f"must be {value!r} with engine='trl' (TRL samples and scores with the model's own modules)")
        check(self, "max_grad_norm",
              self.max_grad_norm is None or (is_real(self.max_grad_norm) and self.max_grad_norm > 0),
              "must be None or > 0")
