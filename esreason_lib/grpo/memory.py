"""A GRPO run's peak device memory, estimated before it starts, and the refusal of one that cannot fit.

The estimate (bytes; `grpo_memory` returns GiB per term) is what stays resident plus the largest of three phases:
- resident: the policy's weights in its dtype, plus the frozen reference copy when beta > 0 ("weights"); AdamW's
  two float32 moments, plus float32 master weights for a bfloat16 model ("optimizer", `optim.master_weight_adamw`);
  the vLLM engine's share (`gpu_memory_utilization` x the device) with backend "vllm" ("rollouts"), unless the
  engine sleeps through the update (`engine_sleep`: then its share counts in the sampling phase);
- sampling, with the local sampler: its KV cache (up to 512 rows x the sequence x layers x 2 x kv width x 2 bytes,
  "rollouts");
- scoring, with backend "vllm": the no-grad log-prob / entropy pass over the engine's tokens
  (`models.logprobs.completion_scores`, cut by `scoring_chunks`): one head call's logits
  (`models.logprobs.logit_bytes`) plus one row chunk's decoder (its hidden states and one block's activations,
  "scoring");
- backward: one gradient per parameter in the model's dtype ("gradients"); activations of one micro-batch
  (`micro_batch_size` rows of prompt + completion tokens) kept for backward, per token and layer
  2 bytes x (6 d + q + 2 kv + 4 ffn) (the block's inputs, norms, projections and the SwiGLU intermediates; SDPA keeps
  no L x L scores) without `gradient_checkpointing`, or 2 bytes x d per layer (each block's input) plus one block's
  worth with it ("activations"); ~10 bytes per token per vocabulary entry (bfloat16 logits, their float32 copy and
  its gradient) for the whole micro-batch, or for `logit_chunk` positions of it ("logits", `grpo.logprobs`);
- step: a bfloat16 model's float32 gradients, 4 bytes per parameter ("step"; `optim.optimizer_step` frees each
  bfloat16 gradient as its copy is made, and CUDA's fused AdamW makes no all-parameter temporaries).
"total" is resident + max(sampling, scoring, backward, step).
Deviations: the activation formula is a per-layer count for Qwen2-style blocks, not a measurement; allocator
fragmentation and CUDA context (~0.5-1 GiB) are covered only by `HEADROOM`. Measured on an H200 (docs/gpus.md):
the first GPU check found a peak 5.7 GiB (one float32 copy of the weights) above the estimate, from float32
gradients the optimiser step kept alive into the next backward pass; the step now frees them and this estimate
counts the step as its own phase.
"""

from __future__ import annotations

import dataclasses

from esreason_lib.models.logprobs import SCORING, Chunks, logit_bytes

GIB = 2**30
HEADROOM = 0.9
"""A configuration is refused when its estimate exceeds this share of the device's memory."""
ROLLOUT_ROWS = 512
"""Rows per batch of the local sampler (`generation.generate`'s default batch_size)."""


def _shape(model) -> dict:
    c = model.config
    head = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return dict(d=c.hidden_size, q=c.num_attention_heads * head, kv=c.num_key_value_heads * head,
                ffn=c.intermediate_size, layers=c.num_hidden_layers, vocab=c.vocab_size)


def grpo_memory(config, model, *, prompt_tokens: int, device_bytes: int | None = None) -> dict[str, float]:
    """{term: GiB} of the estimate (module docstring) and "total", for `config` (a `GRPOConfig`) on `model`
    (parameters may be on the meta device), prompts of `prompt_tokens` tokens; `device_bytes` (the device's memory)
    sizes the vLLM engine's share."""
    s = _shape(model)
    n = sum(p.numel() for p in model.parameters())
    width = next(model.parameters()).element_size()
    rows_all = (config.minibatch_size or config.prompts_per_step) * config.group_size
    rows = config.micro_batch_size or rows_all
    seq = prompt_tokens + (config.max_new_tokens or 512)
    tokens = rows * seq
    block = 2 * (6 * s["d"] + s["q"] + 2 * s["kv"] + 4 * s["ffn"])  # bytes per token of one layer
    acts = tokens * (s["layers"] * 2 * s["d"] + block) if config.gradient_checkpointing else \
        tokens * s["layers"] * block
    completion = config.max_new_tokens or 512
    logits = logit_bytes(Chunks(positions=config.logit_chunk), rows=rows, positions=seq, vocab=s["vocab"], grad=True)
    scoring = 0
    if config.backend == "vllm":
        rollout = (config.gpu_memory_utilization or 0.5) * (device_bytes or 0)
        chunks = scoring_chunks(config)
        scoring = (logit_bytes(chunks, rows=rows_all, positions=completion, vocab=s["vocab"])
                   + min(rows_all, chunks.rows) * seq * (block + 2 * s["d"]))
    else:
        rollout = min(config.prompts_per_step * config.group_size, ROLLOUT_ROWS) * seq * s["layers"] * 2 * s["kv"] * 2
    out = {"weights": n * width * (2 if config.beta > 0 else 1), "optimizer": n * (8 + (4 if width < 4 else 0)),
           "rollouts": rollout, "scoring": scoring, "gradients": n * width, "activations": acts,
           "logits": logits, "step": n * 4 if width < 4 else 0}
    out = {k: v / GIB for k, v in out.items()}
    out["total"] = _total(config, out)
    return out


