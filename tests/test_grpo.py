"""Tests for esreason_lib.grpo.loop and grpo.update: hand-computed advantages and losses, config validation, and
the loop."""

from __future__ import annotations

import copy
import math
import os
import subprocess
import sys
import time
from dataclasses import FrozenInstanceError, replace
from pathlib import Path

import numpy as np
import pytest
import torch
from toy_tasks import ParenTask

from esreason_lib.grpo.config import GRPOConfig
from esreason_lib.grpo.loop import grpo_step, train_grpo
from esreason_lib.grpo.loss import group_advantages, policy_loss
from esreason_lib.grpo.update import forward_rows, policy_update
from esreason_lib.models.generation import Sampling, completion_logprobs, generate
from esreason_lib.models.optim import master_weight_adamw
from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2
from esreason_lib.paper.studies.presets import get_preset


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models gain nothing from intra-op threads, and they thrash on a shared CPU; restore afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


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


def test_policy_loss_weight_counts_a_row_as_that_many_identical_rows():
    torch.manual_seed(0)
    logp, old = torch.randn(2, 3), torch.randn(2, 3)
    mask = torch.tensor([[True, True, False], [True, True, True]])
    adv = torch.tensor([1.0, -2.0])
    rep = [0, 0, 0, 1]  # row 0 three times
    for agg in ("seq-mean-token-mean", "token-mean"):
        full, m_full = policy_loss(logp[rep], old[rep], old[rep], adv[rep], mask[rep], 0.2, 0.1, agg)
        w, m_w = policy_loss(logp, old, old, adv, mask, 0.2, 0.1, agg, weight=torch.tensor([3, 1]))
        assert float(w) == pytest.approx(float(full), abs=1e-6)
        assert m_w == pytest.approx(m_full, abs=1e-6)
    with pytest.raises(ValueError, match="weight"):
        policy_loss(logp, old, None, adv, mask, 0.2, 0.0, weight=torch.ones(3))


def test_forward_rows_keeps_one_of_each_distinct_row_with_its_count():
    p_ids = torch.tensor([[1, 2]] * 4 + [[3, 4]] * 2)  # [6, 2]
    p_mask = torch.ones(6, 2, dtype=torch.bool)
    c_ids = torch.tensor([[5, 0], [6, 0], [5, 0], [5, 0], [7, 7], [7, 7]])  # [6, 2]
    c_mask = torch.tensor([[1, 0], [1, 0], [1, 0], [1, 1], [1, 1], [1, 1]], dtype=torch.bool)  # row 3: EOS kept
    adv = torch.tensor([0.5, -0.5, 0.5, 0.5, 0.0, 0.0])  # rows 0 and 2 agree; row 3 differs by its mask
    index, count = forward_rows(p_ids, p_mask, c_ids, c_mask, adv, skip_zero_advantage=False)
    assert index.tolist() == [0, 1, 3, 4] and count.tolist() == [2, 1, 1, 2]
    index, count = forward_rows(p_ids, p_mask, c_ids, c_mask, adv, skip_zero_advantage=True)
    assert index.tolist() == [0, 1, 3] and count.tolist() == [2, 1, 1]
    adv[2] = 0.25  # the same tokens with another advantage are another row
    index, _ = forward_rows(p_ids, p_mask, c_ids, c_mask, adv, skip_zero_advantage=True)
    assert index.tolist() == [0, 1, 2, 3]


