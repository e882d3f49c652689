"""Notebook 02's two measurements on a loaded model: Lemmas 1-2 on independent populations at each sigma
(`lemma_cells`), and Lemma 3 / Proposition 1 along the first iterations of an ES run (`prop1_trajectory`). The
per-sample estimators they use are `diversity_estimators`, their model passes `diversity_model_passes`; caching,
tables and the finding are `diversity`."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from esreason_lib.es.backends.sequential import SequentialBackend
from esreason_lib.es.config import ESConfig
from esreason_lib.es.core import ES
from esreason_lib.es.loop import es_step
from esreason_lib.es.noise import perturbed
from esreason_lib.metrics import js_policy, js_success, pass_gap_approx, pass_population, pass_same
from esreason_lib.models.generation import Sampling, generate
from esreason_lib.paper.studies.diversity_estimators import (
    ess_fraction,
    fitness_weights,
    is_success,
    mis_success,
    probe_rows,
    token_logprobs,
    tokenwise_kl,
)
from esreason_lib.paper.studies.diversity_model_passes import (
    fisher_projections,
    flat_directions,
    full_logprobs,
    sequence_logp,
    stack_rollouts,
)
from esreason_lib.paper.theory import lemma1_prediction
from esreason_lib.params import named_params
from esreason_lib.progress import progress_bar
from esreason_lib.seeding import derive_seed, numpy_rng


def _sample(model, tokenizer, task, prompts, n, seed):
    return generate(model, tokenizer, prompts, Sampling(temperature=1.0, max_new_tokens=task.max_new_tokens), n=n,
                    stop=task.stop, seed=seed)


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


def prop1_trajectory(config: ESConfig, model, tokenizer, task, probes, *, samples: int, scheme: str = "positive",
                     progress: bool = True, independent: bool = False, run=None) -> pd.DataFrame:
    """Run `config.iterations` iterations of `es.loop.es_step` (the loop of the `train_es` run of `config`, its
    members scored on the sequential backend: for a config whose backend is "fast" or "native", the same run up to
    that backend's float rounding) and record Lemma 3 and Proposition 1's inputs at each (`probe_rows`).

    Before each update the centre samples `samples` completions per probe prompt (T = 1), scored under the
    centre and every member; after it, under the updated centre theta+; weights are `fitness_weights` of the
    iteration's shaped fitness. p_next is the fraction correct among the next iteration's centre samples: drawn
    from theta+ after the update, independent of the samples every other column is computed from (one extra
    draw after the last iteration). With `independent`, a second draw of the centre before each update gives
    p_fresh, independent of the samples JS_succ is computed from (the diversity link's start). Returns the
    stacked rows with `iteration`, `reward_mean` and `ess_min` (smallest importance-sampling effective sample
    size fraction over members).

    With `run` (the unfinished `store.runs.Run` of this trajectory), each iteration is logged to it and the state
    after it (the centre, the rows so far) checkpointed; a call on an interrupted run resumes from its last
    checkpoint and returns the table an uninterrupted call returns (every draw's seed derives from its
    iteration, and the centre's samples are redrawn from the restored centre)."""
    examples = task.examples("train", n=config.train_size, seed=0)
    backend = SequentialBackend.from_config(config, task, tokenizer)
    es = ES(config, model)
    theta0 = {k: p.detach().to("cpu", copy=True) for k, p in es.params.items()}
    prompts = [task.prompt(ex, tokenizer) for ex in probes]
    shape = (len(probes), samples)

    def draw(it, *tag):  # the current centre's samples on the probes: (batch, correct [P, S])
        ro = _sample(model, tokenizer, task, prompts, samples,
                     derive_seed(config.seed, "diversity", "probe", it, *tag))
        correct = [task.is_correct(c, probes[p]) for c, p in zip(ro.completions, ro.prompt_index())]
        batch = (ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
        return batch, np.array(correct, dtype=np.float64).reshape(shape)

    out, start = [], 0
    resumed = run.latest_checkpoint() if run is not None else None
    if resumed is not None:
        start, state = resumed
        model.load_state_dict(state["params"])
        es.load_state_dict({"iteration": start})
        out.append(pd.DataFrame({c: v.numpy() for c, v in state["rows"].items()}))
    if run is not None:
        run.truncate_metrics(start)
    batch, correct = draw(start)
    for it in progress_bar(range(start, config.iterations), initial=start, total=config.iterations,
                           disable=not progress, desc="prop 1"):
        fresh = draw(it, "fresh")[1].mean(1) if independent else None  # [P] an independent draw of theta
        lp0 = sequence_logp(model, *batch).reshape(shape)  # [P, S]
        at_theta = {}

        def score_members(pop, ev):  # the model is still theta: score the probes under every member
            # (called within this iteration's es_step, so the loop's batch and at_theta are this iteration's)
            lp = []
            for sd, sign in zip(pop.seeds.tolist(), pop.signs.tolist()):
                with perturbed(es.params, sd, int(sign), pop.sigma):
                    lp.append(sequence_logp(model, *batch).reshape(shape))  # noqa: B023
            at_theta["lp"] = np.stack(lp, axis=1)  # [P, N, S]  # noqa: B023
            at_theta["w"] = fitness_weights(es.shaping(ev.rewards), scheme)  # [N]  # noqa: B023

        _, ev = es_step(es, model, tokenizer, task, examples, backend, theta0=theta0, before_tell=score_members)
        lp, w = at_theta["lp"], at_theta["w"]
        lp_plus = sequence_logp(model, *batch).reshape(shape)  # [P, S] under theta+
        p_members = np.stack([is_success(lp[p], lp0[p], correct[p]) for p in range(len(probes))])  # [P, N]
        p_plus = np.array([is_success(lp_plus[p][None], lp0[p], correct[p])[0] for p in range(len(probes))])
        ess = ess_fraction(lp.transpose(1, 0, 2).reshape(lp.shape[1], -1), lp0.reshape(-1))  # [N]
        p_theta = correct.mean(1)  # [P]
        batch, correct = draw(it + 1)  # fresh samples of theta+
        rows = probe_rows(p_members, w, p_theta, p_plus, correct.mean(1))
        out.append((rows if fresh is None else rows.assign(p_fresh=fresh)).assign(
            iteration=it + 1, reward_mean=float(ev.rewards.mean()), ess_min=float(ess.min())))
        if run is not None:
            _checkpoint(run, it + 1, model, out, last=it + 1 == config.iterations)
    return pd.concat(out, ignore_index=True)


def _checkpoint(run, step: int, model, out: list[pd.DataFrame], *, last: bool) -> None:
    """Log iteration `step` of a `prop1_trajectory` run and, unless it is the `last`, checkpoint the centre and the
    rows so far (one tensor per column)."""
    run.log(step, {"reward_mean": float(out[-1]["reward_mean"].iloc[0]), "ess_min": float(out[-1]["ess_min"].iloc[0])})
    if not last:
        rows = pd.concat(out, ignore_index=True)
        run.save_checkpoint(step, {"params": model.state_dict(), "iteration": step,
                                   "rows": {c: torch.tensor(rows[c].to_numpy()) for c in rows.columns}})
