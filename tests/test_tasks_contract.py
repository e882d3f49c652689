"""A user's verifier held to its contract (issue 35, `tasks.contract`): a non-bool verdict or a reward that is not
a finite number within the shaping is a one-line error naming the task; a verifier past its bound is stopped,
counted wrong and reported; built-in tasks pass through unchanged."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from toy_tasks import Parity

from esreason_lib.guards import NonFiniteError
from esreason_lib.tasks import get_task
from esreason_lib.tasks.base import RewardShaping
from esreason_lib.tasks.contract import TIMEOUT_ENV, ContractTask, VerifierTimeout, held_to_contract, timeout_s

EX = {"id": "p0", "text": "1"}


class Custom:
    """A user's task whose verdict and reward are whatever the test sets."""

    name, stop, max_new_tokens = "custom", None, 3
    shaping = RewardShaping()

    def __init__(self, verdict=True, reward=1.0):
        self.verdict, self.value = verdict, reward

    def examples(self, split="train", n=None, seed=0):
        return [{"id": str(i), "text": str(i)} for i in range(4)]

    def prompt(self, example, tokenizer=None):
        return example["text"] + "="

    def is_correct(self, completion, example):
        return self.verdict

    def reward(self, completion, example):
        return self.value


def _hang(self, completion, example):
    """A verifier that never returns."""
    while True:  # swallows every Exception: only the bound stops it
        try:
            pass
        except Exception:  # noqa: BLE001
            pass


class Hangs(Custom):
    is_correct = reward = _hang


@pytest.mark.parametrize("verdict", [0.5, 1, None, "yes", np.float64(1.0)])
def test_a_verdict_that_is_no_bool_is_one_line_naming_the_task(verdict):
    with pytest.raises(ValueError, match="task 'custom': is_correct must return a bool, got") as err:
        held_to_contract(Custom(verdict=verdict)).is_correct("x", EX)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("value, error", [(math.nan, NonFiniteError), (math.inf, NonFiniteError),
                                          (2.0, ValueError), (-0.5, ValueError), (True, ValueError),
                                          ("1", ValueError), (None, ValueError)])
def test_a_reward_that_is_not_finite_or_in_range_is_one_line_naming_the_task(value, error):
    with pytest.raises(error, match="task 'custom': reward") as err:
        held_to_contract(Custom(reward=value)).reward("x", EX)
    assert "\n" not in str(err.value)


def test_valid_verdicts_and_rewards_pass_through():
    for verdict in (True, False, np.bool_(True)):
        assert held_to_contract(Custom(verdict=verdict)).is_correct("x", EX) is bool(verdict)
    for value in (0.0, 0.1, 1, np.float32(0.1), np.float64(1.0)):
        assert held_to_contract(Custom(reward=value)).reward("x", EX) == pytest.approx(float(value))


def test_a_verifier_past_its_bound_is_stopped_counted_wrong_and_reported():
    held = held_to_contract(Hangs(), seconds=0.2)
    with pytest.warns(VerifierTimeout, match="task 'custom': is_correct ran past 0.2 s .* example 'p0'"):
        assert held.is_correct("x", EX) is False
    with pytest.warns(VerifierTimeout, match="reward ran past"):
        assert held.reward("x", EX) == 0.0  # the invalid tier
    assert held.timeouts == 2


def test_the_bound_is_configurable(monkeypatch):
    assert timeout_s() == 60.0
    monkeypatch.setenv(TIMEOUT_ENV, "2.5")
    assert timeout_s() == 2.5 and held_to_contract(Custom()).seconds == 2.5
    for bad in ("0", "-1", "nan", "inf", "soon"):
        monkeypatch.setenv(TIMEOUT_ENV, bad)
        with pytest.raises(ValueError, match=f"{TIMEOUT_ENV} must be a positive number of seconds"):
            timeout_s()


def test_built_in_tasks_pass_through_unchanged():
    task = get_task("addition")
    held = held_to_contract(task)
    assert held_to_contract(held) is held and held.name == task.name and held.stop == task.stop
    ex = task.examples("test", n=3)
    for e in ex:
        for completion in (f"{e['answer']}" if "answer" in e else "", "garbage", ""):
            assert held.reward(completion, e) == task.reward(completion, e)
            assert held.is_correct(completion, e) == task.is_correct(completion, e)
    again = pickle.loads(pickle.dumps(held))  # Ray workers receive the task pickled
    assert isinstance(again, ContractTask) and again.name == task.name


