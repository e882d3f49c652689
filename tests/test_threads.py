"""esreason_lib.threads: the thread count from the flag, the environment and the idle usable cores; the CLI
applies it."""

from __future__ import annotations

import os

import pytest
import torch

from esreason_lib import threads
from esreason_lib.threads import AUTO, choose_threads, idle_cores, parse_threads, usable_cores, use_threads


@pytest.fixture
def restore_threads(monkeypatch):
    """Put torch's thread count and the thread variables back after the test."""
    before = torch.get_num_threads()
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.setenv(name, os.environ.get(name, "1"))
    yield
    torch.set_num_threads(before)


def test_usable_cores_is_the_affinity():
    assert usable_cores() == len(os.sched_getaffinity(0)) >= 1


@pytest.mark.parametrize("cores, load, idle", [(2, 0.0, 2), (2, 0.4, 2), (2, 1.2, 1), (2, 3.0, 1), (4, 1.4, 3),
                                               (1, 0.0, 1), (8, 9.0, 1)])
def test_idle_cores_hand_computed(cores, load, idle):
    assert idle_cores(cores, load) == idle


def test_parse_threads_accepts_counts_and_auto_and_names_bad_values():
    assert parse_threads("auto", "f") == AUTO and parse_threads(" AUTO ", "f") == AUTO
    assert parse_threads("2", "f") == 2 and parse_threads(3, "f") == 3
    for bad in ("0", "-1", "two", "1.5", 1.5, True, None, ""):
        with pytest.raises(ValueError, match=f"--threads must be a positive integer or 'auto', got {bad!r}"):
            parse_threads(bad, "--threads")


def test_choose_threads_order_flag_then_environment_then_auto(monkeypatch):
    monkeypatch.setattr(threads, "usable_cores", lambda: 4)
    monkeypatch.setattr(os, "getloadavg", lambda: (2.2, 0.0, 0.0))  # two busy cores: auto leaves two
    env = {"ESREASON_THREADS": "3", "OMP_NUM_THREADS": "1"}
    assert choose_threads(2, env) == 2  # the flag first
    assert choose_threads(None, env) == 3  # then $ESREASON_THREADS
    assert choose_threads(None, {"OMP_NUM_THREADS": "1"}) == 1  # then $OMP_NUM_THREADS (the Makefile's)
    assert choose_threads(None, {}) == 2 and choose_threads("auto", env) == 2  # auto: the idle usable cores
    assert choose_threads(16, {}) == 4  # never more than the usable cores
    with pytest.raises(ValueError, match="ESREASON_THREADS must be a positive integer or 'auto', got 'x'"):
        choose_threads(None, {"ESREASON_THREADS": "x"})


def test_use_threads_sets_torch_and_the_childrens_variables(restore_threads):
    use_threads(1)
    assert torch.get_num_threads() == 1 and os.environ["OMP_NUM_THREADS"] == os.environ["MKL_NUM_THREADS"] == "1"
    with pytest.raises(ValueError, match="thread count must be a positive int, got 0"):
        use_threads(0)


def test_cli_threads_flag(restore_threads, capsys):
    from esreason_lib.cli import main

    assert main(["--threads", "1", "bases", "--preset", "tiny"]) == 0 and torch.get_num_threads() == 1
    assert main(["--threads", "0", "bases", "--preset", "tiny"]) == 2
    assert "esreason: error: --threads must be a positive integer or 'auto', got '0'" in capsys.readouterr().err
