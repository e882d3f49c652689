"""The paper's lemmas on hand-computable and analytic toy cases."""

import importlib
import sys
import types

import numpy as np
import pytest
import torch

from esreason_lib import metrics as M
from esreason_lib.paper import theory as T


# ----------------------------------------------------------------------------------------- Lemma 1
def test_lemma1_prediction_hand_values():
    assert T.lemma1_prediction(0.1, 2, 4.0) == pytest.approx(0.5 * 0.01 * 0.5 * 4.0)
    assert T.lemma1_prediction(0.3, 1, 7.0) == 0.0  # a single member has no diversity
    np.testing.assert_allclose(T.lemma1_prediction(np.array([0.1, 0.2]), 4, 2.0), [0.0075, 0.03])
    for args, match in [((-0.1, 2, 1.0), "sigma"), ((0.1, 0, 1.0), "N"), ((0.1, 2, -1.0), "fisher_trace")]:
        with pytest.raises(ValueError, match=match):
            T.lemma1_prediction(*args)


def test_categorical_fisher_trace_analytic():
    assert T.categorical_fisher_trace([0.0, 0.0]) == pytest.approx(0.5)  # 2 * 0.5 * 0.5
    assert T.categorical_fisher_trace([0.0, 0.0, 0.0, 0.0]) == pytest.approx(0.75)
    assert T.categorical_fisher_trace([50.0, 0.0, 0.0]) == pytest.approx(0.0, abs=1e-12)


def test_lemma1_matches_exact_js_on_categorical_toy():
    rng = np.random.default_rng(0)
    theta = np.array([0.5, -0.3, 1.0, 0.0, -1.2])  # logits of a categorical "policy" [V]
    sigma, n_members, draws = 0.05, 4, 3000
    eps = rng.standard_normal((draws, n_members, theta.size))
    logits = theta + sigma * eps  # [draws, N, V]
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    mean_js = np.mean(M.js_policy_exact(probs))
    predicted = T.lemma1_prediction(sigma, n_members, T.categorical_fisher_trace(theta))
    assert mean_js == pytest.approx(predicted, rel=0.04)


def test_fisher_trace_from_fn_categorical():
    theta = torch.tensor([0.2, -0.5, 1.0], requires_grad=True)
    p = torch.softmax(theta.detach(), 0).numpy()
    ys = [0, 2, 2]
    norms = T.per_sample_sq_grad_norms(lambda b: torch.log_softmax(theta, 0)[ys[b]], 3, [theta])
    expected = [((np.eye(3)[y] - p) ** 2).sum() for y in ys]  # grad log p_y = e_y - p
    np.testing.assert_allclose(norms, expected, rtol=1e-6)
    gen = torch.Generator().manual_seed(0)
    samples = torch.multinomial(torch.softmax(theta.detach(), 0), 4000, replacement=True, generator=gen)
    est = T.fisher_trace_from_fn(lambda b: torch.log_softmax(theta, 0)[samples[b]], 4000, [theta])
    assert est == pytest.approx(T.categorical_fisher_trace(theta.detach().numpy()), rel=0.05)
    with pytest.raises(ValueError, match="requires_grad"):
        T.per_sample_sq_grad_norms(lambda b: theta.sum(), 1, [theta.detach()])


class _ToyModel(torch.nn.Module):
    """Every completion token is an independent draw from softmax(logits) (ignores the prompt)."""

    def __init__(self, logits):
        super().__init__()
        self.logits = torch.nn.Parameter(torch.tensor(logits))


def _fake_completion_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask, *,
                              temperature=1.0, with_entropy=False):
    logp = torch.log_softmax(model.logits / temperature, 0)[completion_ids]  # [B, Lc]
    return logp * completion_mask, None


def test_fisher_trace_with_model(monkeypatch):
    fake = types.ModuleType("esreason_lib.models.generation")
    fake.completion_logprobs = _fake_completion_logprobs
    monkeypatch.setitem(sys.modules, "esreason_lib.models.generation", fake)
    model = _ToyModel([0.0, 1.0, -1.0])
    p = torch.softmax(model.logits.detach(), 0).numpy()
    completion_ids = torch.tensor([[0, 1], [2, 0]])  # second row has one real token (index 0 is padding)
    completion_mask = torch.tensor([[True, True], [True, False]])
    prompt_ids = torch.zeros(2, 3, dtype=torch.long)
    prompt_mask = torch.ones(2, 3, dtype=torch.bool)
    got = T.fisher_trace(model, prompt_ids, prompt_mask, completion_ids, completion_mask, per_sample=True)
    e = np.eye(3)
    expected = [((e[0] - p + e[1] - p) ** 2).sum(), ((e[2] - p) ** 2).sum()]
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert T.fisher_trace(model, prompt_ids, prompt_mask, completion_ids, completion_mask) \
        == pytest.approx(np.mean(expected))
    with pytest.raises(ValueError, match="rows"):
        T.fisher_trace(model, prompt_ids[:1], prompt_mask[:1], completion_ids, completion_mask)


