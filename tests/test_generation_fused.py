"""`generate(..., forward="fused")` (models.fused_qwen2 with one member) and `forward="native"` (its attention in the
C kernel of models.native) against the model's own modules: equal up to float rounding, so held to agreement figures
(completions, logprobs) rather than bit-identity; and the evaluation and preset plumbing that selects them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from esreason_lib.evaluation import EvalSpec, evaluate
from esreason_lib.models.fused_qwen2 import FusedQwen2, KVBuffers, check_fusable, model_weights
from esreason_lib.models.generation import Forward, Sampling, finite_rows, generate
from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2
from esreason_lib.store.identity import config_hash, stored_config


@pytest.fixture(scope="module")
def setup(habit_countdown):
    model, tok, task = habit_countdown
    return model, tok, task, task.examples("test", n=64, seed=0)


FUSED = ["fused", "native"]


def _both(model, tok, prompts, forward, sampling, **kw):
    return [generate(model, tok, prompts, sampling, forward=Forward(kind=f), **kw) for f in ("hf", forward)]


@pytest.mark.parametrize("forward", FUSED)
def test_fused_greedy_matches_hf(setup, forward):
    model, tok, task, examples = setup
    prompts = [task.prompt(e, tok) for e in examples]
    hf, fused = _both(model, tok, prompts, forward, Sampling(greedy=True, max_new_tokens=task.max_new_tokens),
                      stop=task.stop)
    same = np.mean([a == b for a, b in zip(hf.completions, fused.completions)])
    assert same >= 0.995, same
    equal = torch.tensor([a == b for a, b in zip(hf.completions, fused.completions)])
    width = min(hf.logprobs.shape[1], fused.logprobs.shape[1])
    gap = (hf.logprobs[equal, :width] - fused.logprobs[equal, :width]).abs().max()
    assert float(gap) < 1e-4  # the same tokens, scored within float rounding


@pytest.mark.parametrize("forward", FUSED)
def test_fused_sampling_matches_hf_draw_for_draw(setup, forward):
    """One generator stream, the same draws: a sample differs only where rounding moves a cumulative-probability
    boundary across a uniform draw, so almost every completion is the same string."""
    model, tok, task, examples = setup
    prompts = [task.prompt(e, tok) for e in examples[:24]]
    hf, fused = _both(model, tok, prompts, forward, Sampling(temperature=0.6, max_new_tokens=task.max_new_tokens), n=16,
                      stop=task.stop, seed=5)
    same = np.mean([a == b for a, b in zip(hf.completions, fused.completions)])
    assert same >= 0.99, same
    assert hf.completion_mask.shape[0] == fused.completion_mask.shape[0] == 24 * 16


@pytest.mark.parametrize("forward", FUSED)
def test_fused_row_compaction_and_padding(setup, forward):
    """Prompts of different lengths (left padding, a masked prefill) and rows that stop early (compaction of the
    fused cache) give the same completions as the model's modules."""
    model, tok, _, _ = setup
    prompts = ["12 7 3>", "5 9 40 2 1>", "8>", "33 1 9 17>"]
    hf, fused = _both(model, tok, prompts, forward, Sampling(temperature=1.0, max_new_tokens=20), n=3, seed=1)
    assert hf.completions == fused.completions


@pytest.mark.parametrize("forward", FUSED)
def test_evaluate_with_fused_forward_agrees(setup, forward):
    model, tok, task, examples = setup
    spec = EvalSpec(n_samples=8, temperature=0.6, ks=(1, 8), seed=0)
    hf = evaluate(model, tok, task, examples[:32], spec, progress=False)
    fused = evaluate(model, tok, task, examples[:32], dataclasses.replace(spec, forward=forward), progress=False)
    assert np.abs(hf.table["c"].to_numpy() - fused.table["c"].to_numpy()).sum() <= 2
    assert (hf.table["greedy_correct"] == fused.table["greedy_correct"]).mean() >= 0.95


def test_fused_refuses_what_it_cannot_fold():
    tok = build_char_tokenizer()
    model = tiny_random_qwen2(len(tok), seed=0)
    with pytest.raises(TypeError, match="float32"):
        check_fusable(model.to(torch.bfloat16), "here")
    with pytest.raises(TypeError, match="needs a Qwen2ForCausalLM or LlamaForCausalLM, got Linear"):
        check_fusable(torch.nn.Linear(2, 2), "here")
    with pytest.raises(ValueError, match="EvalSpec.forward must be 'hf' with backend 'vllm'"):
        EvalSpec(n_samples=1, ks=(1,), forward="fused", backend="vllm")


