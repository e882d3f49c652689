"""The training pilot behind papers/preregistration-pretrained.md: a few short ES and GRPO runs on the pretrained base,
each final model evaluated on the same problems, so that the training seed and problem components of the
design's checks can be measured before it is registered (a script, not a test; its runs are not the design's).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/pilot_pretrained_training.py --method es --seeds 0 1 \\
        --iterations 10 --problems 48 --samples 16 --out benchmarks/pilot_pretrained_training.jsonl

Each run trains `smollm2-135m` on `multistep` (2 two-digit terms, the "short" style, 20% of the problems held out)
with the library's `train_es` / `train_grpo` (runs in the store under --home, resumed when there), then evaluates
its final weights (`--method base`: the base) with the library's `evaluate` at T = 0.6 on `--problems` problems of
the design's tuning split (`--split test`: its first test problems, where the first pilot evaluations ran), with
`--samples` samples each on the native forward with shared prefixes and inverse-cdf draws (the design's evaluation
path); `--eval-on heldout` evaluates the held-out task of claim 05 instead (two one-digit terms; its 112 problems
are the design's). A stored run is evaluated again without training. One JSON line per evaluated model goes to
--out: the arm, seed, settings, split, Pass@k, each problem's number of correct samples, the wall seconds of
training and of evaluation, and the run's last training metrics.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from esreason_lib.paper.studies.pretrained_design import HELDOUT, PRETRAINED_SPLITS, PRETRAINED_TASK_KWARGS

TASK, TASK_KWARGS, BASE = "multistep", PRETRAINED_TASK_KWARGS, "smollm2-135m"
"""The design's base and training task (esreason_lib/paper/studies/pretrained_design.py)."""


def es_config(seed: int, args):
    """The pilot's ES: antithetic, greedy members (the paper's ES), z-scored rewards, on `--backend` (default the
    fast batched one, ~12.7 GB at population 8 on this base; "sequential": one model perturbed in place, ~2.4 GB,
    the same members' rewards up to float rounding); `--members-at-once` bounds the fast backend's memory at a
    larger population (8: ~12.7 GB, whatever the population)."""
    from esreason_lib import ESConfig

    return ESConfig(model=BASE, task=TASK, task_kwargs=TASK_KWARGS, max_new_tokens=args.max_new_tokens,
                    population_size=args.population, sigma=args.sigma, alpha=args.alpha, iterations=args.iterations,
                    prompts_per_step=args.prompts, antithetic=True, greedy=True, backend=args.backend, seed=seed,
                    members_at_once=args.members_at_once,
                    reward_correct=1.0, reward_formatted=0.0, reward_invalid=0.0, device="cpu", checkpoint_every=5)


def grpo_config(seed: int, args):
    """The pilot's GRPO: the tiny preset's loop (no KL, clip 0.2, group-normalised advantages) at `--lr`, rollouts
    on the native forward with shared prefixes."""
    from esreason_lib import GRPOConfig

    return GRPOConfig(model=BASE, task=TASK, task_kwargs=TASK_KWARGS, max_new_tokens=args.max_new_tokens,
                      group_size=args.group, lr=args.lr, beta=0.0, clip_eps=0.2, temperature=1.0,
                      prompts_per_step=args.prompts, iterations=args.iterations, seed=seed,
                      forward="native", share_prefixes=True, shared_prompts=True, sampler="inverse-cdf",
                      reward_correct=1.0, reward_formatted=0.0, reward_invalid=0.0, device="cpu", checkpoint_every=5)


