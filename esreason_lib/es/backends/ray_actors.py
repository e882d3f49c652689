"""The ES population on Ray: one actor per worker, each holding a replica of the model; seeds in, rewards out.

Protocol. `RayBackend` implements `es.backends.base.PopulationEvaluator`. On its first call it ships the driver's
model once (state dict + model class + model config, with the tokenizer, the task and the `ESConfig`) and
builds `workers` actors from it, each checked against the driver's weight checksum. Each call then sends every
member as a (seed, sign) pair; an actor regenerates the noise (`es.noise`), perturbs its replica, scores it with
the very code the in-process path runs (a one-member `SequentialBackend` call: `score_examples`, sampling seed
`sample_seed(seed, iteration)`), restores it exactly and returns (reward, correct, fix-up fraction). Members go
out one per idle actor and the next one is handed to whichever actor finishes first (`ray.wait`), so a slow
worker never stalls the step. Rewards and correctness therefore equal `SequentialBackend`'s bit for bit.

Keeping the replicas in step with `ES.tell` without sending weights. `tell` (es/core.py) updates only the driver's
tensors, and its inputs are (population, rewards): the population the backend was given and the rewards it
returned. So the backend keeps the last call's (population, rewards) and, at the next call (the next
iteration), every replica runs `ES(config, replica).tell(population, rewards)` first: the same shaping, the
same per-seed coefficients, the same `es.noise.apply_update` kernel on the same device type, hence the same
bits as the driver. Only N seeds, N signs and N rewards cross the wire per step, and the coefficient rule stays
in one place (sending precomputed (seeds, coefficients, scale) to `apply_update` would copy tell's). The replay
assumes the caller told exactly those rewards (as `train_es` and a plain ask/evaluate/tell loop do). A call
whose model is not the one the replicas follow, or whose iteration is neither the last one nor the next (a
resumed run, a new model), reloads every replica from the driver's weights instead (the only time weights travel
after the start); a call at the iteration and with the model of the last one (the members after `score_center`)
leaves the replicas as they are, unchecked, as `VLLMBackend` leaves its engine.

Guarding it. Every `check_every` calls (1 by default; `ESConfig.check_every`), after the replay, the driver's
`weights_fingerprint` (computed on the weights' device, 8 bytes per tensor to the host) is compared with each replica's.
A replica that differs (a tell with other rewards or over another set of tensors, a lost update, a corrupted
replica) is reloaded from the driver's weights with a RuntimeWarning naming it and the iteration, and counted in
`resyncs` (the trainer logs it as es/resyncs); one that still differs after the reload raises a RuntimeError. On a
GPU the fingerprint reads each weight once on the device and never copies it to the host (the blake2b of every
byte, `weights_checksum`, copied ~3 GB per replica per check at 1.5B); on a CPU it costs ~57 ms per million
float32 weights here (blake2b: ~23 ms), so `check_every` still trades the check against its time.

Failures. An actor that dies (`RayActorError`, e.g. `ray.kill` or a crashed process) is replaced by a new actor
built from the driver's current weights (the unperturbed theta of this iteration, which the replicas hold
between members), and the member it was scoring goes back to the queue: a step never loses a member. More than
`max_restarts` replacements in one call raise, naming the member. An exception raised by the scoring code
itself (a task bug) is not a worker failure and propagates.

Generation. With `engine="local"` (the default) an actor generates with the library's own code on its replica;
with `engine="vllm"` (`backend="ray-vllm"`, extras `ray` and `vllm`) each actor also holds one vLLM engine
(`es.backends.vllm_engines.VLLMBackend`) that scores its members. The update is drawn once per actor: the replica
replays `tell` and its engine copies the updated weights (`forget`, then one `Engine.load` at the next call: device
to device by CUDA IPC handle on a GPU) instead of drawing every member's noise again; a reload is passed on the same
way. The copy is exact, so the engine equals the replica bit for bit and is checked against its checksum.
`score_center` decodes the unperturbed model on the first actor (on its engine with "vllm"), so the driver
generates nothing: `es.loop.es_step` logs its rewards as reward/center.

Placement. Replicas use the driver model's device type (noise is a function of the device type, so a CPU driver
with CUDA replicas could not stay bit-identical) and dtype; with a CUDA driver each actor asks Ray for
`gpus_per_worker` GPUs (a fraction shares a GPU; None: the largest share with which every worker fits) and each
vLLM engine takes `gpu_memory_utilization` of its GPU. Before the first actor starts, the request is compared
with `ray.cluster_resources()` (`placement.plan_placement`, the driver's own GPU memory counted) and, with CUDA,
every GPU's bytes are counted (`placement.gpu_commitments`): a shortfall or an over-committed GPU fails in one line
instead of leaving an actor pending and `ray.get` blocked, or a GPU out of memory. Each actor then runs in its own
bundle of one placement group (`ray_cluster.reserve_bundles`, a bounded wait), and actors whose vLLM engines share
a GPU start one after another. `RayBackend.from_config` joins the cluster `ESConfig.ray_address` or $RAY_ADDRESS
names, shipping this package with the job, or starts a local Ray (`ray_cluster.start_ray`), unless the caller already
did `ray.init`.
"""

