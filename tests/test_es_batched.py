"""The population-batched ES evaluator against the sequential one: bit-identical weights, completions, rewards."""

import dataclasses

import numpy as np
import pytest
import torch
from toy_tasks import Lengths

from esreason_lib.es.backends.batched import BatchedBackend, member_weights
from esreason_lib.es.backends.registry import make_backend
from esreason_lib.es.backends.sequential import SequentialBackend
from esreason_lib.es.config import ESConfig
from esreason_lib.es.core import ES
from esreason_lib.es.noise import perturbed
from esreason_lib.models.generation import Sampling, generate
from esreason_lib.params import named_params


@pytest.fixture(scope="module")
def setup():
    from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2

    torch.set_num_threads(1)
    tok = build_char_tokenizer()
    model = tiny_random_qwen2(len(tok), seed=0)
    with torch.no_grad():  # make EOS the greedy choice in some contexts, so rows finish at different steps
        w = model.lm_head.weight
        common = (torch.randn(2000, w.shape[1]) @ w.T).argmax(-1).mode().values
        w[tok.eos_token_id] = w[common] + 0.02 * torch.randn(w.shape[1], generator=torch.Generator().manual_seed(0))
    return tok, model


@pytest.mark.parametrize("seeds, signs", [([11, 11, 12], [1, -1, 1]),  # a pair, then a lone member
                                          ([5, 5, 6, 6], [1, -1, 1, -1]),  # antithetic: evenly spaced signs
                                          ([5, 7, 5, 9], [1, 1, -1, 1])])  # uneven: written through an index
def test_member_weights_equal_perturbed_weights_bitwise(setup, seeds, signs):
    tok, model = setup
    params = named_params(model)
    stacked = member_weights(params, seeds, signs, 0.05)
    for i, (s, sign) in enumerate(zip(seeds, signs)):
        with perturbed(params, s, sign, 0.05):
            for name, p in params.items():
                assert torch.equal(stacked[name][i], p), name
    assert stacked[name].shape == (len(seeds), *params[name].shape)


def test_batched_equals_sequential_over_es_steps(setup, monkeypatch):
    import esreason_lib.es.backends.batched as eb

    tok, model = setup
    task, sigma = Lengths(), 0.05
    widths = []
    real_groups = eb.RowGroups

    def spy(counts, width):
        g = real_groups(counts, width)
        widths.append(len(g.parts))
        return g

    monkeypatch.setattr(eb, "RowGroups", spy)
    cfg = ESConfig(population_size=6, antithetic=True, sigma=sigma, alpha=0.05)
    es = ES(cfg, model)
    examples = task.examples()
    sequential, batched = SequentialBackend(task, tok), BatchedBackend(task, tok)
    for it in range(3):
        pop = es.ask()
        before = {k: v.clone() for k, v in model.state_dict().items()}
        fast = batched.completions(model, pop, examples)
        assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # weights untouched
        params = named_params(model)
        for i, (s, sign) in enumerate(zip(pop.seeds.tolist(), pop.signs.tolist())):
            with perturbed(params, s, sign, sigma):
                ro = generate(model, tok, [task.prompt(e) for e in examples], Sampling(greedy=True, max_new_tokens=10),
                              stop=task.stop)
            assert fast[i] == ro.completions, (it, i)
        a = sequential(model, pop, examples, iteration=it)
        b = batched(model, pop, examples, iteration=it)
        assert np.array_equal(a.rewards, b.rewards) and np.array_equal(a.correct, b.correct)
        assert len(set(a.rewards.tolist())) > 1 and b.generations == 6 * 24
        es.tell(pop, a.rewards)
    assert max(widths) > 1  # members ran different row counts at some step (the grouped path ran)


def test_make_backend_and_config_choice(setup):
    tok, _ = setup
    task = Lengths()
    assert isinstance(make_backend(ESConfig(), task, tok), BatchedBackend)
    assert isinstance(make_backend(ESConfig(greedy=False), task, tok), SequentialBackend)
    assert isinstance(make_backend(ESConfig(dtype="bfloat16"), task, tok), SequentialBackend)
    assert isinstance(make_backend(ESConfig(backend="sequential"), task, tok), SequentialBackend)
    with pytest.raises(ValueError, match="backend"):
        ESConfig(backend="tpu-pods")
    with pytest.raises(ValueError, match="greedy"):
        ESConfig(backend="batched", greedy=False)
    with pytest.raises(TypeError, match="Qwen2ForCausalLM"):
        BatchedBackend(task, tok).completions(torch.nn.Linear(2, 2), ES(ESConfig(), {}).ask(), [])
    assert dataclasses.replace(ESConfig(), backend="batched").backend == "batched"


