"""What a preset is (`Preset`: the shared setup, the ES and GRPO configs, one frozen spec per study) and how one is
built (`build_preset`: the configs' model and task set from the preset's) and changed (`with_overrides`: dotted keys
into the nested specs). The named presets are `presets`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from typing import Any

from esreason_lib.es.config import ESConfig
from esreason_lib.evaluation import EvalSpec
from esreason_lib.grpo.config import GRPOConfig
from esreason_lib.paper.splits import Splits
from esreason_lib.paper.studies.specs import (
    ComparisonSpec,
    ForgettingSpec,
    LemmaSpec,
    Prop1Spec,
    ScalingSpec,
    SequentialSpec,
    SparsitySpec,
)


@dataclass(frozen=True)
class HeldoutTask:
    """A held-out task with keyword arguments of its own (a `Preset.heldout_tasks` entry beside plain task names):
    e.g. the training task's own family at another size, which needs a label of its own in the tables."""

    label: str
    """How it shows in tables and figures (the `task` column of notebooks 00 and 05, a KL scope): distinct from the
    other held-out tasks' labels (and, to read apart in notebook 05's KL table, from the preset's task)."""
    task: str
    """The task's registered name (`esreason_lib.tasks.get_task`)."""
    kwargs: dict[str, Any]
    """Keyword arguments of the task."""

    def __post_init__(self):
        for name in ("label", "task"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"HeldoutTask.{name} must be a non-empty str, got {getattr(self, name)!r}")
        if not isinstance(self.kwargs, dict):
            raise ValueError(f"HeldoutTask.kwargs must be a dict, got {self.kwargs!r}")


@dataclass(frozen=True)
class CompletionRate:
    """A design's measured speed (completions per second), which turns its size in completions into hours (the
    Size section of `preregistration.render`): one rate, or the range of a rate measured several times."""

    slow: float
    """Completions per second at the slowest measurement (> 0): it gives the upper end of the hours."""
    fast: float
    """Completions per second at the fastest measurement (>= `slow`; equal to it for one measured rate): it gives
    the lower end of the hours."""
    clock: str
    """Whose seconds: "core" (CPU time of one core) or "wall" (the wall time of the measuring machine)."""
    provenance: str
    """Where and how the rate was measured and what the hours then leave out (the paragraph under the table)."""

    def __post_init__(self):
        if not self.slow > 0 or not self.fast >= self.slow:
            raise ValueError(f"CompletionRate needs 0 < slow <= fast, got slow={self.slow!r}, fast={self.fast!r}")
        if self.clock not in ("core", "wall"):
            raise ValueError(f"CompletionRate.clock must be 'core' or 'wall', got {self.clock!r}")


@dataclass(frozen=True)
class PilotOC:
    """Where a design's pilot estimate of each primary check's operating characteristic is committed: the
    "Operating characteristics before the first run" section of `preregistration.render` (a design without one
    renders no such section)."""

    path: str
    """The JSON file, relative to the repository root: the list `benchmarks/pilot_pretrained.py --training
    --json-out` writes (`pilot_oc` reads it); it may not exist yet (the section then says so)."""
    provenance: str
    """How the file is made: the pilot's records, the command and its settings (the paragraph under the section)."""
    reading: str = ""
    """How the registration reads the design's checks given these rates, written before the first run (a section
    of its own after this one; "" for none): what a design whose checks miss the bar is registered as."""

    def __post_init__(self):
        for name in ("path", "provenance"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"PilotOC.{name} must be a non-empty str, got {getattr(self, name)!r}")
        if not isinstance(self.reading, str):
            raise ValueError(f"PilotOC.reading must be a str, got {self.reading!r}")
        if not self.path.endswith(".json"):
            raise ValueError(f"PilotOC.path must name a .json file, got {self.path!r}")


