"""The body of one Ray actor of the ES population (`Replica`): a replica of the driver's model, scored and updated
like the driver's.

Plain Python, no Ray import: `es.backends.ray_actors.RayBackend` wraps it with `ray.remote` and runs one per worker;
that module's docstring gives the protocol and its checks.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import torch

from esreason_lib.es.backends.base import score_center
from esreason_lib.es.backends.sequential import SequentialBackend
from esreason_lib.es.config import ESConfig
from esreason_lib.es.core import ES, Population
from esreason_lib.models.weights import load_module_state, materialise, weights_fingerprint


class Replica:
    """The body of one Ray actor: a replica of the driver's model, scored and updated like the driver's."""

    def __init__(self, model_class, model_config, dtype: torch.dtype, device: str, state: dict, tokenizer, task,
                 config: ESConfig, fitness_shaping: Callable | None, engine: str = "local",
                 memory_share: float | None = None):
        self.created_at = time.time()  # wall clock (comparable across the actors' processes)
        self.model = materialise(model_class, model_config, state, dtype=dtype, device=device)  # no random init
        if engine == "vllm":  # one vLLM engine following this replica (es.backends.vllm_engines, extra `vllm`)
            from esreason_lib.es.backends.vllm_engines import VLLMBackend

            self.scorer = VLLMBackend(config, task, tokenizer, fitness_shaping=fitness_shaping,
                                      check_every=config.check_every, engine_kwargs=None
                                      if memory_share is None else {"gpu_memory_utilization": memory_share})
        else:
            self.scorer = SequentialBackend.from_config(config, task, tokenizer)
        self.config, self.shaping, self.engine = config, fitness_shaping, engine
        self.ready_at = time.time()

    def started(self) -> tuple[float, float]:
        """(wall-clock time the replica began building, time it was ready); a call returns once it is ready."""
        return self.created_at, self.ready_at

    def evaluate(self, seed: int, sign: int, sigma: float, examples: list[dict],
                 iteration: int) -> tuple[float, np.ndarray, float]:
        """Member (seed, sign)'s (mean reward, correct [P], fix-up fraction) at scale `sigma` (its population's); the
        replica is restored exactly."""
        ev = self.scorer(self.model, Population([seed], [sign], sigma), examples, iteration=iteration)
        return float(ev.rewards[0]), ev.correct[0], ev.fixup_frac

    def score_center(self, examples: list[dict], iteration: int) -> tuple[np.ndarray, np.ndarray, float]:
        """The unperturbed replica's (rewards [P], correct [P], mean token entropy), decoded as the driver would
        (`base.score_center`) or by this actor's vLLM engine (`VLLMBackend.score_center`)."""
        if self.engine == "vllm":
            return self.scorer.score_center(self.model, examples, iteration=iteration)
        return score_center(self.model, self.scorer.tokenizer, self.scorer.task, examples, self.config, iteration)

    def tell(self, population: Population, rewards: np.ndarray) -> None:
        """Apply the update the driver's `ES.tell(population, rewards)` applied. With "vllm" the engine then copies
        the updated replica (`VLLMBackend.forget`: one weight copy at the next call, by CUDA IPC handle on a GPU)
        instead of drawing every member's noise again to replay the update itself."""
        ES(self.config, self.model, fitness_shaping=self.shaping).tell(population, rewards)
        if self.engine == "vllm":
            self.scorer.forget()

    def load(self, state: dict) -> None:
        """Overwrite the replica with the driver's weights."""
        load_module_state(self.model, state)
        if self.engine == "vllm":
            self.scorer.forget()

    def checksum(self) -> str:
        """`weights_fingerprint` of the replica."""
        return weights_fingerprint(self.model)