def scoring_chunks(config) -> Chunks:
    """The bounds of the no-grad log-prob / entropy pass over a `GRPOConfig`'s vLLM rollouts: `micro_batch_size`
    rows and `logit_chunk` positions when set, else `models.logprobs.SCORING`'s; `SCORING`'s vocabulary chunk."""
    return Chunks(rows=config.micro_batch_size or SCORING.rows, positions=config.logit_chunk or SCORING.positions,
                  vocab=SCORING.vocab)


def _total(config, out: dict[str, float]) -> float:
    """Resident terms plus the largest phase (module docstring); a vLLM engine is resident unless it sleeps
    through the update (`GRPOConfig.engine_sleep`), when it counts in the sampling phase only."""
    awake = config.backend == "vllm" and not getattr(config, "engine_sleep", False)
    resident = out["weights"] + out["optimizer"] + (out["rollouts"] if awake else 0.0)
    phases = (0.0 if awake else out["rollouts"], out.get("scoring", 0.0),
              out["gradients"] + out["activations"] + out["logits"] + out.get("gathered", 0.0), out["step"])
    return resident + max(phases)


QWEN25_SHAPES = {
    "1.5B": dict(hidden_size=1536, num_layers=28, num_heads=12, num_kv_heads=2, intermediate_size=8960),
    "3B": dict(hidden_size=2048, num_layers=36, num_heads=16, num_kv_heads=2, intermediate_size=11008),
    "7B": dict(hidden_size=3584, num_layers=28, num_heads=28, num_kv_heads=4, intermediate_size=18944),
}
"""Qwen2.5's published architectures (config.json of Qwen/Qwen2.5-{1.5B,3B,7B}-Instruct; vocabulary 151,936;
1.5B and 3B tie their embeddings, 7B does not) for `per_gpu_memory` on the meta device."""
QWEN25_TIED = {"1.5B": True, "3B": True, "7B": False}
"""Whether each of `QWEN25_SHAPES` ties its input and output embeddings."""

SHARDED_TERMS = ("weights", "optimizer", "gradients", "step")
"""The terms of `grpo_memory` that FSDP2 / ZeRO-3 divide among the GPUs (the activations, logits and rollouts of a
GPU's own micro-batches stay whole)."""


def per_gpu_memory(config, model, *, prompt_tokens: int, gpus: int, sharded: bool,
                   device_bytes: int | None = None) -> dict[str, float]:
    """`grpo_memory` per GPU when `gpus` processes train together: data parallel (`sharded` False, what
    `grpo.distributed` runs) keeps every term whole on every GPU; FSDP2 / ZeRO-3 (`sharded` True: the update of
    `grpo.distributed.shard_model`, which `train_grpo` does not use yet) divide `SHARDED_TERMS` by `gpus` and add
    one all-gathered layer of weights and gradients (the largest a layer-wise sharded step holds at once)."""
    out = grpo_memory(config, model, prompt_tokens=prompt_tokens, device_bytes=device_bytes)
    if not sharded or gpus == 1:
        return out
    layers = model.config.num_hidden_layers
    gathered = 2 * out["gradients"] / layers  # one layer's weights and gradients, gathered whole
    out = {k: (v / gpus if k in SHARDED_TERMS else v) for k, v in out.items() if k != "total"}
    out["gathered"] = gathered
    out["total"] = _total(config, out)
    return out


def check_grpo_fits(config, model, *, prompt_tokens: int, device_bytes: int) -> dict[str, float]:
    """`grpo_memory`, or ValueError (one line naming the first single change that fits: a smaller
    micro_batch_size, gradient_checkpointing, logit_chunk, a smaller engine share) when its total exceeds
    `HEADROOM` of `device_bytes`."""
    est = grpo_memory(config, model, prompt_tokens=prompt_tokens, device_bytes=device_bytes)
    limit = HEADROOM * device_bytes / GIB
    if est["total"] <= limit:
        return est
    terms = ", ".join(f"{k} {v:.1f}" for k, v in est.items() if k != "total")
    current = config.micro_batch_size or (config.minibatch_size or config.prompts_per_step) * config.group_size
    knobs = [("micro_batch_size", m) for m in (64, 32, 16, 8, 4, 2, 1) if m < current]
    knobs += [("gradient_checkpointing", True)] if not config.gradient_checkpointing else []
    knobs += [("logit_chunk", 256)] if config.logit_chunk is None else []
    knobs += [("engine_sleep", True)] if config.backend == "vllm" and not config.engine_sleep else []
    knobs += [("gpu_memory_utilization", 0.3)] if config.backend == "vllm" else []
    fix = next((f"set {k}={v} (now {getattr(config, k)})" for k, v in knobs
                if grpo_memory(dataclasses.replace(config, **{k: v}), model, prompt_tokens=prompt_tokens,
                               device_bytes=device_bytes)["total"] <= limit),
               "no single knob fits it: use a device with more memory (or a smaller model)")
    raise ValueError(f"GRPOConfig: estimated peak {est['total']:.1f} GiB ({terms}) exceeds {HEADROOM:.0%} of the "
                     f"device's {device_bytes / GIB:.1f} GiB: {fix}")
