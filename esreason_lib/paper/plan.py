"""The training runs a preset's notebooks need, trained ahead of them in balanced shards.

Every notebook trains what it needs itself (runs are cached by config), so this is scheduling only: `make
reproduce` runs `esreason prefill --preset P --shard i/2` for i = 0, 1 side by side, one per core, and the
notebooks then find those runs complete. Without it, notebook 01 would train its whole step-size grid on one core
while 03-05 wait for it. The plan is the studies' own `training_configs` (one definition each, no copies):
notebook 01's grid, which notebooks 03-05 reuse, and notebook 06's cells and ablations. Notebook 03's sequences
(each stage starts from the previous stage's model) and notebook 02's step-by-step trajectories stay with their
notebooks.
"""

from __future__ import annotations

from esreason_lib.es.config import ESConfig
from esreason_lib.grpo.config import GRPOConfig
from esreason_lib.methods import trainer
from esreason_lib.paper.studies.presets import Preset
from esreason_lib.store.identity import config_hash


def training_plan(preset: Preset) -> list[ESConfig | GRPOConfig]:
    """Every distinct training config of notebooks 01 and 06 under `preset`, in the studies' order."""
    from esreason_lib.paper.studies import comparison, scaling

    configs = [*comparison.training_configs(preset).values(), *scaling.training_configs(preset).values()]
    unique = {(type(c).__name__, config_hash(c)): c for c in configs}  # a config shared by two studies trains once
    return list(unique.values())


def expected_cost(config: ESConfig | GRPOConfig) -> float:
    """Relative cost of training `config`: completions generated over the run, a GRPO completion counted twice
    (its backward pass costs about as much again; measured: a tiny GRPO iteration of 1,024 completions takes about
    as long as an ES iteration of 2,048)."""
    if isinstance(config, ESConfig):
        return float(config.iterations * config.prompts_per_step * config.population_size)
    return 2.0 * config.iterations * config.prompts_per_step * config.group_size


def shard(configs, index: int, count: int) -> list:
    """The configs of shard `index` of `count`: longest first, each to the least-loaded shard (deterministic)."""
    if not (isinstance(count, int) and count >= 1 and isinstance(index, int) and 0 <= index < count):
        raise ValueError(f"shard must be i/n with 0 <= i < n, got {index}/{count}")
    loads, out = [0.0] * count, [[] for _ in range(count)]
    for config in sorted(configs, key=lambda c: (-expected_cost(c), config_hash(c))):
        lightest = loads.index(min(loads))
        loads[lightest] += expected_cost(config)
        out[lightest].append(config)
    return out[index]


def prefill(preset: Preset, index: int, count: int, *, home=None, progress: bool = True) -> list:
    """Train (or find complete) shard `index` of `count` of `training_plan(preset)`; returns the runs."""
    return [trainer("es" if isinstance(c, ESConfig) else "grpo")(c, home=home, progress=progress)
            for c in shard(training_plan(preset), index, count)]
