"""GRPO step of this project against TRL's `GRPOTrainer`, side by side in one process (benchmark 4 of issue 12).

    ESREASON_HOME=/tmp/bench-home .venv/bin/python benchmarks/bench_trl.py                         # quick: 1 x 5 steps
    ESREASON_HOME=/tmp/bench-home .venv/bin/python benchmarks/bench_trl.py --steps 100 --seeds 3   # the full one

Needs the `bench` extra (`pip install -e .[bench]`: trl). Both trainers start from the same saved zoo model and
tokenizer (`qwen2-s-habit`, loaded by `models.load_model`, never `AutoTokenizer`), and see the same Countdown prompts:
step t of both is the 128 prompts `training.settings.prompt_indices` draws for this project's step t (TRL gets them
as an unshuffled dataset in that order). Both: group size 8, at most 24 new tokens, temperature 1, lr 1e-4 constant,
AdamW without weight decay, grad-norm clip 1, beta 0, clip epsilon 0.2, the paper's "seq-mean-token-mean" loss (TRL
`loss_type="grpo"`), group-std advantages, one optimiser step per rollout batch of 1,024 completions, float32 on CPU
(`use_cpu=True`, `bf16=False`), one torch thread, and the same reward (`Task.reward` of the completion cut at the
task's stop string). The two step in alternation (a trainer callback runs this project's step after each TRL step),
so a loaded machine slows both alike. A TRL step is timed from the end of the previous step of this project to the
end of its own optimiser step (data loading, generation, scoring, loss, backward, step, logging); a step of this
project is one `grpo.grpo_step` call. Prints the median step-time ratio (this project / TRL) in wall and process CPU
time, both reward curves, and saves them together as benchmarks/trl_rewards.png (and .pdf); `--csv` keeps every
step's row as it is measured, and `--from-csv` summarises and plots such a file (e.g. of an interrupted run).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

GOAL = "<= 0.5"


def plot_reward_curves(table: pd.DataFrame, ax=None):
    """Mean reward per step of each trainer (`table` columns: trainer, seed, step, reward): the seed mean as a thick
    line, each seed as a thin one. Returns (fig, ax)."""
    from esreason_lib.paper.plots import axes_or_new, color_for

    _, ax = axes_or_new(ax)
    for i, (name, rows) in enumerate(table.groupby("trainer", sort=False)):
        color = color_for(name, i)
        for _, seed_rows in rows.groupby("seed"):
            ax.plot(seed_rows["step"], seed_rows["reward"], color=color, alpha=0.25, lw=0.8)
        mean = rows.groupby("step")["reward"].mean()
        seeds = rows["seed"].nunique()
        ax.plot(mean.index, mean.values, color=color, lw=2, label=f"{name} ({seeds} seed{'s' * (seeds > 1)})")
    ax.set_xlabel("step")
    ax.set_ylabel("mean reward of the step's rollouts")
    ax.legend(frameon=False)
    return ax.figure, ax


def _trl_config(args, seed: int, output_dir: str):
    from trl import GRPOConfig as TRLConfig

    return TRLConfig(output_dir=output_dir, use_cpu=True, bf16=False, seed=seed, max_steps=args.steps,
                     per_device_train_batch_size=args.prompts * args.group, gradient_accumulation_steps=1,
                     num_generations=args.group, max_completion_length=args.max_new_tokens, temperature=1.0,
                     top_p=1.0, learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
                     max_grad_norm=1.0, beta=0.0, epsilon=0.2, loss_type="grpo", scale_rewards="group",
                     shuffle_dataset=False, logging_steps=1, report_to="none", save_strategy="no",
                     disable_tqdm=True, dataloader_num_workers=0)


def run_seed(args, seed: int) -> pd.DataFrame:
    """Alternate `args.steps` steps of both trainers from the same base; one row per (trainer, step)."""
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOTrainer

    from esreason_lib.grpo.loop import grpo_step
    from esreason_lib.models.generation import cut_at_stop
    from esreason_lib.models.load import load_model
    from esreason_lib.models.optim import master_weight_adamw
    from esreason_lib.paper.studies.presets import get_preset
    from esreason_lib.training.inputs import training_inputs
    from esreason_lib.training.settings import prompt_indices

    config = replace(get_preset("tiny").config("grpo"), model=args.model, group_size=args.group,
                     prompts_per_step=args.prompts, max_new_tokens=args.max_new_tokens, lr=args.lr, beta=0.0,
                     iterations=args.steps, seed=seed)
    model, tok, task, examples = training_inputs(config, progress=False, caller="bench_trl")
    prompts = [task.prompt(ex, tok) for ex in examples]
    opt = master_weight_adamw(model, lr=config.lr, weight_decay=config.weight_decay)
    order = np.concatenate([prompt_indices(len(examples), args.prompts, t, seed, "grpo", config.prompt_order)
                            for t in range(args.steps)])  # [steps * P] this project's draws, step by step
    data = Dataset.from_dict({"prompt": [prompts[i] for i in order], "example": order.tolist()})
    trl_model, trl_tok = load_model(args.model, device="cpu", dtype=torch.float32, progress=False)
    rows: list[dict] = []
    trl_rewards: list[float] = []

    def countdown_reward(prompts, completions, example, **_):
        scores = [task.reward(cut_at_stop(c, task.stop), examples[i]) for c, i in zip(completions, example)]
        trl_rewards.append(float(np.mean(scores)))
        return scores

    class Alternate(TrainerCallback):
        """After each TRL step, time it and run (and time) this project's step of the same index."""

        def on_train_begin(self, *_, **__):
            self.mark = (time.perf_counter(), time.process_time())

        def on_step_end(self, *_, **__):
            wall, cpu = time.perf_counter(), time.process_time()
            t = len(rows) // 2
            rows.append(dict(trainer="TRL GRPOTrainer", seed=seed, step=t + 1, reward=trl_rewards[-1],
                             wall_s=wall - self.mark[0], cpu_s=cpu - self.mark[1]))
            m = grpo_step(model, None, opt, tok, task, examples, prompts, config, t)
            self.mark = (time.perf_counter(), time.process_time())
            rows.append(dict(trainer="this project", seed=seed, step=t + 1, reward=m["reward/mean"],
                             wall_s=self.mark[0] - wall, cpu_s=self.mark[1] - cpu))
            ours, theirs = rows[-1], rows[-2]
            if args.csv:  # kept step by step, so that an interrupted measurement can still be summarised
                pd.DataFrame(rows[-2:]).to_csv(args.csv, mode="a", header=not Path(args.csv).exists(), index=False)
            print(f"seed {seed} step {t + 1:3d}: this project {ours['cpu_s']:.3f} s cpu ({ours['wall_s']:.3f} wall) "
                  f"reward {ours['reward']:.3f} | TRL {theirs['cpu_s']:.3f} s cpu ({theirs['wall_s']:.3f} wall) "
                  f"reward {theirs['reward']:.3f} | threads {torch.get_num_threads()}", flush=True)

    with tempfile.TemporaryDirectory() as out:
        trainer = GRPOTrainer(model=trl_model, reward_funcs=countdown_reward, args=_trl_config(args, seed, out),
                              train_dataset=data, processing_class=trl_tok, callbacks=[Alternate()])
        trainer.remove_callback(PrinterCallback)  # the per-step lines above say what is compared
        torch.set_num_threads(1)
        trainer.train()
    return pd.DataFrame(rows)


