"""esreason: Evolution Strategies vs GRPO for LLM reasoning, from a 1M-parameter Qwen2 to Qwen2.5 on GPUs.

Reference companion to "Understanding Evolution Strategies for LLM Reasoning: Broader Reasoning Coverage
than GRPO" (arXiv 2608.27351). The public API, for ES or GRPO on your own Hugging Face model and verifier:

- `ESConfig`, `ES` (ask/tell), `train_es`: evolution strategies (`esreason_lib.es`);
- `GRPOConfig`, `train_grpo`: the gradient baseline (`esreason_lib.grpo`);
- `Task` (subclass it for your own verifier), `get_task` (the built-in tasks by name);
- `load_model` (a zoo name, a local model directory or a hub id -> model, tokenizer), `evaluate` (n samples per
  problem: Pass@k, greedy accuracy) and `pass_at_k` (the unbiased estimator).

README.md has a 20-line example; docs/ the rest.
"""

from esreason_lib.es.core import ES, ESConfig
from esreason_lib.es.loop import train_es
from esreason_lib.evaluate import evaluate
from esreason_lib.grpo.config import GRPOConfig
from esreason_lib.grpo.loop import train_grpo
from esreason_lib.metrics import pass_at_k
from esreason_lib.models.load import load_model
from esreason_lib.tasks import Task, get_task
from esreason_lib.version import __version__

__all__ = ["ES", "ESConfig", "GRPOConfig", "Task", "__version__", "evaluate", "get_task", "load_model", "pass_at_k",
           "train_es", "train_grpo"]
