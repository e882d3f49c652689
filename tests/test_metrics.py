"""Metrics on hand-computable cases."""

import math
import time

import numpy as np
import pytest
import torch

from esreason_lib import metrics as M


# ----------------------------------------------------------------------------------------- Pass@K
def test_pass_at_k_matches_exact_binomial_on_grid():
    for n in range(1, 257):
        cs = np.arange(0, n + 1)
        for k in sorted({1, 2, 3, 5, 8, 16, 32, 64, 128, 256, n} & set(range(1, n + 1))):
            got = M.pass_at_k(np.full_like(cs, n), cs, k)
            exact = np.array([1.0 - math.comb(n - c, k) / math.comb(n, k) for c in cs])
            np.testing.assert_allclose(got, exact, rtol=1e-9, atol=1e-12, err_msg=f"n={n} k={k}")


def test_pass_at_k_hand_values_and_types():
    assert M.pass_at_k(10, 3, 2) == pytest.approx(1 - 21 / 45)
    assert isinstance(M.pass_at_k(10, 3, 2), float)
    assert M.pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert M.pass_at_k(5, 0, 3) == 0.0
    assert M.pass_at_k(5, 3, 3) == 1.0  # n - c < k
    out = M.pass_at_k([10, 5], [3, 5], 2)
    assert isinstance(out, np.ndarray) and out.shape == (2,)
    np.testing.assert_allclose(out, [1 - 21 / 45, 1.0])
    np.testing.assert_allclose(M.pass_at_k(8, np.array([[0, 8], [4, 1]]), 1), [[0, 1], [0.5, 0.125]])


@pytest.mark.parametrize("args, match", [((4, 1, 5), "k must be <= n"), ((4, 1, 0), "k must be >= 1"),
                                         ((4, 5, 1), "c must be <= n"), ((-1, 0, 1), "n must be >= 0"),
                                         ((4, -2, 1), "c must be >= 0"), ((4.5, 1, 1), "n must hold integers")])
def test_pass_at_k_errors(args, match):
    with pytest.raises(ValueError, match=match):
        M.pass_at_k(*args)


def test_pass_at_k_curve_and_table():
    n, c = np.array([4, 4]), np.array([0, 2])
    np.testing.assert_allclose(M.pass_at_k_curve(n, c, [1, 2, 4]), [0.25, (0 + 5 / 6) / 2, 0.5])
    table = M.pass_at_k_table(n, c, [1, 2, 4], n_boot=200, random_state=0)
    assert list(table.columns) == ["k", "pass_at_k", "ci_low", "ci_high"]
    np.testing.assert_allclose(table["pass_at_k"], [0.25, 5 / 12, 0.5])
    assert (table["ci_low"] <= table["pass_at_k"]).all() and (table["pass_at_k"] <= table["ci_high"]).all()
    assert table["ci_low"].iloc[2] == 0.0 and table["ci_high"].iloc[2] == 1.0


def test_bootstrap_ci():
    const = np.full(20, 0.3)
    assert M.bootstrap_ci(const, n_boot=50) == pytest.approx((0.3, 0.3))
    vals = np.random.default_rng(1).random(200)
    low, high = M.bootstrap_ci(vals, n_boot=500, random_state=3)
    assert low < vals.mean() < high
    assert (low, high) == M.bootstrap_ci(vals, n_boot=500, random_state=3)  # deterministic
    se = vals.std() / np.sqrt(len(vals))  # normal approximation of the 95% interval
    assert high - low == pytest.approx(2 * 1.96 * se, rel=0.2)
    low2, high2 = M.bootstrap_ci(np.stack([vals, 2 * vals], axis=1), n_boot=500, random_state=3)
    np.testing.assert_allclose(low2, [low, 2 * low]) and np.testing.assert_allclose(high2, [high, 2 * high])
    custom = M.bootstrap_ci(vals, n_boot=500, random_state=3, statistic=lambda v: v.mean())
    assert custom == pytest.approx((low, high))
    with pytest.raises(ValueError, match="alpha"):
        M.bootstrap_ci(vals, alpha=1.5)


