"""models/placement and the RayBackend's resource check before any actor starts, against fake clusters
(`ray.cluster_resources` monkeypatched; no actor is started). The GPU placement itself needs a GPU: untested here."""

from __future__ import annotations

import dataclasses

import pytest

from esreason_lib.cli_settings import flag_overrides
from esreason_lib.es.config import ESConfig
from esreason_lib.grpo.config import GRPOConfig
from esreason_lib.models import placement
from esreason_lib.models.placement import actors_per_gpu, check_gpus_per_worker, check_memory_share, plan_placement
from esreason_lib.store.identity import canonical_config

ONE_GPU = {"CPU": 16.0, "GPU": 1.0}


def plan(**kw):
    base = dict(workers=8, cpus_per_worker=1.0, gpus_per_worker=None, cuda=True, engine="vllm", memory_share=None,
                resources=ONE_GPU)
    return plan_placement(**{**base, **kw})


def test_default_shares_one_gpu_among_all_workers():
    gpus, share = plan()
    assert gpus == 1 / 8 and share == placement.ENGINE_SHARE / 8
    assert plan(workers=2, resources={"CPU": 4, "GPU": 2}) == (1.0, placement.ENGINE_SHARE)
    assert plan(workers=3, resources={"CPU": 4, "GPU": 2})[0] == 0.5  # two per GPU
    assert plan(cuda=False, engine="local", workers=2) == (0.0, None)
    assert plan(cuda=False, workers=2) == (0.0, None)  # a CPU vLLM engine gets no GPU memory share


def test_shortfalls_fail_in_one_line_naming_the_knob():
    for kw, knob in (({"gpus_per_worker": 1.0}, "gpus_per_worker=1"),  # the old default: 8 whole GPUs on 1
                     ({"gpus_per_worker": 0.3, "workers": 4}, "gpus_per_worker=0.3"),  # 3 fit, not 4
                     ({"cpus_per_worker": 4.0}, "cpus_per_worker=4"),
                     ({"memory_share": 0.2}, "gpu_memory_utilization"),  # 8 x 0.2 of one GPU
                     ({"resources": {"CPU": 16.0}}, "0 GPUs")):
        with pytest.raises(ValueError, match=knob) as err:
            plan(**kw)
        assert "\n" not in str(err.value)


def test_fractions_pack_per_gpu():
    assert actors_per_gpu(0.125) == 8 and actors_per_gpu(1 / 3) == 3 and actors_per_gpu(0.3) == 3
    assert plan(gpus_per_worker=2.0, workers=2, resources={"CPU": 8, "GPU": 4}, engine="local") == (2.0, None)


def test_config_fields_are_checked_and_left_out_of_the_identity():
    check_gpus_per_worker("X", None)
    check_memory_share("X", 0.9)
    for bad in (0, -0.5, 1.5, "1"):
        with pytest.raises(ValueError, match="ESConfig.gpus_per_worker"):
            ESConfig(gpus_per_worker=bad)
    for bad in (0, 1.0, 2):
        with pytest.raises(ValueError, match="GRPOConfig.gpu_memory_utilization"):
            GRPOConfig(gpu_memory_utilization=bad)
    for cfg, names in ((ESConfig(), ("gpus_per_worker", "gpu_memory_utilization", "check_every")),
                       (GRPOConfig(), ("gpu_memory_utilization",))):
        assert not set(names) & set(canonical_config(cfg))  # execution settings: at any value
        assert not set(names) & set(canonical_config(dataclasses.replace(
            cfg, **{n: 0.25 if n != "check_every" else 5 for n in names})))


def test_cli_flags_become_settings():
    assert flag_overrides("es", gpus_per_worker=0.125, memory_share=0.06) == {
        "es": {"gpus_per_worker": 0.125, "gpu_memory_utilization": 0.06}}
    assert flag_overrides("grpo", memory_share=0.4) == {"grpo": {"gpu_memory_utilization": 0.4}}
    assert flag_overrides("sequence", gpus_per_worker=0.5, memory_share=0.2) == {
        "es": {"gpus_per_worker": 0.5, "gpu_memory_utilization": 0.2}, "grpo": {"gpu_memory_utilization": 0.2}}
    with pytest.raises(ValueError, match="--gpus-per-worker"):
        flag_overrides("grpo", gpus_per_worker=0.5)


def test_ray_backend_refuses_before_starting_actors(monkeypatch):
    ray = pytest.importorskip("ray")
    from esreason_lib.es.backends import ray_actors
    from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2

    started = []
    monkeypatch.setattr(ray, "put", lambda x: x)  # no cluster is started
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})
    monkeypatch.setattr(ray_actors.RayBackend, "_new_actor", lambda self, *a: started.append(a))
    tok = build_char_tokenizer()
    cfg = ESConfig(backend="ray", workers=8, gpus_per_worker=0.5)
    backend = ray_actors.RayBackend.from_config(cfg, None, tok, workers=cfg.workers)
    assert backend.gpus_per_worker == 0.5 and backend.check_every == cfg.check_every
    with pytest.raises(ValueError, match="workers=8 x cpus_per_worker=1 needs 8 CPUs, the Ray cluster has 2"):
        backend(tiny_random_qwen2(len(tok), seed=0), None, [], iteration=0)
    assert started == []
