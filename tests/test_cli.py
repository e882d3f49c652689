"""The command line: `--set` parsing, the parser, clear errors, and `train` end to end on the smoke preset.

Every run goes to ESREASON_HOME=tmp_path (the smoke zoo model pretrains there in about a second). Only `train` is
executed; `pretrain`, `reproduce` and `claims` are parsed, never run (they write outside tmp_path).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from esreason_lib import cli
from esreason_lib.cli import build_parser, main
from esreason_lib.cli_settings import flag_overrides, group_by_method, parse_assignments, train_overrides
from esreason_lib.es.config import ESConfig
from esreason_lib.grpo.config import GRPOConfig
from esreason_lib.paper import cli as paper_cli
from esreason_lib.paper.studies.presets import get_preset


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("ESREASON_HOME", str(tmp_path))
    torch.set_num_threads(1)
    return tmp_path


# ------------------------------------------------------------------------------------------- parse_assignments
def test_parse_assignments_literals_strings_and_prefixes():
    es = "es"
    got = parse_assignments(["sigma=0.002", "antithetic=False", 'task_kwargs={"high": 9}', "device=cpu",
                             "es.alpha=1e-3", "max_new_tokens=None", "population_size=6", "model=a=b",
                             "normalization='rank'", " seed =3"], es)
    assert got == {"sigma": 0.002, "antithetic": False, "task_kwargs": {"high": 9}, "device": "cpu", "alpha": 1e-3,
                   "max_new_tokens": None, "population_size": 6, "model": "a=b", "normalization": "rank", "seed": 3}
    assert type(got["population_size"]) is int and type(got["sigma"]) is float
    assert parse_assignments([], es) == {}
    assert parse_assignments(["sigma=1", "sigma=2"], es) == {"sigma": 2}  # the last one wins
    assert parse_assignments(["grpo.lr=3e-4", "group_size=4"], "grpo") == {"lr": 3e-4,
                                                                                              "group_size": 4}
    # values that are not Python literals stay strings (a hub id, a path, a bare word)
    assert parse_assignments(["model=Qwen/Qwen2.5-1.5B-Instruct", "task=gsm8k", "dtype=bfloat16"], es) == {
        "model": "Qwen/Qwen2.5-1.5B-Instruct", "task": "gsm8k", "dtype": "bfloat16"}
    assert parse_assignments(["model=/tmp/x y"], es) == {"model": "/tmp/x y"}
    assert ESConfig(**{**dict(model="m"), **parse_assignments(["task_kwargs={'high': 9}"], es)}).task_kwargs == (
        ("high", 9),)


@pytest.mark.parametrize("item, pattern", [
    ("sigma", r"--set expects key=value, got 'sigma'"),
    ("=3", r"--set expects key=value, got '=3'"),
    ("es.=3", r"--set expects key=value, got 'es.=3'"),
    ("bogus=1", r"--set 'bogus' is not a field of ESConfig \(`esreason train METHOD --help` lists them\)"),
    ("sigam=1", r"--set 'sigam' is not a field of ESConfig; did you mean 'sigma'\?"),
    ("es.populaton_size=4", r"--set 'populaton_size' is not a field of ESConfig; did you mean 'population_size'\?"),
    ("es.bogus=1", r"--set 'bogus' is not a field of ESConfig"),
    ("lr=1e-3", r"--set 'lr' is not a field of ESConfig"),
])
def test_parse_assignments_errors_name_the_item(item, pattern):
    with pytest.raises(ValueError, match=pattern):
        parse_assignments(["sigma=1", item], "es")


def test_parse_assignments_checks_against_the_given_config():
    with pytest.raises(ValueError, match=r"--set 'sigma' is not a field of GRPOConfig"):
        parse_assignments(["sigma=0.1"], "grpo")


def test_group_by_method_keeps_order_within_each_prefix():
    got = group_by_method(["es.sigma=1", "lr=2", "grpo.lr=3", " es.alpha=4", "model=a.b", "esx.y=5", "grpo.lr=6"])
    assert got == {"es": ["es.sigma=1", " es.alpha=4"], "grpo": ["grpo.lr=3", "grpo.lr=6"],
                   "": ["lr=2", "model=a.b", "esx.y=5"]}
    assert group_by_method([]) == {"es": [], "grpo": [], "": []}


# ------------------------------------------------------------------------------------------- parser
def test_build_parser_subcommands_and_defaults():
    parser = build_parser()
    a = parser.parse_args(["train", "es"])
    assert (a.command, a.method, a.preset, a.set, a.order, a.budget, a.no_resume, a.eval) == (
        "train", "es", "tiny", [], "grpo,es", None, False, False)
    assert a.func is paper_cli._train
    a = parser.parse_args(["train", "sequence", "--preset", "smoke", "--set", "es.sigma=1", "--set", "grpo.lr=2",
                           "--order", "es,grpo", "--budget", "4", "--no-resume", "--eval"])
    assert (a.method, a.preset, a.set, a.order, a.budget, a.no_resume, a.eval) == (
        "sequence", "smoke", ["es.sigma=1", "grpo.lr=2"], "es,grpo", 4, True, True)
    a = parser.parse_args(["pretrain", "qwen2-s"])
    assert (a.command, a.name, a.func) == ("pretrain", "qwen2-s", cli._pretrain)
    a = parser.parse_args(["reproduce", "01.py", "02.py", "--preset", "smoke"])
    assert (a.notebooks, a.preset, a.func) == (["01.py", "02.py"], "smoke", paper_cli._reproduce)
    a = parser.parse_args(["reproduce"])
    assert (a.notebooks, a.preset) == ([], None)
    assert parser.parse_args(["claims"]).func is paper_cli._claims
    a = parser.parse_args(["bases", "--preset", "smoke"])
    assert (a.preset, a.func) == ("smoke", paper_cli._bases)


def test_bases_prints_the_preset_zoo_bases(capsys):
    assert main(["bases", "--preset", "tiny"]) == 0
    assert capsys.readouterr().out == "qwen2-s qwen2-s-habit\n"


@pytest.mark.parametrize("argv", [[], ["train"], ["train", "adam"], ["train", "es", "--preset", "huge"],
                                  ["train", "es", "--budget", "x"], ["pretrain"], ["nope"]])
def test_parser_rejects_bad_command_lines(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(argv)
    lines = capsys.readouterr().err.splitlines()
    assert exc.value.code == 2 and len(lines) == 1 and lines[0].startswith("esreason: error: "), lines


def test_help_lists_the_commands(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0
    for command in ("train", "pretrain", "bases", "reproduce", "claims"):
        assert command in out


# ------------------------------------------------------------------------------------------- main: errors
@pytest.mark.parametrize("argv, pattern", [
    (["train", "es", "--set", "bogus=1"], r"--set 'bogus' is not a field of ESConfig"),
    (["train", "grpo", "--set", "sigma=0.1"], r"--set 'sigma' is not a field of GRPOConfig"),
    (["train", "es", "--set", "sigma"], r"--set expects key=value, got 'sigma'"),
    (["train", "es", "--set", "sigma=-1"], r"ESConfig\.sigma must be a finite float in \(0, 1\.0\], got -1"),
    (["train", "es", "--set", "grpo.seed=1"], r"--set 'grpo\.seed=1' is a grpo setting, but this trains es"),
    (["train", "sequence", "--set", "sigma=0.1"], r"train sequence: --set keys need an 'es\.' or 'grpo\.' "
                                                  r"prefix, got 'sigma=0\.1'"),
    (["train", "sequence", "--set", "es.bogus=1"], r"--set 'bogus' is not a field of ESConfig"),
    (["train", "sequence", "--order", "grpo,adam"], r"method 'adam' is not one of \('es', 'grpo'\)"),
    (["train", "sequence", "--budget", "1"], r"total must be an int >= the number of stages \(2\), got 1"),
])
def test_main_bad_input_is_one_error_line_and_exit_2(argv, pattern, home, capsys):
    assert main(argv + ["--preset", "smoke"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("esreason: error: "), captured.err
    assert re.search(pattern, lines[0]), lines[0]
    assert captured.out == "" and list(home.iterdir()) == []  # nothing trained, nothing written


# ------------------------------------------------------------------------------------------- main: train
def _table(lines: list[str]) -> dict[str, list[float]]:
    """The before/after table's rows as {model name: [greedy, pass@1, pass@4]}."""
    assert re.fullmatch(r"held-out countdown: 6 problems, 4 samples at T=1\.0", lines[0]), lines[0]
    assert lines[1].split() == ["model", "greedy", "pass@1", "pass@4"], lines[1]
    rows = {}
    for line in lines[2:]:
        m = re.fullmatch(r"(\S+(?: \S+)?) +(\d\.\d{3}) +(\d\.\d{3}) +(\d\.\d{3})", line)
        assert m, line
        rows[m.group(1)] = [float(x) for x in m.groups()[1:]]
        assert all(0.0 <= x <= 1.0 for x in rows[m.group(1)]) and rows[m.group(1)][1] <= rows[m.group(1)][2]
    assert len({len(line) for line in lines[1:]}) == 1  # aligned columns
    return rows


