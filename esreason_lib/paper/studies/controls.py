"""The noise-injection control of notebooks 01 and 04: an "ES" that moves along random directions.

An alternative explanation of any ES result is that ES helps merely by moving the weights: a random walk of the
same length might keep Pass@K and entropy just as well. The control takes a finished ES run and replays its
trajectory with the direction replaced: at iteration t it adds u_t = ||Delta_t|| * g_t / ||g_t||, g_t ~ N(0, I)
over every parameter (drawn from the stream (seed, "noise-control", t)), where ||Delta_t|| is the ES run's own
logged `es/update_norm`. It uses no reward at all, so it costs a few random draws per iteration; it drifts as far
as ES does (the sum of near-orthogonal steps) and should move no metric. It keeps snapshots at the ES run's
`snapshot_every`, so its path can be evaluated like ES's. Each control is a run of kind `es-noise` keyed by the
ES run it replays, so it is built once and its model has a stable reference.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch

from esreason_lib.es.noise import noise
from esreason_lib.models.load import load_model
from esreason_lib.models.weights import relative_drift
from esreason_lib.models.zoo import quiet_transformers
from esreason_lib.params import named_params
from esreason_lib.seeding import derive_seed
from esreason_lib.store.cache import stored_run
from esreason_lib.store.runs import Run
from esreason_lib.training.run_entry import save_snapshot
from esreason_lib.training.settings import DTYPES

CONTROL_KIND = "es-noise"
"""The run kind of a noise-injection control."""


def control_config(es_run: Run) -> dict:
    """The control's run config: the ES run it replays (kind-hash directory name), its base, iterations,
    snapshot_every, dtype and seed."""
    c = es_run.config
    return {"es_run": es_run.path.name, "model": c["model"], "iterations": int(c["iterations"]),
            "snapshot_every": int(c.get("snapshot_every", 0)), "dtype": c.get("dtype", "float32"),
            "seed": int(c["seed"])}


def update_norms(es_run: Run) -> list[float]:
    """The ES run's `es/update_norm` per iteration, in order (one per iteration, else ValueError)."""
    m = es_run.metrics()
    if "es/update_norm" not in m:
        raise ValueError(f"{es_run} logs no es/update_norm: not an ES run")
    m = m.loc[m["es/update_norm"].notna(), ["step", "es/update_norm"]].sort_values("step")
    if m["step"].tolist() != list(range(1, int(es_run.config["iterations"]) + 1)):
        raise ValueError(f"{es_run} does not log es/update_norm at every iteration")
    return [float(x) for x in m["es/update_norm"]]


@torch.no_grad()
def random_step_(params: dict[str, torch.Tensor], norm: float, seed: int, t: int) -> float:
    """Add a random direction of L2 norm `norm` (over all of `params`, float32) in place; returns its norm."""
    draw_seed = derive_seed(seed, "noise-control", t)
    g = {name: noise(draw_seed, name, p) for name, p in params.items()}
    total = math.sqrt(sum(float(x.double().pow(2).sum()) for x in g.values()))
    scale = norm / total if total > 0 else 0.0
    for name, p in params.items():
        p.copy_((p.float() + scale * g[name]).to(p.dtype))
    return scale * total


def noise_control(es_run: Run, *, home=None, progress: bool = True) -> Run:
    """The noise-injection control of the complete ES run `es_run` (built once, cached): a run of kind
    `CONTROL_KIND` whose `model/` is the base plus the random steps, with snapshots like the ES run's. Logs per
    iteration control/update_norm and control/drift_rel (||theta - theta_0|| / ||theta_0||)."""
    if not es_run.is_complete():
        raise ValueError(f"{es_run} is not complete: train it before its noise control")
    cfg = control_config(es_run)

    def build(run: Run) -> None:
        norms = update_norms(es_run)
        model, tokenizer = load_model(cfg["model"], device="cpu", dtype=DTYPES[cfg["dtype"]], home=home,
                                      progress=progress)
        params = named_params(model)
        theta0 = {k: p.detach().clone() for k, p in params.items()}
        snap = SimpleNamespace(snapshot_every=cfg["snapshot_every"], iterations=cfg["iterations"])
        run.truncate_metrics(0)
        for t, norm in enumerate(norms, start=1):
            applied = random_step_(params, norm, cfg["seed"], t)
            run.log(t, {"control/update_norm": applied, "control/drift_rel": relative_drift(params, theta0)})
            save_snapshot(run, snap, t, model, tokenizer)
        with quiet_transformers():
            model.save_pretrained(run.model_dir)
            tokenizer.save_pretrained(run.model_dir)

    return stored_run(CONTROL_KIND, cfg, build, seed=cfg["seed"], home=home)


def final_drift(run: Run, key: str) -> float:
    """The last logged value of `key` (e.g. es/drift_rel, control/drift_rel) of `run`; nan when never logged."""
    m = run.metrics()
    return float(m[key].dropna().iloc[-1]) if key in m and m[key].notna().any() else float("nan")
