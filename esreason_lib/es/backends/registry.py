"""`make_backend(config, task, tokenizer, model=...)`: the population backend a config names (`ESConfig.backend`),
imported by the path `es.backends.base.BACKEND_CLASSES` records for it (name -> "module:class", as the tasks'
registry), so that a run loads only the backend it uses and no backend imports this module."""

from __future__ import annotations

import importlib
import sys
from typing import Any

from esreason_lib.es.backends.base import BACKEND_CLASSES, BACKENDS, PopulationEvaluator


def backend_class(name: str) -> type:
    """The class `BACKEND_CLASSES[name]` names, imported now; ValueError naming `name` when it is not registered."""
    if name not in BACKEND_CLASSES:
        raise ValueError(f"ESConfig.backend must be one of {BACKENDS}, got {name!r}")
    module, _, cls = BACKEND_CLASSES[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def resolve_auto(config: Any, model=None) -> str:
    """The backend "auto" stands for: "batched" for a greedy float32 run, else "sequential"; given the `model` it
    will score, "sequential" (the same rewards) when the batched forward does not implement the model's
    architecture, saying so in one line on stderr."""
    if not (config.greedy and config.dtype == "float32"):
        return "sequential"
    from esreason_lib.es.backends.batched import supports

    if model is not None and not supports(model):
        print(f"esreason: ESConfig.backend='auto': the batched backend implements Qwen2ForCausalLM, not "
              f"{type(model).__name__}; scoring members with the sequential backend (same rewards, slower)",
              file=sys.stderr)
        return "sequential"
    return "batched"


def make_backend(config: Any, task, tokenizer, *, model=None) -> "PopulationEvaluator":
    """The population evaluator `config.backend` names (an `ESConfig`; "auto" resolved by `resolve_auto`);
    `es.backends.lowrank.LowRankBackend` whenever `config.noise` is "lowrank"."""
    if config.noise == "lowrank":
        from esreason_lib.es.backends.lowrank import LowRankBackend

        return LowRankBackend.from_config(config, task, tokenizer)
    name = resolve_auto(config, model) if config.backend == "auto" else config.backend
    return backend_class(name).from_config(config, task, tokenizer)