@dataclass(frozen=True)
class Preset:
    """Everything the notebooks and the CLI need for one scale: the shared setup, then one spec per study."""

    name: str
    """The preset's name (`smoke`, `tiny`, `full`, `paper-easy`, `paper-hard`)."""
    base_model: str
    """The base model every method starts from: a zoo name, a local directory or a hub id."""
    control_model: str | None
    """A second base shown beside the first as a control (the clean zoo model beside the habit one), or None."""
    task: str
    """Training and evaluation task (`esreason_lib.tasks.get_task`)."""
    task_kwargs: dict[str, Any]
    """Keyword arguments of the task."""
    heldout_tasks: tuple[str | HeldoutTask, ...]
    """Tasks the training never sees (base models and forgetting studies): a task name (its default arguments) or a
    `HeldoutTask` (a label, a name and arguments); read them through `heldout()`."""
    es: ESConfig
    """ES hyperparameters (its `model` and `task` fields are set from this preset)."""
    grpo: GRPOConfig
    """GRPO hyperparameters (its `model` and `task` fields are set from this preset)."""
    eval: EvalSpec
    """The evaluation protocol shared by every method."""
    seeds: tuple[int, ...]
    """Training seeds of every verdict that compares trained models (at least `findings.MIN_SEEDS` to resolve one)."""
    device: str
    """Torch device for evaluation ("auto" picks CUDA when available)."""
    comparison: ComparisonSpec
    """Notebook 01."""
    lemma: LemmaSpec
    """Notebook 02, Lemmas 1-2."""
    prop1: Prop1Spec
    """Notebook 02, Lemma 3 and Proposition 1."""
    sequential: SequentialSpec
    """Notebook 03."""
    sparsity: SparsitySpec
    """Notebook 04."""
    forgetting: ForgettingSpec
    """Notebook 05."""
    scaling: ScalingSpec
    """Notebook 06."""
    splits: Splits
    """Disjoint test / selection / tuning index ranges of the task's held-out pool (`splits`)."""

    eval_task_kwargs: dict[str, Any] | None = None
    """Keyword arguments of the task whose test split is evaluated (None = `task_kwargs`): paper-hard trains on
    DeepScaleR, which has no test split, and evaluates on MATH-500. Read it through `test_task_kwargs()`."""

    def __post_init__(self):
        if not self.seeds:
            raise ValueError("Preset.seeds must name at least one seed, got ()")
        if self.comparison.selection_problems and self.eval.n_problems is None:
            raise ValueError("Preset.comparison.selection_problems must be 0 when eval.n_problems is None (the "
                             "whole test split is evaluated, so no held-out problems are left to choose on)")
        if not all(t > 0 for t in self.sparsity.taus):
            raise ValueError(f"Preset.sparsity.taus must all be > 0, got {self.sparsity.taus!r}")
        labels = [h.label for h in self.heldout()]
        if len(set(labels)) < len(labels):
            raise ValueError(f"Preset.heldout_tasks must have distinct labels, got {labels!r}")
        for name, cfg in (("es", self.es), ("grpo", self.grpo)):
            if cfg.model != self.base_model or cfg.task != self.task:
                raise ValueError(f"Preset.{name} must use the preset's base_model and task "
                                 f"({self.base_model!r}, {self.task!r}), got ({cfg.model!r}, {cfg.task!r})")

    def zoo_bases(self) -> list[str]:
        """The base and control models that are zoo names, trained here or pretrained (what every notebook
        loads), sorted."""
        from esreason_lib.models.zoo import is_zoo_name

        return sorted({m for m in (self.base_model, self.control_model) if is_zoo_name(m)})

    def heldout(self) -> tuple[HeldoutTask, ...]:
        """`heldout_tasks` as `HeldoutTask`s (a plain name is its own label, with no arguments); ValueError naming an
        entry that is neither."""
        out = []
        for entry in self.heldout_tasks:
            if not isinstance(entry, (str, HeldoutTask)):
                raise ValueError(f"Preset.heldout_tasks entries must be task names or HeldoutTask, got {entry!r}")
            out.append(HeldoutTask(entry, entry, {}) if isinstance(entry, str) else entry)
        return tuple(out)

    def test_task_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of `task` for its held-out (test-split) problems: `eval_task_kwargs` when set."""
        return dict(self.task_kwargs if self.eval_task_kwargs is None else self.eval_task_kwargs)

    def config(self, method: str, **changes) -> ESConfig | GRPOConfig:
        """The preset's ES or GRPO config with `changes` applied (validated)."""
        if method not in ("es", "grpo"):
            raise ValueError(f"method must be 'es' or 'grpo', got {method!r}")
        config = getattr(self, method)
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(config)})
        if unknown:
            raise ValueError(f"{type(config).__name__} has no field(s) {unknown}")
        return replace(config, **changes)


def build_preset(name: str, *, base_model: str, task: str, task_kwargs: dict, es: dict, grpo: dict,
                 **rest) -> Preset:
    """The `Preset` called `name` whose ES and GRPO configs are built from the `es` and `grpo` field dicts with the
    preset's `base_model`, `task` and `task_kwargs`; `rest` are the other `Preset` fields."""
    es_cfg = ESConfig(model=base_model, task=task, task_kwargs=dict(task_kwargs), **es)
    grpo_cfg = GRPOConfig(model=base_model, task=task, task_kwargs=dict(task_kwargs), **grpo)
    return Preset(name=name, base_model=base_model, task=task, task_kwargs=dict(task_kwargs), es=es_cfg,
                  grpo=grpo_cfg, **rest)


PROPAGATED = {"base_model": "model", "task": "task", "task_kwargs": "task_kwargs"}
"""The `Preset` fields an override also sets on the ES and GRPO configs, with the config field each sets."""


def with_overrides(preset: Preset, overrides: dict[str, Any], where: str) -> Preset:
    """`preset` with `overrides` applied in their order: dotted (or `__`-separated) keys into the nested specs
    (`{"es.sigma": 2e-3, "scaling.eval.n_problems": 100}`); a `PROPAGATED` field also sets the ES and GRPO configs'.
    An unknown key is a ValueError naming `where` (the preset) and the valid fields."""
    for key, value in overrides.items():
        key = key.replace("__", ".")
        if key in PROPAGATED:
            target = PROPAGATED[key]
            preset = replace(preset, **{key: value, "es": replace(preset.es, **{target: value}),
                                        "grpo": replace(preset.grpo, **{target: value})})
        else:
            preset = _set_field(preset, key, value, where)
    return preset


def _set_field(obj, key: str, value, where: str):
    """`obj` (a dataclass) with the field at dotted `key` set to `value`, the dataclasses on the way replaced."""
    if not dataclasses.is_dataclass(obj):  # e.g. "seeds.x": the value at `where` has no fields to set
        raise ValueError(f"{where}: cannot set {key!r} on a {type(obj).__name__} value {obj!r} (it has no fields)")
    names = {f.name for f in dataclasses.fields(obj)}
    head, _, rest = key.partition(".")
    if head not in names:
        raise ValueError(f"{where}: unknown field {head!r}; valid fields: {sorted(names)}")
    if rest:
        return replace(obj, **{head: _set_field(getattr(obj, head), rest, value, f"{where}.{head}")})
    return replace(obj, **{head: value})
