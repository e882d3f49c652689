"""`benchmarks/run_all.py --write` also writes docs/speed.md's speed block, from the same rows as RESULTS.md."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import run_all  # noqa: E402


def test_speed_block_keeps_what_ratio_and_goal(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- speed:start -->\nold\n<!-- speed:end -->\nrest\n")
    rows = ["| overhead | sequential ES step (N=16, P=128) / (N x plain) | 1 s / 1 s | **1.028** | <= 1.03 |",
            "| fast | sequential / fast (N=32) | 1.7 s / 0.4 s | **4.10x** | >= 4 at N=32 |",
            "| fast | sequential / fast (N=16, P=128) | 0.8 s / 0.3 s | **2.60x** | >= 4 at N=32 |",
            "| reproduce | `make reproduce PRESET=tiny` | 1190 s | **19.8 min** | <= 20 min |",
            "| training | tiny GRPO: s / iteration | 0.46 s x 150 | **1.2 min** | none (a cost) |",
            "| evaluation | tiny evaluation | 4.1 s / 3.3 s | **1.24x** | none (a cost) |",
            "| grpo | tiny GRPO iteration, before / fused (tiny's path) | 0.37 s / 0.22 s | **1.71x** | >= 1.5 |",
            "| grpo | tiny GRPO iteration, before / native | 0.37 s / 0.20 s | **1.85x** | >= 1.5 |",
            "| ratio | plain inference / fast population step (N=8, P=128) | 0.16 s / 0.15 s | **1.061** | >= 0.9 |",
            "| ratio | plain inference / native population step (N=8, P=128) | 0.14 s / 0.12 s | **1.146** | >= 0.9 |"]
    run_all.write_speed_block(rows, "2026-12-04 20:00 UTC", readme)
    text = readme.read_text()
    assert "old" not in text and text.startswith("intro\n") and text.endswith("<!-- speed:end -->\nrest\n")
    assert "| fast | sequential / fast (N=32) | **4.10x** | >= 4 at N=32 |" in text
    assert "| reproduce | `make reproduce PRESET=tiny` | **19.8 min** | <= 20 min |" in text
    assert "Measured 2026-12-04 20:00 UTC" in text
    assert "training" not in text and "evaluation" not in text  # costs without a goal stay in RESULTS.md
    assert "| overhead | sequential ES step (N=16, P=128) / (N x plain) | **1.028** | <= 1.03 |" in text
    assert "sequential / fast (N=16" not in text
    assert "(tiny's path) | **1.71x**" in text and "before / native" not in text  # the preset's path only
    assert "fast population step (N=8, P=128) | **1.061**" in text and "native population" not in text


def test_the_speed_doc_has_the_speed_block():
    text = run_all.SPEED_DOC.read_text()
    assert run_all.SPEED_DOC == ROOT / "docs" / "speed.md"
    assert text.index("<!-- speed:start -->") < text.index("<!-- speed:end -->")


def test_run_all_runs_every_benchmark_module_with_its_own_parser():
    """Each module run_all loops over parses every one of its benchmarks' names (what run_all passes it)."""
    import bench_speed

    assert "bench_speed" in (ROOT / "benchmarks" / "run_all.py").read_text()
    for name in bench_speed.BENCHMARKS:
        args = bench_speed.parser().parse_args([name, "--repeats", "1"])
        assert args.which == name and args.populations == [8, 16, 32] and args.snapshots == 100
        assert name in bench_speed.GOALS


def test_bench_cli_compares_the_readme_environment_with_makes():
    """bench_cli runs the README's command without any thread variable against the Makefile's OMP_NUM_THREADS=1 and
    MKL_NUM_THREADS=1, both importing this checkout; run_all runs it and the speed block shows its row."""
    import bench_cli

    base = {"PATH": "/bin", "OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": "4", "ESREASON_THREADS": "auto"}
    envs = bench_cli.environments(base)
    assert envs["readme"] == {"PATH": "/bin", "PYTHONPATH": str(ROOT)}
    assert envs["make"] == {"PATH": "/bin", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    assert base["OMP_NUM_THREADS"] == "4"  # the caller's environment is left alone
    assert bench_cli.COMMAND == ("train", "es", "--preset", "tiny", "--set", "iterations=6")
    assert bench_cli.parser().parse_args(["cli", "--repeats", "1"]).which == "cli"
    assert "bench_cli" in (ROOT / "benchmarks" / "run_all.py").read_text() and "cli" in run_all.HEADLINE


def test_bench_cli_error_times_bad_input_to_its_one_error_line():
    """`bench_cli.py error` runs each bad command line in a fresh process and keeps its time only when it ends with
    one `esreason: error:` line and exit status 2 (no timing is asserted)."""
    import os

    import bench_cli

    env = bench_cli.environments(dict(os.environ))["readme"]
    assert bench_cli.parser().parse_args(["error"]).which == "error" and "error" in bench_cli.GOALS
    assert bench_cli.time_to_error(("train", "es", "--set", "sigam=1"), env) > 0
    with pytest.raises(RuntimeError, match="expected one error line and exit 2, got 0"):
        bench_cli.time_to_error(("--help",), env)
