"""`sampling.next_tokens` against its former definition (kept here as `reference`: every [r, V] tensor materialised,
the non-finite safety as a `finite_rows` pass and a `nan_to_num` pass on every step): the same tokens, log-probs and
entropies, bit for bit, for both samplers, greedy and top-p, on random logits at the pretrained base's vocabulary
with a non-finite row, a row whose log-probabilities overflow, and all rows finite."""

from __future__ import annotations

import pytest
import torch

from esreason_lib.models.sampling import Sampling, finite_rows, inverse_cdf_tokens, next_tokens, top_p_filter


def reference(last, sampling: Sampling, gen, uniforms) -> tuple:
    """`next_tokens` as it was (it returned the whole [r, V] log-probabilities; here gathered at the tokens)."""
    logits = finite_rows(last.float() / sampling.scale)
    logp = torch.log_softmax(logits, dim=-1)
    probs = logp.exp()
    entropy = -(probs * logp).nan_to_num().sum(-1)
    if sampling.greedy:
        tok = logits.max(-1).indices
    else:
        weights = top_p_filter(probs, sampling.top_p) if sampling.top_p < 1.0 else probs
        tok = (torch.multinomial(weights, 1, generator=gen).squeeze(-1) if uniforms is None
               else inverse_cdf_tokens(weights, uniforms))
    return tok, logp.gather(-1, tok[:, None]).squeeze(-1), entropy


def logits_cases(rows: int = 6, vocab: int = 49_152) -> dict:
    """name -> logits [rows, vocab]: peaked like a language model's (a few large logits over a wide spread), all
    finite; with a NaN, a +inf and a -inf row; and with a row of finite logits whose log-probabilities overflow."""
    g = torch.Generator().manual_seed(0)
    base = torch.randn(rows, vocab, generator=g) * 4.0
    base[torch.arange(rows), torch.randint(vocab, (rows,), generator=g)] += 25.0
    bad = base.clone()
    bad[1, 7], bad[3, 100], bad[4, 5] = float("nan"), float("inf"), float("-inf")
    overflow = base.clone()
    overflow[2, 0], overflow[2, 1] = 3e38, -3e38  # x - max = -inf: p log p = 0 x -inf = NaN, counted 0
    return {"finite": base, "non-finite rows": bad, "overflowing row": overflow}


SAMPLINGS = [Sampling(greedy=True), Sampling(temperature=0.6), Sampling(temperature=0.6, sampler="inverse-cdf"),
             Sampling(temperature=0.7, top_p=0.9), Sampling(temperature=1.0, top_p=0.8, sampler="inverse-cdf")]


@pytest.mark.parametrize("sampling", SAMPLINGS, ids=lambda s: f"{s.sampler}-T{s.scale}-p{s.top_p}-g{s.greedy}")
@pytest.mark.parametrize("case", ["finite", "non-finite rows", "overflowing row"])
def test_next_tokens_equal_the_former_definition_bit_for_bit(sampling, case):
    last = logits_cases()[case]
    u = torch.rand(len(last), generator=torch.Generator().manual_seed(1))
    uniforms = u if sampling.sampler == "inverse-cdf" and not sampling.greedy else None
    got = next_tokens(last, sampling, torch.Generator().manual_seed(2), uniforms)
    want = reference(last, sampling, torch.Generator().manual_seed(2), uniforms)
    for name, a, b in zip(("tokens", "log-probs", "entropies"), got, want):
        assert a.shape == b.shape == (len(last),), name
        assert torch.equal(a, b), (case, name, a, b)
    assert torch.isfinite(got[2]).all()  # the non-finite rows sample uniformly: entropy log V
    if case == "non-finite rows":
        assert torch.allclose(got[2][[1, 3, 4]], torch.tensor(49_152.0).log().expand(3))


def test_next_tokens_leave_the_logits_untouched():
    last = logits_cases()["finite"]
    before = last.clone()
    next_tokens(last, Sampling(greedy=True), None, None)
    next_tokens(last, Sampling(temperature=0.6, sampler="inverse-cdf"), None, torch.rand(len(last)))
    assert torch.equal(last, before)
