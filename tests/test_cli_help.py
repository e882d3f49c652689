"""What the command line says before a command runs: help without torch, the presets and `--set` fields, and
one-line errors with "did you mean"; `--task-module` naming your own task."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from esreason_lib import cli_help
from esreason_lib.cli import build_parser, main
from esreason_lib.cli_help import config_field_docs, fields_help, first_sentence, preset_name, suggest

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str) -> subprocess.CompletedProcess:
    """`code` run by this interpreter in a fresh process that imports the repository's esreason_lib."""
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_help_imports_no_torch_transformers_numpy_or_pandas():
    res = _python(textwrap.dedent("""
        import sys
        from esreason_lib.cli import build_parser, main
        build_parser().format_help()
        for argv in (["--help"], ["train", "--help"], ["train", "es", "--help"], ["train", "sequence", "--help"],
                     ["train", "es", "--preset", "tiy"], ["trian"]):
            try:
                main(argv)
            except SystemExit:
                pass
        print(sorted(m for m in ("torch", "transformers", "numpy", "pandas") if m in sys.modules))
        """))
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.splitlines()[-1] == "[]"


def test_python_m_help_shows_examples_presets_and_commands():
    res = subprocess.run([sys.executable, "-m", "esreason_lib", "--help"], cwd=ROOT, capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert "examples:\n  esreason train es --preset tiny --set iterations=6" in res.stdout
    for name, line in cli_help.PRESET_SUMMARIES.items():
        assert re.search(rf"\n  {re.escape(name)} +{re.escape(line)}\n", res.stdout), name
    for command in ("train", "pretrain", "bases", "reproduce", "claims", "power"):
        assert f"    {command}" in res.stdout


def test_preset_table_names_every_preset():
    from esreason_lib.paper.studies.presets import PRESETS

    assert sorted(cli_help.PRESET_SUMMARIES) == sorted(PRESETS)
    assert all(line and "\n" not in line for line in cli_help.PRESET_SUMMARIES.values())


@pytest.mark.parametrize("method, config", [("es", "ESConfig"), ("grpo", "GRPOConfig")])
def test_field_docs_are_the_configs_fields_in_order(method, config):
    from esreason_lib.es.config import ESConfig
    from esreason_lib.grpo.config import GRPOConfig

    cls = {"ESConfig": ESConfig, "GRPOConfig": GRPOConfig}[config]
    docs = config_field_docs(*cli_help.CONFIGS[method])
    assert list(docs) == [f.name for f in dataclasses.fields(cls)]
    assert all(docs.values()), [f for f, doc in docs.items() if not doc]
    assert docs["seed"].startswith("Run seed; every random stream")  # RunSettings' own, through the base class


def test_train_method_help_lists_its_fields_one_line_each(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train", "es", "--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0
    assert "--set fields of ESConfig (KEY=VALUE" in out
    sigma = "  sigma                   Perturbation scale: member i is evaluated at theta + sign_i * sigma * eps_i, ..."
    assert sigma in out.splitlines()
    assert "  temperature             Sampling temperature when not `greedy`." in out.splitlines()
    assert "presets (--preset NAME):" in out and "group_size" not in out
    field_lines = out.split("--set fields of ESConfig", 1)[1].splitlines()[1:]
    assert len(field_lines) == len(config_field_docs("es/config.py", "ESConfig"))
    assert max(map(len, field_lines)) <= cli_help.HELP_WIDTH


def test_train_help_without_method_and_for_a_sequence(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert fields_help(None) in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["train", "sequence", "--help"])
    out = capsys.readouterr().out
    assert "--set fields of ESConfig (es.KEY=VALUE" in out and "--set fields of GRPOConfig (grpo.KEY=VALUE" in out
    assert "\n  es.sigma " in out and "\n  grpo.lr " in out


@pytest.mark.parametrize("argv, error", [
    (["train", "es", "--preset", "tiy"], "esreason: error: argument --preset: unknown preset 'tiy'; did you mean "
                                         "'tiny'? (presets: smoke, tiny, "),
    (["trian"], "esreason: error: argument command: invalid choice: 'trian'; did you mean 'train'? (choose from "),
    (["train", "seqence"], "esreason: error: argument method: invalid choice: 'seqence'; did you mean 'sequence'? "
                           "(choose from 'es', 'grpo', 'sequence') (see `esreason train --help`)"),
    (["power", "--preset", "huge"], "esreason: error: argument --preset: unknown preset 'huge' (presets: "),
])
def test_misspelt_names_are_one_error_line_with_a_suggestion(argv, error, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    captured = capsys.readouterr()
    assert exc.value.code == 2 and captured.out == ""
    assert len(captured.err.splitlines()) == 1 and captured.err.startswith(error), captured.err


def test_misspelt_set_field_is_one_line_naming_the_closest(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ESREASON_HOME", str(tmp_path))
    assert main(["train", "es", "--preset", "smoke", "--set", "sigam=0.1"]) == 2
    assert capsys.readouterr().err == ("esreason: error: --set 'sigam' is not a field of ESConfig; did you mean "
                                       "'sigma'? (`esreason train METHOD --help` lists them)\n")


def test_suggest_preset_name_and_first_sentence():
    assert suggest("tiy", ["smoke", "tiny"]) == "; did you mean 'tiny'?"
    assert suggest("zzz", ["smoke", "tiny"]) == ""
    assert preset_name("smoke") == "smoke"
    with pytest.raises(Exception, match=r"unknown preset 'smok'; did you mean 'smoke'\?"):
        preset_name("smok")
    assert first_sentence("One line\n  wrapped. Second.") == "One line wrapped."
    assert first_sentence("Devices (e.g. cuda) here. More.") == "Devices (e.g. cuda) here."
    assert first_sentence("a b c d e f", width=8) == "a b ..."


def test_task_module_names_your_task_from_the_cli(tmp_path, monkeypatch, capsys):
    """`--task-module MODULE` (which registers) and `MODULE:CLASS` (registered here), then `--set task=NAME`."""
    from esreason_lib import tasks

    monkeypatch.setenv("ESREASON_HOME", str(tmp_path / "runs"))
    monkeypatch.setattr(tasks, "_REGISTRY", dict(tasks._REGISTRY))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    body = textwrap.dedent('''
        from esreason_lib import Task, register_task


        class {cls}(Task):
            name, max_new_tokens = "{name}", 3

            def examples(self, split="test", n=None, seed=0):
                start = 0 if split == "train" else 500
                return [{{"id": str(i), "n": i}} for i in range(start, start + (n or 50))]

            def prompt(self, example, tokenizer=None):
                return f"Is {{example['n']}} even? "

            def extract_answer(self, completion):
                word = completion.strip()[:3].lower()
                return word if word in ("yes", "no") else None

            def is_correct(self, completion, example):
                return self.extract_answer(completion) == ("yes" if example["n"] % 2 == 0 else "no")
        ''')
    registers = '\nregister_task("parity", Parity)\n'
    (tmp_path / "my_tasks.py").write_text(body.format(cls="Parity", name="parity") + registers)
    (tmp_path / "more_tasks.py").write_text(body.format(cls="Evens", name="evens"))
    monkeypatch.delitem(sys.modules, "my_tasks", raising=False)
    monkeypatch.delitem(sys.modules, "more_tasks", raising=False)
    for spec, name in (("my_tasks", "parity"), ("more_tasks:Evens", "evens")):
        argv = ["train", "es", "--preset", "smoke", "--task-module", spec, "--set", f"task={name}",
                "--set", "iterations=1", "--set", "population_size=2", "--set", "antithetic=False"]
        assert main(argv) == 0, capsys.readouterr().err
        path = Path(capsys.readouterr().out.strip())
        config = json.loads((path / "config.json").read_text())
        assert config["task"] == name and config["task_version"].startswith("code:")
        assert json.loads((path / "manifest.json").read_text())["status"] == "complete"
    assert main(["train", "es", "--preset", "smoke", "--task-module", "more_tasks:Nope"]) == 2
    assert capsys.readouterr().err == ("esreason: error: task module 'more_tasks:Nope': more_tasks has no Task "
                                       "subclass 'Nope' with a name\n")
    assert main(["train", "es", "--preset", "smoke", "--task-module", "no_such_module_here"]) == 2
    assert capsys.readouterr().err.startswith("esreason: error: task module 'no_such_module_here': No module named")


def test_parser_keeps_train_flags():
    args = build_parser().parse_args(["train", "es", "--task-module", "a.b", "--task-module", "c:D"])
    assert args.task_module == ["a.b", "c:D"] and args.method == "es"


def test_train_help_read_by_a_reader_that_stops_early_ends_as_every_help_does(tmp_path, monkeypatch):
    """`esreason train es --help | head`: writing the --set fields fails with BrokenPipeError; like argparse's own
    help, it exits 0 without a traceback (it used to raise), the rest of stdout going to the null device (here in
    place of the test's file)."""
    from esreason_lib import cli_help

    sink = open(tmp_path / "out", "w")

    class Closed:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            pass

        def fileno(self):
            return sink.fileno()

    monkeypatch.setattr(cli_help.argparse.ArgumentParser, "print_help", lambda self, file=None: None)
    monkeypatch.setattr("sys.stdout", Closed())
    with pytest.raises(SystemExit) as ended:
        main(["train", "es", "--help"])
    sink.close()
    assert ended.value.code == 0


@pytest.mark.parametrize("command", ["bases", "prefill", "summary", "power", "reproduce", "compare-findings",
                                     "claims"])
def test_every_command_that_takes_a_preset_lists_the_presets(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = capsys.readouterr().out
    assert "presets (--preset NAME):" in out and "pretrained-smollm2" in out
    assert re.search(r"^ +(--preset )?PRESET +\S", out, re.M)  # the option (or argument) says what it is