def evaluation(model, tokenizer, args) -> tuple[dict, list[int], float]:
    """(Pass@k by k, correct samples per problem, seconds) of `model` on the pilot's test problems of the training
    task (`--eval-on train-task`) or of the held-out task."""
    from esreason_lib import EvalSpec, evaluate
    from esreason_lib.tasks import get_task

    if args.eval_on == "train-task":  # the design's tuning split, never one of its test or selection problems
        start = PRETRAINED_SPLITS.tuning[0] if args.split == "tuning" else 0
        problems = get_task(TASK, **TASK_KWARGS).examples("test", n=start + args.problems)[start:]
        task = get_task(TASK, **TASK_KWARGS)
    else:  # the held-out task's pool is the design's (112 problems, all evaluated by notebook 05)
        task = get_task(HELDOUT.task, **HELDOUT.kwargs)
        problems = task.examples("test", n=args.problems)
    ks = tuple(k for k in (1, 2, 4, 8, 16, 32) if k <= args.samples)
    spec = EvalSpec(n_problems=args.problems, n_samples=args.samples, ks=ks, temperature=0.6, greedy=False,
                    max_new_tokens=args.max_new_tokens, forward="native", share_prefixes=True, sampler="inverse-cdf",
                    n_boot=100, batch_size=256)
    start = time.perf_counter()
    result = evaluate(model, tokenizer, task, problems, spec, progress=False)
    seconds = time.perf_counter() - start
    curve = dict(zip(result.curve["k"].astype(int), result.curve["pass_at_k"].astype(float)))
    return {str(k): curve[k] for k in ks}, result.table["c"].astype(int).tolist(), seconds


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", choices=("es", "grpo", "base"), required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--prompts", type=int, default=16, help="train prompts per iteration")
    parser.add_argument("--population", type=int, default=8)
    parser.add_argument("--sigma", type=float, default=1e-3)
    parser.add_argument("--alpha", type=float, default=1e-3)
    parser.add_argument("--backend", default="fast", help="ES population backend (`ESConfig.backend`)")
    parser.add_argument("--members-at-once", type=int, default=None,
                        help="ES members stacked at once (`ESConfig.members_at_once`; default: the population)")
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--lr", type=float, default=3e-5)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--problems", type=int, default=48)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--eval-on", choices=("train-task", "heldout"), default="train-task",
                        help="the test problems evaluated: the training task's or the held-out task's")
    parser.add_argument("--split", choices=("tuning", "test"), default="tuning",
                        help="train-task problems from the design's tuning split [300, ...) (default) or its first "
                        "test problems [0, ...) (the first pilot evaluations, before the splits were fixed)")
    parser.add_argument("--home", default="runs")
    parser.add_argument("--out", type=Path, required=True, help="JSON lines file, appended to")
    args = parser.parse_args(argv)
    from esreason_lib import load_model, train_es, train_grpo

    model, tokenizer = load_model(BASE)
    for seed in args.seeds if args.method != "base" else [None]:
        settings = {}
        train_s, metrics = 0.0, {}
        if args.method == "base":
            trained = model
        else:
            config = (es_config if args.method == "es" else grpo_config)(seed, args)
            settings = {k: getattr(config, k) for k in (("population_size", "sigma", "alpha", "backend")
                                                         if args.method == "es" else ("group_size", "lr"))}
            settings.update(iterations=config.iterations, prompts_per_step=config.prompts_per_step)
            start = time.perf_counter()
            train_fn = train_es if args.method == "es" else train_grpo
            run = train_fn(config, home=args.home, progress=False)
            train_s = time.perf_counter() - start
            lines = (run.path / "metrics.jsonl").read_text().splitlines()
            metrics = json.loads(lines[-1]) if lines else {}
            trained = load_model(run.model_dir)[0]
        torch.manual_seed(0)
        pass_at, counts, eval_s = evaluation(trained, tokenizer, args)
        record = {"arm": args.method, "seed": seed, "eval_on": args.eval_on,
                  "split": args.split if args.eval_on == "train-task" else "heldout-test", **settings,
                  "problems": args.problems, "samples": args.samples,
                  "pass_at": pass_at, "correct_counts": counts, "train_s": round(train_s, 1),
                  "eval_s": round(eval_s, 1), "last_metrics": metrics}
        with open(args.out, "a") as fh:
            fh.write(json.dumps(record) + "\n")
        print(json.dumps({k: record[k] for k in ("arm", "seed", "pass_at", "train_s", "eval_s")}), flush=True)


if __name__ == "__main__":
    main()
