"""The ES centre on the vLLM backend: `VLLMBackend.score_center` decodes the unperturbed model on the engine, so
`es_step` scores nothing with the library's own generation. Checked with a stand-in engine (a copy of the driver's
model decoded by `generate`, driven through the same RPCs as vLLM's worker); vLLM itself: tests/vllm_parity."""

from __future__ import annotations

import copy
import dataclasses
import importlib
import importlib.machinery
import sys
import types

import numpy as np
import pytest
import torch
from toy_tasks import Graded

from esreason_lib.es.config import ESConfig
from esreason_lib.es.loop import train_es
from esreason_lib.models.generation import Sampling, generate
from esreason_lib.models.weights import weights_fingerprint
from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2
from esreason_lib.params import named_params


class SamplingParams:
    """vLLM's `SamplingParams`: its keyword arguments as attributes."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


class Engine:
    """`vllm_engine.Engine`'s interface over a copy of the driver's model: `rpc` runs the `es_*` functions on a
    worker whose `es_views` are the copy's parameters, `generate` decodes every request in one `generate` batch
    (tokens with the EOS that stopped a row, as vLLM returns them)."""

    made: list = []

    def __init__(self, model, tokenizer, *, seed, prefix_caching=False, max_new_tokens=None, engine_kwargs=None):
        self.model, self.tokenizer, self.max_new_tokens = copy.deepcopy(model), tokenizer, max_new_tokens
        self.worker = types.SimpleNamespace(es_views=named_params(self.model))
        self.prompts: list[str] = []
        Engine.made.append(self)

    def rpc(self, method, *args):
        if method == "es_checksum":
            return weights_fingerprint(self.model)
        return method(self.worker, *args)

    def load(self, model):
        self.model.load_state_dict(model.state_dict())

    def check(self, model, where):
        assert weights_fingerprint(model) == weights_fingerprint(self.model), where

    def generate(self, rows, params):
        p = params[0]
        assert all((q.temperature, q.max_tokens) == (p.temperature, p.max_tokens) for q in params)
        texts = [self.tokenizer.decode(r) for r in rows]
        self.prompts += texts
        ro = generate(self.model, self.tokenizer, texts,
                      Sampling(greedy=p.temperature == 0.0, max_new_tokens=p.max_tokens))
        tokens = [ids[mask].tolist() for ids, mask in zip(ro.completion_ids, ro.completion_mask)]
        return [types.SimpleNamespace(outputs=[types.SimpleNamespace(text=t, token_ids=k)])
                for t, k in zip(ro.completions, tokens)]

    def close(self):
        pass


@pytest.fixture
def vllm_backend(monkeypatch):
    """`es.backends.vllm_engines.VLLMBackend` imported over the stand-in `vllm` and `Engine`."""
    return with_stand_in_vllm(monkeypatch, Engine).VLLMBackend


def with_stand_in_vllm(monkeypatch, engine: type):
    """`es.backends.vllm_engines` imported anew over a stand-in `vllm` module and `models.vllm_engine.Engine` =
    `engine`; every replaced module is restored (or dropped) when the test ends."""
    vllm = types.ModuleType("vllm")  # found by the trainer's check for the extra
    vllm.__spec__ = importlib.machinery.ModuleSpec("vllm", None, origin=__file__)
    vllm.SamplingParams = SamplingParams
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "esreason_lib.models.vllm_engine", types.SimpleNamespace(Engine=engine))
    # recorded, then removed: imported anew over the stand-ins, and restored (or dropped) when the test ends
    monkeypatch.setitem(sys.modules, "esreason_lib.es.backends.vllm_engines", None)
    del sys.modules["esreason_lib.es.backends.vllm_engines"]
    Engine.made.clear()
    return importlib.import_module("esreason_lib.es.backends.vllm_engines")


CFG = ESConfig(model="tiny-random", task="graded", population_size=4, sigma=0.05, alpha=0.05, iterations=3,
               prompts_per_step=3, antithetic=True, checkpoint_every=0, device="cpu", seed=0, backend="sequential")


def test_the_centre_is_decoded_by_the_engine_and_equals_the_local_centre(vllm_backend, monkeypatch, tmp_path):
    tok, task = build_char_tokenizer(), Graded()
    local_model, engine_model = (tiny_random_qwen2(len(tok), seed=0) for _ in range(2))
    local = train_es(CFG, model=local_model, tokenizer=tok, task=task, home=tmp_path / "local", progress=False)

    def no_local_centre(*args, **kwargs):
        raise AssertionError("the centre was decoded with the library's generation")

    monkeypatch.setattr("esreason_lib.es.loop.score_center", no_local_centre)
    config = dataclasses.replace(CFG, backend="vllm")
    backend = vllm_backend(config, task, tok, check_every=1)
    run = train_es(config, model=engine_model, tokenizer=tok, task=task, backend=backend, home=tmp_path / "vllm",
                   progress=False)
    a, b = local.metrics(), run.metrics()
    for key in ("reward/center", "reward/mean", "reward/std", "es/update_norm"):
        assert a[key].tolist() == b[key].tolist(), key
    assert (a["reward/std"] > 0).all()  # the members differ: the updates moved theta
    # the entropy comes from one forward over the engine's tokens, not the incremental decode: equal to rounding
    np.testing.assert_allclose(b["policy/entropy"], a["policy/entropy"], rtol=1e-5)
    assert all(torch.equal(v, engine_model.state_dict()[k]) for k, v in local_model.state_dict().items())
    (engine,) = Engine.made
    assert engine.max_new_tokens == task.max_new_tokens  # the context is sized for the run's budget
    # per iteration: the centre's 3 prompts, then 4 members x 3 prompts, all on the engine
    assert len(engine.prompts) == 3 * (3 + 4 * 3)
    assert (b["time/centre_s"] >= 0).all() and (b["time/sync_s"] >= 0).all()