# ---------------------------------------------------------------- GRPOConfig
@pytest.mark.parametrize("kw,field", [
    ({"group_size": 1}, "group_size"), ({"group_size": 0}, "group_size"), ({"lr": 0.0}, "lr"),
    ({"clip_eps": 1.5}, "clip_eps"), ({"beta": -0.1}, "beta"), ({"temperature": 0.0}, "temperature"),
    ({"top_p": 0.0}, "top_p"), ({"prompts_per_step": 0}, "prompts_per_step"), ({"ppo_epochs": 0}, "ppo_epochs"),
    ({"iterations": 0}, "iterations"), ({"max_new_tokens": 0}, "max_new_tokens"), ({"scale": "std"}, "scale"),
    ({"aggregation": "sum"}, "aggregation"), ({"weight_decay": -1.0}, "weight_decay"),
    ({"max_grad_norm": 0.0}, "max_grad_norm"), ({"checkpoint_every": -1}, "checkpoint_every"),
    ({"dtype": "float16"}, "dtype"), ({"micro_batch_size": 0}, "micro_batch_size"), ({"model": ""}, "model"),
    ({"seed": 1.5}, "seed"), ({"train_size": 0}, "train_size"), ({"minibatch_size": 0}, "minibatch_size"),
    ({"minibatch_size": 3}, "minibatch_size"), ({"prompt_order": "sorted"}, "prompt_order"),
])
def test_config_validation_names_field_and_value(kw, field):
    with pytest.raises(ValueError, match=rf"GRPOConfig\.{field} .*got {kw[field]!r}".replace("(", r"\(")):
        GRPOConfig(**kw)


def test_config_is_frozen_with_sane_defaults():
    c = GRPOConfig()
    with pytest.raises(FrozenInstanceError):
        c.lr = 1.0  # type: ignore[misc]
    assert c.scale == "group" and c.aggregation == "seq-mean-token-mean" and c.max_new_tokens is None
    assert GRPOConfig(task_kwargs={"b": 2, "a": 1}).task_kwargs == (("a", 1), ("b", 2))
    hash(GRPOConfig(task_kwargs={"a": 1}))
    with pytest.raises(ValueError, match="GRPOConfig.task_kwargs must have hashable values"):
        GRPOConfig(task_kwargs={"a": [1]})


# ---------------------------------------------------------------- the loop
def paren_config(**kw) -> GRPOConfig:
    base = dict(model="tiny-random", task="paren", group_size=8, prompts_per_step=4, lr=3e-2, beta=0.04,
                iterations=30, checkpoint_every=0, device="cpu", seed=0)
    return GRPOConfig(**{**base, **kw})


def _fresh():
    tok = build_char_tokenizer()
    return tiny_random_qwen2(len(tok), seed=0), tok


def _step_once(sgd=False, **kw):
    model, tok = _fresh()
    cfg, task = paren_config(**kw), ParenTask()
    ex = task.examples("train")
    ref = copy.deepcopy(model).requires_grad_(False) if cfg.beta > 0 else None
    opt = torch.optim.SGD(model.parameters(), lr=1.0) if sgd else torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    m = grpo_step(model, ref, opt, tok, task, ex, [task.prompt(e) for e in ex], cfg, iteration=3)
    return model, m


def test_grpo_step_micro_batches_match_full_batch():
    for agg in ("seq-mean-token-mean", "token-mean"):
        full, m_full = _step_once(sgd=True, aggregation=agg)  # SGD(lr=1): the update is the (clipped) gradient
        micro, m_micro = _step_once(sgd=True, aggregation=agg, micro_batch_size=5)  # 7 uneven chunks of 32 rows
        for (name, a), b in zip(full.named_parameters(), micro.parameters()):
            assert torch.allclose(a, b, atol=1e-6), name
        assert m_micro["loss/policy"] == pytest.approx(m_full["loss/policy"], abs=1e-6)


def test_grpo_step_metrics_and_ppo_epochs():
    _, m = _step_once(beta=0.0)
    assert "policy/kl" not in m  # no reference model when beta == 0
    assert m["policy/ratio_mean"] == pytest.approx(1.0, abs=1e-4)  # on-policy: only KV-cache float noise
    assert m["grpo/generations"] == 4 * 32 and 0 <= m["grpo/zero_std_frac"] <= 1
    assert 0 < m["policy/entropy"] <= math.log(99) and m["completion/length"] == 4.0
    _, m = _step_once(ppo_epochs=4, lr=0.1)  # later epochs are off-policy: the ratio moves and clips
    assert m["policy/kl"] > 0 and m["policy/clip_frac"] > 0 and m["policy/ratio_mean"] != pytest.approx(1.0)


