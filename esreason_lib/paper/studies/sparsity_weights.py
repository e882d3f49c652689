"""Notebook 04's weight-space pieces (`studies.sparsity`): a stored model's state dict, its update drift by module
against the base, and the reset models (the smallest updates set back to the base's values, and a random reset of
the same count) stored as runs of kind `masked`."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import torch

from esreason_lib.models.load import load_model
from esreason_lib.models.zoo import quiet_transformers
from esreason_lib.paper.analysis import (
    StateDict,
    delta_quantiles,
    drift_table,
    module_summary,
    module_type,
    random_reset,
    reset_small_updates,
    update_deltas,
)
from esreason_lib.paper.studies.common import model_ref
from esreason_lib.seeding import derive_seed
from esreason_lib.store.cache import cached, stored_run
from esreason_lib.store.runs import Run


def dedupe_tied(state: StateDict) -> StateDict:
    """`state` without aliases: a key whose tensor shares storage with an earlier key (tied LM head) is dropped,
    so drift and sparsity count each weight once."""
    seen, out = set(), {}
    for name, tensor in state.items():
        ptr = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if ptr in seen:
            continue
        seen.add(ptr)
        out[name] = tensor
    return out


def load_state(ref: str, *, home=None) -> StateDict:
    """The float32 CPU state dict of model `ref` (tied aliases removed); a zoo name is pretrained into `home`."""
    model, _ = load_model(ref, device="cpu", home=home)
    return {k: v.detach().clone() for k, v in dedupe_tied(model.state_dict()).items()}


def top_update_share(base: StateDict, tuned: StateDict, top: float = 0.01) -> pd.Series:
    """Per module type: the fraction of the globally largest `top` fraction of |delta| (over changed
    coordinates) that lies in it. Index: module type; values sum to 1 (empty when tuned equals base)."""
    deltas = {k: d[d != 0].abs().flatten() for k, d in update_deltas(base, tuned).items()}
    mags = torch.cat(list(deltas.values()))  # [changed]
    if mags.numel() == 0:
        return pd.Series(dtype=float)
    count = max(1, int(round(top * mags.numel())))
    tau = torch.topk(mags, count).values.min()
    counts = pd.Series({k: int((d >= tau).sum()) for k, d in deltas.items()}, dtype=float)
    counts = counts.groupby(counts.index.map(module_type)).sum()
    return counts / counts.sum()


def drift_by_module(base: StateDict, tuned: dict[tuple[str, int], StateDict], top: float = 0.01) -> pd.DataFrame:
    """One row per (method, seed, module) plus module "all": rel_l2, update_share, frac_changed and top_share
    (share of the largest `top` fraction of updates, see `top_update_share`)."""
    frames = []
    for (method, seed), state in tuned.items():
        table = drift_table(base, state)
        mods = module_summary(table)
        mods["top_share"] = mods["module"].map(top_update_share(base, state, top)).fillna(0.0)
        total = pd.DataFrame([{"module": "all", "numel": table["numel"].sum(), "changed": table["changed"].sum(),
                               "rel_l2": float(np.sqrt((table["delta_l2"] ** 2).sum())
                                               / np.sqrt((table["base_l2"] ** 2).sum())),
                               "update_share": 1.0, "top_share": 1.0}])
        total["frac_changed"] = total["changed"] / total["numel"]
        frames.append(pd.concat([mods, total], ignore_index=True).assign(method=method, seed=seed))
    cols = ["method", "seed", "module", "numel", "changed", "frac_changed", "rel_l2", "update_share", "top_share"]
    return pd.concat(frames, ignore_index=True)[cols]


def model_drift(base_ref: str, tuned_ref: str, key: tuple[str, int], *, home=None) -> pd.DataFrame:
    """`drift_by_module` of model `tuned_ref` against `base_ref`, labelled `key` = (method, seed); cached as a
    `drift` run, so that `make figures` draws it from stored tables without the weights."""
    def compute() -> dict[str, pd.DataFrame]:
        return {"drift": drift_by_module(load_state(base_ref, home=home), {key: load_state(tuned_ref, home=home)})}

    config = {"base": base_ref, "tuned": tuned_ref, "method": key[0], "seed": int(key[1])}
    return cached("drift", config, ("drift",), compute, seed=int(key[1]), home=home)["drift"]


def _save_reset(run: Run, state: StateDict, template, tokenizer, **extra) -> dict:
    """Save the reset `state` as `run`'s model; returns the manifest fields `extra` (for `stored_run`)."""
    model = copy.deepcopy(template)
    missing, unexpected = model.load_state_dict(state, strict=False)
    aliases = set(template.state_dict()) - set(state)
    if unexpected or set(missing) - aliases:
        raise RuntimeError(f"reset state does not fit the model: missing {missing}, unexpected {unexpected}")
    with quiet_transformers():
        model.save_pretrained(run.model_dir)
        tokenizer.save_pretrained(run.model_dir)
    return extra


