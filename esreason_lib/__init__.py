"""esreason: Evolution Strategies vs GRPO for LLM reasoning, from a 1M-parameter Qwen2 to Qwen2.5 on GPUs.

Reference companion to "Understanding Evolution Strategies for LLM Reasoning: Broader Reasoning Coverage
than GRPO" (arXiv 2608.27351). The public API, for ES or GRPO on your own Hugging Face model and verifier:

- `ESConfig`, `ES` (ask/tell), `train_es`: evolution strategies (`esreason_lib.es`);
- `GRPOConfig`, `train_grpo`: the gradient baseline (`esreason_lib.grpo`);
- `Task` (subclass it for your own verifier), `register_task` (name it for configs and the CLI), `get_task` (a
  task by name);
- `load_model` (a zoo name, trained here or pretrained such as "smollm2-135m" (docs/pretrained.md), a local model
  directory or a hub id -> model, tokenizer), `evaluate` (as an `EvalSpec` says: n samples per problem, Pass@k,
  greedy accuracy), `results_table` (evaluations side by side, e.g. before / after training) and `pass_at_k` (the
  unbiased estimator).

README.md has a 20-line example; docs/ the rest.
"""

from importlib import import_module

from esreason_lib.store.identity import register_zoo_versions
from esreason_lib.version import __version__  # noqa: F401 (eager: the store records it)

# name -> the module that defines it; imported on first use (PEP 562), so `import esreason_lib.metrics` loads no
# transformers and no torch beyond what metrics itself needs.
_API = {
    "ES": "esreason_lib.es.core", "ESConfig": "esreason_lib.es.config", "train_es": "esreason_lib.es.loop",
    "evaluate": "esreason_lib.evaluation", "EvalSpec": "esreason_lib.evaluation",
    "GRPOConfig": "esreason_lib.grpo.config", "train_grpo": "esreason_lib.grpo.loop",
    "pass_at_k": "esreason_lib.metrics", "load_model": "esreason_lib.models.load", "Task": "esreason_lib.tasks",
    "get_task": "esreason_lib.tasks", "register_task": "esreason_lib.tasks", "results_table": "esreason_lib.evaluation",
}

__all__ = sorted([*_API, "__version__"])


def __getattr__(name: str):
    if name not in _API:
        raise AttributeError(f"module 'esreason_lib' has no attribute {name!r}")
    value = getattr(import_module(_API[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__


def _zoo_versions() -> dict[str, str]:
    """`models.zoo.zoo_versions()`, imported when a run's identity first needs it: the package wires the zoo into
    `store.identity` here, so that the store, below the models, imports no model code."""
    from esreason_lib.models.zoo import zoo_versions

    return zoo_versions()


register_zoo_versions(_zoo_versions)