def test_bootstrap_ci_resamples_problem_indices_from_the_generator():
    vals = np.random.default_rng(2).random((40, 3))
    idx = np.random.default_rng(9).integers(0, 40, size=(300, 40))  # the draw scipy makes from the same seed
    expected = np.quantile(vals[idx].mean(axis=1), [0.05, 0.95], axis=0)
    low, high = M.bootstrap_ci(vals, n_boot=300, alpha=0.1, random_state=9)
    np.testing.assert_allclose([low, high], expected, rtol=1e-12)
    assert M.bootstrap_ci([0.7]) == (0.7, 0.7)  # one problem: every resample is the sample


def test_hierarchical_bootstrap_ci_hand_distribution():
    # Seed 0 scores [0, 0], seed 1 scores [0, 2]. A drawn seed's problem mean X is 0 w.p. 1/2 (seed 0) and, for
    # seed 1, 0 / 1 / 2 w.p. 1/8 / 1/4 / 1/8: P(X) = 5/8, 1/4, 1/8. The statistic (X1 + X2) / 2 has the CDF
    # 25/64 at 0, 45/64 at 0.5, 59/64 at 1, 63/64 at 1.5: 2.5%/97.5% quantiles 0 and 1.5, 25%/75% 0 and 1.
    vals = np.array([[0.0, 0.0], [0.0, 2.0]])
    assert M.hierarchical_bootstrap_ci(vals, n_boot=4000, random_state=0) == (0.0, 1.5)
    assert M.hierarchical_bootstrap_ci(vals, n_boot=4000, alpha=0.5, random_state=0) == (0.0, 1.0)
    assert M.hierarchical_bootstrap_ci(vals, n_boot=500, random_state=4) == \
        M.hierarchical_bootstrap_ci(vals, n_boot=500, random_state=4)  # deterministic
    low, high = M.hierarchical_bootstrap_ci(np.stack([vals, 3 * vals], axis=-1), n_boot=4000, random_state=0)
    np.testing.assert_allclose(low, [0.0, 0.0]) and np.testing.assert_allclose(high, [1.5, 4.5])


def test_hierarchical_bootstrap_ci_difference_and_errors():
    const = np.full((3, 5), 0.75)
    assert M.hierarchical_bootstrap_ci(const, n_boot=50, baseline=np.full((2, 5), 0.25)) == (0.5, 0.5)
    vals = np.array([[0.0, 0.0], [0.0, 2.0]])
    # a constant baseline shifts the distribution, whatever the draws spent on it
    assert M.hierarchical_bootstrap_ci(vals, n_boot=4000, baseline=np.ones((4, 2))) == (-1.0, 0.5)
    with pytest.raises(ValueError, match=r"values must have shape \[R seeds, P problems"):
        M.hierarchical_bootstrap_ci([0.1, 0.2])
    with pytest.raises(ValueError, match="baseline shape"):
        M.hierarchical_bootstrap_ci(vals, baseline=np.ones((2, 3)))
    with pytest.raises(ValueError, match="n_boot"):
        M.hierarchical_bootstrap_ci(vals, n_boot=0)


# ----------------------------------------------------------------------------------------- Maj@K
def test_maj_at_k_first_and_exact():
    answers = [["1", "2", "2", None], ["5", "6", None, None], [None, None, None, None]]
    correct = [[True, False, False, False], [True, False, False, False], [False] * 4]
    np.testing.assert_allclose(M.maj_at_k(answers, correct, 3, method="first"), [0.0, 0.5, 0.0])
    np.testing.assert_allclose(M.maj_at_k(answers, correct, 1, method="first"), [1.0, 1.0, 0.0])
    np.testing.assert_allclose(M.maj_at_k(answers, correct, 4), [0.0, 0.5, 0.0])  # k == n: exact


def test_maj_at_k_resample_estimates_expectation():
    # 3 samples: "a" (correct), "b", "b". Subsets of size 2: {a,b} x2 -> tie (0.5), {b,b} -> 0. Expectation 1/3.
    got = M.maj_at_k([["a", "b", "b"]], [[True, False, False]], 2, n_resamples=3000, random_state=0)
    assert got[0] == pytest.approx(1 / 3, abs=0.03)
    again = M.maj_at_k([["a", "b", "b"]], [[True, False, False]], 2, n_resamples=3000, random_state=0)
    np.testing.assert_array_equal(got, again)
    with pytest.raises(ValueError, match="k must be <= number of samples"):
        M.maj_at_k([["a"]], [[True]], 2)
    with pytest.raises(ValueError, match="method"):
        M.maj_at_k([["a"]], [[True]], 1, method="mode")