def test_model_weights_fold_one_member():
    tok = build_char_tokenizer()
    model = tiny_random_qwen2(len(tok), seed=0)
    fused = model_weights(model)
    assert fused[0].shape[0] == 1 and len(fused) == 2 + model.config.num_hidden_layers
    assert torch.equal(fused[0][0], model.model.embed_tokens.weight)


def test_kv_buffers_reuse_storage_and_grow():
    buffers = KVBuffers()
    a = buffers.take((0, 0, 0), (2, 3), "cpu")
    b = buffers.take((0, 0, 0), (3, 2), "cpu")  # same size: the same storage, reshaped
    assert a.data_ptr() == b.data_ptr() and b.shape == (3, 2) and b.dtype == torch.float32
    c = buffers.take((0, 0, 0), (4, 4), "cpu")  # larger: new storage
    assert c.shape == (4, 4) and c.data_ptr() != a.data_ptr()
    assert buffers.take((0, 0, 1), (2, 3), "cpu").data_ptr() != c.data_ptr()  # another key, another storage


def test_fused_forward_in_reused_buffers_equals_fresh_ones():
    """A KV cache left in `KVBuffers` by one decode (compacted into the other half, stale values everywhere) does
    not change the next forward's logits: bit-identical to a fresh cache."""
    tok = build_char_tokenizer()
    model = tiny_random_qwen2(len(tok), seed=0)
    fused = model_weights(model)
    ids = torch.randint(3, len(tok), (1, 6, 5))  # [N, R, L]
    pos = torch.arange(5).expand(1, 6, 5)

    def decode(buffers):
        net = FusedQwen2(model, fused, 9, buffers=buffers)
        out = [net(ids, pos, None, None)]
        net.length = 5
        net.select(torch.tensor([[0, 2, 5]]))  # keep 3 of the 6 rows
        out.append(net(ids[:, [0, 2, 5], -1:], pos[:, :3, -1:] + 1, None, None))
        return out

    shared = KVBuffers()
    decode(shared)
    for fresh, reused in zip(decode(KVBuffers()), decode(shared), strict=True):
        assert torch.equal(fresh, reused)


def test_finite_rows_zeroes_only_rows_with_a_non_finite_logit():
    logits = torch.tensor([[1.0, float("inf")], [1.0, 2.0], [float("nan"), 0.0]])
    assert torch.equal(finite_rows(logits), torch.tensor([[0.0, 0.0], [1.0, 2.0], [0.0, 0.0]]))
    fine = torch.tensor([[1.0, 2.0]])
    assert finite_rows(fine) is fine  # all finite: no copy
    huge = torch.tensor([[3e38, 3e38], [1.0, -1.0]])  # finite values whose sum overflows: every row kept
    assert torch.equal(finite_rows(huge), huge)


def test_eval_spec_forward_field_keeps_stored_identities():
    spec = EvalSpec(n_problems=300)
    added = ("forward", "backend", "sampler", "share_prefixes", "batch_size")  # fields added after runs were stored
    old = {"model": "m", "eval": {k: v for k, v in dataclasses.asdict(spec).items() if k not in added}}
    assert config_hash(stored_config("eval", {"model": "m", "eval": spec})) == config_hash(stored_config("eval", old))
    fused = stored_config("eval", {"model": "m", "eval": dataclasses.replace(spec, forward="fused")})
    assert fused["eval"]["forward"] == "fused"
    with pytest.raises(ValueError, match="EvalSpec.forward"):
        EvalSpec(forward="x")


def test_tiny_runs_the_fused_forward_and_tiny_exact_the_modules():
    from esreason_lib.paper.plan import training_plan
    from esreason_lib.paper.studies.presets import get_preset

    tiny, exact = get_preset("tiny"), get_preset("tiny-exact")
    assert tiny.es.backend == "fast" and exact.es.backend == "auto"
    for preset, forward in ((tiny, "fused"), (exact, "hf")):
        assert {preset.eval.forward, preset.sparsity.eval.forward, preset.forgetting.eval.forward,
                preset.scaling.eval.forward} == {forward}
    assert dataclasses.replace(tiny.es, backend="auto") == exact.es
    assert get_preset("powered").es.backend == "fast"  # powered is tiny with a larger design
    backends = {c.noise: c.backend for c in training_plan(tiny) if hasattr(c, "noise")}
    assert backends == {"full": "fast", "lowrank": "auto"}  # low-rank noise keeps its own (exact) backend


