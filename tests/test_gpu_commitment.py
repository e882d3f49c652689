"""What every GPU holds at once under ES on Ray (models.placement.gpu_commitments) and `plan_placement`'s one-line
refusal of a plan that over-commits one, by hand and at Qwen2.5's 3B and 7B sizes on 8 x 80 GiB (no GPU: the byte
counts only, every number below computed by hand from the sizes)."""

from __future__ import annotations

import pytest
import torch

from esreason_lib.es.noise import COUNTER_BUFFER_BYTES, COUNTER_CHUNK
from esreason_lib.models.logprobs import SCORING, logit_bytes
from esreason_lib.models.placement import (
    GIB,
    GPUMemory,
    ModelSize,
    actors_by_gpu,
    check_gpu_commitments,
    driver_bytes,
    gpu_commitments,
    plan_placement,
    replica_bytes,
)

QWEN_3B = ModelSize(params=3_085_938_688, largest=151_936 * 2048, width=2)  # tied embeddings
QWEN_7B = ModelSize(params=7_615_616_512, largest=152_064 * 3584, width=2)  # 544,997,376 elements in lm_head
GPU_80 = 80 * GIB  # 85,899,345,920 bytes
EIGHT = {"CPU": 64, "GPU": 8}


def test_bytes_by_hand():
    size = ModelSize(params=1000, largest=100, width=2)
    assert driver_bytes(size) == 2 * 1000 * 2 + 8 * 100 == 4800
    assert replica_bytes(size) == 2 * 1000 * 2 + max(100 * (4 + 2 * 2), 8 * 100) == 4800  # one process: the larger
    assert replica_bytes(size, "vllm") == 4000 + 800 + 800 == 5600  # perturbed in the engine, updated in the replica
    assert replica_bytes(ModelSize(params=1000, largest=100, width=4)) == 8000 + 100 * 12  # fp32: perturbation larger
    assert COUNTER_BUFFER_BYTES == 28 * COUNTER_CHUNK == 117_440_512  # 112 MiB per drawing process
    memory = GPUMemory(size, device_bytes=100_000, scoring=50, noise_buffers=7)
    two_gpus = gpu_commitments(memory, workers=3, gpus_per_worker=0.5, gpus_total=2, driver_share=0.1,
                               engine="vllm", engine_share=0.2)
    assert two_gpus == [  # GPU 0: the driver and floor(0.9 / 0.5) = 1 actor; GPU 1: 2 actors
        {"driver": 4800, "replicas": 5600, "engines": 20_000, "noise": 7 * 3, "scoring": 50},
        {"driver": 0, "replicas": 11_200, "engines": 40_000, "noise": 7 * 4, "scoring": 0}]
    check_gpu_commitments(two_gpus, 51_228)  # GPU 1 exactly full fits
    with pytest.raises(ValueError, match=r"^RayBackend: GPU 1 would hold 0\.0 GiB \(replicas 0\.0, engines 0\.0, "
                                         r"noise 0\.0\) of its 0\.0 GiB: lower workers or gpu_memory_utilization, "
                                         r"raise gpus_per_worker, or add GPUs$"):
        check_gpu_commitments(two_gpus, 51_227)


def test_actors_by_gpu_follows_rays_packing():
    common = dict(gpus_total=4)
    assert actors_by_gpu(workers=8, gpus_per_worker=0.25, driver_share=0.2, **common) == [3, 4, 1, 0]
    assert actors_by_gpu(workers=4, gpus_per_worker=0.8, driver_share=0.2, **common) == [1, 1, 1, 1]
    assert actors_by_gpu(workers=3, gpus_per_worker=1.0, driver_share=0.2, **common) == [0, 1, 1, 1]
    assert actors_by_gpu(workers=2, gpus_per_worker=2.0, driver_share=0.0, **common) == [1, 0, 1, 0]
    assert actors_by_gpu(workers=1, gpus_per_worker=2.0, driver_share=0.2, **common) == [0, 1, 0, 0]
    assert actors_by_gpu(workers=4, gpus_per_worker=0.0, driver_share=0.2, **common) == [0, 0, 0, 0]


def test_model_size_of_a_meta_model():
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Linear(6, 2, bias=False)).to(torch.bfloat16)
    assert ModelSize.of(model) == ModelSize(params=4 * 6 + 6 + 6 * 2, largest=24, width=2)


