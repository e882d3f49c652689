"""The ES training loop: `es_step` (one iteration: prompts, centre score, ask, backend, tell) and `train_es`
(a resumable run in the run store, checkpoints and metrics)."""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import torch

from esreason_lib.es.backends.base import CENTER_FORWARD, Evaluation, PopulationEvaluator, score_center
from esreason_lib.es.backends.registry import make_backend
from esreason_lib.es.config import ESConfig
from esreason_lib.es.core import ES
from esreason_lib.guards import NonFiniteError, check_finite_step
from esreason_lib.learning_signal import es_note
from esreason_lib.models.device import record_device
from esreason_lib.models.weights import relative_drift
from esreason_lib.progress import say_no_update
from esreason_lib.training.run_entry import open_training_run, save_snapshot
from esreason_lib.training.settings import prompt_indices


def es_step(es: ES, model, tokenizer, task, examples: list[dict], backend: PopulationEvaluator, *,
            theta0: dict[str, torch.Tensor],
            before_tell: Callable | None = None) -> tuple[dict[str, float], Evaluation]:
    """One ES iteration (the loop body of Algorithm 1) at `es.iteration`, updating `model` in place.

    Draws the step's P = `prompts_per_step` train prompts from `examples` (`training.settings.prompt_indices` in the
    config's `prompt_order`), scores the unperturbed centre on them with the members' sampling seed (with
    `backend.score_center` when the backend has one: the vLLM engines and Ray actors decode it where they decode
    the members; else in this process, `base.score_center`), asks for the population, scores it with `backend`,
    then tells. `before_tell(population, evaluation)` is called with
    the model still at theta (a study measuring the members, e.g. Proposition 1's probes).
    Returns (metrics, evaluation): `tell`'s reward/* and es/update_norm, then reward/center, reward/correct_frac
    (the members' fraction of verified-correct completions), policy/entropy
    (the centre's mean token entropy), es/js_succ, es/fixup_frac, es/drift_rel (against `theta0`, every
    `drift_every` iterations and at the last), es/resyncs (the backend's replica / engine reloads so far, 0 for
    in-process backends) and the time breakdown: time/centre_s (scoring the centre, sync excluded), time/sync_s
    (the backend bringing replicas or engines to the driver's weights), time/population_s (scoring the members, sync
    excluded), time/update_s (tell and drift; `before_tell` is not counted)."""
    from esreason_lib.metrics import js_success

    config, it, p = es.config, es.iteration, es.config.prompts_per_step
    idx = prompt_indices(len(examples), p, it, config.seed, "es", config.prompt_order)  # [P]
    batch = [examples[i] for i in idx]  # [P]
    t0 = time.perf_counter()
    remote = getattr(backend, "score_center", None)  # engines or actors decode the centre where the members are
    if remote is None:
        center, _, center_entropy = score_center(model, tokenizer, task, batch, config, it,
                                                 CENTER_FORWARD.get(config.backend, "hf"))  # [P]
    else:
        center, _, center_entropy = remote(model, batch, iteration=it)  # [P]
    center_sync = float(getattr(backend, "last_sync_s", 0.0)) if remote is not None else 0.0
    t1 = time.perf_counter()
    pop = es.ask()
    ev = backend(model, pop, batch, iteration=it)
    t2 = time.perf_counter()
    if before_tell is not None:
        before_tell(pop, ev)
    t3 = time.perf_counter()
    m = es.tell(pop, ev.rewards)
    m.update({"reward/center": float(center.mean()), "policy/entropy": center_entropy,
              "es/js_succ": float(np.mean(js_success(ev.correct.T))), "es/fixup_frac": ev.fixup_frac,
              "reward/correct_frac": float(ev.correct.mean())})
    if (it + 1) % config.drift_every == 0 or it + 1 == config.iterations:
        m["es/drift_rel"] = relative_drift(es.params, theta0)
    sync = float(getattr(backend, "last_sync_s", 0.0))
    m.update({"es/resyncs": int(getattr(backend, "resyncs", 0)), "time/centre_s": t1 - t0 - center_sync,
              "time/sync_s": center_sync + sync, "time/population_s": t2 - t1 - sync,
              "time/update_s": time.perf_counter() - t3})
    return m, ev


