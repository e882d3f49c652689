"""Generation outputs pinned: the completion tokens of tiny Qwen2 and Llama models for a fixed seed on every forward
kind, both samplers, greedy and top-p, as they were before the decode loop's speed-ups of issue 43 (B6: the
decode step's draw without whole-vocabulary temporaries, the native attention split over threads). A change that
moves a single token fails here; one that only moves float rounding shows in the log-prob and entropy sums.

The pins were computed with torch 2.13 (MKL) on an x86-64 CPU with AVX2, one thread; another BLAS or CPU may round
the tiny models' logits differently and move a token: the cases below then regenerate them (print the hashes)."""

from __future__ import annotations

import hashlib

import pytest
import torch
from test_fused_llama import tiny_random_llama

from esreason_lib.models.generation import Forward, Sampling, generate
from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2

PROMPTS = ["12+3=", "7*8=", "100-1=", "9"]

CASES = [  # model, forward kind, shared prefixes, sampling fields, sha256[:16] of completion_ids, sum of logprobs,
    # sum of entropies
    ("qwen2", "hf", False, dict(temperature=0.8), "66577cd9c63c2865", -548.6415405273438, 548.9634399414062),
    ("qwen2", "fused", False, dict(temperature=0.8), "66577cd9c63c2865", -548.6415405273438, 548.9634399414062),
    ("qwen2", "native", True, dict(temperature=0.6, sampler="inverse-cdf"), "1a828d742ad2fd84", -544.88623046875,
     548.0170288085938),
    ("qwen2", "fused", True, dict(temperature=0.7, top_p=0.9), "eac9495822c181b0", -545.906494140625,
     548.5986938476562),
    ("llama", "native", True, dict(temperature=0.6, sampler="inverse-cdf"), "3a89172f39fc4f07", -279.4836120605469,
     270.0877990722656),
    ("llama", "fused", False, dict(temperature=1.0, top_p=0.8, sampler="inverse-cdf"), "b3e3aeb87d7aac06",
     -378.974609375, 419.92681884765625),
    ("llama", "native", False, dict(greedy=True), "deace8c1fdae16ea", -239.16244506835938, 432.79376220703125),
]


@pytest.fixture(scope="module")
def models():
    torch.set_num_threads(1)
    tok = build_char_tokenizer()
    return {"qwen2": tiny_random_qwen2(len(tok), seed=0), "llama": tiny_random_llama(len(tok))}, tok


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-shared{c[2]}-{'-'.join(map(str, c[3].values()))}")
def test_generation_outputs_are_pinned(models, case):
    name, kind, share, fields, digest, logprob_sum, entropy_sum = case
    by_name, tok = models
    ro = generate(by_name[name], tok, PROMPTS, Sampling(max_new_tokens=10, **fields), n=3, seed=5,
                  forward=Forward(kind=kind, share_prefixes=share, batch_size=8))
    assert hashlib.sha256(ro.completion_ids.numpy().tobytes()).hexdigest()[:16] == digest, ro.completions
    assert float(ro.logprobs.sum()) == pytest.approx(logprob_sum, rel=1e-5)
    assert float(ro.entropies.sum()) == pytest.approx(entropy_sum, rel=1e-5)