def test_train_grpo_reward_rises_on_sanity_objective(tmp_path):
    model, tok = _fresh()
    t0 = time.perf_counter()
    run = train_grpo(paren_config(), model=model, tokenizer=tok, task=ParenTask(), home=tmp_path, progress=False)
    elapsed = time.perf_counter() - t0
    df = run.metrics()
    assert list(df["step"]) == list(range(1, 31))
    first, last = df["reward/mean"].iloc[:5].mean(), df["reward/mean"].iloc[-5:].mean()
    print(f"sanity: reward {first:.3f} -> {last:.3f}, entropy {df['policy/entropy'].iloc[0]:.2f} -> "
          f"{df['policy/entropy'].iloc[-1]:.2f} in {elapsed:.1f}s")
    assert first < 0.2 and last > 0.8
    assert df["policy/entropy"].iloc[-5:].mean() < df["policy/entropy"].iloc[:5].mean()
    for key in ("reward/std", "policy/kl", "policy/clip_frac", "grpo/zero_std_frac", "completion/length",
                "time/step_s", "grpo/generations"):
        assert key in df.columns, key
    assert df["grpo/generations"].iloc[-1] == 30 * 32
    assert run.is_complete() and (run.model_dir / "config.json").exists()
    assert (run.model_dir / "tokenizer_config.json").exists()
    # a complete run is returned immediately, without touching the model
    again = train_grpo(paren_config(), model=None, tokenizer=None, task=ParenTask(), home=tmp_path)
    assert again.path == run.path
    assert elapsed < 30


_CHILD = """
import os, signal, sys, torch
sys.path.insert(0, {tests!r})
torch.set_num_threads({threads})
from esreason_lib.store.runs import Run
from test_grpo import _fresh, paren_config
from toy_tasks import ParenTask
from esreason_lib.grpo.loop import train_grpo
save = Run.save_checkpoint
def save_then_die(self, step, state):
    path = save(self, step, state)
    os.kill(os.getpid(), signal.SIGKILL)  # a hard crash right after the first checkpoint
Run.save_checkpoint = save_then_die
model, tok = _fresh()
train_grpo(paren_config(**{kw!r}), model=model, tokenizer=tok, task=ParenTask(), home={home!r}, progress=False)
"""


def test_kill_and_resume_is_bit_identical(tmp_path):
    kw = dict(iterations=8, checkpoint_every=3, ppo_epochs=2)
    t0 = time.perf_counter()
    model_a, tok = _fresh()
    run_a = train_grpo(paren_config(**kw), model=model_a, tokenizer=tok, task=ParenTask(), home=tmp_path / "a",
                       progress=False)
    child = _CHILD.format(tests=str(Path(__file__).parent), threads=torch.get_num_threads(), kw=kw,
                          home=str(tmp_path / "b"))
    proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert proc.returncode == -9, proc.stderr[-2000:]
    (run_dir,) = (tmp_path / "b").iterdir()
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["step-000003.pt"]
    assert not (run_dir / "manifest.json").exists()
    model_b, tok = _fresh()
    run_b = train_grpo(paren_config(**kw), model=model_b, tokenizer=tok, task=ParenTask(), home=tmp_path / "b",
                       progress=False)
    assert run_b.is_complete()
    sa, sb = model_a.state_dict(), model_b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k
    ma, mb = run_a.metrics(), run_b.metrics()
    assert list(mb["step"]) == list(range(1, 9))
    cols = [c for c in ma.columns if not c.startswith("time/")]
    assert ma[cols].equals(mb[cols])
    assert time.perf_counter() - t0 < 60


def test_train_grpo_builds_named_task_with_shaping(tmp_path, monkeypatch):
    import esreason_lib.training.inputs as inputs

    seen = {}
    real = inputs.get_task

    def spy(name, **kw):
        seen.update(name=name, **kw)
        return real(name, **kw)

    monkeypatch.setattr(inputs, "get_task", spy)  # where a trainer builds its task (`inputs.config_task`)
    model, tok = _fresh()
    cfg = paren_config(task="countdown", iterations=2, group_size=2, prompts_per_step=2, max_new_tokens=6,
                       reward_formatted=0.25, train_size=5, checkpoint_every=1)
    run = train_grpo(cfg, model=model, tokenizer=tok, home=tmp_path, progress=False)
    assert seen["name"] == "countdown" and seen["shaping"].formatted == 0.25
    assert run.is_complete() and list(run.metrics()["step"]) == [1, 2]
    assert run.metrics()["completion/length"].max() <= 6


