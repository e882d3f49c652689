"""The training runs a preset's notebooks need, trained ahead of them in balanced shards.

Every notebook trains what it needs itself (runs are cached by config), so this is scheduling only: `make
reproduce` runs `esreason prefill --preset P --shard i/2` for i = 0, 1 side by side, one per core, and the
notebooks then find those runs complete. Without it, notebook 01 would train its whole step-size grid on one core
while 03-05 wait for it. The plan is the studies' own `training_configs` (one definition each, no copies):
notebook 01's grid, which notebooks 03-05 reuse, and notebook 06's cells and ablations. Notebook 03's sequences
(each stage starts from the previous stage's model) and notebook 02's step-by-step trajectories stay with their
notebooks.

Since the shards run side by side, `shard` keeps in shard 0 every run whose estimated peak memory
(`paper.memory.peak_memory_bytes`) would not fit in the machine beside a run of the other shard: ES on the 135M
pretrained base at population 8 peaks at 12.7 GB (measured, backend "fast"), and two such runs overran the 24 GB
machine (the OOM killer ended one).

`prefill` prints one line per finished run: the shard's count, the plan's, the run, and the time left in the shard
(`time_left`: the seconds per unit of `expected_cost` of the runs this shard trained, times the cost left).
"""

from __future__ import annotations

import time

from esreason_lib.es.config import ESConfig
from esreason_lib.grpo.config import GRPOConfig
from esreason_lib.methods import trainer
from esreason_lib.paper.memory import memory_budget, peak_memory_bytes
from esreason_lib.paper.studies.presets import Preset, preset_notebooks
from esreason_lib.store.identity import config_hash


def training_plan(preset: Preset) -> list[ESConfig | GRPOConfig]:
    """Every distinct training config of notebooks 01 and 06 under `preset`, in the studies' order (06's only when
    the preset runs it: `presets.preset_notebooks`)."""
    from esreason_lib.paper.studies import comparison, scaling

    notebooks = preset_notebooks(preset.name)
    configs = [*comparison.training_configs(preset).values(),
               *(scaling.training_configs(preset).values() if notebooks is None or "06" in notebooks else ())]
    unique = {(type(c).__name__, config_hash(c)): c for c in configs}  # a config shared by two studies trains once
    return list(unique.values())


def expected_cost(config: ESConfig | GRPOConfig) -> float:
    """Relative cost of training `config`: completions generated over the run, a GRPO completion counted twice
    (its backward pass costs about as much again; measured: a tiny GRPO iteration of 1,024 completions takes about
    as long as an ES iteration of 2,048). ES counts its population's completions only: each iteration also decodes
    the centre once per prompt (`es.loop.es_step`: reward/center, policy/entropy), iterations x prompts_per_step
    more, 1 / population_size of the count, left out here (the shards' balance is relative)."""
    if isinstance(config, ESConfig):
        return float(config.iterations * config.prompts_per_step * config.population_size)
    return 2.0 * config.iterations * config.prompts_per_step * config.group_size


def apart(configs, budget: int) -> list[bool]:
    """For each of `configs`, whether it must train in shard 0 for memory (`shard`): it is heavy (its
    `memory.peak_memory_bytes` above half of `budget` bytes, or unknown), or it would not fit in `budget` beside
    the largest heavy one. Two configs not both kept apart then fit together: both are at most half the budget, or
    the one kept apart is heavy and the other fits beside the largest heavy one (or both are in shard 0). ES on
    "fast" at N = 8 on `smollm2-135m` (12.7 GB measured) is heavy on the 24 GB machine (budget 0.8 x 24 GB)."""
    peaks = [peak_memory_bytes(c) for c in configs]
    heavy = [p is None or p > budget / 2 for p in peaks]
    if not any(heavy):
        return heavy
    largest = max(float("inf") if p is None else p for p, h in zip(peaks, heavy) if h)
    return [h or p + largest > budget for p, h in zip(peaks, heavy)]


def shard(configs, index: int, count: int, *, budget: int | None = None) -> list:
    """The configs of shard `index` of `count`: longest first, each to the least-loaded shard (deterministic),
    except those `apart` keeps in shard 0 (counted in its load from the start), so that no two configs whose
    estimated peaks sum above `budget` bytes (default `memory.memory_budget()`, 0.8 of this machine's memory)
    train side by side in two shards. A plan with no heavy config is balanced as before."""
    if not (isinstance(count, int) and count >= 1 and isinstance(index, int) and 0 <= index < count):
        raise ValueError(f"shard must be i/n with 0 <= i < n, got {index}/{count}")
    ordered = sorted(configs, key=lambda c: (-expected_cost(c), config_hash(c)))
    pinned = apart(ordered, memory_budget() if budget is None else budget)
    loads, out = [0.0] * count, [[] for _ in range(count)]
    loads[0] = sum(expected_cost(c) for c, p in zip(ordered, pinned) if p)
    for config, keep in zip(ordered, pinned):
        if keep:
            out[0].append(config)
            continue
        lightest = loads.index(min(loads))
        loads[lightest] += expected_cost(config)
        out[lightest].append(config)
    return out[index]


def time_left(trained: list[tuple[float, float]], cost_left: float) -> float | None:
    """Seconds the runs of `cost_left` (`expected_cost` units) should take at the pace of `trained` ((cost,
    seconds) of each run trained so far; runs found complete are left out); None before any run was trained."""
    cost = sum(c for c, _ in trained)
    return None if not cost else cost_left * sum(s for _, s in trained) / cost


def _duration(seconds: float) -> str:
    """"41 s", "6 min", "1 h 5 min"."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def progress_line(where: str, done: int, count: int, planned: int, name: str, seconds: float | None,
                  left: float | None) -> str:
    """One finished run of a shard: "prefill 0/2: 3 of 12 runs done (the plan has 24): es-1a2b trained in 41 s;
    about 6 min left" (`seconds` None: found complete in the store; `left` None: no estimate yet)."""
    how = "found complete" if seconds is None else f"trained in {_duration(seconds)}"
    rest = "" if done == count else ("; time left: no estimate yet" if left is None else
                                     f"; about {_duration(left)} left")
    return f"{where}: {done} of {count} runs done (the plan has {planned}): {name} {how}{rest}"


def prefill(preset: Preset, index: int, count: int, *, home=None, progress: bool = True) -> list:
    """Train (or find complete) shard `index` of `count` of `training_plan(preset)`; returns the runs. With
    `progress`, one line per finished run (`progress_line`) instead of each run's progress bar."""
    from esreason_lib.progress import say
    from esreason_lib.store.runs import run_exists
    from esreason_lib.training.run_entry import run_identity

    plan = training_plan(preset)
    configs = shard(plan, index, count)
    runs, trained = [], []
    for i, config in enumerate(configs):
        kind = "es" if isinstance(config, ESConfig) else "grpo"
        found = run_exists(kind, run_identity(config), home=home)  # complete already: reused, not trained
        t0 = time.perf_counter()
        run = trainer(kind)(config, home=home, progress=False)
        seconds = time.perf_counter() - t0
        if not found:
            trained.append((expected_cost(config), seconds))
        runs.append(run)
        if progress:
            left = time_left(trained, sum(expected_cost(c) for c in configs[i + 1:]))
            say(progress_line(f"prefill {preset.name} {index}/{count}", i + 1, len(configs), len(plan),
                              run.path.name, None if found else seconds, left))
    return runs