@pytest.mark.parametrize("backend", ["batched", "fast", "lowrank"])
def test_members_at_once_decodes_members_in_parts_with_the_same_completions(setup, backend):
    """`ESConfig.members_at_once` bounds the stacked weights (N copies) without changing any member's
    completions: 7 antithetic-and-lone members in parts of 1, 3 and 4 (a pair split across parts) equal the
    whole population's, for the exact, the fused and the low-rank forward."""
    tok, model = setup
    task = Lengths()
    cfg = ESConfig(population_size=8, antithetic=True, sigma=0.05, backend="auto" if backend == "lowrank" else backend,
                   noise="lowrank" if backend == "lowrank" else "full")
    pop = ES(cfg, model).ask()
    pop = dataclasses.replace(pop, seeds=pop.seeds[:7], signs=pop.signs[:7])
    examples = task.examples()[:10]
    whole = make_backend(cfg, task, tok).completions(model, pop, examples)
    assert len(whole) == 7 and len(set(map(tuple, whole))) > 1
    for k in (1, 3, 4):
        parts = make_backend(dataclasses.replace(cfg, members_at_once=k), task, tok)
        assert parts.members_at_once == k
        assert parts.completions(model, pop, examples) == whole, k
    empty = dataclasses.replace(pop, seeds=pop.seeds[:0], signs=pop.signs[:0])
    assert make_backend(cfg, task, tok).completions(model, empty, examples) == []


def test_members_at_once_is_checked_and_left_out_of_the_run_identity():
    from esreason_lib.store.identity import jsonable

    for bad in (0, -2, 1.5, True, "4"):
        with pytest.raises(ValueError, match=f"ESConfig.members_at_once must be None or a positive int, got {bad!r}"):
            ESConfig(members_at_once=bad)
    with pytest.raises(ValueError, match="members_at_once must be None or a positive int, got 0"):
        BatchedBackend(Lengths(), None, members_at_once=0)
    for backend in ("sequential", "ray", "vllm"):  # one model or replica per worker: no copy per member to bound
        with pytest.raises(ValueError, match=f"members_at_once is only used by .*backend is '{backend}'"):
            ESConfig(backend=backend, members_at_once=4)
    assert jsonable(ESConfig(members_at_once=4)) == jsonable(ESConfig())
    assert jsonable(ESConfig(members_at_once=4), legacy=True) == jsonable(ESConfig(), legacy=True)


def test_the_backend_registry_names_each_backend_by_its_import_path():
    """Every `ESConfig.backend` but "auto" is a registered "module:class"; a class is imported only when named."""
    from esreason_lib.es.backends.base import BACKEND_CLASSES, BACKENDS
    from esreason_lib.es.backends.fast import NativeBackend
    from esreason_lib.es.backends.registry import backend_class

    assert BACKENDS == ("auto", *BACKEND_CLASSES) and "auto" not in BACKEND_CLASSES
    assert backend_class("sequential") is SequentialBackend and backend_class("native") is NativeBackend
    assert all(":" in path and path.startswith("esreason_lib.es.backends.") for path in BACKEND_CLASSES.values())
    with pytest.raises(ValueError, match=r"ESConfig\.backend must be one of .*, got 'tpu-pods'"):
        backend_class("tpu-pods")


def test_train_es_ends_bit_identical_with_either_backend(setup, tmp_path):
    from esreason_lib.es.loop import train_es

    tok, model = setup
    states, rewards = [], []
    for backend in ("sequential", "batched"):
        net = type(model)(model.config)
        net.load_state_dict(model.state_dict())
        cfg = ESConfig(model="tiny-random", population_size=4, antithetic=True, sigma=0.05, alpha=0.05,
                       iterations=2, prompts_per_step=8, checkpoint_every=0, device="cpu", backend=backend)
        # its own store: which backend scored a run is not part of its identity (a second train would reuse it)
        run = train_es(cfg, model=net, tokenizer=tok, task=Lengths(), home=tmp_path / backend, progress=False)
        states.append(net.state_dict())
        rewards.append(run.metrics()["reward/mean"].tolist())
    assert rewards[0] == rewards[1] and len(rewards[0]) == 2
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])
    assert not all(torch.equal(states[0][k], v) for k, v in model.state_dict().items())  # training moved them


def test_shift_adds_in_the_tensors_dtype_in_place():
    from esreason_lib.es.noise import shift_

    t = torch.tensor([1.0, 2.0])
    out = shift_(t, torch.tensor([0.5, -1.0]), 2.0)
    assert out is t and t.tolist() == [2.0, 0.0]
    b = torch.tensor([1.0], dtype=torch.bfloat16)
    shift_(b, torch.tensor([1e-3]), 1.0)  # 1 + 1e-3 rounds back to 1 in bfloat16 (resolution 2**-7)
    assert b.dtype == torch.bfloat16 and b.item() == 1.0