# ---------------------------------------------------------------- paper scale: minibatches, bf16 masters
def _rollout(model, tok, cfg, task):
    ex = task.examples("train")[: cfg.prompts_per_step]
    return generate(model, tok, [task.prompt(e) for e in ex], Sampling(max_new_tokens=task.max_new_tokens),
                    n=cfg.group_size, seed=7)


def test_policy_update_minibatches_make_the_ratio_and_clip_live_from_the_second_step():
    model, tok = _fresh()
    cfg = paren_config(beta=0.0, minibatch_size=2, lr=3e-2)  # 4 prompts, minibatch 2: two steps per rollout
    ro = _rollout(model, tok, cfg, ParenTask())
    adv = torch.randn(ro.completion_ids.shape[0], generator=torch.Generator().manual_seed(0))  # [B] any signal
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    steps = policy_update(model, None, opt, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask,
                          adv, cfg)
    assert len(steps) == 2
    assert steps[0]["policy/ratio_mean"] == 1.0 and steps[0]["policy/clip_frac"] == 0.0  # pi_old = the policy
    assert steps[1]["policy/ratio_mean"] != pytest.approx(1.0, abs=1e-3)  # the first step moved the policy
    assert steps[1]["policy/clip_frac"] > 0
    two_epochs = policy_update(model, None, opt, ro.prompt_ids, ro.prompt_mask, ro.completion_ids,
                               ro.completion_mask, adv, replace(cfg, ppo_epochs=2))
    assert len(two_epochs) == 4


@pytest.mark.parametrize("aggregation", ["seq-mean-token-mean", "token-mean"])
def test_policy_update_gradient_equals_a_forward_over_every_row(aggregation):
    """Skipping zero-advantage rows and forwarding repeated rows once leave the gradient of the full batch."""
    model, tok = _fresh()
    cfg = paren_config(beta=0.0, max_grad_norm=None, aggregation=aggregation)
    ro = _rollout(model, tok, cfg, ParenTask())
    c_ids, c_mask = ro.completion_ids.clone(), ro.completion_mask.clone()
    c_ids[1], c_mask[1] = c_ids[0], c_mask[0]  # a repeated row within the first group
    adv = torch.tensor([1.0, 1.0, -1.0, 0.5] * 2 + [0.0] * 8 + [0.3, -0.3] * 4 + [0.0] * 8)  # [32] two flat groups
    assert len(forward_rows(ro.prompt_ids, ro.prompt_mask, c_ids, c_mask, adv, skip_zero_advantage=True)[0]) < 16
    ref_model = copy.deepcopy(model)
    logp, _ = completion_logprobs(ref_model, ro.prompt_ids, ro.prompt_mask, c_ids, c_mask)
    loss, m = policy_loss(logp, logp.detach(), None, adv, c_mask, cfg.clip_eps, 0.0, aggregation)
    loss.backward()
    (step,) = policy_update(model, None, torch.optim.SGD(model.parameters(), lr=0.0), ro.prompt_ids, ro.prompt_mask,
                            c_ids, c_mask, adv, cfg)
    for (name, p), q in zip(model.named_parameters(), ref_model.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-7, rtol=1e-5, msg=name)
    assert step["loss/policy"] == pytest.approx(m["loss/policy"], abs=1e-7)
    assert step["policy/clip_frac"] == 0.0 and step["policy/ratio_mean"] == 1.0


def test_policy_update_without_signal_still_steps_from_zero_gradients():
    model, tok = _fresh()
    cfg = paren_config(beta=0.0)
    ro = _rollout(model, tok, cfg, ParenTask())
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    (step,) = policy_update(model, None, opt, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask,
                            torch.zeros(32), cfg)
    assert step["policy/grad_norm"] == 0.0 and step["loss/policy"] == 0.0 and "policy/ratio_mean" not in step
    assert all(float(opt.state[p]["step"]) == 1 and torch.all(p.grad == 0) for p in model.parameters())


