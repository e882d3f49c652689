"""The fast and native population evaluators against the sequential one: not bit-identical, so held to agreement
figures over several ES steps and both antithetic signs (completions equal on >= 99.5% of rows, rewards Spearman
>= 0.99)."""

import numpy as np
import pytest

from esreason_lib.es.backends.fast import FastBackend, NativeBackend, agreement
from esreason_lib.es.backends.registry import make_backend
from esreason_lib.es.backends.sequential import SequentialBackend
from esreason_lib.es.config import ESConfig
from esreason_lib.es.core import ES
from esreason_lib.es.noise import perturbed
from esreason_lib.models.generation import Sampling, generate
from esreason_lib.models.weights import weights_checksum
from esreason_lib.params import named_params


@pytest.fixture(scope="module")
def setup(habit_countdown):
    model, tok, task = habit_countdown
    return model, tok, task, task.examples("train", n=192, seed=0)


FAST = [FastBackend, NativeBackend]


@pytest.mark.parametrize("backend", FAST)
def test_fast_agrees_with_sequential_over_es_steps(setup, backend):
    model, tok, task, examples = setup
    sigma = 1e-2
    seq, fast = SequentialBackend(task, tok), backend(task, tok)
    es = ES(ESConfig(population_size=8, antithetic=True, sigma=sigma, alpha=5e-3), model)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    same, rhos = {1: [], -1: []}, []
    try:
        for it in range(3):
            pop = es.ask()
            batch = examples[64 * it: 64 * (it + 1)]  # 4 x 64 rows per sign and step: one differing row is 0.4%
            reference = [[] for _ in range(len(pop))]
            for i, (s, sign) in enumerate(zip(pop.seeds.tolist(), pop.signs.tolist())):
                with perturbed(named_params(model), s, sign, sigma):
                    reference[i] = _greedy(model, tok, task, batch)
            before = weights_checksum(model)
            texts = fast.completions(model, pop, batch)
            assert weights_checksum(model) == before  # the model is never touched
            ev, ref = fast(model, pop, batch, iteration=it), seq(model, pop, batch, iteration=it)
            for sign in (1, -1):
                rows = [i for i, s in enumerate(pop.signs.tolist()) if s == sign]
                same[sign].append(agreement([texts[i] for i in rows], [reference[i] for i in rows], [0], [0])[0])
            rhos.append(agreement(texts, reference, ev.rewards, ref.rewards)[1])
            es.tell(pop, ref.rewards)
    finally:
        model.load_state_dict(state)
    for sign, fractions in same.items():
        assert np.mean(fractions) >= 0.995, (sign, fractions)
    assert min(rhos) >= 0.99, rhos


class _Ragged:
    """A Countdown task whose prompts drop 0-5 leading characters, so that prompts are left-padded (the masked
    prefill and decode kernels)."""

    def __init__(self, task):
        self.task, self.stop, self.max_new_tokens = task, task.stop, task.max_new_tokens

    def prompt(self, example, tokenizer=None):
        return self.task.prompt(example, tokenizer)[int(example["id"].encode().hex(), 16) % 6:]

    def reward(self, completion, example):
        return float(len(completion))

    def is_correct(self, completion, example):
        return self.task.is_correct(completion, example)


@pytest.mark.parametrize("backend", FAST)
def test_fast_agrees_with_sequential_on_padded_prompts(setup, backend):
    model, tok, task, examples = setup
    ragged, sigma = _Ragged(task), 1e-2
    assert len({len(ragged.prompt(e)) for e in examples}) > 1
    pop = ES(ESConfig(population_size=8, antithetic=True, sigma=sigma), model).ask()
    reference = []
    for s, sign in zip(pop.seeds.tolist(), pop.signs.tolist()):
        with perturbed(named_params(model), s, sign, sigma):
            reference.append(_greedy(model, tok, ragged, examples))
    fast = backend(ragged, tok)
    same, rho = agreement(fast.completions(model, pop, examples), reference,
                          fast(model, pop, examples, iteration=0).rewards,
                          SequentialBackend(ragged, tok)(model, pop, examples, iteration=0).rewards)
    assert same >= 0.995 and rho >= 0.99, (same, rho)


def _greedy(model, tok, task, examples) -> list[str]:
    """The sequential path's completions (`base.score_examples`'s generate call)."""
    ro = generate(model, tok, [task.prompt(e, tok) for e in examples],
                  Sampling(greedy=True, max_new_tokens=task.max_new_tokens), stop=task.stop)
    return ro.completions


@pytest.mark.parametrize("name, backend", [("fast", FastBackend), ("native", NativeBackend)])
def test_fast_is_registered_and_greedy_only(setup, name, backend):
    _, tok, task, _ = setup
    assert type(make_backend(ESConfig(backend=name), task, tok)) is backend
    with pytest.raises(ValueError, match="greedy"):
        ESConfig(backend=name, greedy=False)


def test_agreement_figures():
    assert agreement([["a", "b"], ["c", "d"]], [["a", "b"], ["c", "x"]], [1, 2], [1, 2]) == pytest.approx((0.75, 1.0))
    assert agreement([["a"]], [["a"]], [0.5, 0.5], [0.5, 0.5])[1] == 1.0
    assert agreement([["a"]], [["a"]], [3, 2, 1], [1, 2, 3])[1] == pytest.approx(-1.0)


@pytest.mark.parametrize("name, forward", [("fast", "fused"), ("native", "native"), ("auto", "hf")])
def test_es_step_scores_the_center_as_its_backend_scores_members(setup, monkeypatch, name, forward):
    import esreason_lib.es.loop as loop

    model, tok, task, examples = setup
    seen, real = [], loop.score_center
    monkeypatch.setattr(loop, "score_center", lambda *a: (seen.append(a[-1]), real(*a))[1])  # a[-1]: the forward
    config = ESConfig(population_size=4, antithetic=True, sigma=1e-2, prompts_per_step=8, backend=name)
    es = ES(config, model)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        loop.es_step(es, model, tok, task, examples, make_backend(config, task, tok),
                     theta0={k: p.detach().clone() for k, p in es.params.items()})
    finally:
        model.load_state_dict(state)
    assert seen == [forward]
