"""The paper harness's commands on `esreason`'s command line (`esreason_lib.cli` loads this module by its path).

    train es|grpo|sequence --preset tiny [--set key=value ...] [--order grpo,es] [--no-resume] [--eval]
                                       [--keep-checkpoints]
    bases --preset tiny                print the preset's zoo bases (base and control), which `make` pretrains first
    reproduce [NOTEBOOK.py ...]        execute notebooks with papermill into build/notebooks/ (`make -j2` schedules)
    prefill --preset tiny --shard 0/2  train shard 0 of 2 of the runs notebooks 01 and 06 need (`make reproduce`)
            [--trajectories]           or build shard 0 of 2 of notebook 02's trajectories (one seed in two)
    claims                             write papers/claims.md and the README findings table
    summary --preset tiny              draw every stored check as one forest plot (figures/summary.png)
    compare-findings A B               the checks two presets share, side by side
    power --preset tiny                MDE, cost and each check's operating characteristic (`paper.power_report`)

`--set` keys are fields of the method's config (`es.sigma`-style prefixes are accepted too); values are parsed
as Python literals when possible (`--set sigma=0.002 --set antithetic=False --set task_kwargs={"high":9}`).
The flags and `--set` items become config dicts (`cli_settings.train_overrides`), checked against the configs'
fields before torch loads. `--eval` prints a before/after table: the base and every trained model on the preset's
held-out problems (greedy accuracy and Pass@K from `EVAL_SAMPLES` samples at the preset's temperature; cached in
the run store), sampled on one vLLM engine when the training sampled on vLLM (`--backend vllm` / `ray-vllm`).

Nothing here imports torch or the presets at module level: each command imports its work when it runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

from esreason_lib.cli_help import TrainHelp, preset_name, presets_help
from esreason_lib.cli_settings import train_overrides
from esreason_lib.training.early_checks import check_values

EVAL_SAMPLES = 16
"""Samples per held-out problem in `train --eval` (Pass@1 and Pass@16; the notebooks use the preset's n)."""
MAX_SHARDS = 1024
"""The most shards `prefill --shard i/n` splits a preset's runs into (more than any preset has runs)."""


def get_preset(name: str, **overrides):
    """`paper.studies.presets.get_preset`, imported when a command runs (the presets import torch)."""
    from esreason_lib.paper.studies.presets import get_preset as preset

    return preset(name, **overrides)


def eval_backend(configs) -> str:
    """`EvalSpec.backend` for `train --eval` after training `configs`: "vllm" when any of them sampled on vLLM
    engines (ES `vllm` / `ray-vllm`, GRPO `vllm`), so the evaluation runs where the training did; else "local"."""
    return "vllm" if any(getattr(c, "backend", None) in ("vllm", "ray-vllm") for c in configs) else "local"


def before_after(preset, runs, backend: str = "local") -> str:
    """The table printed by `train --eval`: the first run's base model, then each run in `runs`, on the same
    held-out problems of the runs' task (the preset gives the evaluation protocol; `backend` draws the samples,
    `EvalSpec.backend`)."""
    from esreason_lib.evaluation import results_table
    from esreason_lib.paper.studies.common import evaluate_ref, model_ref

    n = min(EVAL_SAMPLES, preset.eval.n_samples)
    ks = sorted({1, n})
    spec = dataclasses.replace(preset.eval, n_samples=n, ks=tuple(ks), backend=backend,
                               forward=preset.eval.forward if backend == "local" else "hf")
    first = runs[0].config
    base, task, task_kwargs = first["model"], first["task"], dict(first["task_kwargs"])
    if task == preset.task and task_kwargs == dict(preset.task_kwargs):
        task_kwargs = preset.test_task_kwargs()  # paper-hard trains on DeepScaleR (no test split), tests on MATH-500
    rows = [("base " + base, base)] + [(run.path.name, model_ref(run)) for run in runs]
    cols = (["eval/greedy"] if spec.greedy else []) + [f"eval/pass@{k}" for k in ks]
    results = {name: evaluate_ref(ref, task, task_kwargs, spec, device=preset.device, progress=False)
               for name, ref in rows}
    on = "" if backend == "local" else f" on {backend}"
    return (f"held-out {task}: {spec.n_problems or 'all'} problems, {n} samples at T={spec.temperature}{on}\n"
            + results_table(results, cols))


def _check_train(args) -> None:
    """`train`'s input, before torch loads: the config dicts (`train_overrides`: fields, prefixes, flags), the
    values they set (`early_checks.check_values`: the configs' own checks of one field) and `--budget` only with a
    sequence."""
    if args.budget is not None and args.method != "sequence":
        raise ValueError(f"--budget applies to train sequence only (train {args.method} runs its config's "
                         f"iterations), got --budget {args.budget}")
    args.overrides = train_overrides(
        args.method, args.set, backend=args.backend, workers=args.workers, ray_address=args.ray_address,
        gpus_per_worker=args.gpus_per_worker, memory_share=args.gpu_memory_utilization,
        keep_checkpoints=args.keep_checkpoints)
    check_values(args.overrides)


def _train(args) -> int:
    from esreason_lib.methods import sequence_stages, train_sequence, trainer
    from esreason_lib.tasks import import_task_module

    if args.task_module and os.getcwd() not in sys.path:  # as under `python -m`: ./my_tasks.py is importable
        sys.path.insert(0, os.getcwd())
    for spec in args.task_module:
        import_task_module(spec)
    preset = get_preset(args.preset)
    if args.method == "sequence":
        es = dataclasses.replace(preset.es, **args.overrides["es"])
        grpo = dataclasses.replace(preset.grpo, **args.overrides["grpo"])
        order = [m.strip() for m in args.order.split(",")]
        budgets = {"es": preset.sequential.es_budget, "grpo": preset.sequential.grpo_budget}
        stages = sequence_stages(order, budgets if args.budget is None else args.budget)
        runs = train_sequence(stages, es=es, grpo=grpo, resume=not args.no_resume, progress=True)
        for run in runs:
            print(run.path)
        if args.eval:
            print(before_after(preset, runs, eval_backend([es, grpo])))
        return 0
    config = preset.config(args.method, **args.overrides[args.method])
    run = trainer(args.method)(config, resume=not args.no_resume, progress=True)
    print(run.path)
    if args.eval:
        print(before_after(preset, [run], eval_backend([config])))
    return 0


def _reproduce(args) -> int:
    from esreason_lib.paper.notebooks import list_notebooks, run_notebooks

    sources = args.notebooks or list_notebooks()
    parameters = {"preset": args.preset} if args.preset else None
    run_notebooks(sources, parameters=parameters, out_dir=args.out_dir)
    return 0 if args.no_claims else _write_claims(args.preset)


def _check_reproduce(args) -> None:
    missing = [n for n in args.notebooks if not Path(n).is_file()]
    if missing:
        raise ValueError(f"reproduce: no notebook source {missing[0]!r}")


def _bases(args) -> int:
    print(" ".join(get_preset(args.preset).zoo_bases()))
    return 0


def parse_shard(text: str) -> tuple[int, int]:
    """"i/n" -> (i, n) with 0 <= i < n <= `MAX_SHARDS`; ValueError naming the text otherwise (before any work)."""
    head, sep, tail = text.partition("/")
    if not (sep and head.isascii() and tail.isascii() and head.isdigit() and tail.isdigit() and len(tail) <= 6
            and int(head) < int(tail) <= MAX_SHARDS):
        raise ValueError(f"--shard must be i/n with 0 <= i < n <= {MAX_SHARDS} (e.g. 0/2), got {text!r}")
    return int(head), int(tail)


def _prefill(args) -> int:
    from esreason_lib.paper.plan import prefill

    index, count = parse_shard(args.shard)
    if args.trajectories:
        return _prefill_trajectories(get_preset(args.preset), index, count)
    runs = prefill(get_preset(args.preset), index, count)
    print(f"shard {index}/{count}: {len(runs)} runs complete")
    return 0


def _prefill_trajectories(preset, index: int, count: int) -> int:
    """Notebook 02's trajectories of the followed seeds i, i + n, ... (`diversity.compute_prop1`), each resumed
    from its checkpoint or found complete."""
    from esreason_lib.paper.studies.diversity import compute_prop1, followed_seeds

    seeds = followed_seeds(preset)[index::count]
    compute_prop1(preset, seeds=seeds)
    print(f"trajectories shard {index}/{count}: seeds {list(seeds) or 'none'} complete")
    return 0


def _claims(args) -> int:
    return _write_claims(args.preset)


def _write_claims(preset: str | None) -> int:
    """Rewrite papers/claims.md and the README's findings block after a run at `preset` (None: the notebooks' own);
    a preset the table does not show (smoke, tiny-exact) leaves both as they are and says where its records are."""
    from esreason_lib.paper.claims import TABLE_PRESETS, write_claims
    from esreason_lib.paper.records import records_dir
    from esreason_lib.paper.studies.presets import preset_label

    if preset is not None and preset not in TABLE_PRESETS:
        get_preset(preset)  # an unknown preset: one line naming the choices, exit 2
        print(f"esreason: the {preset_label(preset)} findings are in {records_dir(preset)}; papers/claims.md and "
              f"the README show {' and '.join(TABLE_PRESETS)} only and are left as they are")
        return 0
    table = write_claims(missing_ok=preset not in (None, TABLE_PRESETS[0]))
    if table is None:  # e.g. `make reproduce PRESET=powered` on a store without tiny's records
        print(f"esreason: papers/claims.md left as it is (the run store lacks the last run's findings, whose "
              f"results it shows); the {preset} findings are in {records_dir(preset)}")
    else:
        print(table)
    return 0


def _summary(args) -> int:
    from esreason_lib.paper.summary import write_summary

    print("wrote", *write_summary(args.preset))
    return 0


def _compare_findings(args) -> int:
    from esreason_lib.paper.compare import render_comparison

    print(render_comparison(args.a, args.b))
    return 0


def _power(args) -> int:
    from esreason_lib.paper.power_report import report

    print(report(get_preset(args.preset)))
    return 0


def one_line_errors() -> tuple[type, ...]:
    """The harness's failures that `esreason_lib.cli.main` prints as one line: a notebook that raised."""
    from esreason_lib.paper.notebooks import NotebookError

    return (NotebookError,)


def _list_presets(parser) -> None:
    """End a command's help with the presets, one line each (`presets_help`)."""
    parser.epilog, parser.formatter_class = presets_help(), argparse.RawDescriptionHelpFormatter


def _preset_option(parser, default: str | None = "tiny", text: str = "", epilog: bool = True) -> None:
    """Add `--preset PRESET` to a command's `parser`, with the presets listed in its help's epilog (`epilog`)."""
    parser.add_argument("--preset", default=default, type=preset_name, metavar="PRESET",
                        help=text or f"the preset, listed below (default {default})")
    if epilog:
        _list_presets(parser)


def _add_train(sub) -> None:
    train = sub.add_parser("train", help="train ES, GRPO or a sequence of both", add_help=False,
                           epilog=presets_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    train.add_argument("-h", "--help", action=TrainHelp, help="show this help; after the method (train es --help) "
                       "also every --set field of its config")
    train.add_argument("method", choices=["es", "grpo", "sequence"])
    _preset_option(train, epilog=False)
    train.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override a config field (`train es --help` lists them)")
    train.add_argument("--task-module", action="append", default=[], metavar="MODULE[:CLASS]", help="import "
                       "MODULE first (it calls esreason_lib.register_task), or register its Task subclass CLASS under "
                       "its name; then --set task=NAME trains on it")
    train.add_argument("--order", default="grpo,es", help="sequence order, e.g. grpo,es or es,grpo")
    train.add_argument("--budget", type=int, default=None,
                       help="every method's full budget in a sequence (default: the preset's)")
    train.add_argument("--backend", default=None, help="ES population backend: auto, batched, fast, native, "
                       "sequential, ray, vllm or ray-vllm; GRPO rollout sampler: local or vllm (the same as --set "
                       "backend=...; in a sequence the ES stage's, and vllm / ray-vllm put its GRPO stage on vLLM too)")
    train.add_argument("--workers", type=int, default=None, help="Ray actors for --backend ray / ray-vllm (default 2)")
    train.add_argument("--ray-address", default=None, help="the Ray cluster that --backend ray / ray-vllm joins "
                       "(e.g. 10.0.0.1:6379; default $RAY_ADDRESS, else a new local one); the package is shipped "
                       "to its nodes")
    train.add_argument("--gpus-per-worker", type=float, default=None,
                       help="Ray GPUs per ES actor; a fraction shares a GPU (default: every worker fits)")
    train.add_argument("--gpu-memory-utilization", type=float, default=None,
                       help="share of its GPU's memory one vLLM engine takes (default 0.5 split among the engines)")
    train.add_argument("--no-resume", action="store_true", help="ignore existing checkpoints of this config")
    train.add_argument("--keep-checkpoints", action="store_true", help="keep the last checkpoints once a run is "
                       "complete (default: only its final weights; the same as --set keep_checkpoints=True)")
    train.add_argument("--eval", action="store_true", help="print a before/after held-out evaluation (on a vLLM "
                       "engine when the training sampled on vLLM)")
    train.set_defaults(func=_train, check=_check_train)


def add_commands(sub) -> None:
    """Add the harness's commands to `esreason`'s subparsers `sub`."""
    _add_train(sub)
    bases = sub.add_parser("bases", help="print the preset's zoo bases (what `make reproduce` pretrains first)")
    _preset_option(bases)
    bases.set_defaults(func=_bases)
    rep = sub.add_parser("reproduce", help="execute notebooks with papermill")
    rep.add_argument("notebooks", nargs="*", help="notebook sources, e.g. notebooks/01_passk_es_vs_grpo.py (default: "
                     "every one)")
    _preset_option(rep, None, "override every notebook's preset (default: each notebook's own, tiny)")
    rep.add_argument("--out-dir", default=None, help="where executed notebooks go (default build/notebooks, "
                     "build/notebooks/<preset> for a preset other than tiny)")
    rep.add_argument("--no-claims", action="store_true", help="do not rewrite papers/claims.md afterwards")
    rep.set_defaults(func=_reproduce, check=_check_reproduce)
    pf = sub.add_parser("prefill", help="train one shard of the runs the notebooks need (`make reproduce` runs two)")
    _preset_option(pf)
    pf.add_argument("--shard", default="0/1", help="i/n: train shard i of n (default 0/1: all)")
    pf.add_argument("--trajectories", action="store_true", help="instead, build notebook 02's Proposition 1 "
                    "trajectories of the followed seeds in shard i of n (seeds i, i + n, ...; each resumes from its "
                    "checkpoint): `make` runs them as jobs of their own beside the other notebooks")
    pf.set_defaults(func=_prefill, check=lambda args: parse_shard(args.shard))
    cl = sub.add_parser("claims", help="write papers/claims.md and the README findings table")
    cl.add_argument("--preset", default=None, help="the preset just run: the tables show tiny and powered only (for "
                    "powered, a store without tiny's records leaves them as they are; others leave them untouched)")
    _list_presets(cl)
    cl.set_defaults(func=_claims)
    sm = sub.add_parser("summary", help="draw every stored check of a preset's findings as one forest plot "
                        "(figures/summary.png; figures/<preset>/ for a preset other than tiny)")
    _preset_option(sm)
    sm.set_defaults(func=_summary)
    cmp = sub.add_parser("compare-findings", help="the checks two presets share, side by side (e.g. tiny tiny-exact)")
    cmp.add_argument("a", type=preset_name, metavar="PRESET", help="the first preset (listed below)")
    cmp.add_argument("b", type=preset_name, metavar="PRESET", help="the second preset")
    _list_presets(cmp)
    cmp.set_defaults(func=_compare_findings)
    pw = sub.add_parser("power", help="MDE and cost of candidate designs and each stored check's operating "
                                      "characteristic (P(reproduced | delta), P(reproduced | 0), "
                                      "P(not reproduced | delta))")
    _preset_option(pw)
    pw.set_defaults(func=_power)
