"""What one GPU holds at once under ES on Ray (models.placement.gpu_commitment) and the one-line refusal of a plan
that over-commits it, by hand and at Qwen2.5's 1.5B and 7B sizes (no GPU: the byte counts only)."""

from __future__ import annotations

import pytest
import torch

from esreason_lib.models.placement import (
    GIB,
    ModelSize,
    check_gpu_commitment,
    driver_bytes,
    driver_gpu_commitment,
    gpu_commitment,
    replica_bytes,
)

QWEN_1P5B = ModelSize(params=1_543_714_304, largest=151_936 * 1536, width=2)
QWEN_7B = ModelSize(params=7_615_616_512, largest=152_064 * 3584, width=2)
H100 = 80 * 10**9


def test_bytes_by_hand():
    size = ModelSize(params=1000, largest=100, width=2)
    assert replica_bytes(size) == 2 * 1000 * 2 + 100 * (4 + 2 * 2) == 4800
    assert driver_bytes(size, scoring=50) == 2 * 1000 * 2 + 8 * 100 + 50 == 4850
    assert gpu_commitment(size, actors=3, engine_share=0.1, device_bytes=10_000, driver=True, scoring=50) == {
        "driver": 4800, "replicas": 14_400, "engines": 3000, "scoring": 50}
    assert gpu_commitment(size, actors=2, engine_share=None, device_bytes=10_000, driver=False)["engines"] == 0
    common = dict(driver_share=0.1, engine_share=None, device_bytes=10_000)
    assert driver_gpu_commitment(size, workers=8, gpus_per_worker=0.25, **common)["replicas"] == 3 * 4800
    assert driver_gpu_commitment(size, workers=2, gpus_per_worker=0.25, **common)["replicas"] == 2 * 4800
    assert driver_gpu_commitment(size, workers=8, gpus_per_worker=1.0, **common)["replicas"] == 0
    check_gpu_commitment({"driver": 6000, "replicas": 4000}, 10_000)  # exactly full fits
    with pytest.raises(ValueError, match=r"^RayBackend: GPU 3 would hold 0\.0 GiB \(driver 0\.0, replicas 0\.0\) of "
                                         r"its 0\.0 GiB: lower workers or gpu_memory_utilization, or add GPUs$"):
        check_gpu_commitment({"driver": 6000, "replicas": 4001, "engines": 0}, 10_000, gpu=3)


def test_model_size_of_a_meta_model():
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Linear(6, 2, bias=False)).to(torch.bfloat16)
    assert ModelSize.of(model) == ModelSize(params=4 * 6 + 6 + 6 * 2, largest=24, width=2)


def test_seven_b_replicas_sharing_the_drivers_gpu_are_refused_and_one_and_a_half_b_fits():
    eight_on_one = driver_gpu_commitment(QWEN_7B, workers=8, gpus_per_worker=0.1, driver_share=0.2,
                                         engine_share=0.05, device_bytes=H100)
    assert eight_on_one["replicas"] == 8 * replica_bytes(QWEN_7B)  # 8 x ~31 GB: every resident copy counted
    with pytest.raises(ValueError, match=r"RayBackend: GPU 0 would hold 321\.7 GiB \(driver 32\.4, replicas 259\.4, "
                                         r"engines 29\.8\) of its 74\.5 GiB"):
        check_gpu_commitment(eight_on_one, H100)
    one_beside = driver_gpu_commitment(QWEN_1P5B, workers=8, gpus_per_worker=0.5, driver_share=0.2,
                                       engine_share=0.25, device_bytes=H100)
    assert sum(one_beside.values()) / GIB < 40
    check_gpu_commitment(one_beside, H100)
