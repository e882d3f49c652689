"""Estimators behind notebook 02 (`studies.diversity`): plain functions over documented shapes.

Shapes: `M` scoring members, `N` drawing members, `P` prompts, `S` samples per member and prompt, `B` rows
(samples), `T` completion positions, `V` vocabulary, `D` parameters, `K` directions.

- `tokenwise_kl`: JS_pol by the token-level (Rao-Blackwellised) chain rule, KL(pi_i || pi_bar) =
  E_{y ~ pi_i} sum_t KL(pi_i(.|y<t) || pi_bar(.|y<t)), where the mixture's next-token law is the posterior-
  weighted mixture pi_bar(.|y<t) = sum_j a_j(y<t) pi_j(.|y<t), a_j propto pi_j(y<t). Unbiased like the
  sequence-level Monte Carlo `metrics.js_policy`, but each sample contributes a positive O(sigma^2) quantity
  instead of an O(sigma) log-ratio, so the small-sigma end of a log-log plot is measurable with few samples.
  It needs the full next-token distribution of every member (`diversity_model_passes.full_logprobs`, its device
  logits bounded by a byte budget, its [B, Lc, V] float64 result whole on the CPU): tiny vocabularies only.
- `mis_success`: member success probabilities by self-normalised deterministic-mixture importance sampling
  over all the prompt's samples; `is_success`: from samples of one base policy. Shared samples keep the
  *differences* between members free of independent sampling noise (which would inflate JS_succ), and self-
  normalisation keeps estimates in [0, 1] and equal when all samples agree (no spurious spread near p = 0, 1).
- `probe_rows` / `prop1_table` / `prop1_slack`: Lemma 3 and Proposition 1 from per-prompt success probabilities.
- `grid_bootstrap` / `band_checks`: the uncertainty of a statistic of the (sigma, population, prompt) grid of
  Lemmas 1-2 (resampling populations and prompts), and the two one-sided checks (TOST) that it lies in a band.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import torch

from esreason_lib.metrics import as_probability, js_success
from esreason_lib.paper.findings import Check
from esreason_lib.paper.intervals import crossed_resample
from esreason_lib.paper.mde import mde_from_ci
from esreason_lib.paper.theory import lemma3_identity, prop1_bound, prop1_condition, weighted_pass
from esreason_lib.seeding import numpy_rng


def token_logprobs(logp: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-token log-probs of the sampled tokens under every member: logp [M, B, T, V], tokens/mask [B, T]
    -> [M, B, T] (0 where masked)."""
    idx = tokens[None, :, :, None].expand(logp.shape[0], -1, -1, 1)  # [M, B, T, 1]
    return torch.where(mask[None], logp.gather(-1, idx).squeeze(-1), 0.0)  # [M, B, T]


def tokenwise_kl(logp: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor, owner: torch.Tensor) -> torch.Tensor:
    """Rao-Blackwellised estimate of KL(pi_owner || pi_bar) per sampled row, pi_bar = (1/M) sum_j pi_j.

    `logp` [M, B, T, V]: log pi_j(. | x, y<t) for every member j at every position of every row; `tokens`,
    `mask` [B, T]: the sampled completions (row b drawn from member owner[b]); `owner` [B] long.
    Returns [B]: sum_t KL(pi_owner(.|y<t) || pi_bar(.|y<t)) over the row's masked positions; its mean over
    rows drawn from member i is an unbiased estimate of KL(pi_i || pi_bar) between sequence distributions.
    """
    tok = token_logprobs(logp, tokens, mask)  # [M, B, T]
    prefix = torch.cumsum(tok, dim=-1) - tok  # [M, B, T] log pi_j(y<t)
    log_a = prefix - torch.logsumexp(prefix, dim=0, keepdim=True)  # [M, B, T] posterior over members
    log_q = torch.logsumexp(log_a[..., None] + logp, dim=0)  # [B, T, V] mixture's next-token law
    own = logp[owner, torch.arange(logp.shape[1])]  # [B, T, V]
    kl_t = (own.exp() * (own - log_q)).sum(-1)  # [B, T]
    return torch.where(mask, kl_t, 0.0).sum(-1)  # [B]


def mis_success(seq_logp, correct) -> np.ndarray:
    """Self-normalised deterministic-mixture importance-sampling success probability of each member.

    `seq_logp` [M, B]: log pi_j(y_b) for rows drawn equally often from every member (so they are draws from
    pi_bar); `correct` [B] 0/1. Returns p [M] = sum_b r_jb c_b / sum_b r_jb with r_jb = pi_j(y_b) / pi_bar(y_b):
    in [0, 1] by construction, exactly equal across members when every sample (or none) is correct."""
    return is_success(seq_logp, _log_mean_exp(np.asarray(seq_logp, dtype=np.float64)), correct)


