"""Where Ray actors and vLLM engines go: GPUs per actor, each engine's memory share, and the shortfall check.

An actor that asks Ray for more than the cluster has never starts, and `ray.get` on it waits forever without an
error (the `--backend ray-vllm --workers 8` hang on one GPU). `plan_placement` therefore compares the request
with `ray.cluster_resources()` before any actor starts and fails in one line naming the knob. Several actors
(and their vLLM engines) share a GPU through a fractional `gpus_per_worker`; Ray packs floor(1 / g) of them on
a GPU, and vLLM's `gpu_memory_utilization` (the share of the GPU's memory one engine may take) must then leave
room for the others: the shares of the engines on one GPU must sum below 1. A driver whose model sits on a GPU
takes `driver_share` of one GPU (`ray_cluster.driver_gpu_share`), counted in both: the actors on that GPU get
the rest, and the engines' shares there sum below 1 - driver_share. `start_one_by_one` says when actors must
start their engines in turn. Given the model's size (`GPUMemory`), `plan_placement` also counts the bytes every GPU
holds at once (`gpu_commitments`: the driver's model and theta_0 with its update temporaries, every replica with its
fix-up list and its perturbation and update temporaries, the engines' memory shares, the noise draws' chunk buffers,
the centre's scoring pass) and refuses, in one line naming the GPU, its need and its capacity, a plan that
over-commits one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from esreason_lib.validation import is_real

ENGINE_SHARE = 0.5
"""Memory share of the vLLM engines on one GPU, together, when none is given (the rest holds the models and their
training state: ES replicas, the driver, GRPO's optimiser)."""


def check_gpus_per_worker(owner: str, value) -> None:
    """ValueError unless `value` is None, a fraction in (0, 1], or a whole number (Ray's rule for num_gpus)."""
    if value is None:
        return
    if not (is_real(value) and value > 0 and (value <= 1 or float(value).is_integer())):
        raise ValueError(f"{owner}.gpus_per_worker must be None, in (0, 1] or a whole number, got {value!r}")


def check_memory_share(owner: str, value) -> None:
    """ValueError unless `value` is None or in (0, 1)."""
    if value is not None and not (is_real(value) and 0 < value < 1):
        raise ValueError(f"{owner}.gpu_memory_utilization must be None or in (0, 1), got {value!r}")


def actors_per_gpu(gpus_per_worker: float) -> int:
    """How many actors of `gpus_per_worker` (<= 1) Ray packs on one GPU."""
    return int(math.floor(1.0 / gpus_per_worker + 1e-9))


def start_one_by_one(engine: str, gpus_per_worker: float) -> bool:
    """Whether actors must start one after another: vLLM engines sharing a GPU (vLLM profiles the GPU's free
    memory when an engine starts, and engines starting at once see each other's allocations as their own)."""
    return engine == "vllm" and 0 < gpus_per_worker < 1


def _floor4(x: float) -> float:
    """`x` rounded down to 4 decimals (Ray keeps fractional resources to 1e-4)."""
    return math.floor(x * 1e4 + 1e-6) / 1e4


def plan_placement(*, workers: int, cpus_per_worker: float, gpus_per_worker: float | None, cuda: bool,
                   engine: str, memory_share: float | None, resources: dict,
                   driver_share: float = 0.0, memory: GPUMemory | None = None) -> tuple[float, float | None]:
    """(GPUs per actor, memory share per vLLM engine or None) for `workers` actors on a cluster with `resources`
    (`ray.cluster_resources()`); ValueError naming the knob when the cluster cannot hold them all at once.

    `gpus_per_worker` None: 0 without CUDA; with CUDA 1 when the cluster has a GPU per worker, else the largest
    share 1 / k with which every worker fits (k = ceil(workers / GPUs)). `memory_share` None (engine "vllm"):
    `ENGINE_SHARE` split among the engines on one GPU (None without GPUs: the engine's own default).
    `driver_share`: the share of one GPU the driver holds (0 off CUDA); the default GPUs per actor become
    (1 - driver_share) / k, so that the actors of the driver's GPU fit beside it. `memory` (a CUDA driver): every
    GPU's bytes are counted (`gpu_commitments`) and a plan that over-commits one is refused in one line naming it."""
    if not (is_real(driver_share) and 0 <= driver_share < 1):
        raise ValueError(f"RayBackend: the driver's GPU share must be in [0, 1), got {driver_share!r}")
    gpus_total, cpus_total = float(resources.get("GPU", 0.0)), float(resources.get("CPU", 0.0))
    if workers * cpus_per_worker > cpus_total + 1e-9:
        raise ValueError(f"RayBackend: workers={workers} x cpus_per_worker={cpus_per_worker:g} needs "
                         f"{workers * cpus_per_worker:g} CPUs, the Ray cluster has {cpus_total:g}: lower workers "
                         f"or cpus_per_worker")
    if gpus_per_worker is None:
        if not cuda:
            gpus = 0.0
        elif gpus_total < 1:
            raise ValueError(f"RayBackend: the model is on CUDA but the Ray cluster has {gpus_total:g} GPUs "
                             f"(ray.cluster_resources()); start Ray with the GPUs visible")
        else:
            gpus = _floor4((1.0 - driver_share) / math.ceil(workers / math.floor(gpus_total)))
    else:
        gpus = float(gpus_per_worker)
    if gpus > 0:
        if gpus <= 1:  # the driver's GPU holds floor((1 - driver_share) / gpus) of them
            fits = (actors_per_gpu(gpus) * (math.floor(gpus_total) - 1)
                    + int(math.floor((1 - driver_share) / gpus + 1e-9)))
        else:
            fits = math.floor((gpus_total - driver_share) / gpus)
        if workers > fits:
            raise ValueError(f"RayBackend: workers={workers} with gpus_per_worker={gpus:g} needs "
                             f"{workers * gpus:g} GPUs, the Ray cluster has {gpus_total:g} ({fits} such actors "
                             f"fit): lower workers or gpus_per_worker (e.g. --gpus-per-worker "
                             f"{1 / math.ceil(workers / max(math.floor(gpus_total), 1)):g})")
    share = _engine_share(workers=workers, gpus=gpus, engine=engine, memory_share=memory_share,
                          driver_share=driver_share)
    if memory is not None:
        check_gpu_commitments(gpu_commitments(memory, workers=workers, gpus_per_worker=gpus, gpus_total=gpus_total,
                                              driver_share=driver_share, engine=engine, engine_share=share),
                              memory.device_bytes)
    return gpus, share


def _engine_share(*, workers: int, gpus: float, engine: str, memory_share: float | None,
                  driver_share: float) -> float | None:
    """Each vLLM engine's memory share for actors of `gpus` GPUs (`plan_placement`); None without one on a GPU."""
    if engine != "vllm" or (gpus == 0 and memory_share is None):  # a CPU engine takes no GPU share
        return None
    sharing = min(workers, actors_per_gpu(gpus)) if 0 < gpus < 1 else 1  # engines on one GPU
    share = ENGINE_SHARE / sharing if memory_share is None else float(memory_share)
    if sharing * share + driver_share >= 1:
        beside = f" beside the driver's {driver_share:.3g}" if driver_share else ""
        raise ValueError(f"RayBackend: {sharing} vLLM engines share a GPU at gpu_memory_utilization={share:g} "
                         f"each ({sharing * share:g} of its memory{beside}): lower gpu_memory_utilization below "
                         f"{(1 - driver_share) / sharing:.3g}")
    return share


GIB = 2**30


@dataclass(frozen=True)
class ModelSize:
    """What the GPU memory of an ES model's copies depends on."""

    params: int
    """Parameters of the model."""
    largest: int
    """Elements of its largest tensor (perturbation and update temporaries are made one tensor at a time)."""
    width: int
    """Bytes per parameter in its dtype (2 for bfloat16, 4 for float32)."""

    @classmethod
    def of(cls, model) -> "ModelSize":
        """The size of `model` (a `torch.nn.Module`; parameters may be on the meta device)."""
        params = list(model.parameters())
        return cls(params=sum(p.numel() for p in params), largest=max(p.numel() for p in params),
                   width=params[0].element_size())


@dataclass(frozen=True)
class GPUMemory:
    """What `plan_placement` counts in bytes on every GPU of a plan (a driver whose model is on CUDA)."""

    size: ModelSize
    """The ES model (every copy is one of it)."""
    device_bytes: int
    """Memory of one GPU (every GPU of the cluster is taken to be the driver's kind)."""
    scoring: int = 0
    """Bytes of the centre's log-prob / entropy pass (`models.logprobs.logit_bytes`), on actor 0's GPU."""
    noise_buffers: int = 0
    """Bytes of one noise draw's chunk temporaries (`es.noise.COUNTER_BUFFER_BYTES`), once per process that draws
    (the driver, each replica, each vLLM engine): the CUDA caching allocator keeps them reserved after the draw."""


def driver_bytes(size: ModelSize) -> int:
    """The driver at its peak: its model, theta_0 (the drift's reference), one tensor's update temporaries (the
    float32 accumulator and noise of `es.noise.apply_update`)."""
    return 2 * size.params * size.width + 8 * size.largest


def replica_bytes(size: ModelSize, engine: str = "local") -> int:
    """One actor's copies at their peak, its engine's share apart: the replica's weights; the fix-up list of a
    perturbed member (`es.noise`: at most one copy of the weights); one tensor's perturbation temporaries (its float32
    noise, the original bits and the round-trip copy); one tensor's update temporaries (8 bytes per element, as the
    driver's). With engine "local" one process does both, its temporaries reused (the larger counts); with "vllm"
    the member is perturbed inside the engine's process and the update replayed in the replica's, each keeping its
    own."""
    perturb, update = size.largest * (4 + 2 * size.width), 8 * size.largest
    temporaries = perturb + update if engine == "vllm" else max(perturb, update)
    return 2 * size.params * size.width + temporaries


def actors_by_gpu(*, workers: int, gpus_per_worker: float, gpus_total: float, driver_share: float) -> list[int]:
    """How many actors hold their model on each GPU, in Ray's PACK order: for g <= 1, GPU 0 (the driver's when
    `driver_share` > 0) floor((1 - driver_share) / g) of them and every other GPU floor(1 / g); an actor of g > 1
    GPUs holds its model on the first of its ceil(g) whole GPUs (none on a GPU the driver shares); none for g = 0
    (CPU actors)."""
    counts, left = [0] * max(int(math.floor(gpus_total + 1e-9)), 1), workers
    if gpus_per_worker > 1:
        k, start = math.ceil(gpus_per_worker - 1e-9), int(driver_share > 0)
        for i in range(start, len(counts) - k + 1, k):
            counts[i], left = min(left, 1), left - min(left, 1)
    elif gpus_per_worker > 0:
        for i in range(len(counts)):
            room = 1 - driver_share if i == 0 else 1.0
            counts[i] = min(left, int(math.floor(room / gpus_per_worker + 1e-9)))
            left -= counts[i]
    return counts


def gpu_commitments(memory: GPUMemory, *, workers: int, gpus_per_worker: float, gpus_total: float,
                    driver_share: float, engine: str, engine_share: float | None) -> list[dict[str, int]]:
    """{term: bytes} each GPU holds at once, by GPU index (`actors_by_gpu`): the driver (GPU 0, when
    `driver_share` > 0), its actors' replicas (`replica_bytes`) and vLLM engines (each `engine_share` of the
    device; the engine's weights and KV cache are inside it), the noise draws' chunk buffers of every process that
    draws there, and the centre's scoring pass on actor 0's GPU."""
    counts = actors_by_gpu(workers=workers, gpus_per_worker=gpus_per_worker, gpus_total=gpus_total,
                           driver_share=driver_share)
    first = next((i for i, n in enumerate(counts) if n), None)  # actor 0's GPU
    out = []
    for i, n in enumerate(counts):
        driver = i == 0 and driver_share > 0
        drawing = int(driver) + n * (2 if engine == "vllm" else 1)
        out.append({"driver": driver_bytes(memory.size) if driver else 0,
                    "replicas": n * replica_bytes(memory.size, engine),
                    "engines": int(n * (engine_share or 0.0) * memory.device_bytes),
                    "noise": drawing * memory.noise_buffers, "scoring": memory.scoring if i == first else 0})
    return out


def check_gpu_commitments(commitments: list[dict[str, int]], device_bytes: int) -> None:
    """ValueError, one line naming the first over-committed GPU, its need (by term) and its capacity, when any of
    `commitments` (`gpu_commitments`) exceeds `device_bytes`."""
    for gpu, terms in enumerate(commitments):
        total = sum(terms.values())
        if total <= device_bytes:
            continue
        parts = ", ".join(f"{k} {v / GIB:.1f}" for k, v in terms.items() if v)
        raise ValueError(f"RayBackend: GPU {gpu} would hold {total / GIB:.1f} GiB ({parts}) of its "
                         f"{device_bytes / GIB:.1f} GiB: lower workers or gpu_memory_utilization, raise "
                         f"gpus_per_worker, or add GPUs")
