"""Shared pieces of the experiments: model references, cached evaluation, training cost.

A *model reference* is a string `load_model` understands: a zoo name, a hub id, or a trained run's
`model` directory. Evaluations are runs of kind `eval` keyed by (reference, task, EvalSpec), so an evaluation
is computed once and reloaded by every notebook and by `make figures`.
"""

from __future__ import annotations

from pathlib import Path

from esreason_lib.evaluation import EvalResult, EvalSpec, evaluate
from esreason_lib.models.load import load_model
from esreason_lib.store.runs import Run
from esreason_lib.tasks import get_task, task_version
from esreason_lib.training.inputs import resolve_device


def model_ref(run_or_name: Run | str | Path) -> str:
    """The `load_model` reference of a trained run (its saved model directory) or a name/path as given."""
    return str(run_or_name.model_dir) if isinstance(run_or_name, Run) else str(run_or_name)


def evaluate_ref(ref: str, task: str, task_kwargs: dict, spec: EvalSpec, *, device: str = "cpu", home=None,
                 progress: bool = True, model=None, tokenizer=None) -> EvalResult:
    """Evaluate model `ref` on `task`'s held-out problems under `spec`; cached as an `eval` run. The samples are
    drawn by `spec.backend`: the library's generation, or one vLLM engine ("vllm").

    `model`/`tokenizer` may be passed when already in memory (e.g. a masked model in the sparsity study); the
    cache key is still `ref`, so give such a model a distinct `ref`. A task that is not built in is keyed on its
    code as well (`tasks.task_version`): an edited verifier is evaluated anew.
    """
    config = {"model": ref, "task": task, "task_kwargs": dict(task_kwargs), "eval": spec}  # (forward "hf" and
    # backend "local" left out: the identities of evaluations stored before those fields existed)
    task_obj = get_task(task, **dict(task_kwargs))
    if (version := task_version(task_obj)) is not None:  # a task that is not built in: keyed on its code too
        config["task_version"] = version
    run = Run.open("eval", config, seed=spec.seed, home=home, lock=True)  # two notebooks never evaluate one model
    try:  # at once (`make reproduce` runs two side by side): the second waits, then reads the first's tables
        examples = task_obj.examples("test", n=spec.n_problems, seed=spec.seed)
        if model is None and not run.is_complete():
            model, tokenizer = load_model(ref, device=resolve_device(device), home=home, progress=progress)
        result = evaluate(model, tokenizer, task_obj, examples, spec, run=run, name="eval", progress=progress)
        if not run.is_complete():
            run.finish(**{k: float(v) for k, v in result.summary().items()})
    finally:
        run.release()
    return result


def run_cost(runs) -> dict[str, float]:
    """What training `runs` (one run, or a sequence's stages) cost: {"generations": the sum over runs of the last
    `<kind>/generations` logged (completions the updates used; 0 when never logged), "seconds": the sum of
    `time/step_s` (nan when a run logs no step time)}."""
    gens = secs = 0.0
    for run in runs:
        m = run.metrics()
        gen = f"{run.kind}/generations"
        gens += float(m[gen].dropna().iloc[-1]) if gen in m and m[gen].notna().any() else 0.0
        secs += float(m["time/step_s"].sum()) if "time/step_s" in m else float("nan")
    return {"generations": int(gens), "seconds": secs}
