"""Notebook 02: the paper's theory (Lemmas 1-3, Proposition 1) checked numerically on the tiny model.

Lemmas 1-2 (`compute_lemmas`): independent populations of iid members at each sigma on held-out prompts; JS_pol
by the token-level chain rule, member success probabilities by importance sampling, the Fisher trace and each
drawn population's own second-order prediction from per-sample gradients (`diversity_estimators`).
Lemma 3 and Proposition 1 (`compute_prop1`): along the first iterations of the preset's ES run, the center
samples fixed held-out probe prompts and those samples, scored under every member and the updated center theta+,
give p_theta, p_i and p_theta+ by importance sampling (common random numbers, so differences are not drowned in
sampling noise); Pass@K is the plug-in 1 - (1 - p)^K for all three policies.
"""

from __future__ import annotations

from dataclasses import asdict, replace

import numpy as np
import pandas as pd
import torch

from ..es import ES, ESConfig, es_step
from ..es_backends import SequentialBackend
from ..es_noise import named_params, perturbed
from ..findings import Finding, make_finding
from ..generation import generate
from ..metrics import js_policy, js_success, pass_gap_approx, pass_population, pass_same
from ..models import load_model
from ..presets import Preset
from ..progress import progress_bar
from ..runs import Run
from ..seeding import derive_seed, numpy_rng
from ..tasks import get_task
from ..theory import lemma1_prediction, lemma3_identity, prop1_condition, weighted_pass
from ..training import config_task, resolve_device
from .diversity_estimators import (bernoulli_kl, ess_fraction, fisher_projections, fitness_weights, flat_directions,
                                   full_logprobs, is_success, loglog_slope, mis_success, pass_k, sequence_logp,
                                   stack_rollouts, token_logprobs, tokenwise_kl)


def _sample(model, tokenizer, task, prompts, n, seed):
    return generate(model, tokenizer, prompts, n=n, temperature=1.0, max_new_tokens=task.max_new_tokens,
                    stop=task.stop, seed=seed)


# ------------------------------------------------------------------------------------------ Lemmas 1 and 2


