"""Every benchmark script answers `--help` with its usage and exit 0, on a CPU machine without the optional extras
(vLLM, a GPU): the first thing a user runs never ends in a traceback."""

from __future__ import annotations

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
