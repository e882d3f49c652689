"""A Ray replica as its actor builds and updates it, in-process (no Ray cluster): built on the meta device from the
driver's tensors (`models.weights.materialise`: equal to the driver, no random initialisation on a real device),
and under `ray-vllm` its update drawn once per member (the engine copies the updated replica instead of replaying
the update: counted with tests/test_es_vllm_center.py's stand-in engine)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from test_es_vllm_center import CFG, Engine, vllm_backend  # noqa: F401  (the stand-in vLLM fixture)
from toy_tasks import Graded

from esreason_lib.es.backends.ray_replica import Replica
from esreason_lib.es.core import ES
from esreason_lib.models.weights import load_module_state, materialise, module_state, weights_fingerprint
from esreason_lib.models.zoo import build_char_tokenizer, init_qwen2, qwen2_config, tiny_random_qwen2


def _tied(vocab: int):
    """A tiny Qwen2 whose head is its embedding (as Qwen2.5-1.5B's and 3B's)."""
    config = qwen2_config(vocab, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64,
                          max_position_embeddings=64, tie_word_embeddings=True)
    return init_qwen2(config, 3).eval()


def _real_inits(monkeypatch, model_class) -> list[str]:
    """Records the device of every module `model_class._init_weights` initialises off the meta device."""
    seen, original = [], model_class._init_weights

    def recording(self, module):
        seen.extend(t.device.type for t in (*module.parameters(recurse=False), *module.buffers(recurse=False))
                    if t.device.type != "meta")
        return original(self, module)

    monkeypatch.setattr(model_class, "_init_weights", recording)
    return seen


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_replica_is_the_drivers_tensors_and_no_random_init_runs(monkeypatch, dtype):
    vocab = len(build_char_tokenizer())
    for driver in (tiny_random_qwen2(vocab, seed=0).to(dtype), _tied(vocab).to(dtype)):
        model_class = type(driver)
        seen = _real_inits(monkeypatch, model_class)
        model_class(driver.config)  # the control: the old build initialises every module on the host
        assert seen and set(seen) == {"cpu"}
        seen.clear()
        replica = materialise(model_class, driver.config, module_state(driver), dtype=dtype, device="cpu")
        assert seen == []  # nothing initialised on a real device
        assert weights_fingerprint(replica) == weights_fingerprint(driver)
        assert all(torch.equal(b, dict(driver.named_buffers())[k]) for k, b in replica.named_buffers())
        x = torch.tensor([[1, 5, 9, 2]])
        assert torch.equal(replica(x).logits, driver(x).logits)
        if driver.config.tie_word_embeddings:  # tied again: one tensor, as in the driver
            assert replica.lm_head.weight.data_ptr() == replica.model.embed_tokens.weight.data_ptr()
        assert not replica.training


def test_a_state_without_the_buffers_is_refused_and_load_overwrites():
    driver = tiny_random_qwen2(len(build_char_tokenizer()), seed=0)
    with pytest.raises(KeyError, match=r"materialise: state lacks the buffers \['model.rotary_emb.inv_freq'"):
        materialise(type(driver), driver.config, driver.state_dict(), dtype=torch.float32, device="cpu")
    other = tiny_random_qwen2(len(build_char_tokenizer()), seed=1)
    load_module_state(other, module_state(driver))
    assert weights_fingerprint(other) == weights_fingerprint(driver)
    with pytest.raises(KeyError, match="'model.nothing.here' is neither"):
        load_module_state(other, {**module_state(driver), "model.nothing.here": torch.zeros(1)})


def test_ray_vllm_draws_each_members_update_once_per_actor(vllm_backend, monkeypatch):  # noqa: F811
    """One actor's replica with its (stand-in) engine over three iterations: the centre, the members one per call,
    then the driver's tell replayed on the replica (what `RayBackend._sync` runs on every actor). Noise draws are
    counted per tensor: the replica's replay draws what the driver's tell drew, and the engine's sync draws nothing
    (it used to replay the update too: every member's noise drawn twice per actor and iteration). The engine
    still equals the driver bit for bit, and the members' rewards equal the in-process backend's."""
    import esreason_lib.es.noise as noise
    from esreason_lib.es.backends.sequential import SequentialBackend

    draws = []
    real = noise.standard_normal
    monkeypatch.setattr(noise, "standard_normal", lambda *a, **kw: draws.append(1) or real(*a, **kw))
    tok, task = build_char_tokenizer(), Graded()
    driver = tiny_random_qwen2(len(tok), seed=0)
    config = dataclasses.replace(CFG, backend="ray-vllm")
    replica = Replica(type(driver), driver.config, torch.float32, "cpu", module_state(driver), tok, task, config, None,
                      engine="vllm")
    local = SequentialBackend.from_config(config, task, tok)
    es, examples = ES(config, driver), task.examples("train", n=3, seed=0)
    told, synced, last = [], [], None
    for it in range(3):
        if last is not None:
            before = len(draws)
            replica.tell(*last)
            told.append(len(draws) - before)
        before = len(draws)
        replica.score_center(examples, it)  # the engine's sync happens here, at the iteration's first call
        synced.append(len(draws) - before)
        pop = es.ask()
        rewards = np.array([replica.evaluate(s, g, pop.sigma, examples, it)[0]
                            for s, g in zip(pop.seeds.tolist(), pop.signs.tolist())])
        np.testing.assert_array_equal(rewards, local(driver, pop, examples, iteration=it).rewards)
        before = len(draws)
        es.tell(pop, rewards)
        driver_told, last = len(draws) - before, (pop, rewards)
        assert weights_fingerprint(Engine.made[0].model) != weights_fingerprint(driver)  # the driver moved alone
    tensors = len(dict(driver.named_parameters()))
    assert driver_told > 0 and driver_told % tensors == 0  # one draw per tensor of each member seed told
    assert told == [driver_told, driver_told]  # the actor draws the update once, as the driver does
    assert synced == [0, 0, 0]  # the engine copies the updated replica: no noise drawn again
    replica.tell(*last)
    replica.score_center(examples, 3)
    (engine,) = Engine.made
    assert weights_fingerprint(engine.model) == weights_fingerprint(replica.model) == weights_fingerprint(driver)
