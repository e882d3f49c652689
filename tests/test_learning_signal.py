"""A run that learned nothing says so: `learning_signal.es_note` / `grpo_note` on hand-made metrics, and the line
`train_es` / `train_grpo` end with on a toy task that always scores 0."""

from __future__ import annotations

import math

import pytest
import torch

from esreason_lib.learning_signal import MOSTLY, es_note, flat_share, grpo_note
from esreason_lib.tasks import BINARY, Task


class Never(Task):
    """A verifier nothing satisfies: every completion scores 0 (with `BINARY` shaping, no format reward either)."""

    name, max_new_tokens = "never", 3

    def examples(self, split="test", n=None, seed=0):
        return [{"id": str(i), "n": i} for i in range(n or 8)]

    def prompt(self, example, tokenizer=None):
        return f"{example['n']}="

    def extract_answer(self, completion):
        return completion.strip() or None

    def is_correct(self, completion, example):
        return False


def test_flat_share_counts_exact_zeros():
    assert flat_share([0.0, 0.0, 0.5, 0.0]) == 0.75 and flat_share([1e-9]) == 0.0
    assert math.isnan(flat_share([]))


@pytest.mark.parametrize("std, mean, why", [
    ([0, 0, 0, 0], [0, 0, 0, 0], "the base never succeeds on these prompts (ES needs a base that sometimes does)"),
    ([0, 0, 0, 0], [1, 1, 1, 1], "the base always succeeds"),
    ([0, 0, 0, 0], None, "the base never or always succeeds on these prompts, or sigma 0.001 is too small"),
    ([0, 0, 0, 0], [0.5, 0.25, 0.5, 0.5], "sigma 0.001 may be too small for this model"),
    ([0, 0, 0, 0, 0.1], [0, 0, 0, 0, 0.2], "never succeeds"),  # 4 of 5 flat = MOSTLY; the flat ones scored 0
])
def test_es_note_names_the_likely_reason(std, mean, why):
    note = es_note(std, mean, sigma=1e-3)
    assert note.startswith(f"ES made no update in {std.count(0)} of {len(std)} iterations") and why in note, note


def test_es_note_is_silent_when_members_differed_often_enough():
    assert MOSTLY == 0.8
    assert es_note([0, 0, 0, 0.1], [0, 0, 0, 0.1], sigma=1e-3) is None  # 3 of 4 flat < 80%
    assert es_note([0.2, 0.1], [0.5, 0.5], sigma=1e-3) is None and es_note([], [], sigma=1e-3) is None


def test_grpo_note_from_the_zero_advantage_share():
    note = grpo_note([1.0, 1.0, 0.5, 1.0, 0.75], [0, 0, 0, 0, 0])  # mean 0.85 >= 0.8
    assert note.startswith("GRPO had no signal in 85% of its groups") and "over 5 iterations" in note
    assert "never succeeds" in note
    assert "a higher temperature or a larger group_size" in grpo_note([1.0], [0.5])
    assert "over 1 iterations: the base never or always succeeds" in grpo_note([1.0], None)
    assert grpo_note([1.0, 0.5], [0, 0]) is None and grpo_note([], []) is None  # 75% < 80%


@pytest.fixture
def smoke(tmp_path, monkeypatch):
    from esreason_lib.paper.studies.presets import get_preset

    monkeypatch.setenv("ESREASON_HOME", str(tmp_path))
    torch.set_num_threads(1)
    return get_preset("smoke")


def test_train_es_on_a_task_that_always_scores_0_ends_saying_so(smoke, capsys):
    from esreason_lib.es.loop import train_es

    run = train_es(smoke.config("es", iterations=2), task=Never(BINARY), progress=True)
    metrics = run.metrics()
    assert (metrics["reward/std"] == 0).all() and (metrics["es/update_norm"] == 0).all()
    assert (metrics["reward/correct_frac"] == 0).all()
    lines = [line for line in capsys.readouterr().err.splitlines() if "no update" in line]
    assert lines == ["esreason: ES made no update in 2 of 2 iterations (all members scored the same, reward/std "
                     "0): every member scored 0: the base never succeeds on these prompts (ES needs a base that "
                     "sometimes does)"]
    train_es(smoke.config("es", iterations=2), task=Never(BINARY), progress=False)  # quiet without progress
    assert "no update" not in capsys.readouterr().err


def test_train_grpo_on_a_task_that_always_scores_0_ends_saying_so(smoke, capsys):
    from esreason_lib.grpo.loop import train_grpo

    train_grpo(smoke.config("grpo", iterations=2), task=Never(BINARY), progress=True)
    lines = [line for line in capsys.readouterr().err.splitlines() if "no signal" in line]
    assert lines == ["esreason: GRPO had no signal in 100% of its groups (every sample of a prompt scored the same, "
                     "advantage 0) over 2 iterations: every sample scored 0: the base never succeeds on these "
                     "prompts"]
