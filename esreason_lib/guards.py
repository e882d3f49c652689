"""Finite-ness guards: a diverging run (NaN or inf in its weights, rewards or losses) stops with
`NonFiniteError` and, when it has a run directory, is marked failed, never complete."""

from __future__ import annotations

import math

import torch

GUARDED_METRICS = ("reward/", "loss/")
"""Prefixes of the per-step metrics that must be finite (`check_finite_metrics`): rewards and losses."""


class NonFiniteError(ValueError):
    """Weights, a loss or a reward became nan or +-inf; the run was stopped (and marked failed)."""


def _stop(message: str, run) -> None:
    if run is not None:
        run.fail(message)
    raise NonFiniteError(message)


def check_finite_params(model_or_params, *, where: str, run=None) -> None:
    """Raise NonFiniteError (after `run.fail`, when a run is given) if any parameter of `model_or_params` (a
    module or a {name: tensor} dict) holds nan or inf; the message names `where`, the count and the first tensor."""
    named = (model_or_params.items() if isinstance(model_or_params, dict)
             else model_or_params.named_parameters())
    bad, first = 0, None
    for name, tensor in named:
        n = int((~torch.isfinite(tensor.detach())).sum())
        if n and first is None:
            first = name
        bad += n
    if bad:
        _stop(f"{where}: {bad} non-finite weight(s) (nan/inf), first in {first!r}; the run is stopped", run)


def check_finite_metrics(metrics: dict, *, where: str, run=None) -> None:
    """Raise NonFiniteError (after `run.fail`) if a metric named with a `GUARDED_METRICS` prefix is nan/inf."""
    for key, value in metrics.items():
        if key.startswith(GUARDED_METRICS) and isinstance(value, float) and not math.isfinite(value):
            _stop(f"{where}: {key} = {value}; the run is stopped", run)


def check_finite_step(model_or_params, metrics: dict, *, where: str, run) -> None:
    """`check_finite_metrics` then `check_finite_params`: what a trainer calls after logging each step."""
    check_finite_metrics(metrics, where=where, run=run)
    check_finite_params(model_or_params, where=where, run=run)
