"""The paper's forgetting summary at scale: the average change of Pass@K over the held-out suite.

The paper reports forgetting as the mean, over its held-out tasks with each task weighted equally, of
Delta Pass@32 = Pass@32(trained model) - Pass@32(base model). The suite is `Preset.heldout_tasks` of the paper
presets: CommonsenseQA, GPQA-Diamond, HotpotQA and MBPP (`tasks/`), plus the other reasoning set (MATH-500 for the
GSM8K-trained `paper-easy`, GSM8K for the DeepScaleR-trained `paper-hard`). `average_delta` takes the per-task
deltas of one method (e.g. the `d_pass@K` column of `studies.forgetting.forgetting_deltas`, by task).
"""

from __future__ import annotations

import math
from typing import Mapping

__all__ = ["average_delta"]


def average_delta(per_task_deltas: Mapping[str, float]) -> float:
    """The unweighted mean of `per_task_deltas` ({task: Delta Pass@K}; a dict, a pandas Series indexed by task or
    (task, delta) pairs). ValueError when it is empty, or naming the task whose delta is not a finite number in
    [-1, 1] (a difference of two probabilities)."""
    try:
        deltas = dict(per_task_deltas)
    except (TypeError, ValueError):
        raise ValueError(f"per_task_deltas must map task names to deltas, got {per_task_deltas!r:.80}") from None
    if not deltas:
        raise ValueError("per_task_deltas is empty: no held-out task to average over")
    for task, delta in deltas.items():
        if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not math.isfinite(delta) \
                or not -1.0 <= delta <= 1.0:
            raise ValueError(f"per_task_deltas[{task!r}] must be a finite number in [-1, 1], got {delta!r}")
    return math.fsum(float(d) for d in deltas.values()) / len(deltas)
