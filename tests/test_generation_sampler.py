"""`Sampling(sampler="inverse-cdf")` (issue 34): one uniform per token instead of `torch.multinomial`'s draw per
vocabulary entry. The same distribution (other samples), so held to distributions and to the tiny evaluation's
correct-sample counts within noise; the default "multinomial" keeps every stored identity; and a `Generator`'s fused
weights, folded once for every chunk of an evaluation, change nothing."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from esreason_lib.evaluation import EvalSpec, evaluate
from esreason_lib.grpo.config import GRPOConfig
from esreason_lib.models import generation
from esreason_lib.models.generation import Forward, Generator, Sampling, generate, inverse_cdf_tokens
from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2
from esreason_lib.store.identity import config_hash, stored_config


def test_inverse_cdf_tokens_hand_computed():
    weights = torch.tensor([[0.0, 1.0, 0.0, 3.0]] * 5)  # cumulative 0, 1, 1, 4: token 1 on [0, 1/4), 3 on [1/4, 1)
    u = torch.tensor([0.0, 0.2499, 0.25, 0.9999, 1.0 - 2**-24])
    assert inverse_cdf_tokens(weights, u).tolist() == [1, 1, 3, 3, 3]  # zero-weight tokens 0 and 2 never


def test_inverse_cdf_tokens_sample_the_distribution():
    p = torch.tensor([0.1, 0.0, 0.2, 0.3, 0.4])
    u = torch.rand(200_000, generator=torch.Generator().manual_seed(0))
    freq = torch.bincount(inverse_cdf_tokens(p.expand(len(u), -1) * 7.0, u), minlength=5).double() / len(u)
    assert freq[1] == 0
    assert torch.allclose(freq, p.double(), atol=0.004)  # ~4 standard errors (sqrt(0.25 / 2e5) = 0.0011)


@pytest.fixture(scope="module")
def tiny():
    tok = build_char_tokenizer()
    return tiny_random_qwen2(len(tok), seed=0), tok


def test_first_tokens_follow_the_model_under_both_samplers(tiny):
    """4,000 one-token samples of one prompt: each sampler's token frequencies are within sampling noise of the
    model's temperature-scaled next-token probabilities (what each sample's recorded log-prob says)."""
    model, tok = tiny
    for sampler in generation.SAMPLERS:
        ro = generate(model, tok, ["12+3="], Sampling(temperature=0.7, max_new_tokens=1, sampler=sampler), n=4000,
                      seed=2, forward=Forward(batch_size=4000))
        probs = torch.zeros(model.config.vocab_size)
        probs[ro.completion_ids[:, 0]] = ro.logprobs[:, 0].exp()  # [V] the model's probability of each drawn token
        freq = torch.bincount(ro.completion_ids[:, 0], minlength=len(probs)).float() / 4000
        seen = freq > 0
        assert (freq[seen] - probs[seen]).abs().max() < 0.025, sampler  # 4 SE at p ~ 0.1
        assert 1 - probs[seen].sum() < 0.02, sampler  # the unseen tokens were unlikely


def test_inverse_cdf_rows_keep_their_draws_whatever_the_compaction(tiny, monkeypatch):
    """A row's uniforms are fixed by its place in the chunk: dropping finished rows at another point leaves every
    sample as it was (multinomial deals its draws out to the rows still running)."""
    model, tok = tiny
    kw = dict(n=6, seed=4, stop="1")
    sampling = Sampling(temperature=1.0, max_new_tokens=12, sampler="inverse-cdf")
    prompts = ["12+3=", "A longer prompt>", "7>"]
    want = generate(model, tok, prompts, sampling, **kw)
    monkeypatch.setattr(generation, "COMPACT_FRACTION", 1.0)  # no compaction before every row is done
    got = generate(model, tok, prompts, sampling, **kw)
    assert got.completions == want.completions and torch.equal(got.completion_ids, want.completion_ids)
    torch.testing.assert_close(got.logprobs, want.logprobs)
    assert 0 < np.mean([len(c) < 12 for c in want.completions]) < 1  # some rows stopped early: compaction ran


def test_generator_reused_across_calls_is_unchanged(tiny):
    """A `Generator` (the fused weights folded once, as `evaluate` keeps one) draws in its second call what a fresh
    `generate` draws."""
    model, tok = tiny
    prompts, sampling = ["12+3=", "7>"], Sampling(temperature=0.8, max_new_tokens=8)
    for kind in ("fused", "native"):
        reused = Generator(model, tok, Forward(kind=kind))
        reused(prompts, sampling, n=3, seed=0)
        plain = generate(model, tok, prompts, sampling, n=5, seed=1, forward=Forward(kind=kind))
        given = reused(prompts, sampling, n=5, seed=1)
        assert plain.completions == given.completions and torch.equal(plain.logprobs, given.logprobs)


def test_tiny_evaluation_counts_agree_within_noise(habit_countdown):
    """The tiny spec's evaluation (T = 0.6) of 60 test problems x 64 samples on qwen2-s-habit, native forward:
    inverse-cdf's correct samples per problem differ from multinomial's by sampling noise only (the sum of the
    differences within 4 standard errors of two independent binomial draws per problem), and the greedy decodes
    (no sampling) agree exactly."""
    model, tok, task = habit_countdown
    examples = task.examples("test", n=60, seed=0)
    spec = EvalSpec(n_samples=64, temperature=0.6, ks=(1, 64), seed=0, forward="native")
    a = evaluate(model, tok, task, examples, spec, progress=False)
    b = evaluate(model, tok, task, examples, dataclasses.replace(spec, sampler="inverse-cdf"), progress=False)
    ca, cb = a.table["c"].to_numpy(), b.table["c"].to_numpy()
    q = (ca + cb) / 128
    se = np.sqrt((2 * 64 * q * (1 - q)).sum())  # [] the standard error of sum(ca - cb)
    assert se > 0 and abs(int(ca.sum()) - int(cb.sum())) <= 4 * se, (ca.sum(), cb.sum(), se)
    assert (a.table["greedy_correct"] == b.table["greedy_correct"]).all()
    assert not np.array_equal(ca, cb)  # other draws: the sampler was used


def test_sampler_fields_keep_stored_identities_and_are_checked(tiny):
    spec = EvalSpec(n_problems=300)
    added = ("forward", "backend", "sampler", "share_prefixes", "batch_size")  # fields added after runs were stored
    old = {"model": "m", "eval": {k: v for k, v in dataclasses.asdict(spec).items() if k not in added}}
    assert config_hash(stored_config("eval", {"model": "m", "eval": spec})) == config_hash(stored_config("eval", old))
    assert stored_config("eval", {"model": "m", "eval": dataclasses.replace(spec, sampler="inverse-cdf")})[
        "eval"]["sampler"] == "inverse-cdf"
    assert config_hash(GRPOConfig(sampler="inverse-cdf")) != config_hash(GRPOConfig())
    with pytest.raises(ValueError, match="EvalSpec.sampler"):
        EvalSpec(sampler="gumbel")
    with pytest.raises(ValueError, match="GRPOConfig.sampler"):
        GRPOConfig(sampler="gumbel")
    with pytest.raises(ValueError, match="GRPOConfig.sampler must be 'multinomial' with backend='vllm'"):
        GRPOConfig(sampler="inverse-cdf", backend="vllm")
    with pytest.raises(ValueError, match="Sampling.sampler must be one of .* got 'x'"):
        Sampling(sampler="x")
    with pytest.raises(ValueError, match="EvalSpec.sampler must be 'multinomial' with backend 'vllm'"):
        EvalSpec(backend="vllm", sampler="inverse-cdf")


@pytest.mark.parametrize("forward", ["fused", "native"])
@pytest.mark.parametrize("sampler", ["multinomial", "inverse-cdf", "greedy"])
def test_shared_prefixes_decode_the_same_samples(habit_countdown, forward, sampler):
    """`share_prefixes` (one cache row per distinct running prefix) gives the unshared decode's completions, with
    log-probs and entropies equal to float rounding, on the tiny evaluation's shapes (24 problems x 32 samples at
    T = 0.6, rows stopping and compacted at different steps), the draws being dealt to the same rows. Not bit for
    bit: the shared forward runs its gemms on fewer rows, and CPU BLAS picks kernels by row count (torch 2.13 on an
    AVX-512 machine rounds a gemm of <= 3 rows otherwise: entropies then differ by < 1e-9 at such a step)."""
    model, tok, task = habit_countdown
    prompts = [task.prompt(e, tok) for e in task.examples("test", n=24, seed=0)]
    n, sampling = (1, Sampling(greedy=True, max_new_tokens=task.max_new_tokens)) if sampler == "greedy" else (
        32, Sampling(temperature=0.6, sampler=sampler, max_new_tokens=task.max_new_tokens))
    a, b = (generate(model, tok, prompts, sampling, n=n, stop=task.stop, seed=3,
                     forward=Forward(kind=forward, batch_size=256, share_prefixes=share)) for share in (False, True))
    assert a.completions == b.completions
    assert torch.equal(a.completion_ids, b.completion_ids) and torch.equal(a.completion_mask, b.completion_mask)
    for name in ("logprobs", "entropies"):
        torch.testing.assert_close(getattr(b, name), getattr(a, name), rtol=1e-6, atol=1e-7, msg=name)


def test_evaluate_with_shared_prefixes_is_unchanged(habit_countdown):
    model, tok, task = habit_countdown
    examples = task.examples("test", n=16, seed=0)
    spec = EvalSpec(n_samples=16, temperature=0.6, ks=(1, 16), seed=0, forward="native", sampler="inverse-cdf")
    a = evaluate(model, tok, task, examples, spec, progress=False)
    b = evaluate(model, tok, task, examples, dataclasses.replace(spec, share_prefixes=True), progress=False)
    assert a.samples.equals(b.samples)  # the same completions and verdicts; the entropies to float rounding
    assert a.table.drop(columns="mean_entropy").equals(b.table.drop(columns="mean_entropy"))
    np.testing.assert_allclose(b.table["mean_entropy"], a.table["mean_entropy"], rtol=1e-6)
    assert "share_prefixes" not in stored_config("eval", {"eval": EvalSpec()})["eval"]
    assert stored_config("eval", {"eval": EvalSpec(forward="native", share_prefixes=True)})["eval"]["share_prefixes"]
    with pytest.raises(ValueError, match="EvalSpec.share_prefixes must be a bool, False with forward 'hf'"):
        EvalSpec(share_prefixes=True)
    with pytest.raises(ValueError, match="Forward.share_prefixes must be a bool, False with kind 'hf'"):
        Forward(share_prefixes=True)
