"""`train`'s settings as config dicts, checked before anything heavy loads: `--set KEY=VALUE` items and the flags
(`--backend`, `--workers`, `--ray-address`, `--gpus-per-worker`, `--gpu-memory-utilization`,
`--keep-checkpoints`) become one dict of config fields per method, {"es": {...}, "grpo": {...}}.

The field names are read from the config classes' source (`cli_help.config_field_docs`: no torch, no
transformers), so a misspelt field, a setting for the other method or a flag that does not apply is one clear error
within a second of the command; the values are checked when the configs are built (their `__post_init__`).
"""

from __future__ import annotations

import ast
from typing import Any, Sequence

from esreason_lib.cli_help import CONFIGS, config_field_docs, suggest

METHODS = ("es", "grpo")
"""The methods whose configs `--set` fills: a sequence trains both."""


def config_fields(method: str) -> tuple[str, set[str]]:
    """(the config class's name, its field names) for `method` ("es" or "grpo"), read from its source."""
    module, cls = CONFIGS[method]
    return cls, set(config_field_docs(module, cls))


def parse_assignments(items: Sequence[str], method: str) -> dict[str, Any]:
    """`["sigma=0.002", ...]` -> {"sigma": 0.002}, checking each key (an `es.`-style prefix dropped) is a field of
    `method`'s config; values are Python literals where they parse as one, else strings (a hub id, a path)."""
    cls, fields = config_fields(method)
    out = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip().split(".")[-1]
        if not sep or not key:
            raise ValueError(f"--set expects key=value, got {item!r}")
        if key not in fields:
            raise ValueError(f"--set {key!r} is not a field of {cls}{suggest(key, fields)} "
                             f"(`esreason train METHOD --help` lists them)")
        try:
            out[key] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            out[key] = text
    return out


def group_by_method(items: Sequence[str]) -> dict[str, list[str]]:
    """Split `--set` items by their method prefix: {"es": [...], "grpo": [...], "": [unprefixed ...]}."""
    groups: dict[str, list[str]] = {"es": [], "grpo": [], "": []}
    for item in items:
        prefix, dot, _ = item.partition("=")[0].strip().partition(".")
        groups[prefix if dot and prefix in METHODS else ""].append(item)
    return groups


def set_overrides(method: str, items: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The `--set` items of `train method` as {method: {field: value}} ({"es": ..., "grpo": ...} for a sequence,
    whose items need an `es.` or `grpo.` prefix); ValueError for an item of the other method or a bad field."""
    groups = group_by_method(items)
    if method == "sequence":
        if groups[""]:  # would otherwise be silently ignored: a sequence has two configs
            raise ValueError(f"train sequence: --set keys need an 'es.' or 'grpo.' prefix, got {groups[''][0]!r}")
        return {m: parse_assignments(groups[m], m) for m in METHODS}
    other = "grpo" if method == "es" else "es"
    if groups[other]:  # the prefix is dropped when parsed, so it would silently set the field of `method`
        raise ValueError(f"--set {groups[other][0]!r} is a {other} setting, but this trains {method}")
    return {method: parse_assignments(groups[""] + groups[method], method)}


def _es_only(method: str, flag: str, value) -> None:
    """ValueError when `flag` (given as `value`) is set for GRPO, which scores no ES population."""
    what = "the Ray cluster of" if flag == "--ray-address" else "the Ray actors that score"
    if value is not None and method == "grpo":
        raise ValueError(f"{flag} sets {what} an ES population; grpo has none (its --backend is local or vllm), "
                         f"got {flag} {value}")


def flag_overrides(method: str, *, backend: str | None = None, workers: int | None = None,
                   ray_address: str | None = None, gpus_per_worker: float | None = None,
                   memory_share: float | None = None, keep_checkpoints: bool = False) -> dict[str, dict[str, Any]]:
    """The config fields the flags of `train method` stand for, as {method: {field: value}}: `--backend` and
    `--workers`, `--ray-address`, `--gpus-per-worker` the ES config's (the GRPO config's `backend` for grpo: its
    rollout sampler; in a sequence the ES stage's, plus the GRPO stage's backend "vllm" when the ES backend runs on
    vLLM, so that both stages sample on the engine); `--gpu-memory-utilization` and `--keep-checkpoints` every
    stage's. A flag left out sets nothing; an ES-only flag given to grpo is a ValueError naming it."""
    for flag, value in (("--workers", workers), ("--ray-address", ray_address),
                        ("--gpus-per-worker", gpus_per_worker)):
        _es_only(method, flag, value)
    shared = {k: v for k, v in (("gpu_memory_utilization", memory_share),
                                ("keep_checkpoints", True if keep_checkpoints else None)) if v is not None}
    es = {k: v for k, v in (("backend", backend), ("workers", workers), ("ray_address", ray_address),
                            ("gpus_per_worker", gpus_per_worker)) if v is not None}
    if method == "es":
        return {"es": es | shared}
    if method == "grpo":
        return {"grpo": ({"backend": backend} if backend is not None else {}) | shared}
    grpo = {"backend": "vllm"} if backend and "vllm" in backend else {}
    return {"es": es | shared, "grpo": grpo | shared}


def train_overrides(method: str, items: Sequence[str], **flags) -> dict[str, dict[str, Any]]:
    """`set_overrides` with `flag_overrides` over it (a flag wins over a `--set` of the same field): every config
    field `train method` changes from the preset's, per method."""
    sets, flagged = set_overrides(method, items), flag_overrides(method, **flags)
    return {m: {**sets.get(m, {}), **flagged.get(m, {})} for m in dict.fromkeys([*sets, *flagged])}