def test_main_train_es_end_to_end_then_eval(home, capsys):
    argv = ["train", "es", "--preset", "smoke", "--set", "iterations=1", "--set", "es.sigma=0.01"]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1
    path = Path(out[0])
    assert path.parent == home and path.name.startswith("es-") and path.is_dir()
    config = json.loads((path / "config.json").read_text())
    assert (config["model"], config["iterations"], config["sigma"], config["task"]) == ("smoke", 1, 0.01,
                                                                                         "countdown")
    assert json.loads((path / "manifest.json").read_text())["status"] == "complete"
    metrics = (path / "metrics.jsonl").read_text()
    assert [json.loads(line)["step"] for line in metrics.splitlines()] == [1]

    # the same command again (+ --eval): the finished run is reused, then the before/after table is printed
    assert main(argv + ["--eval"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == str(path) and (path / "metrics.jsonl").read_text() == metrics
    rows = _table(out[1:])
    assert list(rows) == ["base smoke", path.name]
    evals = sorted(p.name for p in home.iterdir() if p.name.startswith("eval-"))
    assert len(evals) == 2  # base and trained model, cached in the run store
    refs = {json.loads((home / e / "config.json").read_text())["model"] for e in evals}
    assert refs == {"smoke", f"run:{path.name}/model"}  # portable: found wherever the store lies
    # a third time: every evaluation comes from the cache and the table is identical
    assert main(argv + ["--eval"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == out[1:]


def test_main_train_grpo_no_resume(home, capsys):
    assert main(["train", "grpo", "--preset", "smoke", "--set", "grpo.iterations=1", "--set", "lr=1e-3",
                 "--no-resume"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    path = Path(line)
    assert path.parent == home and path.name.startswith("grpo-")
    config = json.loads((path / "config.json").read_text())
    assert (config["iterations"], config["lr"], config["group_size"]) == (1, 1e-3, 4)
    assert (path / "model" / "config.json").exists()


def test_main_train_sequence_prints_each_stage_and_the_table(home, capsys):
    assert main(["train", "sequence", "--preset", "smoke", "--budget", "2", "--set", "es.sigma=0.01",
                 "--eval"]) == 0
    out = capsys.readouterr().out.splitlines()
    first, second = Path(out[0]), Path(out[1])
    assert first.parent == second.parent == home
    assert first.name.startswith("grpo-") and second.name.startswith("es-")  # default order grpo,es
    c1 = json.loads((first / "config.json").read_text())
    c2 = json.loads((second / "config.json").read_text())
    assert (c1["model"], c1["iterations"]) == ("smoke", 1)
    assert (c2["model"], c2["iterations"], c2["sigma"]) == (f"run:{first.name}/model", 1, 0.01)
    rows = _table(out[2:])
    assert list(rows) == ["base smoke", first.name, second.name]  # one row per stage run


def test_main_train_sequence_budget_and_order(home, capsys):
    assert main(["train", "sequence", "--preset", "smoke", "--budget", "3", "--order", "es, grpo"]) == 0
    first, second = (Path(line) for line in capsys.readouterr().out.splitlines())
    assert first.name.startswith("es-") and second.name.startswith("grpo-")
    c1 = json.loads((first / "config.json").read_text())
    c2 = json.loads((second / "config.json").read_text())
    assert (c1["iterations"], c2["iterations"]) == (1, 2)  # 3 split 50/50: the last stage takes the remainder
    assert c2["model"] == f"run:{first.name}/model"


def test_before_after_caps_samples_and_follows_the_preset(home, monkeypatch):
    from esreason_lib.es.loop import train_es

    preset = get_preset("smoke", **{"eval.greedy": False, "eval.n_problems": 3})
    run = train_es(preset.config("es", iterations=1), progress=False)
    monkeypatch.setattr(paper_cli, "EVAL_SAMPLES", 2)  # fewer than the preset's n_samples=4: Pass@1 and Pass@2
    lines = paper_cli.before_after(preset, [run]).splitlines()
    assert lines[0] == "held-out countdown: 3 problems, 2 samples at T=1.0"
    assert lines[1].split() == ["model", "pass@1", "pass@2"]  # no greedy column when the preset skips it
    assert [line.split()[:-2] for line in lines[2:]] == [["base", "smoke"], [run.path.name]]
    specs = [json.loads((p / "config.json").read_text())["eval"] for p in home.iterdir() if p.name.startswith("eval-")]
    assert len(specs) == 2 and all((s["n_samples"], s["ks"], s["greedy"]) == (2, [1, 2], False) for s in specs)


@pytest.mark.parametrize("method, backend, workers, expected", [
    ("es", "ray", 4, {"es": {"backend": "ray", "workers": 4}}),
    ("es", None, None, {"es": {}}),
    ("grpo", "vllm", None, {"grpo": {"backend": "vllm"}}),
    ("sequence", "ray", 3, {"es": {"backend": "ray", "workers": 3}, "grpo": {}}),
    ("sequence", "vllm", None, {"es": {"backend": "vllm"}, "grpo": {"backend": "vllm"}}),
    ("sequence", "ray-vllm", 2, {"es": {"backend": "ray-vllm", "workers": 2}, "grpo": {"backend": "vllm"}}),
])
def test_flag_overrides_per_method(method, backend, workers, expected):
    assert flag_overrides(method, backend=backend, workers=workers) == expected


def test_flags_are_config_fields_and_win_over_set_items():
    assert flag_overrides("es", keep_checkpoints=True, ray_address="10.0.0.1:6379") == {
        "es": {"ray_address": "10.0.0.1:6379", "keep_checkpoints": True}}
    assert flag_overrides("sequence", keep_checkpoints=True) == {"es": {"keep_checkpoints": True},
                                                                 "grpo": {"keep_checkpoints": True}}
    assert train_overrides("es", ["backend='batched'", "sigma=0.5"], backend="sequential") == {
        "es": {"backend": "sequential", "sigma": 0.5}}
    assert train_overrides("sequence", ["grpo.lr=0.1"], backend="vllm") == {
        "es": {"backend": "vllm"}, "grpo": {"lr": 0.1, "backend": "vllm"}}
    for flag, kw in (("--workers", {"workers": 2}), ("--ray-address", {"ray_address": "a:1"}),
                     ("--gpus-per-worker", {"gpus_per_worker": 0.5})):
        with pytest.raises(ValueError, match=f"{flag} sets the Ray (actors that score|cluster of) an ES population; "
                                             f"grpo has none"):
            flag_overrides("grpo", **kw)


def test_bad_input_is_answered_before_torch_loads(tmp_path):
    """A misspelt field, a setting of the other method, a flag that does not apply, a bad value, a missing path:
    each is one error line from the command's `check`, naming the field and the value, before torch or
    transformers is imported (`esreason_lib.cli.main`)."""
    import subprocess
    import sys

    cases = [["train", "es", "--set", "sigam=1"], ["train", "grpo", "--workers", "2"],
             ["train", "es", "--set", "grpo.lr=1"], ["import-results", str(tmp_path / "none")],
             ["relocate", "--home", str(tmp_path / "none")], ["reproduce", "notebooks/99_none.py"],
             ["prefill", "--shard", "2/2"], ["train", "es", "--set", "population_size=-3"],
             ["train", "sequence", "--set", "grpo.group_size=1"], ["train", "es", "--backend", "foo"],
             ["train", "es", "--set", f"model={tmp_path / 'no_model'}"]]
    code = ("import sys; from esreason_lib.cli import main\n"
            f"codes = [main(a) for a in {cases!r}]\n"
            "print(codes, sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.stdout.strip() == f"{[2] * len(cases)} []", done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == len(cases) and all(line.startswith("esreason: error: ") for line in lines), lines
    assert "did you mean 'sigma'" in lines[0] and "is not a directory" in lines[3] and "99_none.py" in lines[5]
    assert lines[7] == "esreason: error: ESConfig.population_size must be a positive int, got -3"
    assert lines[8].startswith("esreason: error: GRPOConfig.group_size must be >= 2") and lines[8].endswith("got 1")
    assert lines[9].startswith("esreason: error: ESConfig.backend must be one of (") and lines[9].endswith("'foo'")
    assert f"ESConfig.model: '{tmp_path / 'no_model'}' is not a zoo name" in lines[10]


def test_main_train_backend_and_workers_flags_set_the_es_config(home, capsys):
    assert main(["train", "es", "--preset", "smoke", "--set", "iterations=1", "--backend", "sequential"]) == 0
    run_dir = Path(capsys.readouterr().out.splitlines()[0])
    assert "backend" not in json.loads((run_dir / "config.json").read_text())  # an execution setting (exact)
    assert main(["train", "es", "--preset", "smoke", "--set", "iterations=1", "--backend", "batched"]) == 0
    assert Path(capsys.readouterr().out.splitlines()[0]) == run_dir  # the same run, found, not retrained
    assert main(["train", "grpo", "--preset", "smoke", "--backend", "ray"]) == 2  # grpo's are local and vllm
    assert "GRPOConfig.backend must be one of ('local', 'vllm'), got 'ray'" in capsys.readouterr().err
    assert main(["train", "grpo", "--preset", "smoke", "--workers", "2"]) == 2  # grpo has no population
    assert "--workers sets the Ray actors that score an ES population; grpo has none" in capsys.readouterr().err
    assert main(["train", "es", "--preset", "smoke", "--workers", "0", "--backend", "ray"]) == 2
    assert "ESConfig.workers must be a positive int, got 0" in capsys.readouterr().err


def test_before_after_evaluates_on_the_presets_test_task(monkeypatch):
    """paper-hard trains on DeepScaleR, which has no test split: `--eval` scores MATH-500 (`eval_task_kwargs`)."""
    import types

    from esreason_lib.paper.studies import common

    seen = []

    def fake_evaluate_ref(ref, task, task_kwargs, spec, **kw):
        seen.append((task, dict(task_kwargs)))
        return types.SimpleNamespace(summary=lambda: {"eval/greedy": 0.0, "eval/pass@1": 0.0, "eval/pass@16": 0.0})

    monkeypatch.setattr(common, "evaluate_ref", fake_evaluate_ref)
    preset = get_preset("paper-hard")
    run = types.SimpleNamespace(config={"model": preset.base_model, "task": "math",
                                        "task_kwargs": [["dataset", "deepscaler"]]}, path=Path("/x/es-1"))
    paper_cli.before_after(preset, [run])
    assert seen == [("math", {"dataset": "math500"})] * 2


def test_eval_runs_on_vllm_when_the_training_sampled_on_vllm(home, monkeypatch):
    """`train --backend vllm --eval` evaluates on one vLLM engine (`EvalSpec.backend`), under an identity apart from
    the local evaluation's; checked with a stand-in for `VLLMRollouts` that samples with `generate`."""
    from test_gpu_evaluate_vllm import Standin

    from esreason_lib.es.loop import train_es
    from esreason_lib.models import rollouts_vllm

    assert paper_cli.eval_backend([ESConfig(backend="ray-vllm")]) == "vllm"
    assert paper_cli.eval_backend([ESConfig(backend="ray"), GRPOConfig(backend="vllm")]) == "vllm"
    assert paper_cli.eval_backend([ESConfig(backend="fast"), GRPOConfig()]) == "local"
    monkeypatch.setattr(rollouts_vllm, "VLLMRollouts", Standin)
    Standin.made.clear()
    preset = get_preset("smoke", **{"eval.n_problems": 2, "eval.forward": "fused"})
    run = train_es(preset.config("es", iterations=1), progress=False)
    monkeypatch.setattr(paper_cli, "EVAL_SAMPLES", 2)
    on_vllm = paper_cli.before_after(preset, [run], "vllm").splitlines()
    assert on_vllm[0] == "held-out countdown: 2 problems, 2 samples at T=1.0 on vllm"
    assert len(Standin.made) == 2 and all(s.closed for s in Standin.made)  # the base and the run, one engine each
    local = paper_cli.before_after(preset, [run]).splitlines()
    assert len(Standin.made) == 2 and local[0] == "held-out countdown: 2 problems, 2 samples at T=1.0"
    specs = sorted((s["eval"].get("backend", "local"), s["eval"].get("forward", "hf")) for s in
                   (json.loads((p / "config.json").read_text()) for p in home.iterdir() if p.name.startswith("eval-")))
    assert specs == [("local", "fused")] * 2 + [("vllm", "hf")] * 2  # vLLM samples with the model's own modules


def test_pretrain_of_an_unknown_name_lists_the_pretrained_bases_too(capsys):
    assert main(["pretrain", "nope"]) != 0
    err = capsys.readouterr().err
    assert "unknown zoo model 'nope'" in err and "'smollm2-135m'" in err and "'qwen2-s'" in err