def train_es(config: ESConfig, *, model=None, tokenizer=None, task=None, backend: PopulationEvaluator | None = None,
             home=None, resume: bool = True, progress: bool = True):
    """Train `config.model` on `config.task` with ES; returns the `Run` (immediately if already complete).

    `model`/`tokenizer` override loading `config.model` (the model is updated in place; it is the base theta_0);
    `task` (a `Task`) overrides `get_task(config.task, ...)` and its own reward shaping is then used; `backend`
    overrides `make_backend(config, ..., model=model)` (a backend made here is closed at the end, one passed in is
    not). A complete run of the same identity (`training.run_entry.run_identity`: the config, and the code of a task
    that is not built in) is returned as it is, saying so on stderr when `progress`, and `model` is left untouched. With
    `resume`, training continues from the run's last checkpoint and ends bit-identical to an uninterrupted run;
    without it, earlier metrics are dropped and training starts from the base. Logs per iteration (step = 1-based
    iteration): reward/mean, reward/std, reward/max, reward/min (population fitness), reward/correct_frac (verified
    answers), reward/center (the unperturbed model on the same prompts, same sampling seed; a diagnostic, not
    counted in es/generations), policy/entropy (the center model's mean full-distribution token entropy at its own
    generated positions), es/js_succ
    (`metrics.js_success` over members, per prompt, averaged over prompts), es/drift_rel (||theta - theta_0|| /
    ||theta_0||; every `drift_every` iterations), es/update_norm, es/fixup_frac, es/resyncs, es/generations (cumulative
    population completions), time/centre_s, time/sync_s, time/population_s, time/update_s (`es_step`), time/step_s.
    The device (`models.device.record_device`) is recorded in the run's device.json; a resume on another GPU model
    warns. With `progress`, a run whose members all scored the same in most iterations (no update was made) ends
    with one line saying so and why it may be (`learning_signal.es_note`, `progress.say_no_update`).
    """
    from esreason_lib.models.zoo import quiet_transformers
    from esreason_lib.progress import progress_bar

    run, inputs = open_training_run("es", config, model=model, tokenizer=tokenizer, task=task, home=home,
                                    progress=progress)
    if inputs is None:
        return run
    model, tokenizer, task, examples = inputs
    model.eval()
    owned = backend is None
    backend = backend or make_backend(config, task, tokenizer, model=model)
    es = ES(config, model)
    theta0 = {k: p.detach().clone() for k, p in es.params.items()}  # the base, on the device: drift stays there
    record_device(run, model)

    generations = 0
    ckpt = run.latest_checkpoint() if resume else None
    if ckpt is not None:
        step, state = ckpt
        model.load_state_dict(state["params"])
        es.load_state_dict({"iteration": state["iteration"]})
        torch.set_rng_state(state["rng"]["torch"])
        generations = int(state["generations"])
        run.truncate_metrics(step)
    else:
        run.truncate_metrics(0)

    bar = progress_bar(range(es.iteration, config.iterations), initial=es.iteration, total=config.iterations,
                       disable=not progress, desc=f"es {config.task}")
    try:
        for it in bar:
            t0 = time.perf_counter()
            try:
                m, ev = es_step(es, model, tokenizer, task, examples, backend, theta0=theta0)
            except NonFiniteError as err:  # a nan/inf reward from the task or backend: the run is failed, not resumable
                run.fail(f"train_es iteration {it + 1}: {err}")
                raise
            generations += ev.generations
            m.update({"es/generations": generations, "time/step_s": time.perf_counter() - t0})
            run.log(it + 1, m)
            check_finite_step(es.params, m, where=f"train_es iteration {it + 1}", run=run)
            bar.set_postfix(reward=f"{m['reward/mean']:.3f}", center=f"{m['reward/center']:.3f}")
            save_snapshot(run, config, it + 1, model, tokenizer)
            if config.checkpoint_every and (it + 1) % config.checkpoint_every == 0 and it + 1 < config.iterations:
                run.save_checkpoint(it + 1, {"params": model.state_dict(), "iteration": it + 1,
                                             "generations": generations, "rng": {"torch": torch.get_rng_state()}})
    finally:  # a backend made here holds engines or actors (vLLM, Ray): released even when a step fails
        if owned and hasattr(backend, "close"):
            backend.close()
    with quiet_transformers():
        model.save_pretrained(run.model_dir)
        tokenizer.save_pretrained(run.model_dir)
    run.finish()
    metrics = run.metrics()
    note = es_note(metrics["reward/std"], metrics.get("reward/correct_frac"), config.sigma) if progress else None
    if note:
        say_no_update(note)
    return run