def lemma_cells(model, tokenizer, task, examples, *, sigmas, population: int, repeats: int, samples: int,
                fisher_samples: int, seed: int = 0, progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Lemma 1 and 2 quantities for `repeats` independent populations of `population` iid members per sigma.

    Every member theta + sigma eps_i (signs +1, no mirroring: Lemma 1's (1 - 1/N) assumes iid eps_i) samples
    `samples` completions (T = 1) per prompt; every sample is scored under every member with the full
    next-token distribution. The same eps_i and sampling seeds serve every sigma (common random numbers).
    `fisher_samples` samples per prompt of the unperturbed model give tr I_x(theta) and, per drawn population,
    Q = (1/N) sum_i (eps_i - eps_bar)' I_x (eps_i - eps_bar), whose expectation over draws is (1 - 1/N) tr I_x.
    Returns (cells, members): cells one row per (sigma, repeat, prompt) with fisher_trace, prediction (Lemma 1,
    the expectation), prediction_pop (sigma^2 Q / 2, the drawn population's second-order value), js_pol
    (token-level), js_pol_mc (`metrics.js_policy`), js_succ, n_correct (correct among the prompt's n_samples =
    N*S samples), p_bar, p_pop, p_same, gap, gap_approx; members one row per (sigma, repeat, prompt, member)
    with p (self-normalised importance-sampling estimate).
    """
    prompts = [task.prompt(ex, tokenizer) for ex in examples]
    n_p, n, s_ = len(prompts), population, samples
    seeds = [numpy_rng(seed, "diversity", "members", r).integers(0, 2**62, size=n).tolist() for r in range(repeats)]
    center = _sample(model, tokenizer, task, prompts, fisher_samples, derive_seed(seed, "diversity", "fisher"))
    sq, proj = fisher_projections(model, center.prompt_ids, center.prompt_mask, center.completion_ids,
                                  center.completion_mask, flat_directions(model, sum(seeds, [])))  # [B], [B, R*N]
    trace = sq.reshape(n_p, fisher_samples).mean(1)  # [P]
    proj = proj.reshape(n_p, fisher_samples, repeats, n)  # [P, F, R, N]
    quad = ((proj - proj.mean(-1, keepdims=True)) ** 2).mean(-1).mean(1)  # [P, R]: Q per prompt and population
    params = named_params(model)
    cells, members = [], []
    grid = [(sig, r) for r in range(repeats) for sig in sigmas]
    for sigma, rep in progress_bar(grid, disable=not progress, desc="lemmas 1-2"):
        rolls = []
        for i, sd in enumerate(seeds[rep]):
            with perturbed(params, sd, 1, sigma):
                rolls.append(_sample(model, tokenizer, task, prompts, s_, derive_seed(seed, "diversity", rep, i)))
        pid, pmask, cid, cmask = stack_rollouts(rolls, tokenizer.pad_token_id)  # rows (member, prompt, sample)
        logp = []
        for sd in seeds[rep]:
            with perturbed(params, sd, 1, sigma):
                logp.append(full_logprobs(model, pid, pmask, cid, cmask))
        logp = torch.stack(logp)  # [M, B, T, V]
        cid, cmask = cid.cpu(), cmask.cpu()
        seq = token_logprobs(logp, cid, cmask).sum(-1).numpy()  # [M, B]
        correct = np.array([task.is_correct(c, examples[p]) for r in rolls
                            for c, p in zip(r.completions, r.prompt_index())], dtype=np.float64)  # [B]
        rows = np.arange(cid.shape[0]).reshape(n, n_p, s_)  # [N, P, S]
        owner = torch.arange(n).repeat_interleave(s_)  # [N*S] member of each row of one prompt
        for p in range(n_p):
            idx = rows[:, p].reshape(-1)  # [N*S]
            t_idx = torch.as_tensor(idx)
            kl = tokenwise_kl(logp[:, t_idx], cid[t_idx], cmask[t_idx], owner).numpy()  # [N*S]
            p_i = mis_success(seq[:, idx], correct[idx])  # [N]
            p_bar = float(p_i.mean())
            cells.append({"sigma": sigma, "repeat": rep, "prompt": p, "fisher_trace": trace[p],
                          "prediction": lemma1_prediction(sigma, n, trace[p]),
                          "prediction_pop": 0.5 * sigma**2 * quad[p, rep], "js_pol": float(kl.mean()),
                          "js_pol_mc": js_policy(np.transpose(seq[:, rows[:, p]], (1, 0, 2))),
                          "js_succ": js_success(p_i), "n_correct": int(correct[idx].sum()),
                          "n_samples": len(idx), "p_bar": p_bar, "p_pop": pass_population(p_i),
                          "p_same": pass_same(p_bar, n), "gap_approx": pass_gap_approx(p_i)})
            members += [{"sigma": sigma, "repeat": rep, "prompt": p, "member": i, "p": v} for i, v in enumerate(p_i)]
    cells = pd.DataFrame(cells)
    cells["gap"] = cells["p_pop"] - cells["p_same"]
    return cells, pd.DataFrame(members)


def lemma1_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Per sigma: measured JS_pol (mean over populations and prompts, with its standard error over populations),
    the sequence-level Monte Carlo value, the Lemma 1 prediction (expectation over draws) and the drawn
    populations' own second-order value, with the ratios measured / predicted."""
    per_rep = cells.groupby(["sigma", "repeat"])["js_pol"].mean().groupby("sigma")
    out = cells.groupby("sigma")[["js_pol", "js_pol_mc", "prediction", "prediction_pop"]].mean()
    out["js_pol_se"] = per_rep.std(ddof=1).fillna(0.0) / np.sqrt(per_rep.size())
    out["ratio"] = out["js_pol"] / out["prediction"]
    out["ratio_pop"] = out["js_pol"] / out["prediction_pop"]
    return out.reset_index()[["sigma", "js_pol", "js_pol_se", "js_pol_mc", "prediction", "ratio", "prediction_pop",
                              "ratio_pop"]]


def compute_lemmas(preset: Preset, *, home=None, progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`lemma_cells` on the preset's base model and held-out prompts; cached as a `diversity-lemmas` run."""
    config = {"model": preset.base_model, "task": preset.task, "task_kwargs": dict(preset.task_kwargs),
              "sigmas": list(preset.lemma.sigmas), "population": preset.lemma.population,
              "repeats": preset.lemma.repeats, "prompts": preset.lemma.prompts,
              "samples": preset.lemma.samples, "fisher_samples": preset.lemma.fisher_samples,
              "seed": preset.seeds[0], "version": 2}
    run = Run.open("diversity-lemmas", config, seed=preset.seeds[0], home=home)
    if run.is_complete():
        return run.read_table("cells"), run.read_table("members")
    model, tokenizer = load_model(preset.base_model, device=resolve_device(preset.device), home=home,
                                  progress=progress)
    task = get_task(preset.task, **preset.test_task_kwargs())
    examples = task.examples("test", n=preset.lemma.prompts, seed=preset.eval.seed)
    cells, members = lemma_cells(model, tokenizer, task, examples, sigmas=preset.lemma.sigmas,
                                 population=preset.lemma.population, repeats=preset.lemma.repeats,
                                 samples=preset.lemma.samples, fisher_samples=preset.lemma.fisher_samples,
                                 seed=preset.seeds[0], progress=progress)
    run.write_table("cells", cells)
    run.write_table("members", members)
    run.finish()
    return cells, members


# ------------------------------------------------------------------------------------------ Lemma 3 and Prop 1


def prop1_step(p_members, w, p_theta, p_plus, ks) -> pd.DataFrame:
    """Lemma 3 and Proposition 1 for one ES iteration from per-prompt success probabilities.

    `p_members` [P, N] (members on the probe prompts), `w` [N] simplex weights, `p_theta`, `p_plus` [P] (center
    before and after the update). One row per K: jk_theta, jk_w, jk_plus (mean plug-in Pass@K), eps
    (mean_x KL(Bern(p_w) || Bern(p_plus))), margin = jk_w - jk_theta, threshold = K sqrt(eps / 2), condition,
    rose (jk_plus > jk_theta), and the iteration's p_theta, p_bar, p_w, p_plus, lift (mean p_w - p_bar) and
    lemma3_err (max over prompts of |p_w - p_bar - N Cov(w, p)|)."""
    p_members, p_theta, p_plus = (np.asarray(a, dtype=np.float64) for a in (p_members, p_theta, p_plus))
    lhs, rhs = lemma3_identity(p_members, np.broadcast_to(w, p_members.shape))  # [P], [P]
    p_w = weighted_pass(p_members, np.broadcast_to(w, p_members.shape))  # [P]
    eps = float(np.mean(bernoulli_kl(p_w, p_plus)))
    rows = []
    for k in ks:
        jt, jw, jp = (float(np.mean(pass_k(p, k))) for p in (p_theta, p_w, p_plus))
        rows.append({"k": int(k), "jk_theta": jt, "jk_w": jw, "jk_plus": jp, "eps": eps, "margin": jw - jt,
                     "threshold": float(k * np.sqrt(eps / 2)), "condition": prop1_condition(eps, jw, jt, k),
                     "rose": jp > jt, "p_theta": float(p_theta.mean()), "p_bar": float(p_members.mean()),
                     "p_w": float(p_w.mean()), "p_plus": float(p_plus.mean()), "lift": float(np.mean(lhs)),
                     "lemma3_err": float(np.max(np.abs(np.asarray(lhs) - np.asarray(rhs))))})
    return pd.DataFrame(rows)


def prop1_trajectory(config: ESConfig, model, tokenizer, task, probes, *, samples: int, ks, scheme: str = "positive",
                     progress: bool = True) -> pd.DataFrame:
    """Run `config.iterations` iterations of `es.es_step` (so the trajectory is the first iterations of the
    `train_es` run of `config`) and evaluate Lemma 3 and Proposition 1 at each: before the update, the center
    samples `samples` completions per probe prompt (T = 1), scored under the center and every member; after it,
    under the updated center; weights are `fitness_weights` of the iteration's shaped fitness. Returns the stacked
    `prop1_step` tables with `iteration`, `reward_mean` and `ess_min` (smallest importance-sampling effective
    sample size fraction over members)."""
    examples = task.examples("train", n=config.train_size, seed=0)
    backend = SequentialBackend.from_config(config, task, tokenizer)
    es = ES(config, model)
    theta0 = {k: p.detach().to("cpu", copy=True) for k, p in es.params.items()}
    prompts = [task.prompt(ex, tokenizer) for ex in probes]
    shape = (len(probes), samples)
    out = []
    for it in progress_bar(range(config.iterations), disable=not progress, desc="prop 1"):
        ro = _sample(model, tokenizer, task, prompts, samples, derive_seed(config.seed, "diversity", "probe", it))
        batch = (ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
        correct = np.array([task.is_correct(c, probes[p]) for c, p in zip(ro.completions, ro.prompt_index())],
                           dtype=np.float64).reshape(shape)  # [P, S]
        lp0 = sequence_logp(model, *batch).reshape(shape)  # [P, S]
        at_theta = {}

        def score_members(pop, ev):  # the model is still theta: score the probes under every member
            lp = []
            for sd, sign in zip(pop.seeds.tolist(), pop.signs.tolist()):
                with perturbed(es.params, sd, int(sign), config.sigma):
                    lp.append(sequence_logp(model, *batch).reshape(shape))
            at_theta["lp"] = np.stack(lp, axis=1)  # [P, N, S]
            at_theta["w"] = fitness_weights(es.shaping(ev.rewards), scheme)  # [N]

        _, ev = es_step(es, model, tokenizer, task, examples, backend, theta0=theta0, before_tell=score_members)
        lp, w = at_theta["lp"], at_theta["w"]
        lp_plus = sequence_logp(model, *batch).reshape(shape)  # [P, S] under theta+
        p_members = np.stack([is_success(lp[p], lp0[p], correct[p]) for p in range(len(probes))])  # [P, N]
        p_plus = np.array([is_success(lp_plus[p][None], lp0[p], correct[p])[0] for p in range(len(probes))])
        ess = ess_fraction(lp.transpose(1, 0, 2).reshape(lp.shape[1], -1), lp0.reshape(-1))  # [N]
        out.append(prop1_step(p_members, w, correct.mean(1), p_plus, ks).assign(
            iteration=it + 1, reward_mean=float(ev.rewards.mean()), ess_min=float(ess.min())))
    return pd.concat(out, ignore_index=True)


def compute_prop1(preset: Preset, *, home=None, progress: bool = True, scheme: str = "positive") -> pd.DataFrame:
    """`prop1_trajectory` for the preset's ES (seed `preset.seeds[0]`, `prop1.iterations` iterations) on
    `prop1.probe_prompts` held-out prompts; cached as a `diversity-prop1` run."""
    config = replace(preset.es, iterations=preset.prop1.iterations, seed=preset.seeds[0])
    key = {"es": asdict(config), "probes": preset.prop1.probe_prompts, "samples": preset.prop1.samples,
           "ks": list(preset.prop1.ks), "scheme": scheme, "probe_seed": preset.eval.seed, "version": 1}
    run = Run.open("diversity-prop1", key, seed=config.seed, home=home)
    if run.is_complete():
        return run.read_table("iterations")
    device = resolve_device(config.device)
    model, tokenizer = load_model(config.model, device=device, dtype=getattr(torch, config.dtype), home=home,
                                  progress=progress)
    task = config_task(config)
    probes = get_task(config.task, **preset.test_task_kwargs()).examples("test", n=preset.prop1.probe_prompts,
                                                                         seed=preset.eval.seed)
    table = prop1_trajectory(config, model, tokenizer, task, probes, samples=preset.prop1.samples,
                             ks=preset.prop1.ks, scheme=scheme, progress=progress)
    run.write_table("iterations", table)
    run.finish()
    return table


# ------------------------------------------------------------------------------------------ tables and finding


def small_sigmas(sigmas) -> list[float]:
    """The small-sigma regime of the check: the smallest half of the sigmas (at least two when available)."""
    s = sorted(set(float(x) for x in sigmas))
    return s[:max(min(2, len(s)), (len(s) + 1) // 2)]


RESOLVED = 3
"""A cell's success split is *resolved* when its samples hold at least this many successes and failures."""


def lemma2_resolved(cells: pd.DataFrame) -> pd.Series:
    """Cells whose prompt had >= RESOLVED correct and >= RESOLVED incorrect samples: there the importance-sampling
    p_i are informative; with one or two failures (or successes) JS_succ's estimate is dominated by noise."""
    return (cells["n_correct"] >= RESOLVED) & (cells["n_samples"] - cells["n_correct"] >= RESOLVED)


def lemma1_plot_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Long table (sigma, estimator, js) for the log-log plot: JS_pol measured (token-level and sequence Monte
    Carlo; non-positive values dropped) and the drawn populations' second-order value sigma^2 Q / 2."""
    t = lemma1_table(cells)
    series = {"JS_pol token-level": "js_pol", "JS_pol sequence MC": "js_pol_mc",
              "sigma^2 Q / 2 (drawn populations)": "prediction_pop"}
    long = pd.concat([t[["sigma"]].assign(estimator=k, js=t[v]) for k, v in series.items()], ignore_index=True)
    return long[long["js"] > 0]


def prop1_plot_table(table: pd.DataFrame) -> pd.DataFrame:
    """Long table (iteration, k, quantity, value): the margin J_K(pi_w) - J_K(pi_theta), the threshold
    K sqrt(eps / 2) and the realised change J_K(pi_theta+) - J_K(pi_theta)."""
    parts = {"J_K(w) - J_K(theta)": table["margin"], "K sqrt(eps/2)": table["threshold"],
             "J_K(theta+) - J_K(theta)": table["jk_plus"] - table["jk_theta"]}
    return pd.concat([table[["iteration", "k"]].assign(quantity=q, value=v.to_numpy()) for q, v in parts.items()],
                     ignore_index=True)


def prop1_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per K: iterations, how often the condition held, how often Pass@K rose among those and overall."""
    g = table.groupby("k")
    return pd.DataFrame({"iterations": g.size(), "condition": g["condition"].sum(),
                         "rose_given_condition": g.apply(lambda d: int((d["condition"] & d["rose"]).sum()),
                                                         include_groups=False),
                         "rose": g["rose"].sum()}).reset_index()


def _lemma1_sentence(t1: pd.DataFrame, small) -> str:
    ts, big = t1[t1["sigma"].isin(small)], t1.iloc[-1]
    slope_small, slope_all = loglog_slope(ts["sigma"], ts["js_pol"]), loglog_slope(t1["sigma"], t1["js_pol"])
    return (f"Lemma 1: log-log slope of JS_pol {slope_small:.2f} for sigma <= {max(small):g} ({slope_all:.2f} over "
            f"{t1['sigma'].min():g}-{t1['sigma'].max():g}), measured/predicted {ts['ratio'].min():.2f}-"
            f"{ts['ratio'].max():.2f} there ({ts['ratio_pop'].min():.2f}-{ts['ratio_pop'].max():.2f} against the "
            f"drawn populations' own second-order value) and {big['ratio']:.2f} at sigma={big['sigma']:g}")


def _lemma2_sentence(cells: pd.DataFrame, small) -> str:
    bound = (cells["js_succ"] >= -1e-12) & (cells["js_succ"] <= cells["js_pol"])
    resolved = lemma2_resolved(cells)
    pp = (cells["p_pop"] >= cells["p_same"] - 1e-12).sum()
    sc = cells[cells["sigma"].isin(small) & resolved & (cells["gap_approx"] > 0)]
    gap = f"{np.median(sc['gap'] / sc['gap_approx']):.2f}" if len(sc) else "n/a (no spread)"
    return (f"Lemma 2: 0 <= JS_succ <= JS_pol in {bound.sum()}/{len(cells)} (sigma, population, prompt) cells "
            f"({bound[resolved].sum()}/{resolved.sum()} where the prompt had >= {RESOLVED} successes and failures), "
            f"P_pop >= P_same in {pp}/{len(cells)}, median gap/approximation {gap} (resolved cells, sigma <= "
            f"{max(small):g})")


def _lemma3_prop1_sentence(prop1: pd.DataFrame) -> str:
    lemma3, s1 = prop1.drop_duplicates("iteration"), prop1_summary(prop1)
    n_it = int(s1["iterations"].max()) if len(s1) else 0
    ks, held, rose_c, rose = ("/".join(str(int(v)) for v in s1[c])
                              for c in ("k", "condition", "rose_given_condition", "rose"))
    return (f"Lemma 3 (ES fitness weights): identity max error {lemma3['lemma3_err'].max():.1e}, mean p_w - p_bar "
            f"{lemma3['lift'].mean():+.4f}; Prop 1 (K={ks}): condition held in {held} of {n_it} iterations, "
            f"Pass@K rose in {rose_c} of those ({rose} of {n_it} overall)")


def describe_diversity(cells: pd.DataFrame, prop1: pd.DataFrame) -> str:
    """The finding line of notebook 02, computed from the Lemma 1-2 cells and the Proposition 1 table: one
    clause per lemma, the small-sigma regime being `small_sigmas` of the grid."""
    t1 = lemma1_table(cells)
    small = small_sigmas(t1["sigma"])
    return "; ".join((_lemma1_sentence(t1, small), _lemma2_sentence(cells, small), _lemma3_prop1_sentence(prop1)))


# ------------------------------------------------------------------------------------------ the study face


def compute(preset: Preset, *, home=None, progress: bool = True) -> dict[str, pd.DataFrame]:
    """Notebook 02's tables, from cached runs: {"cells", "members"} (`compute_lemmas`) and {"prop1"}
    (`compute_prop1`)."""
    cells, members = compute_lemmas(preset, home=home, progress=progress)
    return {"cells": cells, "members": members, "prop1": compute_prop1(preset, home=home, progress=progress)}


def finding(tables: dict[str, pd.DataFrame]) -> Finding:
    """Notebook 02's finding from `compute`'s tables."""
    return make_finding(describe_diversity(tables["cells"], tables["prop1"]), checks=())