# ----------------------------------------------------------------------------------------- entropy
def test_mean_token_entropy():
    ent = np.array([[1.0, 2.0, 9.0], [3.0, 9.0, 9.0]])
    mask = np.array([[1, 1, 0], [1, 0, 0]], dtype=bool)
    assert M.mean_token_entropy(ent, mask) == pytest.approx(2.0)
    assert M.mean_token_entropy(torch.tensor(ent), torch.tensor(mask)) == pytest.approx(2.0)
    assert math.isnan(M.mean_token_entropy(ent, np.zeros_like(mask)))
    with pytest.raises(ValueError, match="shape"):
        M.mean_token_entropy(ent, mask[:, :2])


def test_token_entropy():
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0], [1000.0, 0.0, 0.0, 0.0], [0.0, 0.0, -float("inf"), -1e9]])
    ent = M.token_entropy(logits)
    assert ent.shape == (3,)
    np.testing.assert_allclose(ent.numpy(), [math.log(4), 0.0, math.log(2)], atol=1e-6)
    p = torch.tensor([0.2, 0.3, 0.5])
    assert M.token_entropy(p.log() + 7.0).item() == pytest.approx(-(p * p.log()).sum().item(), abs=1e-6)


# ----------------------------------------------------------------------------------------- Lemma 2
def test_binary_entropy_and_js_success():
    assert M.binary_entropy(0.0) == 0.0 and M.binary_entropy(1.0) == 0.0
    assert M.binary_entropy(0.5) == pytest.approx(math.log(2))
    np.testing.assert_allclose(M.binary_entropy([0.1, 0.9]), [0.3250829733914482] * 2)
    assert M.js_success([0.0, 1.0]) == pytest.approx(math.log(2))
    assert M.js_success([0.3, 0.3, 0.3]) == pytest.approx(0.0, abs=1e-15)
    out = M.js_success(np.array([[0.0, 1.0], [0.2, 0.2]]))
    np.testing.assert_allclose(out, [math.log(2), 0.0], atol=1e-15)
    with pytest.raises(ValueError, match="p must lie in"):
        M.js_success([0.5, 1.5])


def test_pass_population_and_same():
    assert M.pass_population([0.5, 0.5]) == pytest.approx(0.75)
    assert M.pass_population([0.0, 1.0]) == 1.0
    np.testing.assert_allclose(M.pass_population(np.array([[0.5, 0.5], [0.1, 0.0]])), [0.75, 0.1])
    assert M.pass_same(0.5, 2) == pytest.approx(0.75)
    assert M.pass_same(0.5, 2) <= M.pass_population([0.0, 1.0])  # diversity helps coverage
    with pytest.raises(ValueError, match="N must be"):
        M.pass_same(0.5, 0)


@pytest.mark.parametrize("n_members", [2, 4, 16])
@pytest.mark.parametrize("p_bar", [0.05, 0.3, 0.7])
def test_pass_gap_approx_is_leading_order(n_members, p_bar):
    d = np.random.default_rng(n_members).standard_normal(n_members)
    d -= d.mean()
    errors = []
    for spread in [1e-1, 1e-2, 1e-3]:
        p = p_bar + spread * min(p_bar, 1 - p_bar) * d / np.abs(d).max()
        gap = (1 - p.mean()) ** n_members - np.prod(1 - p)  # = P_pop - P_same without cancellation near 1
        assert gap == pytest.approx(M.pass_population(p) - M.pass_same(p.mean(), n_members), abs=1e-12)
        errors.append(abs(gap / M.pass_gap_approx(p) - 1.0))
    assert errors[0] < 0.05 and errors[2] < 5e-4 and errors[2] < errors[0] / 50  # relative error -> 0
    assert M.pass_gap_approx(np.full(n_members, p_bar)) == 0.0


# ----------------------------------------------------------------------------------------- JS_pol
def _exact_kl_mix(probs):
    mix = probs.mean(axis=0)
    return np.mean([(row * np.log(row / mix)).sum() for row in probs])


