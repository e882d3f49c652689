"""Your own model and verifier: `register_task`, a task's code in its runs' identity (an edited verifier trains
anew; built-in tasks keep their identities), "auto" on a model the batched forward does not implement, and the
before/after `results_table`."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from toy_tasks import Parity

from esreason_lib import tasks
from esreason_lib.es.config import ESConfig
from esreason_lib.evaluation import EvalResult, results_table
from esreason_lib.tasks import Countdown, get_task, register_task, task_version
from esreason_lib.training.run_entry import run_identity


class EditedParity(Parity):
    """The same task name with an edited verifier (every answer counts as correct)."""

    def is_correct(self, completion, example):
        return True


class DeclaredParity(Parity):
    version = "2"


@pytest.fixture
def registry(monkeypatch):
    """A copy of the task registry, restored after the test."""
    monkeypatch.setattr(tasks, "_REGISTRY", dict(tasks._REGISTRY))
    return tasks._REGISTRY


# ------------------------------------------------------------------------------------------- register_task
def test_register_task_makes_get_task_build_it(registry):
    register_task("parity", Parity)
    assert isinstance(get_task("parity"), Parity)
    register_task("parity", EditedParity)  # registering again replaces it (an edited class)
    assert isinstance(get_task("parity"), EditedParity)
    with pytest.raises(ValueError, match=r"unknown task 'parit'; did you mean 'parity'\? choose one of"):
        get_task("parit")


@pytest.mark.parametrize("name, factory, pattern", [
    ("countdown", Parity, r"register_task: 'countdown' is a built-in task"),
    ("", Parity, r"register_task: name must be a non-empty string, got ''"),
    ("x", 3, r"register_task: factory must be a Task subclass or a callable, got 3"),
])
def test_register_task_refuses_bad_input(name, factory, pattern, registry):
    with pytest.raises(ValueError, match=pattern):
        register_task(name, factory)


def test_public_api_exports_register_task_and_results_table():
    import esreason_lib

    assert esreason_lib.register_task is register_task and esreason_lib.results_table is results_table


# ------------------------------------------------------------------------------------------- task_version
def test_task_version_is_none_for_built_in_tasks_and_code_for_yours():
    assert task_version(Countdown()) is None and task_version(get_task("addition")) is None
    ours = task_version(Parity())
    assert ours.startswith("code:") and len(ours) == 17
    assert task_version(Parity()) == ours  # stable for the same code
    assert task_version(EditedParity()) not in (ours, None)
    assert task_version(DeclaredParity()) == "2"

    class DuckTyped:  # a task that does not subclass Task: its code counts too
        def is_correct(self, completion, example):
            return False

    class EditedDuckTyped:
        def is_correct(self, completion, example):
            return True

    assert task_version(DuckTyped()).startswith("code:")
    assert task_version(DuckTyped()) != task_version(EditedDuckTyped())


def test_task_version_without_source_hashes_the_code():
    """A class typed into a notebook or REPL has no source file: its methods' code is hashed instead, so an edited
    method still changes it, and only the code (not where it was typed) counts."""
    template = ("from esreason_lib.tasks import Task\n"
                "class Typed(Task):\n"
                "    name = 'typed'\n"
                "    def examples(self, split='test', n=None, seed=0): return []\n"
                "    def prompt(self, example, tokenizer=None): return ''\n"
                "    def extract_answer(self, completion): return None\n"
                "    def is_correct(self, completion, example): return {}\n")

    def typed(body: str, filename: str):
        namespace = {"__name__": "typed_in_a_notebook"}
        exec(compile(template.format(body), filename, "exec"), namespace)
        return namespace["Typed"]()

    a, b = typed("False", "<cell-1>"), typed("False", "<cell-2>")
    assert task_version(a) == task_version(b)
    assert task_version(typed("True", "<cell-3>")) != task_version(a)


# ------------------------------------------------------------------------------------------- the cache knows it
def test_run_identity_keeps_built_in_configs_and_adds_your_tasks_version(registry):
    config = ESConfig(model="smoke", task="countdown")
    assert run_identity(config) is config and run_identity(config, Countdown()) is config
    ours = dataclasses.replace(config, task="parity")
    identity = run_identity(ours, Parity())
    assert identity["task_version"] == task_version(Parity()) and identity["task"] == "parity"
    register_task("parity", Parity)
    assert run_identity(ours) == identity  # by name, through the registry: the same identity
    unknown = dataclasses.replace(config, task="nope")
    assert run_identity(unknown) is unknown  # left to the checks, which name the task


def test_an_edited_verifier_is_not_served_the_stored_run(tmp_path, capsys):
    from esreason_lib.es.loop import train_es
    from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2

    tokenizer = build_char_tokenizer()
    config = ESConfig(model="my-model", task="parity", population_size=2, iterations=1, prompts_per_step=2,
                      device="cpu")

    def train(task):
        model = tiny_random_qwen2(len(tokenizer), seed=0)
        return train_es(config, model=model, tokenizer=tokenizer, task=task, home=tmp_path, progress=True)

    first = train(Parity())
    assert "reused" not in capsys.readouterr().err
    again = train(Parity())
    assert again.path == first.path
    assert capsys.readouterr().err == (f"esreason: {first.path} is complete (the same config, task and seed): reused, "
                                       f"not trained again\n")
    edited = train(EditedParity())
    assert edited.path != first.path and edited.is_complete()
    assert "reused" not in capsys.readouterr().err
    rewards = [float(line.split('"reward/mean": ')[1].split(",")[0])
               for line in (edited.path / "metrics.jsonl").read_text().splitlines()]
    assert rewards == [1.0]  # trained with the edited verifier: every completion correct


# ------------------------------------------------------------------------------------------- auto backend
def test_auto_backend_falls_back_to_sequential_for_other_architectures(capsys):
    from transformers import GPT2Config, GPT2LMHeadModel

    from esreason_lib.es.backends.batched import BatchedBackend
    from esreason_lib.es.backends.registry import make_backend
    from esreason_lib.es.backends.sequential import SequentialBackend
    from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2

    tokenizer = build_char_tokenizer()
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=16, n_layer=1, n_head=2))
    assert isinstance(make_backend(ESConfig(), Parity(), tokenizer, model=gpt2), SequentialBackend)
    assert capsys.readouterr().err == ("esreason: ESConfig.backend='auto': the batched backend implements "
                                       "Qwen2ForCausalLM, not GPT2LMHeadModel; scoring members with the sequential "
                                       "backend (same rewards, slower)\n")
    qwen2 = tiny_random_qwen2(len(tokenizer), seed=0)
    assert isinstance(make_backend(ESConfig(), Parity(), tokenizer, model=qwen2), BatchedBackend)
    assert isinstance(make_backend(ESConfig(), Parity(), tokenizer), BatchedBackend)
    with pytest.raises(TypeError, match="BatchedBackend: needs a Qwen2ForCausalLM, got GPT2LMHeadModel"):
        make_backend(ESConfig(backend="batched"), Parity(), tokenizer, model=gpt2).check_model(gpt2)
    assert capsys.readouterr().err == ""  # an explicit backend is never replaced


# ------------------------------------------------------------------------------------------- results_table
def _result(greedy, pass_at):
    """An EvalResult of two problems with greedy accuracy `greedy` and the curve {k: pass@k}."""
    table = pd.DataFrame({"problem_id": ["0", "1"], "greedy_correct": greedy, "mean_reward": 0.0,
                          "mean_entropy": 0.0, "mean_length": 1.0, "distinct_correct": 0.0})
    curve = pd.DataFrame({"k": list(pass_at), "pass_at_k": list(pass_at.values()), "ci_low": 0.0, "ci_high": 1.0})
    return EvalResult(table=table, curve=curve)


def test_results_table_lines_up_before_and_after():
    before, after = _result([0.0, 1.0], {1: 0.25, 8: 0.5}), _result([1.0, 1.0], {1: 0.75, 8: 1.0})
    assert results_table({"before": before, "after": after}) == (
        "model     greedy    pass@1    pass@8\n"
        "before     0.500     0.250     0.500\n"
        "after      1.000     0.750     1.000")
    assert results_table({"a long model name": after}, ["eval/pass@8"]) == (
        "model                pass@8\n"
        "a long model name     1.000")
    no_greedy = _result([np.nan, np.nan], {1: 0.5})
    assert results_table({"x": no_greedy, "y": before}) == "model    pass@1\nx         0.500\ny         0.250"
    with pytest.raises(ValueError, match=r"columns \['eval/pass@4'\] are not in every result's summary"):
        results_table({"x": before}, ["eval/pass@4"])
    with pytest.raises(ValueError, match="must name at least one EvalResult"):
        results_table({})