def test_fisher_trace_real_generation_if_available():
    try:
        gen = importlib.import_module("esreason_lib.models.generation")
        models = importlib.import_module("esreason_lib.models.zoo")
        gen.completion_logprobs  # noqa: B018
        tokenizer = models.build_char_tokenizer()
        model = models.tiny_random_qwen2(len(tokenizer), seed=0).eval()
    except (ImportError, AttributeError, NotImplementedError) as err:
        pytest.skip(f"generation/models not available yet: {err}")
    prompt_ids = torch.tensor([[0, 5, 6], [7, 8, 9]])
    prompt_mask = prompt_ids != 0
    completion_ids = torch.tensor([[10, 11, 1], [12, 1, 0]])
    completion_mask = torch.tensor([[True, True, True], [True, True, False]])
    got = T.fisher_trace(model, prompt_ids, prompt_mask, completion_ids, completion_mask, per_sample=True)
    assert got.shape == (2,) and np.all(np.isfinite(got)) and np.all(got > 0)
    logp, _ = gen.completion_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask)
    grads = torch.autograd.grad((logp[1] * completion_mask[1]).sum(), list(model.parameters()), allow_unused=True)
    assert got[1] == pytest.approx(sum(float((g ** 2).sum()) for g in grads if g is not None), rel=1e-4)


# ----------------------------------------------------------------------------------------- Lemma 3
def test_lemma3_hand_values():
    p, w = [0.2, 0.4, 0.9], [0.5, 0.25, 0.25]
    assert T.weighted_pass(p, w) == pytest.approx(0.425)
    diff, ncov = T.lemma3_identity(p, w)
    assert diff == pytest.approx(-0.075) and ncov == pytest.approx(-0.075)
    assert T.lemma3_identity(p, [1 / 3] * 3)[1] == pytest.approx(0.0, abs=1e-15)


def test_lemma3_identity_random_batches():
    rng = np.random.default_rng(1)
    p = rng.random((50, 8))
    w = rng.random((50, 8))
    w /= w.sum(-1, keepdims=True)
    diff, ncov = T.lemma3_identity(p, w)
    assert diff.shape == (50,)
    np.testing.assert_allclose(diff, ncov, atol=1e-12)
    np.testing.assert_allclose(T.weighted_pass(p, w), (w * p).sum(-1))
    ones, w3 = np.ones(4), np.array([0.56, 0.02, 0.32, 0.1])  # these sum to 1 + 1 ulp: p_w stays 1, not above
    assert w3.sum() > 1.0 and T.weighted_pass(ones, w3) == 1.0


def test_lemma3_validation():
    with pytest.raises(ValueError, match="sum to 1"):
        T.weighted_pass([0.1, 0.2], [0.5, 0.6])
    with pytest.raises(ValueError, match="non-negative"):
        T.lemma3_identity([0.1, 0.2], [1.5, -0.5])
    with pytest.raises(ValueError, match="p must lie"):
        T.weighted_pass([0.1, 1.2], [0.5, 0.5])
    with pytest.raises(ValueError, match="broadcast"):
        T.weighted_pass([0.1, 0.2, 0.3], [0.5, 0.5])


# ----------------------------------------------------------------------------------------- Prop 1
def test_prop1_hand_values():
    # K sqrt(eps / 2) = 2 * sqrt(0.01) = 0.2
    assert T.prop1_bound(0.7, 2, 0.02) == pytest.approx(0.5)
    assert T.prop1_condition(0.02, 0.7, 0.45, 2) is True
    assert T.prop1_condition(0.02, 0.6, 0.45, 2) is False
    assert T.prop1_condition(0.0, 0.5, 0.4, 8) is True  # exact mixture fit: any gain counts
    np.testing.assert_array_equal(T.prop1_condition(0.02, np.array([0.7, 0.6]), 0.45, 2), [True, False])
    for args, match in [((-1.0, 0.5, 0.4, 2), "kl_eps"), ((0.1, 0.5, 0.4, 0), "k must"),
                        ((0.1, 1.5, 0.4, 2), "jk_w")]:
        with pytest.raises(ValueError, match=match):
            T.prop1_condition(*args)


def test_prop1_bound_holds_on_random_categoricals():
    rng = np.random.default_rng(2)
    for _ in range(300):
        v, k = rng.integers(2, 8), int(rng.integers(1, 9))
        success = rng.random(v) < 0.4  # which outcomes are correct
        pi_w = rng.dirichlet(np.ones(v))
        pi_new = rng.dirichlet(np.ones(v)) if rng.random() < 0.5 else 0.9 * pi_w + 0.1 * rng.dirichlet(np.ones(v))
        kl = float((pi_w * np.log(pi_w / pi_new)).sum())
        jk = lambda pi: 1.0 - (1.0 - pi[success].sum()) ** k  # noqa: E731
        assert jk(pi_new) >= T.prop1_bound(jk(pi_w), k, kl) - 1e-12