def test_policy_update_old_logprobs_are_the_rollout_policy_not_the_sampler():
    """pi_old comes from a forward pass of the weights that sampled: a policy moved after sampling (as if the
    sampler's log-probs were stale) still gets ratio exactly 1 on its first step."""
    model, tok = _fresh()
    cfg = paren_config(beta=0.0)
    ro = _rollout(model, tok, cfg, ParenTask())
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    adv = torch.ones(ro.completion_ids.shape[0])  # [B]
    (step,) = policy_update(model, None, torch.optim.SGD(model.parameters(), lr=0.0), ro.prompt_ids, ro.prompt_mask,
                            ro.completion_ids, ro.completion_mask, adv, cfg)
    assert step["policy/ratio_mean"] == 1.0


def test_paper_preset_grpo_step_moves_a_bf16_model_through_fp32_masters():
    """One step shaped like paper-easy's GRPO (64 prompts, minibatch 32, G=8, lr 1e-6, beta 1e-3, bf16) on a
    tiny random bf16 Qwen2: the fp32 masters move by ~lr, the bf16 model is the masters rounded."""
    paper = get_preset("paper-easy").grpo
    cfg = replace(paper, model="tiny-random", task="paren", device="cpu", max_new_tokens=4, prompt_order="epoch")
    assert (cfg.prompts_per_step, cfg.minibatch_size, cfg.group_size, cfg.lr) == (64, 32, 8, 1e-6)
    model, tok = _fresh()
    model.to(torch.bfloat16)
    task = ParenTask()
    ex = task.examples("train")
    ref = copy.deepcopy(model).requires_grad_(False)
    opt = master_weight_adamw(model, lr=cfg.lr, weight_decay=cfg.weight_decay)
    masters = [m for g in opt.param_groups for m in g["params"]]
    before = [m.detach().clone() for m in masters]
    bf16_before = [p.detach().clone() for p in model.parameters()]
    m = grpo_step(model, ref, opt, tok, task, ex, [task.prompt(e) for e in ex], cfg, iteration=0)
    assert m["grpo/generations"] == 64 * 8
    moved = torch.cat([(a - b).abs().flatten() for a, b in zip(masters, before)])
    assert all(mm.dtype == torch.float32 for mm in masters)
    assert (moved > 0).float().mean() > 0.5  # most coordinates got a gradient and moved
    assert float(moved.max()) <= 2 * 2e-6 + 1e-9  # two Adam steps of at most ~lr each
    for p, mm in zip(model.parameters(), masters):
        assert p.dtype == torch.bfloat16 and torch.equal(p, mm.to(torch.bfloat16))
    assert any(not torch.equal(p, b) for p, b in zip(model.parameters(), bf16_before))  # small weights moved


def test_bf16_resume_restores_the_fp32_masters_bit_identically(tmp_path, monkeypatch):
    """A crash right after a checkpoint, then a resume, ends where an uninterrupted bf16 run ends: the checkpoint
    carries the fp32 masters (reloading only the bf16 weights would lose their sub-resolution part)."""
    from esreason_lib.store.runs import Run

    kw = dict(iterations=4, checkpoint_every=2, lr=1e-4, beta=0.0, dtype="bfloat16", minibatch_size=2)
    model_a, tok = _fresh()
    train_grpo(paren_config(**kw), model=model_a, tokenizer=tok, task=ParenTask(), home=tmp_path / "a",
               progress=False)
    save = Run.save_checkpoint

    def save_then_crash(self, step, state):
        save(self, step, state)
        raise KeyboardInterrupt("simulated crash after the first checkpoint")

    monkeypatch.setattr(Run, "save_checkpoint", save_then_crash)
    model_b, tok = _fresh()
    with pytest.raises(KeyboardInterrupt):
        train_grpo(paren_config(**kw), model=model_b, tokenizer=tok, task=ParenTask(), home=tmp_path / "b",
                   progress=False)
    monkeypatch.setattr(Run, "save_checkpoint", save)
    model_b, tok = _fresh()
    train_grpo(paren_config(**kw), model=model_b, tokenizer=tok, task=ParenTask(), home=tmp_path / "b",
               progress=False)
    sa, sb = model_a.state_dict(), model_b.state_dict()
    assert next(model_b.parameters()).dtype == torch.bfloat16
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
