"""The scripts' front doors on a CPU machine without the optional extras (vLLM, a GPU): every benchmark answers
`--help` with its usage and exit 0, and a script started the wrong way (no GPU, no torchrun, no resolution
report) says so in one line: the first thing a user runs never ends in a traceback."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from esreason_lib.paths import REPO_ROOT

SCRIPTS = sorted(p.name for p in (REPO_ROOT / "benchmarks").glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_benchmark_answers_help(script):
    done = subprocess.run([sys.executable, f"benchmarks/{script}", "--help"], cwd=REPO_ROOT, capture_output=True,
                          text=True)
    assert done.returncode == 0 and "usage:" in done.stdout, (script, done.stderr[-500:])
    assert "Traceback" not in done.stderr, (script, done.stderr[-500:])


def test_the_gpu_benchmark_says_in_one_line_that_it_needs_a_gpu():
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the benchmark would run")
    done = subprocess.run([sys.executable, "benchmarks/bench_gpu_generate.py"], cwd=REPO_ROOT, capture_output=True,
                          text=True)
    assert done.returncode == 1 and "needs a CUDA GPU" in done.stderr and "Traceback" not in done.stderr


def test_torchrun_grpo_outside_torchrun_says_how_to_start_it(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(REPO_ROOT / "scripts"))
    import torchrun_grpo

    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SystemExit, match="RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT not set: start it under torchrun"):
        torchrun_grpo.main(["--preset", "smoke"])
    assert torchrun_grpo.main(["--help"]) == 0 and "torchrun --nproc-per-node" in capsys.readouterr().out


def test_gpu_lock_without_a_report_names_the_make_target(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO_ROOT / "scripts"))
    import gpu_lock

    with pytest.raises(SystemExit, match="no resolution report at .*missing.json: run `make resolve-gpu` first"):
        gpu_lock.main([str(tmp_path / "missing.json")])


def test_make_help_lists_every_documented_target_with_its_line():
    """`make help` prints one line per target whose rule carries a `## ` description, in the Makefile's order,
    the two commands of the README among them."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    out = subprocess.run(["make", "-s", "help"], cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
    documented = re.findall(r"^([a-z][a-z-]*):[^\n]*?## (.+)$", (REPO_ROOT / "Makefile").read_text(), flags=re.M)
    lines = out.splitlines()
    assert len(lines) == len(documented) >= 10
    for line, (target, what) in zip(lines, documented):
        assert line.split(None, 2) == ["make", target, what]
    assert {"test", "reproduce", "figures", "help"} <= {target for target, _ in documented}