def _log_mean_exp(lp: np.ndarray) -> np.ndarray:
    """log mean_j exp(lp[j]) over axis 0: [M, B] -> [B]."""
    m = lp.max(axis=0)
    return m + np.log(np.exp(lp - m).mean(axis=0))


def is_success(seq_logp, base_logp, correct) -> np.ndarray:
    """Self-normalised importance-sampling success probability of each target from samples of a base policy.

    `seq_logp` [M, B]: log pi_j(y_b) under M targets; `base_logp` [B]: log of the sampling density of y_b;
    `correct` [B]. Returns p [M] = sum_b r_jb c_b / sum_b r_jb, r_jb = exp(lp_jb - lp_0b) (bias O(1/B))."""
    lw = np.asarray(seq_logp, dtype=np.float64) - np.asarray(base_logp, dtype=np.float64)[None]  # [M, B]
    w = np.exp(lw - lw.max(axis=1, keepdims=True))  # [M, B]
    return (w * np.asarray(correct, dtype=np.float64)[None]).sum(axis=1) / w.sum(axis=1)


def ess_fraction(seq_logp, base_logp) -> np.ndarray:
    """Effective sample size / B of the importance weights pi_j / pi_0 for each target: [M, B], [B] -> [M]."""
    lw = np.asarray(seq_logp, dtype=np.float64) - np.asarray(base_logp, dtype=np.float64)[None]  # [M, B]
    w = np.exp(lw - lw.max(axis=1, keepdims=True))
    return w.sum(axis=1) ** 2 / (w ** 2).sum(axis=1) / lw.shape[1]


def fitness_weights(z, scheme: str = "positive", temperature: float = 1.0) -> np.ndarray:
    """Normalised member weights from shaped fitness z [N] (the simplex weights of Lemma 3 / Proposition 1).

    "positive": w_i propto max(z_i, 0), the members the ES update moves toward (uniform when no z_i > 0);
    "softmax": w_i propto exp(z_i / temperature)."""
    z = np.asarray(z, dtype=np.float64).reshape(-1)  # [N]
    if scheme == "positive":
        pos = np.maximum(z, 0.0)
        return pos / pos.sum() if pos.sum() > 0 else np.full(z.size, 1.0 / z.size)
    if scheme == "softmax":
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        e = np.exp((z - z.max()) / temperature)
        return e / e.sum()
    raise ValueError(f"scheme must be 'positive' or 'softmax', got {scheme!r}")


def bernoulli_kl(a, b, floor: float = 1e-12):
    """KL(Bern(a) || Bern(b)) in nats, elementwise; 0 where a == b, otherwise b is clipped to [floor, 1 - floor]
    so that it stays finite."""
    a, b_raw = np.asarray(a, dtype=np.float64), b
    b = np.clip(np.asarray(b, dtype=np.float64), floor, 1 - floor)
    with np.errstate(divide="ignore", invalid="ignore"):
        kl = np.where(a > 0, a * np.log(a / b), 0.0) + np.where(a < 1, (1 - a) * np.log((1 - a) / (1 - b)), 0.0)
    kl = np.where(a == np.asarray(b_raw, dtype=np.float64), 0.0, np.maximum(kl, 0.0))  # equal: 0; rounding: >= 0
    return float(kl) if kl.ndim == 0 else kl


def pass_k(p, k: int):
    """Plug-in Pass@K 1 - (1 - p)^K of per-prompt success probabilities p (any shape).

    p within 1e-9 of [0, 1] is clipped into it (stored self-normalised estimates can sit 1 ulp above 1); further
    out raises."""
    return 1.0 - (1.0 - as_probability("p", p, tol=1e-9)) ** k