def _memory(size: ModelSize) -> GPUMemory:
    """paper-easy's centre (64 prompts, 2048 new tokens) on 80 GiB GPUs."""
    scoring = logit_bytes(SCORING, rows=64, positions=2048, vocab=152_064)
    assert scoring == 16 * 256 * 16_384 * 14 == 939_524_096  # the bounded pass: 0.875 GiB
    return GPUMemory(size, device_bytes=GPU_80, scoring=scoring, noise_buffers=COUNTER_BUFFER_BYTES)


def test_seven_b_on_eight_80_gib_gpus():
    """7B bf16, ray-vllm, the driver holding 0.2 of GPU 0: the default plan (8 actors, 0.8 GPU each, engines at
    0.5) puts actor 0's replica and engine beside the driver and is refused on GPU 0; 7 actors of one whole GPU
    each leave GPU 0 to the driver and fit everywhere, and a larger engine share is refused on actor 0's GPU."""
    memory = _memory(QWEN_7B)
    assert driver_bytes(QWEN_7B) == 2 * 7_615_616_512 * 2 + 8 * 544_997_376 == 34_822_445_056  # 32.4 GiB
    assert replica_bytes(QWEN_7B, "vllm") == 30_462_466_048 + 16 * 544_997_376 == 39_182_424_064  # 36.5 GiB
    base = dict(cpus_per_worker=1, cuda=True, engine="vllm", memory_share=None, resources=EIGHT, driver_share=0.2)
    assert plan_placement(workers=8, gpus_per_worker=None, **base) == (0.8, 0.5)  # without the byte count
    gpu0 = 34_822_445_056 + 39_182_424_064 + GPU_80 // 2 + 3 * 117_440_512 + 939_524_096
    assert gpu0 == 118_246_387_712  # 110.1 GiB of 80
    with pytest.raises(ValueError, match=r"^RayBackend: GPU 0 would hold 110\.1 GiB \(driver 32\.4, replicas 36\.5, "
                                         r"engines 40\.0, noise 0\.3, scoring 0\.9\) of its 80\.0 GiB"):
        plan_placement(workers=8, gpus_per_worker=None, memory=memory, **base)
    assert plan_placement(workers=7, gpus_per_worker=1.0, memory=memory, **base) == (1.0, 0.5)
    per_gpu = gpu_commitments(memory, workers=7, gpus_per_worker=1.0, gpus_total=8, driver_share=0.2,
                              engine="vllm", engine_share=0.5)
    assert sum(per_gpu[0].values()) == 34_822_445_056 + 117_440_512  # the driver alone: 32.5 GiB
    assert sum(per_gpu[1].values()) == 39_182_424_064 + GPU_80 // 2 + 2 * 117_440_512 + 939_524_096  # 77.6 GiB
    assert sum(per_gpu[1].values()) == 83_306_502_144 <= GPU_80
    assert all(sum(t.values()) == 82_366_978_048 for t in per_gpu[2:])  # 76.7 GiB: no centre there
    assert 39_182_424_064 + int(0.6 * GPU_80) + 2 * 117_440_512 + 939_524_096 == 91_896_436_736  # 85.6 GiB
    with pytest.raises(ValueError, match=r"^RayBackend: GPU 1 would hold 85\.6 GiB \(replicas 36\.5, engines 48\.0, "
                                         r"noise 0\.2, scoring 0\.9\) of its 80\.0 GiB"):
        plan_placement(workers=7, gpus_per_worker=1.0, memory=memory, **{**base, "memory_share": 0.6})


def test_three_b_fits_the_default_plan_on_eight_80_gib_gpus():
    memory = _memory(QWEN_3B)
    base = dict(cpus_per_worker=1, cuda=True, engine="vllm", memory_share=None, resources=EIGHT, driver_share=0.1)
    assert plan_placement(workers=8, gpus_per_worker=None, memory=memory, **base) == (0.9, 0.5)
    per_gpu = gpu_commitments(memory, workers=8, gpus_per_worker=0.9, gpus_total=8, driver_share=0.1,
                              engine="vllm", engine_share=0.5)
    gpu0 = (2 * 3_085_938_688 * 2 + 8 * 311_164_928) + (2 * 3_085_938_688 * 2 + 16 * 311_164_928) + GPU_80 // 2 \
        + 3 * 117_440_512 + 939_524_096
    assert sum(per_gpu[0].values()) == gpu0 == 76_396_986_368  # 71.2 GiB of 80