from __future__ import annotations

import time
import warnings
from collections import deque
from typing import Callable

import numpy as np
import torch

try:
    import ray
    from ray.exceptions import RayActorError
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError("esreason: the Ray backend needs the `ray` extra: pip install 'esreason[ray]'") from err
from ray.util.placement_group import remove_placement_group  # noqa: E402
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy  # noqa: E402

from esreason_lib.es.backends.base import Evaluation
from esreason_lib.es.backends.ray_cluster import actor_bundles, driver_gpu_share, reserve_bundles, start_ray
from esreason_lib.es.backends.ray_replica import Replica
from esreason_lib.es.config import ESConfig
from esreason_lib.es.core import Population
from esreason_lib.es.noise import COUNTER_BUFFER_BYTES
from esreason_lib.models.logprobs import SCORING, logit_bytes
from esreason_lib.models.placement import GPUMemory, ModelSize, check_memory_share, plan_placement, start_one_by_one
from esreason_lib.models.weights import module_state, weights_fingerprint
from esreason_lib.validation import check, check_nonnegative_float, check_nonnegative_int, check_positive_int, is_real

_REMOTE_REPLICA = ray.remote(Replica)


class RayBackend:
    """Score the population on `workers` Ray actors (see the module docstring for the protocol and its checks).

    `config` gives the scoring (greedy, temperature, max_new_tokens, seed, as `SequentialBackend`; sigma comes with
    each population) and the
    update the replicas replay (alpha, normalization, or `fitness_shaping` when the driver's `ES` was given one).
    `check_every`: compare weight checksums every this many calls. `max_restarts`: dead workers replaced within
    one call before it raises. `cpus_per_worker` / `gpus_per_worker`: Ray resources per actor (GPUs default to 1
    when the driver's model is on CUDA, else 0; fractions share a GPU). `engine`: how an actor generates, "local"
    (the library's generation on its replica) or "vllm" (one vLLM engine per actor following its replica,
    `es.backends.vllm_engines.VLLMBackend`); `gpu_memory_utilization`: each engine's share of its GPU
    (`placement.plan_placement`)."""

    def __init__(self, config: ESConfig, task, tokenizer, *, workers: int, check_every: int = 1,
                 fitness_shaping: Callable | None = None, cpus_per_worker: float = 1.0,
                 gpus_per_worker: float | None = None, max_restarts: int = 3, engine: str = "local",
                 gpu_memory_utilization: float | None = None):
        self.config, self.task, self.tokenizer, self.shaping = config, task, tokenizer, fitness_shaping
        self.engine = engine
        check(self, "engine", engine in ("local", "vllm"), "must be 'local' or 'vllm'")
        self.workers, self.check_every, self.max_restarts = workers, check_every, max_restarts
        self.cpus_per_worker, self.gpus_per_worker = cpus_per_worker, gpus_per_worker
        check_positive_int(self, "workers", "check_every")
        check_nonnegative_int(self, "max_restarts")
        check_nonnegative_float(self, "cpus_per_worker")
        check(self, "gpus_per_worker", gpus_per_worker is None or (is_real(gpus_per_worker) and gpus_per_worker >= 0),
              "must be None or a number >= 0")
        check_memory_share("RayBackend", gpu_memory_utilization)
        self.gpu_memory_utilization = gpu_memory_utilization
        self._placement: tuple[float, float | None] | None = None  # (GPUs per actor, engine share) once planned
        self._group = None  # the placement group: one bundle per actor (after the driver's, when it has one)
        self._first_bundle = 0  # the bundle index of actor 0
        self.restarts = 0  # actors replaced after dying, over the backend's life
        self.resyncs = 0  # replicas reloaded after a checksum mismatch, over the backend's life
        self.last_sync_s = 0.0  # seconds the last call spent bringing the replicas to the driver's weights
        self._actors: list = []
        self._driver = None  # the model the replicas follow
        self._iteration: int | None = None  # the iteration of the last call
        self._pending: tuple[Population, np.ndarray] | None = None  # the last call's (population, rewards)
        self._calls = 0

    @classmethod
    def from_config(cls, config: ESConfig, task, tokenizer, *, workers: int | None = None,
                    engine: str | None = None) -> "RayBackend":
        """The backend an `ESConfig` describes, on `workers` actors (default `config.workers`) generating with
        `engine` (default "vllm" for `backend="ray-vllm"`, else "local"; its `check_every`, `gpus_per_worker` and
        `gpu_memory_utilization`)."""
        workers = config.workers if workers is None else workers
        engine = engine or ("vllm" if config.backend == "ray-vllm" else "local")
        start_ray(config.ray_address)
        return cls(config, task, tokenizer, workers=workers, engine=engine, check_every=config.check_every,
                   gpus_per_worker=config.gpus_per_worker, gpu_memory_utilization=config.gpu_memory_utilization)

    @property
    def actors(self) -> tuple:
        """The live actor handles, one per worker (empty before the first call and after `close`)."""
        return tuple(self._actors)

    def close(self) -> None:
        """Kill the actors (a later call starts new ones from the driver's weights)."""
        for actor in self._actors:
            ray.kill(actor, no_restart=True)
        if self._group is not None:
            remove_placement_group(self._group)
        self._actors, self._driver, self._iteration, self._pending, self._group = [], None, None, None, None

    def score_center(self, model, examples: list[dict], *, iteration: int) -> tuple[np.ndarray, np.ndarray, float]:
        """The unperturbed model's (rewards [P], correct [P], mean token entropy) on `examples`, scored by the first
        live actor after the replicas are brought to the driver's weights (`Replica.score_center`: equal to the
        driver's own `base.score_center` with the local engine; on its vLLM engine with "vllm"). A dead actor
        is replaced and asked again, up to `max_restarts` times."""
        iteration = int(iteration)
        self._sync(model, iteration)
        batch = ray.put(list(examples))
        for restarts in range(self.max_restarts + 1):
            try:
                return ray.get(self._actors[0].score_center.remote(batch, iteration))
            except RayActorError as err:
                if restarts == self.max_restarts:
                    raise RuntimeError(f"RayBackend: the actor scoring the centre died {restarts + 1} times in "
                                       f"iteration {iteration} (max_restarts={self.max_restarts}): {err}") from err
                self._replace(0, model)

    def __call__(self, model, population, examples: list[dict], *, iteration: int) -> Evaluation:
        iteration = int(iteration)
        self._sync(model, iteration)
        seeds, signs = population.seeds.tolist(), population.signs.tolist()
        n, p = len(seeds), len(examples)
        rewards, correct, fix = np.zeros(n), np.zeros((n, p)), np.zeros(n)  # [N], [N, P], [N]
        batch, restarts = ray.put(list(examples)), 0
        todo, idle, running = deque(range(n)), deque(range(len(self._actors))), {}
        while todo or running:
            while todo and idle:
                w, i = idle.popleft(), todo.popleft()
                member = self._actors[w].evaluate.remote(seeds[i], signs[i], population.sigma, batch, iteration)
                running[member] = (w, i)
            (ref,), _ = ray.wait(list(running), num_returns=1)
            w, i = running.pop(ref)
            try:
                rewards[i], correct[i], fix[i] = ray.get(ref)
            except RayActorError as err:
                restarts += 1
                if restarts > self.max_restarts:
                    raise RuntimeError(f"RayBackend: {restarts} workers died in iteration {iteration} (max_restarts="
                                       f"{self.max_restarts}); the last was scoring member {i} (seed {seeds[i]}, "
                                       f"sign {signs[i]}): {err}") from err
                self._replace(w, model)
                todo.appendleft(i)
            idle.append(w)
        self._pending = (population, rewards.copy())
        return Evaluation(rewards=rewards, correct=correct, fixup_frac=float(fix.mean()), generations=n * p)

    # ------------------------------------------------------------------------------------------------ internals
    def _new_actor(self, w: int, model, state_ref):
        """Start actor `w` in its placement-group bundle from the weights `state_ref`."""
        gpus, share = self._placement
        where = PlacementGroupSchedulingStrategy(placement_group=self._group,
                                                 placement_group_bundle_index=self._first_bundle + w)
        return _REMOTE_REPLICA.options(num_cpus=self.cpus_per_worker, num_gpus=gpus, scheduling_strategy=where).remote(
            type(model), model.config, next(model.parameters()).dtype, _device_type(model), state_ref, self.tokenizer,
            self.task, self.config, self.shaping, self.engine, share)

    def _replace(self, w: int, model) -> None:
        """Kill actor `w` (if still alive) and start a new one from the driver's current weights."""
        ray.kill(self._actors[w], no_restart=True)
        self._actors[w] = self._new_actor(w, model, ray.put(module_state(model)))
        self.restarts += 1

    def _sync(self, model, iteration: int) -> None:
        """Bring every replica to the driver's weights before scoring `iteration` (module docstring)."""
        t0 = time.perf_counter()
        if self._actors and model is self._driver and iteration == self._iteration:
            self.last_sync_s = 0.0  # already brought there this iteration (the centre, then the members)
            return
        if not self._actors:
            self._start_actors(model)
        elif model is not self._driver or self._iteration is None or iteration not in (self._iteration,
                                                                                       self._iteration + 1):
            self._on_all("load", ray.put(module_state(model)), model=model)
        elif iteration == self._iteration + 1 and self._pending is not None:
            self._on_all("tell", *self._pending, model=model)
        self._driver, self._iteration, self._pending = model, iteration, None
        if self._calls % self.check_every == 0:
            want = weights_fingerprint(model)
            for w, c in enumerate(self._on_all("checksum", model=model)):
                if c != want:
                    self._resync(w, model, iteration, c, want)
        self._calls += 1
        self.last_sync_s = time.perf_counter() - t0

    def _start_actors(self, model) -> None:
        """Plan the placement, reserve one bundle per actor (and the driver's GPU share), start the actors from
        the driver's weights: all at once, or one after another (each ready before the next) when their vLLM
        engines share a GPU (`placement.start_one_by_one`)."""
        state = ray.put(module_state(model))  # starts a local Ray cluster when none is running
        driver, cuda = driver_gpu_share(model), _device_type(model) == "cuda"
        self._placement = plan_placement(  # with CUDA, every GPU's bytes counted before any actor starts
            workers=self.workers, cpus_per_worker=self.cpus_per_worker, gpus_per_worker=self.gpus_per_worker,
            cuda=cuda, engine=self.engine, memory_share=self.gpu_memory_utilization,
            resources=ray.cluster_resources(), driver_share=driver, memory=self._gpu_memory(model) if cuda else None)
        bundles = actor_bundles(workers=self.workers, cpus_per_worker=self.cpus_per_worker,
                                gpus_per_worker=self._placement[0], driver_share=driver)
        self._group, self._first_bundle = reserve_bundles(bundles), len(bundles) - self.workers
        self._actors = []
        for w in range(self.workers):
            self._actors.append(self._new_actor(w, model, state))
            if start_one_by_one(self.engine, self._placement[0]):
                ray.get(self._actors[w].started.remote())
        self._calls = 0  # a fresh pool is always checked once

    def _gpu_memory(self, model) -> GPUMemory:
        """What the placement counts on each GPU for `model` (on CUDA): its size, the device's memory, the centre's
        scoring pass over the step's prompts at the generation budget, the noise draws' chunk buffers."""
        scoring = logit_bytes(SCORING, rows=self.config.prompts_per_step, vocab=model.config.vocab_size,
                              positions=self.config.max_new_tokens or self.task.max_new_tokens)
        return GPUMemory(ModelSize.of(model), scoring=scoring, noise_buffers=COUNTER_BUFFER_BYTES,
                         device_bytes=torch.cuda.get_device_properties(next(model.parameters()).device).total_memory)

    def _resync(self, w: int, model, iteration: int, got: str, want: str) -> None:
        """Reload replica `w`, whose checksum `got` differs from the driver's `want`, from the driver's weights
        (a warning, counted in `resyncs`); RuntimeError when it still differs after the reload."""
        warnings.warn(f"RayBackend: replica {w} drifted from the driver's weights at iteration {iteration} "
                      f"(checksum {got} != driver {want}; was tell given other rewards?): reloading it from the "
                      f"driver", RuntimeWarning, stacklevel=3)
        ray.get(self._actors[w].load.remote(ray.put(module_state(model))))
        self.resyncs += 1
        again = ray.get(self._actors[w].checksum.remote())
        if again != want:
            raise RuntimeError(f"RayBackend: replica {w} still differs from the driver after a reload at iteration "
                               f"{iteration} (checksum {again} != driver {want})")

    def _on_all(self, method: str, *args, model) -> list:
        """Run `method(*args)` on every actor and return the results. An actor found dead is replaced from the
        driver's weights, which already hold any update being replayed; a replacement is asked again only for
        `checksum` (its result for `tell` / `load` is None)."""
        refs = [getattr(actor, method).remote(*args) for actor in self._actors]
        out = []
        for w, ref in enumerate(refs):
            try:
                out.append(ray.get(ref))
            except RayActorError:
                self._replace(w, model)
                out.append(ray.get(self._actors[w].checksum.remote()) if method == "checksum" else None)
        return out


def _device_type(model) -> str:
    return next(model.parameters()).device.type
