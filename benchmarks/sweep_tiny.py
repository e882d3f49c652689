"""The ES and GRPO hyperparameter sweeps behind the `tiny` preset: writes their tables into `papers/sweeps.md`.

    python benchmarks/sweep_tiny.py [--grid main|grpo] [--workers 2] [--out papers/sweeps.md]

Each cell is a training run (cached in the run store, so re-running the script only evaluates what is new) that
starts from the preset's base model with the grid's fixed fields and the cell's changes. Each trained model is
scored on the preset's tuning split of the held-out Countdown pool (`preset.splits`, [300, 500) at `tiny`: no
test or selection problem), as its base: greedy accuracy (the quantity ES optimises with greedy decoding) and,
from n samples at temperature 1, Pass@1 and Pass@n. Runs use one thread per worker (two workers fill the two
cores); `seconds` is the summed training step time under that load.
"""

from __future__ import annotations

import argparse
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ES_FIXED = {"population_size": 16, "prompts_per_step": 64, "normalization": "zscore"}
GRPO_FIXED = {"group_size": 8, "prompts_per_step": 8, "lr": 2e-5}

GRIDS: dict[str, tuple[str, dict, list[dict]]] = {
    # ES: step size per coordinate and iteration ~ alpha / sqrt(N); sigma = perturbation scale; 300 iterations
    # at N=16, P=64 take about 2.5 minutes on one core
    "main": ("es", ES_FIXED, [
        {"sigma": 3e-3, "alpha": 1.2e-3, "iterations": 300},
        {"sigma": 3e-3, "alpha": 2.4e-3, "iterations": 300},
        {"sigma": 1e-2, "alpha": 2.4e-3, "iterations": 300},
        {"sigma": 1e-2, "alpha": 4.8e-3, "iterations": 300},
        {"sigma": 1e-2, "alpha": 2.4e-3, "iterations": 600},
        {"sigma": 3e-3, "alpha": 2.4e-3, "iterations": 300, "prompts_per_step": 128},
        {"sigma": 1e-2, "alpha": 2.4e-3, "iterations": 150, "prompts_per_step": 128},
        {"sigma": 1e-2, "alpha": 3.4e-3, "iterations": 150, "population_size": 32},
        {"sigma": 1e-2, "alpha": 2.4e-3, "iterations": 300, "normalization": "rank"},
        {"sigma": 1e-2, "alpha": 2.4e-3, "iterations": 300, "normalization": "none"},
    ]),
    # GRPO at the prototype's batch (8 prompts x 8 samples) and at ES's prompts per step and iterations
    "grpo": ("grpo", GRPO_FIXED, [
        {"iterations": 400},
        {"iterations": 1200},
        {"iterations": 400, "lr": 1e-4},
        {"iterations": 150, "prompts_per_step": 128},
        {"iterations": 150, "prompts_per_step": 128, "lr": 1e-4},
        {"iterations": 150, "prompts_per_step": 128, "lr": 3e-4},
    ]),
}
"""Named grids: (method, fields every cell sets, cells); a cell's fields override the fixed ones, and the rest
come from the preset."""


def _spec(preset, n: int):
    """The evaluation that holds the preset's whole tuning split (its first `splits.end("tuning")` problems)."""
    from esreason_lib.evaluation import EvalSpec

    return EvalSpec(n_problems=preset.splits.end("tuning"), n_samples=n, ks=(1, n), n_boot=100)


def tuning_scores(result, preset, n: int) -> dict[str, float]:
    """Greedy accuracy, Pass@1 and Pass@n over the tuning-split rows of `result` (an `EvalResult` of `_spec`)."""
    import numpy as np

    from esreason_lib.metrics import pass_at_k
    from esreason_lib.paper.splits import split_rows

    rows = result.table[split_rows(np.arange(len(result.table)), preset.splits, "tuning")]
    nn, c = rows["n"].to_numpy(), rows["c"].to_numpy()
    return {"greedy": float(rows["greedy_correct"].astype(float).mean()),
            "pass@1": float(np.mean(pass_at_k(nn, c, 1))), f"pass@{n}": float(np.mean(pass_at_k(nn, c, n))),
            "problems": len(rows)}


def _cell(args: tuple[str, str, dict, dict, str]) -> dict:
    preset_name, method, fixed, changes, eval_n = args
    import torch

    torch.set_num_threads(1)
    from esreason_lib.methods import trainer
    from esreason_lib.paper.studies.common import evaluate_ref, model_ref
    from esreason_lib.paper.studies.presets import get_preset

    preset = get_preset(preset_name)
    n = int(eval_n)
    run = trainer(method)(preset.config(method, seed=0, **{**fixed, **changes}), progress=False)
    seconds = run.metrics()["time/step_s"].sum()
    res = evaluate_ref(model_ref(run), preset.task, preset.task_kwargs, _spec(preset, n), progress=False)
    scores = tuning_scores(res, preset, n)
    return {**fixed, **changes, "seconds": round(float(seconds)),
            "greedy": scores["greedy"], "pass@1": scores["pass@1"], f"pass@{n}": scores[f"pass@{n}"],
            "train_reward_last20": float(run.metrics()["reward/center" if method == "es" else "reward/mean"]
                                         .tail(20).mean())}


def _markdown(df) -> str:
    cells = [[f"{v:.4g}" if isinstance(v, float) else ("" if v is None else str(v)) for v in row]
             for row in df.astype(object).where(df.notna(), None).itertuples(index=False)]
    lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    return "\n".join(lines + ["| " + " | ".join(c) + " |" for c in cells])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--grid", default="main", choices=sorted(GRIDS))
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--eval-samples", type=int, default=16)
    parser.add_argument("--out", type=Path, default=None, help="write the markdown table here")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    import pandas as pd
    import torch

    from esreason_lib.paper.studies.common import evaluate_ref
    from esreason_lib.paper.studies.presets import get_preset

    torch.set_num_threads(1)
    preset = get_preset(args.preset)
    n = args.eval_samples
    base = tuning_scores(evaluate_ref(preset.base_model, preset.task, preset.task_kwargs, _spec(preset, n),
                                      progress=False), preset, n)
    method, fixed, grid = GRIDS[args.grid]
    cells = [(args.preset, method, fixed, changes, str(n)) for changes in grid]
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        rows = []
        for row in pool.map(_cell, cells):
            print(row, flush=True)
            rows.append(row)
    df = pd.DataFrame(rows)
    df["d_greedy"] = df["greedy"] - base["greedy"]
    table = _markdown(df)
    header = (f"base {preset.base_model}: greedy {base['greedy']:.3f}, pass@1 {base['pass@1']:.3f}, "
              f"pass@{n} {base[f'pass@{n}']:.3f} on the {base['problems']} problems of the tuning split "
              f"{preset.splits.tuning} of the held-out pool")
    print(header)
    print(table)
    if args.out:
        write_between_markers(args.out, f"sweep:{args.grid}",
                              f"<!-- written by benchmarks/sweep_tiny.py --grid {args.grid} -->\n"
                              f"{header}\n\n{table}")


def write_between_markers(path: Path, name: str, text: str) -> None:
    """Put `text` between `<!-- {name}:start -->` and `<!-- {name}:end -->` in `path` (appended when absent),
    leaving the prose around it alone."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    old = path.read_text() if path.exists() else ""
    block = f"{start}\n{text}\n{end}"
    if start in old and end in old:
        new = old[:old.index(start)] + block + old[old.index(end) + len(end):]
    else:
        new = (old.rstrip() + "\n\n" if old.strip() else "") + block + "\n"
    path.write_text(new)


if __name__ == "__main__":
    main()
