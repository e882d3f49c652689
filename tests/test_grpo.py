"""Tests for esreason_lib.grpo: hand-computed advantages and losses, config validation, and the loop."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from esreason_lib.grpo import GRPOConfig, group_advantages, policy_loss


# ---------------------------------------------------------------- group_advantages
def test_group_advantages_group_scale_hand_computed():
    adv = group_advantages([1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5], 4, scale="group", eps=0.0)
    assert adv.dtype == torch.float32
    assert torch.equal(adv, torch.tensor([1.0, -1.0, -1.0, 1.0, 0.0, 0.0, 0.0, 0.0]))
    # mean 2, population std sqrt(2/3): (3-2)/0.8165 = 1.2247
    adv = group_advantages(torch.tensor([3.0, 1.0, 2.0], dtype=torch.float64), 3, eps=0.0)
    assert adv.dtype == torch.float64
    s = math.sqrt(2 / 3)
    assert torch.allclose(adv, torch.tensor([1 / s, -1 / s, 0.0], dtype=torch.float64))


def test_group_advantages_eps_and_zero_std_exactly_zero():
    adv = group_advantages(np.array([1.0, 0.0, 0.1, 0.1, 0.1, 0.1]), 2, eps=1e-6)
    assert adv[0] == pytest.approx(0.5 / (0.5 + 1e-6)) and adv[1] == pytest.approx(-0.5 / (0.5 + 1e-6))
    assert torch.all(adv[2:] == 0.0)  # 0.1 groups: no float noise leaks through


def test_group_advantages_scale_none():
    adv = group_advantages([1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5], 4, scale="none")
    assert torch.allclose(adv, torch.tensor([0.5, -0.5, -0.5, 0.5, 0.0, 0.0, 0.0, 0.0]))


def test_group_advantages_errors():
    with pytest.raises(ValueError, match="not a multiple of group_size=4"):
        group_advantages([1.0, 0.0, 1.0], 4)
    with pytest.raises(ValueError, match="scale"):
        group_advantages([1.0, 0.0], 2, scale="std")
    with pytest.raises(ValueError, match="group_size"):
        group_advantages([1.0, 0.0], 0)


# ---------------------------------------------------------------- policy_loss
def _one(ratio: float, a: float, clip_eps=0.2):
    logp = torch.tensor([[math.log(ratio)]], requires_grad=True)  # [1, 1]
    old = torch.zeros(1, 1)
    loss, m = policy_loss(logp, old, None, torch.tensor([a]), torch.ones(1, 1, dtype=torch.bool), clip_eps, 0.0)
    loss.backward()
    return float(loss.detach()), m, float(logp.grad)


@pytest.mark.parametrize("ratio,a,want_loss,want_clip,want_grad", [
    (1.5, 1.0, -1.2, 1.0, 0.0),    # positive advantage, ratio above 1+eps: clipped, no gradient
    (0.5, 1.0, -0.5, 0.0, -0.5),   # positive advantage, ratio below 1-eps: unclipped (pessimistic min)
    (0.5, -1.0, 0.8, 1.0, 0.0),    # negative advantage, ratio below 1-eps: clipped
    (1.5, -1.0, 1.5, 0.0, 1.5),    # negative advantage, ratio above 1+eps: unclipped
    (1.1, 2.0, -2.2, 0.0, -2.2),   # inside the trust region
])
def test_policy_loss_clipping_hand_computed(ratio, a, want_loss, want_clip, want_grad):
    loss, m, grad = _one(ratio, a)
    assert loss == pytest.approx(want_loss, abs=1e-6)
    assert m["policy/clip_frac"] == want_clip
    assert m["policy/ratio_mean"] == pytest.approx(ratio, abs=1e-6)
    assert m["loss/policy"] == pytest.approx(want_loss, abs=1e-6)
    assert math.isnan(m["policy/kl"])
    assert grad == pytest.approx(want_grad, abs=1e-6)


def test_policy_loss_kl_k3_zero_at_equal_policies_and_hand_value():
    logp = torch.randn(3, 5)
    mask = torch.ones(3, 5, dtype=torch.bool)
    loss, m = policy_loss(logp, logp, logp.clone(), torch.zeros(3), mask, 0.2, beta=0.5)
    assert m["policy/kl"] == 0.0 and float(loss) == 0.0
    logp = torch.zeros(1, 1)
    ref = torch.full((1, 1), math.log(2.0))  # k3 = 2 - log 2 - 1
    loss, m = policy_loss(logp, logp, ref, torch.zeros(1), torch.ones(1, 1, dtype=torch.bool), 0.2, beta=0.5)
    assert m["policy/kl"] == pytest.approx(1 - math.log(2), abs=1e-6)
    assert float(loss) == pytest.approx(0.5 * (1 - math.log(2)), abs=1e-6)
    with pytest.raises(ValueError, match="ref_logp is required"):
        policy_loss(logp, logp, None, torch.zeros(1), torch.ones(1, 1, dtype=torch.bool), 0.2, beta=0.1)


def test_policy_loss_aggregation_on_unequal_lengths():
    logp = torch.zeros(2, 3)
    mask = torch.tensor([[True, False, False], [True, True, True]])
    adv = torch.tensor([1.0, 2.0])  # per-token losses: -1 (1 token) and -2 (3 tokens)
    seq, _ = policy_loss(logp, logp, None, adv, mask, 0.2, 0.0, aggregation="seq-mean-token-mean")
    tok, _ = policy_loss(logp, logp, None, adv, mask, 0.2, 0.0, aggregation="token-mean")
    assert float(seq) == pytest.approx(-1.5) and float(tok) == pytest.approx(-7 / 4)
    # masked positions contribute nothing, even with garbage (e.g. -inf) log-probs there
    bad = logp.clone()
    bad[0, 1:] = -math.inf
    seq2, m = policy_loss(bad, logp, bad, adv, mask, 0.2, 0.1)
    assert float(seq2) == pytest.approx(-1.5) and math.isfinite(m["policy/kl"])
    with pytest.raises(ValueError, match="aggregation"):
        policy_loss(logp, logp, None, adv, mask, 0.2, 0.0, aggregation="sum")


def test_policy_loss_gradients_flow_only_through_logp():
    torch.manual_seed(0)
    logp = torch.randn(2, 4, requires_grad=True)
    old = torch.randn(2, 4, requires_grad=True)
    ref = torch.randn(2, 4, requires_grad=True)
    adv = torch.randn(2, requires_grad=True)
    loss, _ = policy_loss(logp, old, ref, adv, torch.ones(2, 4, dtype=torch.bool), 0.2, 0.1)
    loss.backward()
    assert logp.grad is not None and torch.any(logp.grad != 0)
    assert old.grad is None and ref.grad is None and adv.grad is None


# ---------------------------------------------------------------- GRPOConfig
@pytest.mark.parametrize("kw,field", [
    ({"group_size": 1}, "group_size"), ({"group_size": 0}, "group_size"), ({"lr": 0.0}, "lr"),
    ({"clip_eps": 1.5}, "clip_eps"), ({"beta": -0.1}, "beta"), ({"temperature": 0.0}, "temperature"),
    ({"top_p": 0.0}, "top_p"), ({"prompts_per_step": 0}, "prompts_per_step"), ({"ppo_epochs": 0}, "ppo_epochs"),
    ({"iterations": 0}, "iterations"), ({"max_new_tokens": 0}, "max_new_tokens"), ({"scale": "std"}, "scale"),
    ({"aggregation": "sum"}, "aggregation"), ({"weight_decay": -1.0}, "weight_decay"),
    ({"max_grad_norm": 0.0}, "max_grad_norm"), ({"checkpoint_every": -1}, "checkpoint_every"),
    ({"dtype": "float16"}, "dtype"), ({"micro_batch_size": 0}, "micro_batch_size"), ({"model": ""}, "model"),
    ({"seed": 1.5}, "seed"), ({"train_size": 0}, "train_size"),
])
def test_config_validation_names_field_and_value(kw, field):
    with pytest.raises(ValueError, match=rf"GRPOConfig\.{field} .*got {kw[field]!r}".replace("(", r"\(")):
        GRPOConfig(**kw)


def test_config_is_frozen_with_sane_defaults():
    c = GRPOConfig()
    with pytest.raises(Exception):
        c.lr = 1.0  # type: ignore[misc]
    assert c.scale == "group" and c.aggregation == "seq-mean-token-mean" and c.max_new_tokens is None
