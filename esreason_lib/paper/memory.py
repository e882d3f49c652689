"""Peak memory of a training run, estimated from its config without loading its model: what `paper.plan.shard`
keeps apart, so that the two shards `make computed` trains side by side fit in the machine's memory together.

An estimate is copies of the weights times the model's size (`peak_memory_bytes`). The copies are calibrated on
the one measurement there is, of ES on the pretrained base `smollm2-135m` (134,515,008 float32 parameters, 0.54 GB
a copy) at population 8 on the 24 GB development machine: one run peaked at 12.7 GB of RSS on backend "fast" (and
12.7 GB on "native"), 2.4 GB on "sequential" (about twice as slow); two "fast" runs side by side did not fit (the
kernel's OOM killer killed one). GRPO on that base takes a few GB (not measured more closely).
"""

from __future__ import annotations

import functools
import os

from esreason_lib.es.config import ESConfig
from esreason_lib.grpo.config import GRPOConfig
from esreason_lib.training.settings import DTYPES

MEMBER_COPIES = {"batched": 1, "fast": 2, "native": 2}
"""ES backends that hold a copy of the weights per member (of every member at once, or of
`ESConfig.members_at_once` members), and how many copies per member: "batched" stacks the N
members' weights ([N, *shape] per tensor, `es.backends.batched.member_weights`); "fast" and "native" also fold
them into a second, fused and transposed, stack (`models.fused_qwen2.fused_weights`). "sequential" perturbs the
one model in place, the low-rank backend keeps the shared weights and each member's factors, and the Ray and vLLM
backends hold one replica per worker or engine: none of them holds a copy per member."""
ES_OVERHEAD_COPIES = 8
"""Copies an ES run on a `MEMBER_COPIES` backend holds beside its members' (the model, theta_0 for the drift, the
update's and the centre's scoring temporaries, the process itself, the allocator's slack): set so that "fast" at
N = 8 on `smollm2-135m` gives 2 x 8 + 8 = 24 copies = 12.9 GB, at or above the 12.7 GB measured."""
ES_COPIES = 5
"""Copies an ES run on any other backend holds (the measured 2.4 GB of "sequential" on `smollm2-135m` is 4.5
copies), plus two per Ray actor (its replica and a perturbed member's fix-up list, `models.placement.replica_bytes`)."""
GRPO_COPIES = 5
"""Copies a GRPO run holds in float32: the weights, their gradients, Adam's two moments and one more for the
update's activations and the process (not measured; 2.7 GB on `smollm2-135m`, within the "few GB" seen there),
plus one for the frozen reference model when `beta` > 0."""
HUB_PARAMETERS = {
    "Qwen/Qwen2.5-0.5B-Instruct": 494_032_768, "Qwen/Qwen2.5-1.5B-Instruct": 1_543_714_304,
    "Qwen/Qwen2.5-3B-Instruct": 3_085_938_688, "Qwen/Qwen2.5-7B-Instruct": 7_615_616_512,
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": 1_777_088_000,
}
"""Parameters of the hub bases the paper presets train (their checkpoints' counts, as their model cards round them:
0.49B, 1.54B, 3.09B, 7.61B, 1.78B), which cannot be counted here without downloading them."""
BUDGET_FRACTION = 0.8
"""Share of the machine's memory the runs trained side by side may take together (`memory_budget`)."""


@functools.cache
def model_parameters(name: str) -> int | None:
    """Parameters of the base `name` without loading its weights: a trained-here zoo base built on the meta device
    (`models.zoo.ZOO`), a pretrained base's count (`models.zoo.PRETRAINED_PARAMETERS`), a paper preset's hub base
    (`HUB_PARAMETERS`); None for any other (a local directory, another hub id)."""
    from esreason_lib.models.zoo import PRETRAINED_PARAMETERS, ZOO, build_char_tokenizer, num_parameters

    if name in ZOO:
        import torch

        with torch.device("meta"):
            return num_parameters(ZOO[name].build(len(build_char_tokenizer())))
    return PRETRAINED_PARAMETERS.get(name, HUB_PARAMETERS.get(name))


def weight_copies(config: ESConfig | GRPOConfig) -> float:
    """Copies of the weights `config`'s run holds at its peak (`MEMBER_COPIES`, `ES_OVERHEAD_COPIES`, `ES_COPIES`,
    `GRPO_COPIES`). Backend "auto" counts as "batched" for a greedy float32 run (what it picks for a Qwen2; the
    sequential path it takes for other architectures holds fewer); a member-copying backend holds the copies of
    `ESConfig.members_at_once` members at a time when that is set."""
    if isinstance(config, GRPOConfig):
        return GRPO_COPIES + (1 if config.beta > 0 else 0)
    backend = config.backend
    if backend == "auto":
        backend = "batched" if config.greedy and config.dtype == "float32" else "sequential"
    if config.noise == "full" and backend in MEMBER_COPIES:
        members = min(config.members_at_once or config.population_size, config.population_size)
        return MEMBER_COPIES[backend] * members + ES_OVERHEAD_COPIES
    return ES_COPIES + (2 * config.workers if backend in ("ray", "ray-vllm") else 0)


def peak_memory_bytes(config: ESConfig | GRPOConfig) -> int | None:
    """Estimated peak memory of training `config`: `weight_copies` x `model_parameters` x bytes per parameter (the
    config's dtype for ES; 4 for GRPO, whose optimiser keeps float32 weights and moments); None when the base's
    size is unknown. ES "fast" at N = 8 on `smollm2-135m`: 24 x 134,515,008 x 4 = 12.9 GB (12.7 GB measured)."""
    params = model_parameters(config.model)
    if params is None:
        return None
    width = 4 if isinstance(config, GRPOConfig) else DTYPES[config.dtype].itemsize
    return round(weight_copies(config) * params * width)


@functools.cache
def memory_budget(fraction: float = BUDGET_FRACTION) -> int:
    """`fraction` of this machine's physical memory in bytes (read once): 20.2 GB on the development machine (25.3 GB,
    the "24 GB" one)."""
    return int(fraction * os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
