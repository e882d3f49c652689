"""GRPO's speed options (issue 34): `GRPOConfig.shared_prompts` (each prompt forwarded once in the update) gives the
update of the full forward up to float rounding, alone and beside the fused / native rollouts."""

from __future__ import annotations

import copy

import pytest
import torch

from esreason_lib.grpo.config import GRPOConfig
from esreason_lib.grpo.logprobs import shared_prompt_logprobs
from esreason_lib.models.generation import Sampling, completion_logprobs, generate
from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def rollout():
    """Three left-padded prompts of different lengths (one given twice), three samples each."""
    tok = build_char_tokenizer()
    model = tiny_random_qwen2(len(tok), seed=0)
    ro = generate(model, tok, ["12+3=", "A longer prompt>", "12+3=", "7>"], Sampling(max_new_tokens=9), n=3, seed=1)
    return model, ro


def test_shared_prompt_logprobs_equal_the_full_forward_with_gradients(rollout):
    model, ro = rollout
    args = (ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
    full, _ = completion_logprobs(model, *args, temperature=0.7)
    weights = torch.linspace(-1, 1, full.numel()).view(full.shape)  # [B, Lc] every token's own weight
    (full * weights).sum().backward()
    want = {k: p.grad.clone() for k, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    got = shared_prompt_logprobs(model, *args, temperature=0.7)
    (got * weights).sum().backward()
    torch.testing.assert_close(got, full, rtol=1e-5, atol=1e-5)
    assert (got[~ro.completion_mask] == 0).all()
    for k, p in model.named_parameters():
        torch.testing.assert_close(p.grad, want[k], rtol=1e-4, atol=1e-6, msg=k)
    model.zero_grad(set_to_none=True)
    one = shared_prompt_logprobs(model, ro.prompt_ids[:1], ro.prompt_mask[:1], ro.completion_ids[:1, :1],
                                 ro.completion_mask[:1, :1], temperature=0.7)  # one completion token: prompt only
    torch.testing.assert_close(one, full[:1, :1].detach(), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="temperature must be > 0, got 0"):
        shared_prompt_logprobs(model, *args, temperature=0)


def _two_iterations(**kw):
    """The weights and metrics after GRPO iterations 0 and 1 on the GRPO tests' sanity objective, stepped by SGD
    (lr 1: each step adds the clipped gradient, so the weights carry the gradients' rounding as it is; AdamW's
    normalisation would blow the rounding of a gradient that is 0 in exact arithmetic, e.g. a key bias's, up to a
    step of ~lr)."""
    from test_grpo import paren_config  # noqa: PLC0415 - the GRPO tests' config on the sanity objective
    from toy_tasks import ParenTask  # noqa: PLC0415

    from esreason_lib.grpo.loop import grpo_step, rollout_sampler

    tok = build_char_tokenizer()
    model, task, cfg = tiny_random_qwen2(len(tok), seed=0), ParenTask(), paren_config(**kw)
    ex = task.examples("train")
    ref = copy.deepcopy(model).requires_grad_(False) if cfg.beta > 0 else None
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    metrics = [grpo_step(model, ref, opt, tok, task, ex, [task.prompt(e) for e in ex], cfg, it,
                         rollout=rollout_sampler(cfg)) for it in (0, 1)]
    return {k: v.detach().clone() for k, v in model.named_parameters()}, metrics


@pytest.mark.parametrize("kw", [dict(beta=0.0), dict(beta=0.04, minibatch_size=2, ppo_epochs=2),
                                dict(beta=0.0, forward="native")])
def test_shared_prompts_give_the_same_weights_after_two_iterations(kw):
    """Two iterations with `shared_prompts` end at the weights of the full forward to float32 tolerance: on-policy
    (beta 0, one step), with the reference model, the old policy's forward and off-policy epochs in play, and
    beside native rollouts."""
    want, m_want = _two_iterations(**kw)
    got, m_got = _two_iterations(shared_prompts=True, **kw)
    assert any(not torch.equal(got[k], want[k]) for k in want)  # the other path ran: it rounds differently
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-5, atol=1e-6, msg=k)
    for a, b in zip(m_want, m_got):
        assert a["reward/mean"] == b["reward/mean"]
        for key in ("loss/policy", "policy/grad_norm"):
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-7), key


def test_shared_prompts_config_checks():
    assert GRPOConfig().shared_prompts is False
    for other in ({"gradient_checkpointing": True}, {"logit_chunk": 8}):
        with pytest.raises(ValueError, match=r"GRPOConfig\.shared_prompts must be False with gradient_checkpointing"):
            GRPOConfig(shared_prompts=True, **other)
    with pytest.raises(ValueError, match=r"GRPOConfig\.shared_prompts"):
        GRPOConfig(shared_prompts=1)


def test_shared_prompts_default_leaves_the_identity():
    from esreason_lib.store.identity import canonical_config, config_hash

    assert "shared_prompts" not in canonical_config(GRPOConfig())
    assert canonical_config(GRPOConfig(shared_prompts=True))["shared_prompts"] is True
    assert config_hash(GRPOConfig(shared_prompts=True)) != config_hash(GRPOConfig())


def test_shared_prefix_rollouts_leave_the_iterations_unchanged():
    """`GRPOConfig.share_prefixes`: the rollouts' samples, and so two iterations' weights, bit for bit (native)."""
    want, m_want = _two_iterations(beta=0.0, forward="native")
    got, m_got = _two_iterations(beta=0.0, forward="native", share_prefixes=True)
    assert all(torch.equal(got[k], want[k]) for k in want) and m_got[1]["reward/mean"] == m_want[1]["reward/mean"]
    with pytest.raises(ValueError, match=r"GRPOConfig\.share_prefixes must be False with forward='hf'"):
        GRPOConfig(share_prefixes=True)