def summarize(table: pd.DataFrame, skip: int) -> list[str]:
    """Median step-time ratio (this project / TRL) over steps after the first `skip`, and the reward curves; only
    steps that both trainers finished count (an interrupted run's last TRL step has no partner)."""
    table = table.groupby(["seed", "step"]).filter(lambda pair: pair["trainer"].nunique() == 2)
    timed = table[table["step"] > skip]
    med = timed.groupby("trainer")[["wall_s", "cpu_s"]].median()
    ours, trl = med.loc["this project"], med.loc["TRL GRPOTrainer"]
    lines = [f"median step time over {timed['seed'].nunique()} seed(s) x {timed['step'].nunique()} steps "
             f"(first {skip} skipped): this project {ours['cpu_s']:.3f} s cpu / {ours['wall_s']:.3f} s wall, "
             f"TRL {trl['cpu_s']:.3f} s cpu / {trl['wall_s']:.3f} s wall",
             f"ratio (this project / TRL): {ours['cpu_s'] / trl['cpu_s']:.2f} cpu, "
             f"{ours['wall_s'] / trl['wall_s']:.2f} wall (goal {GOAL})"]
    n = table["step"].max()
    k = max(1, min(10, n // 3))
    for name, rows in table.groupby("trainer", sort=False):
        curve = rows.groupby("step")["reward"].mean()  # [steps] seed mean
        marks = " ".join(f"{s}:{curve[s]:.3f}" for s in sorted({1, *range(10, n + 1, 10), n}))
        lines.append(f"reward {name}: first {k} steps {curve.iloc[:k].mean():.3f} -> last {k} "
                     f"{curve.iloc[-k:].mean():.3f}, mean over all steps {curve.mean():.3f} | {marks}")
    return lines


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5, help="steps per seed (100 for the full measurement)")
    ap.add_argument("--seeds", type=int, default=1, help="seeds 0..seeds-1 (3 for the full measurement)")
    ap.add_argument("--model", default="qwen2-s-habit")
    ap.add_argument("--prompts", type=int, default=128)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--skip", type=int, default=1, help="warm-up steps left out of the timing medians")
    ap.add_argument("--plot", default=str(Path(__file__).resolve().parent / "trl_rewards.png"),
                    help="where the reward-curve figure goes ('' = no figure)")
    ap.add_argument("--csv", default="", help="also append every step's row to this CSV as it is measured")
    ap.add_argument("--from-csv", default="", help="only summarise (and plot) the rows of this CSV")
    args = ap.parse_args(argv)
    if args.from_csv:
        table = pd.read_csv(args.from_csv)
    else:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        warnings.filterwarnings("ignore", category=FutureWarning)  # transformers 5 renames inside TRL
        torch.set_num_threads(1)
        if args.csv:
            Path(args.csv).unlink(missing_ok=True)
        table = pd.concat([run_seed(args, seed) for seed in range(args.seeds)], ignore_index=True)
    print("\n".join(summarize(table, args.skip)))
    if args.plot:
        from esreason_lib.paper.plots import save_figure

        fig, _ = plot_reward_curves(table)
        plot = Path(args.plot)
        print("wrote", *save_figure(fig, plot.stem, preset="tiny", directory=plot.parent))


if __name__ == "__main__":
    sys.exit(main())
