"""benchmarks/bench_trl.py's summary and plot on a hand-made table (the TRL run itself is a benchmark, not a test)."""

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_trl  # noqa: E402


def _table():
    rows = []
    for step, (ours, trl) in enumerate([(9.0, 1.0), (1.0, 4.0), (3.0, 4.0), (2.0, 8.0)], start=1):
        rows.append(dict(trainer="TRL GRPOTrainer", seed=0, step=step, reward=0.1 * step, wall_s=trl, cpu_s=trl / 2))
        rows.append(dict(trainer="this project", seed=0, step=step, reward=0.2, wall_s=ours, cpu_s=ours / 2))
    rows.append(dict(trainer="TRL GRPOTrainer", seed=0, step=5, reward=9.0, wall_s=99.0, cpu_s=99.0))  # no partner
    return pd.DataFrame(rows)


def test_summarize_takes_the_median_ratio_of_finished_pairs_after_the_warm_up():
    lines = bench_trl.summarize(_table(), skip=1)
    # steps 2-4: medians this project 2.0 s wall / 1.0 s cpu, TRL 4.0 s wall / 2.0 s cpu; step 5 has no partner
    assert "1 seed(s) x 3 steps" in lines[0] and "this project 1.000 s cpu / 2.000 s wall" in lines[0]
    assert lines[1] == "ratio (this project / TRL): 0.50 cpu, 0.50 wall (goal <= 0.5)"
    assert "reward TRL GRPOTrainer: first 1 steps 0.100 -> last 1 0.400, mean over all steps 0.250" in lines[2]


def test_plot_reward_curves_draws_each_trainer_and_seed():
    fig, ax = bench_trl.plot_reward_curves(_table())
    assert len(ax.lines) == 4  # per trainer: one thin line per seed and the seed mean
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["TRL GRPOTrainer (1 seed)", "this project (1 seed)"]
    assert fig is ax.figure
