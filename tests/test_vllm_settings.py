"""The vLLM engine's context length without vLLM: `vllm_settings.engine_max_model_len` by hand, the paper presets'
budgets, and `VLLMRollouts` sizing its engine for the largest budget asked so far (a stand-in `Engine`; the engine
itself: tests/vllm_parity, `make test-vllm`)."""

from __future__ import annotations

import sys
import types

import pytest

from esreason_lib.models.generation import Sampling
from esreason_lib.models.vllm_settings import PROMPT_TOKENS, engine_max_model_len


def test_context_is_the_prompt_budget_plus_the_new_tokens_within_the_models_positions():
    assert PROMPT_TOKENS == 2048
    assert engine_max_model_len(2048, 32_768) == 4096  # the artifact's Qwen2.5-1.5B engines
    assert engine_max_model_len(4096, 131_072) == 6144  # paper-hard's budget on DeepSeek-R1-Distill-Qwen-1.5B
    assert engine_max_model_len(32, 64) == 64  # a zoo model: its positions, vLLM's own default
    assert engine_max_model_len(1, None) == 2049
    for bad in (0, -1, 2.0, True, None):
        with pytest.raises(ValueError, match=rf"max_new_tokens must be a positive int, got {bad!r}"):
            engine_max_model_len(bad, 64)
    with pytest.raises(ValueError, match="max_positions must be a positive int, got 0"):
        engine_max_model_len(8, 0)


def test_paper_easy_engines_get_the_artifacts_context():
    from esreason_lib.paper.studies.presets import get_preset

    easy = get_preset("paper-easy")
    budgets = {easy.es.max_new_tokens, easy.grpo.max_new_tokens, easy.eval.max_new_tokens}
    assert budgets == {2048} and engine_max_model_len(2048, 32_768) == 4096  # configs/easy_qwen25_1p5b.yaml


class _Engine:
    """`vllm_engine.Engine`'s interface, recording how it was started; generates nothing."""

    made: list = []

    def __init__(self, model, tokenizer, *, seed, prefix_caching=False, max_new_tokens=None, sleep_mode=False,
                 engine_kwargs=None):
        self.max_new_tokens, self.sleep_mode, self.loads, self.closed = max_new_tokens, sleep_mode, 0, False
        self.events: list[str] = []
        _Engine.made.append(self)

    def load(self, model):
        self.loads += 1
        self.events.append("load")

    def sleep(self):
        self.events.append("sleep")

    def wake(self):
        self.events.append("wake")

    def check(self, model, where):
        pass

    def generate(self, rows, params):
        self.events.append("generate")
        return [types.SimpleNamespace(outputs=[types.SimpleNamespace(token_ids=[1])]) for _ in rows]  # EOS at once

    def close(self):
        self.closed = True


@pytest.fixture
def standin(monkeypatch):
    """A tiny model and its tokenizer, with `vllm` and `vllm_engine.Engine` replaced by stand-ins."""
    from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(SamplingParams=lambda **kw: kw))
    monkeypatch.setitem(sys.modules, "esreason_lib.models.vllm_engine", types.SimpleNamespace(Engine=_Engine))
    _Engine.made.clear()
    tok = build_char_tokenizer()
    return tiny_random_qwen2(len(tok), seed=0), tok


def test_rollouts_size_the_engine_for_the_first_calls_budget(standin):
    from esreason_lib.models.rollouts_vllm import VLLMRollouts

    model, tok = standin
    sampler = VLLMRollouts()
    ro = sampler(model, tok, ["1+2=", "3"], Sampling(max_new_tokens=12), n=2)
    assert ro.completions == ["", "", "", ""] and sampler.max_new_tokens == 12
    sampler(model, tok, ["1"], Sampling(max_new_tokens=5))  # a smaller budget fits the context
    (engine,) = _Engine.made
    assert engine.max_new_tokens == 12 and engine.loads == 1 and not engine.closed
    sampler(model, tok, ["1"], Sampling(max_new_tokens=13))  # too long for it: a new engine, sized anew
    assert engine.closed and [e.max_new_tokens for e in _Engine.made] == [12, 13] and sampler.max_new_tokens == 13
    sampler.close()
    assert _Engine.made[1].closed and sampler.max_new_tokens is None


def test_a_sleeping_engine_sleeps_after_drawing_and_wakes_before_the_weight_copy(standin):
    """`GRPOConfig.engine_sleep` reaches the rollout engine: it starts in sleep mode, sleeps as soon as its tokens
    are drawn (the entropy pass and the update then have its memory) and wakes before the next weight copy."""
    from esreason_lib.grpo.config import GRPOConfig
    from esreason_lib.grpo.loop import rollout_sampler

    model, tok = standin
    sampler = rollout_sampler(GRPOConfig(backend="vllm", engine_sleep=True))
    assert sampler.sleep
    for _ in range(2):
        sampler(model, tok, ["1+2="], Sampling(max_new_tokens=4), n=2)
    (engine,) = _Engine.made
    assert engine.sleep_mode and engine.events == ["generate", "sleep", "wake", "load", "generate", "sleep"]
    assert not rollout_sampler(GRPOConfig(backend="vllm")).sleep  # off by default
    with pytest.raises(ValueError, match="GRPOConfig.engine_sleep needs backend='vllm' .*, backend is 'local'"):
        GRPOConfig(engine_sleep=True)
    from esreason_lib.store.identity import jsonable

    assert "engine_sleep" not in jsonable(GRPOConfig(backend="vllm"))  # stored runs keep their identity
