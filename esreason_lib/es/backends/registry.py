"""`make_backend(config, task, tokenizer, model=...)`: the population backend a config names (`ESConfig.backend`).

The registry sits above every backend module, so that no backend imports it."""

from __future__ import annotations

import sys
from typing import Any

from esreason_lib.es.backends.base import BACKENDS, PopulationEvaluator
from esreason_lib.es.backends.sequential import SequentialBackend


def make_backend(config: Any, task, tokenizer, *, model=None) -> "PopulationEvaluator":
    """The population evaluator `config.backend` names (an `ESConfig`; "auto" resolved as `BACKENDS` says);
    `es.backends.lowrank.LowRankBackend` whenever `config.noise` is "lowrank". Given the `model` it will score,
    "auto" falls back from "batched" to "sequential" (the same rewards) when the batched forward does not
    implement the model's architecture, saying so in one line on stderr."""
    from esreason_lib.es.backends.batched import BatchedBackend, supports

    if config.noise == "lowrank":
        from esreason_lib.es.backends.lowrank import LowRankBackend

        return LowRankBackend.from_config(config, task, tokenizer)
    name = config.backend
    if name == "auto":
        name = "batched" if config.greedy and config.dtype == "float32" else "sequential"
        if name == "batched" and model is not None and not supports(model):
            print(f"esreason: ESConfig.backend='auto': the batched backend implements Qwen2ForCausalLM, not "
                  f"{type(model).__name__}; scoring members with the sequential backend (same rewards, slower)",
                  file=sys.stderr)
            name = "sequential"
    if name not in BACKENDS:
        raise ValueError(f"ESConfig.backend must be one of {BACKENDS}, got {config.backend!r}")
    if name in ("ray", "ray-vllm"):
        from esreason_lib.es.backends.ray_actors import RayBackend  # here: it needs the optional `ray` extra

        return RayBackend.from_config(config, task, tokenizer, workers=config.workers,
                                      engine="vllm" if name == "ray-vllm" else "local")
    if name == "vllm":
        from esreason_lib.es.backends.vllm_engines import VLLMBackend  # here: it needs the optional `vllm` extra

        return VLLMBackend.from_config(config, task, tokenizer)
    if name in ("fast", "native"):
        from esreason_lib.es.backends.fast import FastBackend, NativeBackend

        return (FastBackend if name == "fast" else NativeBackend).from_config(config, task, tokenizer)
    return (BatchedBackend if name == "batched" else SequentialBackend).from_config(config, task, tokenizer)
