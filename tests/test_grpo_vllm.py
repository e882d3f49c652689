"""GRPO's rollout seam without vLLM: `rollouts_from_tokens` rebuilds `generate`'s `Rollouts` from its tokens, and
`grpo_step` / `train_grpo` sample through whatever `rollout` they are given (the engine itself: tests/vllm_parity)."""

from __future__ import annotations

import pytest
import torch

from esreason_lib.grpo.config import GRPOConfig
from esreason_lib.grpo.loop import grpo_step, rollout_sampler
from esreason_lib.models.generation import Sampling, generate
from esreason_lib.models.logprobs import Chunks
from esreason_lib.models.rollouts_vllm import rollouts_from_tokens
from esreason_lib.store.identity import config_hash
from esreason_lib.tasks import get_task


def _tokens(ro) -> list[list[int]]:
    """[B] each row's generated tokens (what an engine returns)."""
    return [ids[mask].tolist() for ids, mask in zip(ro.completion_ids, ro.completion_mask)]


@pytest.mark.parametrize("greedy", [False, True])
def test_rollouts_from_tokens_equals_generates_rollouts(tiny, greedy):
    tok, make = tiny
    model = make()
    prompts = ["1 2>3=", "12+", "(", "7"]
    ro = generate(model, tok, prompts, Sampling(temperature=0.7, top_p=0.9, greedy=greedy, max_new_tokens=12), n=3,
                  stop="=", seed=5)
    assert {len(t) for t in _tokens(ro)} != {12}  # some rows stopped early (stop string or EOS): padding is tested
    got = rollouts_from_tokens(model, tok, prompts, 3, _tokens(ro), temperature=1.0 if greedy else 0.7, stop="=",
                               chunks=Chunks(rows=5, positions=4, vocab=7))
    assert got.prompts == ro.prompts and got.n == 3 and got.completions == ro.completions
    for name in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask"):
        assert torch.equal(getattr(got, name), getattr(ro, name)), name
    # the incremental KV-cache decode and one full forward agree up to float rounding
    torch.testing.assert_close(got.logprobs, ro.logprobs, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(got.entropies, ro.entropies, atol=2e-5, rtol=1e-5)


def test_rollouts_from_tokens_rejects_a_row_count_that_does_not_match(tiny):
    tok, make = tiny
    with pytest.raises(ValueError, match="completion_tokens: 3 rows for 2 prompts x n=2"):
        rollouts_from_tokens(make(), tok, ["1", "2"], 2, [[1], [2], [3]])


def test_grpo_step_samples_through_the_rollout_it_is_given(tiny):
    tok, make = tiny
    task = get_task("countdown")
    examples = task.examples("train", n=8, seed=0)
    prompts = [task.prompt(ex, tok) for ex in examples]
    config = GRPOConfig(model="tiny-random", task="countdown", group_size=2, prompts_per_step=2, beta=0.0,
                        max_new_tokens=8, seed=1)
    calls = []

    def through_tokens(model, tokenizer, prompts, sampling, **kw):  # an engine that returns generate's tokens
        calls.append((list(prompts), kw["n"], kw["seed"]))
        ro = generate(model, tokenizer, prompts, sampling, **kw)
        return rollouts_from_tokens(model, tokenizer, prompts, kw["n"], _tokens(ro),
                                    temperature=sampling.temperature, stop=kw["stop"])

    metrics = {}
    for rollout in (generate, through_tokens):
        model = make()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        metrics[rollout] = grpo_step(model, None, opt, tok, task, examples, prompts, config, 0, rollout=rollout)
    assert len(calls) == 1 and calls[0][1] == 2 and len(calls[0][0]) == 2
    a, b = metrics[generate], metrics[through_tokens]
    for key in ("reward/mean", "completion/length", "grpo/generations"):
        assert a[key] == b[key], key
    assert a["policy/entropy"] == pytest.approx(b["policy/entropy"], abs=1e-5)
    assert b["time/rollout_s"] <= b["time/step_s"]


def test_grpo_backend_field_keeps_the_local_runs_identity_and_is_checked():
    assert rollout_sampler(GRPOConfig()) is generate
    assert config_hash(GRPOConfig(backend="local")) == config_hash(GRPOConfig())  # stored runs keep their hash
    assert config_hash(GRPOConfig(backend="vllm")) != config_hash(GRPOConfig())  # other samples, another run
    with pytest.raises(ValueError, match=r"GRPOConfig.backend must be one of \('local', 'vllm'\), got 'ray'"):
        GRPOConfig(backend="ray")


def test_check_every_reaches_the_vllm_rollouts_and_leaves_the_identity():
    sampler = rollout_sampler(GRPOConfig(backend="vllm", check_every=5))  # the engine starts at the first call
    assert sampler.check_every == 5 and sampler.engine is None
    assert config_hash(GRPOConfig(check_every=5)) == config_hash(GRPOConfig())  # how often it is checked only
    with pytest.raises(ValueError, match="GRPOConfig.check_every must be a positive int"):
        GRPOConfig(check_every=0)