def test_train_es_refuses_a_half_true_verdict(tmp_path):
    """The probe's case: is_correct returning 0.5 no longer trains as if it said True."""
    from esreason_lib.es.config import ESConfig
    from esreason_lib.es.loop import train_es
    from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2

    tok = build_char_tokenizer()
    cfg = ESConfig(model="tiny-random", task="custom", population_size=2, sigma=0.01, alpha=0.01, iterations=1,
                   prompts_per_step=2, checkpoint_every=0, device="cpu", backend="sequential")
    with pytest.raises(ValueError, match="task 'custom': is_correct must return a bool, got float 0.5"):
        train_es(cfg, model=tiny_random_qwen2(len(tok)), tokenizer=tok, task=Custom(verdict=0.5), home=tmp_path,
                 progress=False)


def test_evaluate_refuses_a_half_true_verdict():
    from esreason_lib.evaluation import EvalSpec, evaluate
    from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2

    tok = build_char_tokenizer()
    task = Custom(verdict=0.5)
    with pytest.raises(ValueError, match="task 'custom': is_correct must return a bool"):
        evaluate(tiny_random_qwen2(len(tok)), tok, task, task.examples()[:2],
                 EvalSpec(n_samples=1, ks=(1,), greedy=False, max_new_tokens=2), progress=False)


class ReadmeParity(Parity):
    """The README's own-task example (a `Task` subclass: its `reward` and `score` are the base class's) with a
    verifier that returns 0.5."""

    def is_correct(self, completion, example):
        return 0.5  # half true: no bool


class HangingParity(ReadmeParity):
    is_correct = _hang


def _readme_route(task, home):
    """The README's route: `evaluate`, then `train_es` with the task instance."""
    from esreason_lib.es.config import ESConfig
    from esreason_lib.es.loop import train_es
    from esreason_lib.evaluation import EvalSpec, evaluate
    from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2

    tok = build_char_tokenizer()
    model = tiny_random_qwen2(len(tok), seed=0)
    config = ESConfig(model="my-model", task=task.name, population_size=2, iterations=1, prompts_per_step=2,
                      device="cpu")
    yield lambda: evaluate(model, tok, task, task.examples("test", n=2),
                           EvalSpec(n_samples=1, ks=(1,), greedy=False, max_new_tokens=2), progress=False)
    yield lambda: train_es(config, model=model, tokenizer=tok, task=task, home=home, progress=False)


def test_the_readme_route_holds_a_task_instance_to_the_contract(tmp_path):
    """`train_es(config, model=m, tokenizer=t, task=Parity())` and `evaluate(...)` with a `Task` subclass whose
    `is_correct` returns 0.5: refused as on the CLI route, never trained with the centre's reward shown as 1.0."""
    held = held_to_contract(ReadmeParity())
    with pytest.raises(ValueError, match="task 'parity': is_correct must return a bool, got float 0.5"):
        held.score("yes", {"id": "0", "n": 0})
    with pytest.raises(ValueError, match="task 'parity': is_correct must return a bool, got float 0.5"):
        held.reward("yes", {"id": "0", "n": 0})
    for step in _readme_route(ReadmeParity(), tmp_path):
        with pytest.raises(ValueError, match="task 'parity': is_correct must return a bool, got float 0.5"):
            step()
    assert not list(tmp_path.glob("es-*/manifest.json"))  # nothing trained


def test_the_readme_route_bounds_a_hanging_verifier(tmp_path, monkeypatch):
    monkeypatch.setenv(TIMEOUT_ENV, "0.05")
    for step in _readme_route(HangingParity(), tmp_path):
        with pytest.warns(VerifierTimeout, match="task 'parity': is_correct ran past 0.05 s"):
            step()


class HangingExtraction(ReadmeParity):
    def is_correct(self, completion, example):
        return True

    def extract_answer(self, completion):
        while True:  # what evaluation reads of a completion is bounded too
            pass


def test_evaluation_bounds_the_tasks_extraction(monkeypatch):
    monkeypatch.setenv(TIMEOUT_ENV, "0.05")
    held = held_to_contract(HangingExtraction())
    with pytest.warns(VerifierTimeout, match="task 'parity': extract_answer ran past 0.05 s"):
        assert held.extract_answer("yes") is None
    with pytest.warns(VerifierTimeout, match=r"canonical_answer ran past 0.05 s .* on example '3'"):
        assert held.canonical_answer("yes", {"id": "3", "n": 3}) is None
    assert held.timeouts == 2
    countdown = held_to_contract(get_task("countdown"))
    assert countdown.extract_answer("3+5") == "3+5" and countdown.canonical_answer("3+5", {}) is not None