def reset_models(base_ref: str, tuned_ref: str, quantiles, *, taus=(), seed: int = 0, home=None,
                 dtype: torch.dtype = torch.float32) -> pd.DataFrame:
    """Build (or reload) the magnitude and random reset models of `tuned_ref` for each quantile of |delta| and
    each absolute threshold in `taus`.

    Returns one row per (mode, threshold): mode, threshold (label "q=0.9" or "tau=0.0005"), quantile, tau,
    sparsity (achieved fraction of changed coordinates reset) and ref (the saved model's directory); quantiles
    first, then taus. An absolute tau's
    quantile is its sparsity (the fraction of changed |delta| <= tau, i.e. the q of which tau is the quantile).
    The random control of a threshold resets exactly as many coordinates as its magnitude reset
    (`analysis.random_reset`). A tuned model equal to its base (no update, e.g. all rewards equal) gives
    sparsity 0. Models are saved in `dtype` (the training dtype: every reset weight is a base or a tuned
    value, so no precision is lost).
    """
    loaded: dict = {}

    def states():
        if not loaded:
            template, tokenizer = load_model(base_ref, device="cpu", dtype=dtype, home=home)
            loaded.update(template=template, tokenizer=tokenizer, base=load_state(base_ref, home=home),
                          tuned=load_state(tuned_ref, home=home))
        return loaded

    rows = []
    for key, value in [("quantile", float(q)) for q in quantiles] + [("tau", float(t)) for t in taus]:
        cfg = {"base": base_ref, "tuned": tuned_ref, key: value}
        def magnitude(run: Run, key=key, value=value) -> dict:
            s = states()
            if key == "tau":
                tau = value
            else:
                changed = any(bool((d != 0).any()) for d in update_deltas(s["base"], s["tuned"]).values())
                tau = float(delta_quantiles(s["base"], s["tuned"], [value])[0]) if changed else 0.0
            state, sparsity = reset_small_updates(s["base"], s["tuned"], tau)
            return _save_reset(run, state, s["template"], s["tokenizer"], tau=tau, sparsity=sparsity)

        mag = stored_run("masked", {**cfg, "mode": "magnitude"}, magnitude, seed=seed, home=home)
        tau, sparsity = mag.manifest()["tau"], mag.manifest()["sparsity"]

        def random_count(run: Run, key=key, value=value, sparsity=sparsity) -> dict:
            s = states()
            state, achieved = random_reset(s["base"], s["tuned"], sparsity,
                                           seed=derive_seed(seed, "sparsity", "random", key, value))
            return _save_reset(run, state, s["template"], s["tokenizer"], sparsity=achieved)

        rnd = stored_run("masked", {**cfg, "mode": "random", "count": "exact"}, random_count, seed=seed, home=home)
        quantile, label = (value, f"q={value:g}") if key == "quantile" else (float(sparsity), f"tau={value:g}")
        rows.append({"mode": "magnitude", "threshold": label, "quantile": quantile, "tau": tau, "sparsity": sparsity,
                     "ref": model_ref(mag)})
        rows.append({"mode": "random", "threshold": label, "quantile": quantile, "tau": float("nan"),
                     "sparsity": rnd.manifest()["sparsity"], "ref": model_ref(rnd)})
    return pd.DataFrame(rows)
