"""`make_backend(config, task, tokenizer)`: the population backend a config names (`ESConfig.backend`).

The registry sits above every backend module, so that no backend imports it."""

from __future__ import annotations

from typing import Any


from esreason_lib.es.backends.base import BACKENDS, PopulationEvaluator
from esreason_lib.es.backends.sequential import SequentialBackend


def make_backend(config: Any, task, tokenizer) -> "PopulationEvaluator":
    """The population evaluator `config.backend` names (an `ESConfig`; "auto" resolved as `BACKENDS` says);
    `es.backends.lowrank.LowRankBackend` whenever `config.noise` is "lowrank"."""
    from esreason_lib.es.backends.batched import BatchedBackend

    if config.noise == "lowrank":
        from esreason_lib.es.backends.lowrank import LowRankBackend

        return LowRankBackend.from_config(config, task, tokenizer)
    name = config.backend
    if name == "auto":
        name = "batched" if config.greedy and config.dtype == "float32" else "sequential"
    if name not in BACKENDS:
        raise ValueError(f"ESConfig.backend must be one of {BACKENDS}, got {config.backend!r}")
    if name in ("ray", "ray-vllm"):
        from esreason_lib.es.backends.ray_actors import RayBackend  # here: es.backends.ray_actors imports es, which imports this module

        return RayBackend.from_config(config, task, tokenizer, workers=config.workers,
                                      engine="vllm" if name == "ray-vllm" else "local")
    if name == "vllm":
        from esreason_lib.es.backends.vllm_engines import VLLMBackend  # here: es.backends.vllm_engines imports es, which imports this module

        return VLLMBackend.from_config(config, task, tokenizer)
    if name in ("fast", "native"):
        from esreason_lib.es.backends.fast import FastBackend, NativeBackend

        return (FastBackend if name == "fast" else NativeBackend).from_config(config, task, tokenizer)
    return (BatchedBackend if name == "batched" else SequentialBackend).from_config(config, task, tokenizer)
