"""The paper's lemmas and proposition, stated here once, as plain functions (notebook 02 checks them on runs;
`metrics` holds the measured quantities, `studies/diversity` the checks).

Setting: ES perturbs theta into N members theta_i = theta + sigma eps_i (eps_i ~ N(0, I)); pi_i is member i's
policy on a prompt x, p_i its success probability, w_i its (normalised) update weight.

- Lemma 1 (policy diversity): E[JS_pol] = (sigma^2 / 2) (1 - 1/N) tr I_x(theta) + O(sigma^4), where I_x is the
  Fisher information of the sequence distribution pi_theta(.|x) and JS_pol = (1/N) sum_i KL(pi_i || pi_bar).
- Lemma 2 (population coverage): projected on success, JS_succ = h(p_bar) - mean_i h(p_i) (binary entropy h,
  nats) lies in [0, JS_pol]; the population's chance that some member solves x, P_pop = 1 - prod_i (1 - p_i), is
  at least that of N draws from one policy of the same mean success, P_same = 1 - (1 - p_bar)^N, and
  P_pop - P_same ~= N p_bar (1 - p_bar)^(N-1) JS_succ when the spread is small (`metrics.js_success`,
  `metrics.pass_population`, `metrics.pass_same`, `metrics.pass_gap_approx`).
- Lemma 3 (weighted success): for weights on the simplex, p_w = sum_i w_i p_i satisfies
  p_w - p_bar = N Cov_i(w_i, p_i) (population covariance over members).
- Proposition 1 (Pass@K of the update): if KL between the weighted mixture pi_w and the updated policy
  pi_theta+ is at most eps, then J_K(pi_theta+) >= J_K(pi_w) - K sqrt(eps / 2) (Pinsker: TV <= sqrt(eps/2), and
  Pass@K is K-Lipschitz in TV); hence J_K(pi_w) - J_K(pi_theta) > K sqrt(eps / 2) implies J_K improves.

What data can falsify: Lemma 1's leading-order scaling and constant, Lemma 2's small-spread approximation, and
Proposition 1's bound against a theta+ measured on samples it was not computed from. The rest are identities that
hold for any numbers (Lemma 2's P_pop >= P_same is AM-GM, JS_succ >= 0 is Jensen, Lemma 3 is algebra, and
Proposition 1 on exact probabilities is Pinsker); `studies/diversity.finding` reports them as sanity checks only.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch

from esreason_lib.metrics import as_probability


def _out(x):
    return float(x) if np.ndim(x) == 0 else x


def _nonneg(name: str, x) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if np.any(~(arr >= 0)):
        raise ValueError(f"{name} must be >= 0, got {x!r}")
    return arr


# --------------------------------------------------------------------------------------------- Lemma 1


def lemma1_prediction(sigma, N, fisher_trace):
    """Lemma 1: E[JS_pol] ~= (sigma^2 / 2) (1 - 1/N) tr I_x(theta) (leading order in sigma; inputs broadcast).

    `sigma`: ES noise scale; `N`: population size (>= 1); `fisher_trace`: tr I_x(theta) (nats per unit^2)."""
    sigma, tr = _nonneg("sigma", sigma), _nonneg("fisher_trace", fisher_trace)
    n = np.asarray(N, dtype=np.float64)
    if np.any(~(n >= 1)):
        raise ValueError(f"N must be >= 1, got {N!r}")
    return _out(0.5 * sigma ** 2 * (1.0 - 1.0 / n) * tr)


def per_sample_sq_grad_norms(seq_logprob_fn: Callable[[int], torch.Tensor], n_samples: int,
                             params: Sequence[torch.Tensor]) -> np.ndarray:
    """||grad_params log pi(y_b | x)||^2 for b in range(n_samples): array [n_samples].

    `seq_logprob_fn(b)` must return the scalar (differentiable) sequence log-prob of sample b, where the
    samples y_b were drawn from pi itself (so the mean estimates the Fisher trace). One backward per sample."""
    params = [p for p in params if p.requires_grad]
    if not params:
        raise ValueError("params must contain at least one tensor with requires_grad=True")
    if n_samples < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples}")
    out = np.empty(n_samples)
    for b in range(n_samples):
        logp = seq_logprob_fn(b)
        if logp.numel() != 1:
            raise ValueError(f"seq_logprob_fn({b}) must return a scalar, got shape {tuple(logp.shape)}")
        grads = torch.autograd.grad(logp.reshape(()), params, allow_unused=True)
        out[b] = float(sum((g.double() ** 2).sum() for g in grads if g is not None))
    return out


def fisher_trace_from_fn(seq_logprob_fn: Callable[[int], torch.Tensor], n_samples: int,
                         params: Sequence[torch.Tensor]) -> float:
    """Monte Carlo tr I = E_y ||grad log pi(y|x)||^2: mean of `per_sample_sq_grad_norms` (samples from pi)."""
    return float(per_sample_sq_grad_norms(seq_logprob_fn, n_samples, params).mean())


def fisher_trace(model: torch.nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                 completion_ids: torch.Tensor, completion_mask: torch.Tensor, *, temperature: float = 1.0,
                 params: Sequence[torch.Tensor] | None = None, per_sample: bool = False):
    """tr I_x(theta) of the sequence distribution, estimated from completions sampled from `model` itself.

    `prompt_ids`/`prompt_mask` [B, Lp] (left-padded), `completion_ids`/`completion_mask` [B, Lc] as in
    `generation.Rollouts` (sampled at `temperature`, which must match). Each row b gives
    ||grad_theta sum_t logp[b, t]||^2 (one backward per row; tiny models only); `params` defaults to the
    model's trainable parameters. Returns the mean over rows (when rows hold several prompts this is
    E_x tr I_x), or with `per_sample=True` the array [B]. Put the model in eval mode first (no dropout).
    """
    from esreason_lib.models.generation import completion_logprobs  # lazy: generation sits above theory's peers

    if prompt_ids.shape[0] != completion_ids.shape[0]:
        raise ValueError(f"prompt_ids has {prompt_ids.shape[0]} rows but completion_ids has "
                         f"{completion_ids.shape[0]}")
    params = list(model.parameters()) if params is None else list(params)

    def seq_logprob(b: int) -> torch.Tensor:
        logp, _ = completion_logprobs(model, prompt_ids[b:b + 1], prompt_mask[b:b + 1],
                                      completion_ids[b:b + 1], completion_mask[b:b + 1],
                                      temperature=temperature)  # [1, Lc]
        return (logp * completion_mask[b:b + 1].to(logp.dtype)).sum()

    norms = per_sample_sq_grad_norms(seq_logprob, int(completion_ids.shape[0]), params)
    return norms if per_sample else float(norms.mean())


def categorical_fisher_trace(logits) -> float:
    """Exact tr I for a categorical with free logits theta [V]: sum_k p_k (1 - p_k) = 1 - ||p||^2."""
    z = np.asarray(logits, dtype=np.float64)
    p = np.exp(z - z.max())
    p /= p.sum()
    return float(1.0 - (p ** 2).sum())


# --------------------------------------------------------------------------------------------- Lemma 3


def _weights(p, w) -> tuple[np.ndarray, np.ndarray]:
    p = as_probability("p", p)
    w = np.asarray(w, dtype=np.float64)
    try:
        p, w = np.broadcast_arrays(p, w)
    except ValueError:
        raise ValueError(f"p shape {p.shape} and w shape {w.shape} do not broadcast") from None
    if p.ndim == 0:
        raise ValueError("p and w need a member axis (last axis), got scalars")
    if np.any(w < 0) or not np.allclose(w.sum(axis=-1), 1.0, atol=1e-8):
        raise ValueError(f"w must be non-negative and sum to 1 over members, got sums {w.sum(axis=-1)!r}")
    return p, w


def weighted_pass(p, w):
    """p_w = sum_i w_i p_i over the last (member) axis: [N] -> float, [P, N] -> [P]; w on the simplex.

    A convex combination lies between the smallest and largest p_i; the sum is clipped to that range, so weights
    summing to 1 + 1 ulp cannot put p_w above 1."""
    p, w = _weights(p, w)
    return _out(np.clip((w * p).sum(axis=-1), p.min(axis=-1), p.max(axis=-1)))


def lemma3_identity(p, w):
    """Lemma 3: returns (p_w - p_bar, N Cov_i(w_i, p_i)), equal up to rounding (population covariance)."""
    p, w = _weights(p, w)
    n = p.shape[-1]
    lhs = (w * p).sum(axis=-1) - p.mean(axis=-1)
    cov = ((w - w.mean(axis=-1, keepdims=True)) * (p - p.mean(axis=-1, keepdims=True))).mean(axis=-1)
    return _out(lhs), _out(n * cov)


# --------------------------------------------------------------------------------------------- Prop 1


def _prop1_inputs(kl_eps, k, **pass_values):
    eps = _nonneg("kl_eps", kl_eps)
    k_arr = np.asarray(k, dtype=np.float64)
    if np.any(~(k_arr >= 1)):
        raise ValueError(f"k must be >= 1, got {k!r}")
    for name, v in pass_values.items():
        as_probability(name, v)
    return eps, k_arr


def prop1_bound(jk_w, k, kl_eps):
    """Proposition 1 lower bound J_K(pi_theta+) >= J_K(pi_w) - K sqrt(eps / 2) (may be negative; inputs broadcast).

    `jk_w`: Pass@K of the weighted mixture pi_w; `k`: K; `kl_eps`: bound eps on KL(pi_w, pi_theta+)."""
    eps, k_arr = _prop1_inputs(kl_eps, k, jk_w=jk_w)
    return _out(np.asarray(jk_w, dtype=np.float64) - k_arr * np.sqrt(eps / 2.0))


def prop1_condition(kl_eps, jk_w, jk_theta, k):
    """Proposition 1 sufficient condition for J_K(pi_theta+) > J_K(pi_theta): J_K(pi_w) - J_K(pi_theta) > K sqrt(eps/2).

    Returns a bool for scalar inputs, else a bool array of the broadcast shape."""
    eps, k_arr = _prop1_inputs(kl_eps, k, jk_w=jk_w, jk_theta=jk_theta)
    cond = np.asarray(jk_w, dtype=np.float64) - np.asarray(jk_theta, dtype=np.float64) > k_arr * np.sqrt(eps / 2.0)
    return bool(cond) if cond.ndim == 0 else cond