def test_js_policy_exact_hand_values():
    assert M.js_policy_exact([[1.0, 0.0], [0.0, 1.0]]) == pytest.approx(math.log(2))
    assert M.js_policy_exact([[0.3, 0.7], [0.3, 0.7]]) == pytest.approx(0.0, abs=1e-15)
    probs = np.array([[0.2, 0.3, 0.5], [0.6, 0.3, 0.1], [0.1, 0.1, 0.8]])
    assert M.js_policy_exact(probs) == pytest.approx(_exact_kl_mix(probs))
    np.testing.assert_allclose(M.js_policy_exact(np.stack([probs, probs])), [_exact_kl_mix(probs)] * 2)
    with pytest.raises(ValueError, match="sum"):
        M.js_policy_exact([[0.2, 0.2]])


def test_js_policy_estimator_matches_exact():
    rng = np.random.default_rng(0)
    probs = np.array([[0.2, 0.3, 0.5], [0.6, 0.3, 0.1], [0.1, 0.1, 0.8]])  # [N, V]
    n_members, n_samples = probs.shape[0], 20000
    samples = np.stack([rng.choice(3, size=n_samples, p=row) for row in probs])  # [N, S] drawn from member i
    logp = np.log(probs)[:, samples].transpose(1, 0, 2)  # [i, j, s] = log pi_j(y_{i,s})
    assert logp.shape == (n_members, n_members, n_samples)
    est = M.js_policy(logp)
    assert est == pytest.approx(M.js_policy_exact(probs), abs=0.01)
    batched = np.stack([logp, logp])  # [2, N, N, S]
    assert M.js_policy(batched) == pytest.approx(est)
    assert M.js_policy(torch.tensor(batched), per_prompt=True).shape == (2,)
    # identical members -> exactly zero
    assert M.js_policy(np.zeros((4, 4, 7))) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match=r"\[..., N, N, S\]"):
        M.js_policy(np.zeros((3, 4, 5)))


def test_majority_scores_hand_computed_rows():
    codes = np.array([[0, 1, 1], [0, 1, -1], [-1, -1, -1], [2, 2, 0]])  # [R=4, k=3]
    correct = np.array([[True, False, False], [True, False, False], [False] * 3, [True, False, False]])
    # row 0: "1" wins 2-1 and is wrong -> 0; row 1: tie 0/1 -> (1 + 0) / 2; row 2: no answer -> 0;
    # row 3: code 2 wins with one of its two samples correct -> 0.5
    np.testing.assert_allclose(M.majority_scores(codes, correct), [0.0, 0.5, 0.0, 0.5])
    with pytest.raises(ValueError, match="one shape"):
        M.majority_scores(codes, correct[:, :2])


def test_maj_at_k_resample_is_fast_enough_for_the_paper_protocol():
    rng = np.random.default_rng(0)
    answers = [[str(a) for a in rng.integers(0, 4, size=32)] for _ in range(50)]  # [P=50][n=32]
    correct = [[a == "0" for a in row] for row in answers]
    t0 = time.perf_counter()
    per_k = [M.maj_at_k(answers, correct, k, random_state=k) for k in range(1, 33)]
    assert time.perf_counter() - t0 < 5.0  # 500 problems x 32 K at paper scale: well under a minute
    np.testing.assert_allclose(per_k[0], np.mean(correct, axis=1), atol=0.15)  # Maj@1 = a random sample's accuracy


def test_as_probability_clips_within_tol_and_names_the_field_beyond():
    np.testing.assert_array_equal(M.as_probability("p", [0.0, 0.5, 1.0]), [0.0, 0.5, 1.0])
    np.testing.assert_array_equal(M.as_probability("p_w", [1 + 2e-16, -1e-12], tol=1e-9), [1.0, 0.0])
    with pytest.raises(ValueError, match=r"p_w must lie in \[0, 1\], got \[1.1\]"):
        M.as_probability("p_w", [0.5, 1.1], tol=1e-9)
    with pytest.raises(ValueError, match="q must lie in"):
        M.as_probability("q", [1 + 2e-16])  # tol 0: an ulp above 1 is refused
    with pytest.raises(ValueError, match="nan"):
        M.as_probability("p", [float("nan")], tol=1e-9)