@pytest.mark.parametrize("forward", FUSED)
def test_grpo_rollouts_on_the_fused_forward_match_hf(setup, forward):
    """GRPO's `rollout_sampler` with `GRPOConfig.forward` samples what "hf" samples under the same seed (the
    rounding-level agreement of the ES paths: rows and rewards), and one `grpo_step` from each lands on the same
    rewards and nearly the same weights."""
    import copy

    from esreason_lib.grpo.config import GRPOConfig
    from esreason_lib.grpo.loop import grpo_step, rollout_sampler

    model, tok, task, _ = setup
    examples = task.examples("train", n=32, seed=0)
    prompts = [task.prompt(e, tok) for e in examples]
    config = GRPOConfig(model="qwen2-s-habit", task="countdown", group_size=8, prompts_per_step=16, beta=0.0,
                        lr=1e-3, forward=forward, seed=3)
    kw = dict(n=8, stop=task.stop, seed=11)
    sampling = Sampling(temperature=1.0, top_p=1.0, max_new_tokens=task.max_new_tokens)
    hf = generate(model, tok, prompts[:16], sampling, **kw)
    fast = rollout_sampler(config)(model, tok, prompts[:16], sampling, **kw)
    same = np.mean([a == b for a, b in zip(hf.completions, fast.completions, strict=True)])
    assert same >= 0.99, same
    rewards = [[task.reward(s, examples[i // 8]) for i, s in enumerate(ro.completions)] for ro in (hf, fast)]
    assert abs(np.mean(rewards[0]) - np.mean(rewards[1])) <= 2 / len(rewards[0])
    steps = {}
    for f in ("hf", forward):
        net = copy.deepcopy(model)
        cfg = dataclasses.replace(config, forward=f)
        opt = torch.optim.SGD(net.parameters(), lr=cfg.lr)
        steps[f] = (net, grpo_step(net, None, opt, tok, task, examples, prompts, cfg, 0, rollout=rollout_sampler(cfg)))
    (a, ma), (b, mb) = steps["hf"], steps[forward]
    assert abs(ma["reward/mean"] - mb["reward/mean"]) <= 2 / (16 * 8)
    assert ma["completion/length"] == pytest.approx(mb["completion/length"], abs=0.5)
    with torch.no_grad():
        moved = max(float((p - p0).abs().max()) for p, p0 in zip(a.parameters(), model.parameters()))
        gap = max(float((p - q).abs().max()) for p, q in zip(a.parameters(), b.parameters()))
    assert moved > 0 and gap <= 0.05 * moved, (gap, moved)  # the same update, up to the rows that differ


def test_grpo_forward_field_keeps_stored_identities_and_is_checked():
    from esreason_lib.grpo.config import GRPOConfig
    from esreason_lib.grpo.loop import rollout_sampler

    assert config_hash(GRPOConfig(forward="hf")) == config_hash(GRPOConfig())  # stored runs keep their hash
    assert config_hash(GRPOConfig(forward="fused")) != config_hash(GRPOConfig())  # other samples, another run
    assert rollout_sampler(GRPOConfig()) is generate
    assert rollout_sampler(GRPOConfig(sampler="inverse-cdf")) is generate  # the sampler goes in grpo_step's Sampling
    assert rollout_sampler(GRPOConfig(forward="native", share_prefixes=True)).keywords == {
        "forward": Forward(kind="native", share_prefixes=True)}
    with pytest.raises(ValueError, match="GRPOConfig.forward must be one of"):
        GRPOConfig(forward="compiled")
    with pytest.raises(ValueError, match="GRPOConfig.forward must be 'hf' with backend='vllm'"):
        GRPOConfig(backend="vllm", forward="fused")
    with pytest.raises(ValueError, match="GRPOConfig.forward must be 'hf' with dtype='bfloat16'"):
        GRPOConfig(dtype="bfloat16", forward="native")