def loglog_slope(x, y):
    """Least-squares slope of log y against log x along the last axis: x [S] > 0, y [..., S] -> [...] (float for
    a 1-d y); NaN where a y is not positive and finite, or with fewer than 2 points."""
    lx = np.log(np.asarray(x, dtype=np.float64))  # [S]
    y = np.asarray(y, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ly = np.where((y > 0) & np.isfinite(y), np.log(np.where(y > 0, y, 1.0)), np.nan)  # [..., S]
        dx = lx - lx.mean()
        slope = ((ly - ly.mean(-1, keepdims=True)) * dx).sum(-1) / (dx ** 2).sum()
    slope = np.where(lx.size >= 2, slope, np.nan)
    return float(slope) if slope.ndim == 0 else slope


def nanmedian_rows(x) -> np.ndarray:
    """Median over the last three axes ignoring NaN: [..., S, R, P] -> [...]; NaN where every value is NaN."""
    x = np.asarray(x, dtype=np.float64)
    flat = x.reshape(*x.shape[:-3], -1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows: NaN, said by the check's status
        return np.nanmedian(flat, axis=-1)


def grid(cells: pd.DataFrame, column: str) -> np.ndarray:
    """[S, R, P] values of `column` over the (sigma, repeat, prompt) grid, sigmas ascending."""
    c = cells.sort_values(["sigma", "repeat", "prompt"])
    shape = tuple(c[k].nunique() for k in ("sigma", "repeat", "prompt"))
    if len(c) != np.prod(shape):
        raise ValueError(f"cells must hold every (sigma, repeat, prompt) once: {len(c)} rows for grid {shape}")
    return c[column].to_numpy(dtype=np.float64).reshape(shape)


def grid_bootstrap(grids, stat, *, n_boot: int = 2000, seed: int = 0, name: str = "") -> tuple[float, np.ndarray]:
    """(estimate, draws [n_boot]) of `stat` over (sigma, population, prompt) grids, bootstrapped hierarchically.

    `grids`: arrays [S, R, P] on one grid; `stat(*arrays)` maps [..., S, R, P] to [...]. Each resample draws the
    R populations with replacement and, shared by all of them (every population sampled every prompt), the P
    prompts; the sigmas are the design and stay. The first axis is independent populations, not training seeds."""
    grids = [np.asarray(g, dtype=np.float64) for g in grids]
    _, r, p = grids[0].shape
    rows, cols = crossed_resample(numpy_rng(seed, "grid_bootstrap", name), n_boot, r, p)  # [B, R], [B, P]
    ri, pi = rows[:, :, None], cols[:, None, :]  # [B, R, 1], [B, 1, P]
    draws = stat(*(np.moveaxis(g[:, ri, pi], 0, 1) for g in grids))  # each [B, S, R, P] -> [B]
    return float(stat(*grids)), np.asarray(draws, dtype=np.float64)


def band_checks(name: str, estimate: float, draws, band: tuple[float, float]) -> tuple[Check, Check]:
    """Two one-sided checks that a statistic lies inside `band` = (low, high): "name > low" and "name < high",
    both with the 95% percentile interval of `draws` (NaN draws leave them `not resolved`); no seed axis."""
    draws = np.asarray(draws, dtype=np.float64)
    low, high = (float(v) for v in np.quantile(draws, [0.025, 0.975])) if np.isfinite(draws).all() else (
        float("nan"), float("nan"))
    mde = mde_from_ci(low, high)
    return (Check(f"{name} > {band[0]:g}", estimate, low, high, mde, direction="greater", threshold=band[0]),
            Check(f"{name} < {band[1]:g}", estimate, low, high, mde, direction="less", threshold=band[1]))


# ------------------------------------------------------------------------------------------ Lemma 3 and Prop 1


def probe_rows(p_members, w, p_theta, p_plus, p_next) -> pd.DataFrame:
    """Lemma 3 and Proposition 1's inputs for one ES iteration, one row per probe prompt.

    `p_members` [P, N] (members), `w` [N] simplex weights, `p_theta`, `p_plus`, `p_next` [P] (the centre before
    the update, theta+ by importance sampling from the centre's samples, theta+ from fresh samples). Columns:
    prompt, p_theta, p_bar, p_w, p_plus, p_next, kl = KL(Bern(p_w) || Bern(p_plus)), lift = p_w - p_bar,
    lemma3_err = |p_w - p_bar - N Cov(w, p)| and js_succ (the members' JS diversity of success,
    `metrics.js_success`)."""
    p_members, p_theta, p_plus = (np.asarray(a, dtype=np.float64) for a in (p_members, p_theta, p_plus))
    w = np.broadcast_to(w, p_members.shape)  # [P, N]
    lhs, rhs = lemma3_identity(p_members, w)  # [P], [P]
    p_w = weighted_pass(p_members, w)  # [P]
    return pd.DataFrame({"prompt": np.arange(len(p_theta)), "p_theta": p_theta, "p_bar": p_members.mean(1),
                         "p_w": p_w, "p_plus": p_plus, "p_next": np.asarray(p_next, dtype=np.float64),
                         "kl": bernoulli_kl(p_w, p_plus), "lift": lhs, "lemma3_err": np.abs(lhs - rhs),
                         "js_succ": [js_success(row) for row in p_members]})


def prop1_table(probes: pd.DataFrame, ks) -> pd.DataFrame:
    """Proposition 1 per (seed, iteration, K), pooled over the probe prompts: jk_theta, jk_w, jk_plus, jk_next
    (mean plug-in Pass@K 1 - (1 - p)^K), eps (mean KL), margin = jk_w - jk_theta, threshold = K sqrt(eps / 2),
    condition (margin > threshold), change = jk_next - jk_theta (realised, on fresh samples of theta+), rose
    (change > 0), and the iteration's mean p_*, lift, reward_mean, ess_min and max lemma3_err."""
    means = ["p_theta", "p_bar", "p_w", "p_plus", "p_next", "lift", "reward_mean", "ess_min"]
    out = []
    for k in ks:
        jk = probes.assign(**{f"jk_{c}": pass_k(probes[f"p_{c}"], k) for c in ("theta", "w", "plus", "next")})
        g = jk.groupby(["seed", "iteration"])
        t = g[[f"jk_{c}" for c in ("theta", "w", "plus", "next")] + means].mean()
        t.insert(0, "k", int(k))
        t["eps"], t["lemma3_err"] = g["kl"].mean(), g["lemma3_err"].max()
        t["margin"], t["threshold"] = t["jk_w"] - t["jk_theta"], k * np.sqrt(t["eps"] / 2)
        t["condition"] = prop1_condition(t["eps"].to_numpy(), t["jk_w"].to_numpy(), t["jk_theta"].to_numpy(), k)
        t["change"] = t["jk_next"] - t["jk_theta"]
        t["rose"] = t["change"] > 0
        out.append(t.reset_index())
    return pd.concat(out, ignore_index=True)


def prop1_slack(probes: pd.DataFrame, k: int) -> np.ndarray:
    """[seeds, prompts]: mean over iterations of J_K(p_next) - (J_K(p_w) - K sqrt(kl / 2)), Proposition 1 applied
    prompt by prompt (its bound holds for any prompt distribution, a point mass included, and the per-prompt
    bounds average to a tighter one than the pooled bound, by Jensen). p_next comes from samples the bound was
    not computed from, so a negative value is evidence against it."""
    bound = prop1_bound(pass_k(probes["p_w"].to_numpy(), k), k, probes["kl"].to_numpy())  # [rows]
    slack = probes.assign(slack=pass_k(probes["p_next"].to_numpy(), k) - bound)
    return slack.groupby(["seed", "prompt"])["slack"].mean().unstack("prompt").to_numpy()  # [R, P]


def _per_seed_prompt(probes: pd.DataFrame, values, how: str = "mean") -> np.ndarray:
    """[R, P] of `values` (one per probes row) aggregated over iterations per (seed, prompt)."""
    t = probes[["seed", "prompt"]].assign(v=np.asarray(values, dtype=np.float64))
    return t.groupby(["seed", "prompt"])["v"].agg(how).unstack("prompt").to_numpy()


def condition_slack(probes: pd.DataFrame, k: int) -> np.ndarray:
    """[seeds, prompts]: mean over iterations of J_K(p_w) - J_K(p_theta) - K sqrt(kl / 2), Proposition 1's
    sufficient condition applied prompt by prompt (> 0: the condition holds and guarantees a rise)."""
    margin = pass_k(probes["p_w"].to_numpy(), k) - pass_k(probes["p_theta"].to_numpy(), k)
    return _per_seed_prompt(probes, margin - k * np.sqrt(probes["kl"].to_numpy() / 2))


def fresh_change(probes: pd.DataFrame, k: int) -> np.ndarray:
    """[seeds, prompts]: mean over iterations of J_K(p_next) - J_K(p_theta): the realised per-iteration change of
    the plug-in Pass@K, p_next from samples of theta+ that no other column was computed from."""
    return _per_seed_prompt(probes, pass_k(probes["p_next"].to_numpy(), k) - pass_k(probes["p_theta"].to_numpy(), k))


def diversity_link(probes: pd.DataFrame, k: int, start: str = "p_theta") -> np.ndarray:
    """[seeds, prompts']: per (seed, prompt), the correlation across iterations between the population's JS_succ
    and the change J_K(p_next) - J_K(`start`); prompts' = the prompts where it is defined for every seed (both
    series vary). Empty [seeds, 0] when there are none.

    `start` "p_theta" (the samples JS_succ was computed from: the two share their noise, so the correlation is
    negative even when the true change is 0, regression to the mean) or "p_fresh" (an independent draw of the same
    centre: JS_succ at t from one sample set, the change from fresh samples at t and t+1)."""
    change = pass_k(probes["p_next"].to_numpy(), k) - pass_k(probes[start].to_numpy(), k)
    t = probes[["seed", "prompt", "js_succ"]].assign(change=change)

    def corr(g):
        x, y = g["js_succ"].to_numpy(), g["change"].to_numpy()
        return float(np.corrcoef(x, y)[0, 1]) if len(x) > 2 and x.std() > 0 and y.std() > 0 else np.nan

    out = t.groupby(["seed", "prompt"])[["js_succ", "change"]].apply(corr).unstack("prompt")
    return out.loc[:, out.notna().all(axis=0)].to_numpy()
