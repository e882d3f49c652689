"""The Ray population backend: rewards and weights equal the in-process backend's, dead workers are replaced,
drifted replicas are caught. One local Ray (2 CPUs, no dashboard) and one 2-actor backend for the module."""

from __future__ import annotations

import dataclasses
import hashlib
import sys
import time

import numpy as np
import pytest
import torch

ray = pytest.importorskip("ray", reason="the Ray backend tests need the `ray` extra (pip install 'esreason[ray]')")

from esreason_lib.es.backends.ray_actors import RayBackend, start_ray  # noqa: E402
from esreason_lib.es.backends.sequential import SequentialBackend  # noqa: E402
from esreason_lib.es.config import ESConfig  # noqa: E402
from esreason_lib.es.core import ES
from esreason_lib.es.loop import train_es
from esreason_lib.models.weights import module_state, weights_checksum, weights_fingerprint  # noqa: E402
from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2  # noqa: E402


class Digits:
    """A graded toy objective (rewards spread over [0, 1], so ES updates are non-zero): the sum of the
    completion's character codes mod 11, over 10. While `arm` names an existing file, the first actor to score a
    completion deletes it and kills itself with `ray.kill` (a worker dying mid-step)."""

    name, stop, max_new_tokens = "digits", None, 4

    def __init__(self, arm=None):
        self.arm = arm

    def examples(self, split="train", n=None, seed=0):
        rng = np.random.default_rng(0)
        ex = [{"id": f"{split}-{i}", "text": "".join(rng.choice(list("0123456789"), 5))} for i in range(8)]
        return ex[:n] if n else ex

    def prompt(self, example, tokenizer=None):
        return example["text"] + "="

    def reward(self, completion, example):
        if self.arm is not None and ray.get_runtime_context().get_actor_id() is not None:
            try:
                self.arm.unlink()  # only one actor wins the file
            except FileNotFoundError:
                pass
            else:
                ray.kill(ray.get_runtime_context().current_actor, no_restart=True)
                time.sleep(60)  # killed long before this returns
        return sum(map(ord, completion)) % 11 / 10

    def is_correct(self, completion, example):
        return self.reward(completion, example) >= 0.5


CFG = ESConfig(model="tiny-random", task="digits", population_size=4, sigma=0.05, alpha=0.05, iterations=3,
               prompts_per_step=3, antithetic=True, checkpoint_every=0, device="cpu", seed=0,
               backend="sequential")  # the in-process reference the Ray results are compared with


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    """A 2-actor RayBackend over `Digits` (armed through a file in a module temp folder) and the arm path."""
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # actors cannot import this test module
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    start_ray(num_cpus=2, include_dashboard=False, log_to_driver=False)  # retried when a loaded machine times out
    print(f"ray.init: {time.perf_counter() - t0:.1f} s")
    arm = tmp_path_factory.mktemp("ray") / "arm"
    tok = build_char_tokenizer()
    b = RayBackend(CFG, Digits(arm), tok, workers=2)
    yield b, arm
    b.close()
    ray.shutdown()
    ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def _model():
    return tiny_random_qwen2(len(build_char_tokenizer()), seed=0)


def _bits(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_weights_checksum_by_hand():
    w = torch.tensor([1.0, -2.0])
    expect = hashlib.blake2b(b"w:torch.float32:(2,);" + np.array([1.0, -2.0], "<f4").tobytes(), digest_size=16)
    assert weights_checksum({"w": w}) == expect.hexdigest()
    assert weights_checksum({"w": w.to(torch.bfloat16)}) != expect.hexdigest()  # dtype is part of it
    nudged = w.clone()
    nudged.view(torch.int32)[1] += 1  # one ulp
    assert weights_checksum({"w": nudged}) != expect.hexdigest()


def test_rejects_bad_options():
    for kw, field in (({"workers": 0}, "workers"), ({"workers": 2, "check_every": 0}, "check_every"),
                      ({"workers": 2, "max_restarts": -1}, "max_restarts"),
                      ({"workers": 2, "gpus_per_worker": -1}, "gpus_per_worker")):
        with pytest.raises(ValueError, match=f"RayBackend.{field}"):
            RayBackend(CFG, Digits(), None, **kw)
    assert RayBackend.from_config(CFG, Digits(), None, workers=3).workers == 3


def test_make_backend_builds_a_ray_backend_from_the_config():
    from esreason_lib.es.backends.registry import make_backend

    made = make_backend(dataclasses.replace(CFG, backend="ray", workers=3), Digits(), None)
    assert isinstance(made, RayBackend) and made.workers == 3 and not made.actors  # actors start on first call
    with pytest.raises(ValueError, match="ESConfig.workers must be a positive int"):
        dataclasses.replace(CFG, backend="ray", workers=0)


def test_train_es_matches_sequential_bit_for_bit(backend, tmp_path, monkeypatch):
    ray_backend, _ = backend
    tok, task = build_char_tokenizer(), Digits()
    seq_model, ray_model = _model(), _model()
    seq = train_es(CFG, model=seq_model, tokenizer=tok, task=task, home=tmp_path / "seq", progress=False)

    def no_local_centre(*args, **kwargs):
        raise AssertionError("the driver decoded the centre")

    monkeypatch.setattr("esreason_lib.es.loop.score_center", no_local_centre)  # an actor scores it
    t0 = time.perf_counter()
    run = train_es(CFG, model=ray_model, tokenizer=tok, task=task, backend=ray_backend, home=tmp_path / "ray",
                   progress=False)
    print(f"3 ray steps (2 actors): {time.perf_counter() - t0:.1f} s")
    a, b = seq.metrics(), run.metrics()
    for key in ("reward/mean", "reward/std", "reward/max", "reward/min", "es/js_succ", "es/fixup_frac",
                "es/update_norm", "es/generations", "reward/center", "policy/entropy"):
        assert a[key].tolist() == b[key].tolist(), key
    assert (a["reward/std"] > 0).all() and (a["es/update_norm"] > 0).all()  # every step really moved theta
    base = _bits(_model())
    assert all(torch.equal(v, _bits(ray_model)[k]) for k, v in _bits(seq_model).items())
    assert not all(torch.equal(v, base[k]) for k, v in _bits(seq_model).items())
    # one more step: the replicas replay the last tell and still match the driver (checked every call)
    es = ES(CFG, ray_model, iteration=3)
    pop, examples = es.ask(), task.examples(n=3)
    ev = ray_backend(ray_model, pop, examples, iteration=3)
    want = SequentialBackend.from_config(CFG, task, tok)(seq_model, pop, examples, iteration=3)
    assert ev.rewards.tolist() == want.rewards.tolist() and np.array_equal(ev.correct, want.correct)
    assert ev.fixup_frac == want.fixup_frac and ev.generations == want.generations == 12
    assert len(ray_backend.actors) == 2


def test_actor_killed_mid_step_is_replaced_and_every_member_scored(backend):
    ray_backend, arm = backend
    tok, model = build_char_tokenizer(), _model()
    pop, examples = ES(CFG, model).ask(), Digits().examples(n=3)
    before, restarts = ray_backend.actors, ray_backend.restarts
    arm.touch()
    ev = ray_backend(model, pop, examples, iteration=0)
    assert not arm.exists() and ray_backend.restarts == restarts + 1
    assert len(set(ray_backend.actors) & set(before)) == 1  # one actor is new
    want = SequentialBackend.from_config(CFG, Digits(), tok)(model, pop, examples, iteration=0)
    assert ev.rewards.tolist() == want.rewards.tolist() and np.array_equal(ev.correct, want.correct)
    ray_backend.max_restarts = 0  # no replacement allowed: the death is an error that names the member
    arm.touch()
    try:
        with pytest.raises(RuntimeError, match=r"1 workers died in iteration 0 \(max_restarts=0\); the last was "
                                                r"scoring member \d \(seed -?\d+, sign -?1\)"):
            ray_backend(model, pop, examples, iteration=0)
    finally:
        ray_backend.max_restarts = 3


def test_corrupted_replica_is_reloaded_with_a_warning(backend):
    ray_backend, _ = backend
    model = _model()
    es = ES(CFG, model)
    pop, examples = es.ask(), Digits().examples(n=3)
    ev = ray_backend(model, pop, examples, iteration=0)  # a new model: replicas reload and pass the check
    es.tell(pop, ev.rewards)

    def nudge(replica):  # one ulp in one weight of one replica
        with torch.no_grad():
            replica.model.model.norm.weight.view(torch.int32)[0] += 1

    ray.get(ray_backend.actors[1].__ray_call__.remote(nudge))
    before = ray_backend.resyncs
    with pytest.warns(RuntimeWarning, match="replica 1 drifted from the driver's weights at iteration 1"):
        ray_backend(model, es.ask(), examples, iteration=1)
    assert ray_backend.resyncs == before + 1 and ray_backend.last_sync_s > 0
    assert ray.get(ray_backend.actors[1].checksum.remote()) == weights_fingerprint(model)


class _Slowed:
    """Wraps a replica's scorer: each member takes `delay` seconds longer; counts the members it scored."""

    def __init__(self, scorer, delay):
        self.scorer, self.delay, self.calls = scorer, delay, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        time.sleep(self.delay)
        return self.scorer(*args, **kwargs)


def test_a_slow_worker_does_not_stall_the_step(backend):
    ray_backend, _ = backend
    model, tok = _model(), build_char_tokenizer()
    pop, examples = ES(dataclasses.replace(CFG, population_size=8), model).ask(), Digits().examples(n=2)
    ray_backend(model, pop, examples, iteration=0)  # start or reload the replicas before timing anything
    slow = ray_backend.actors[0]
    ray.get(slow.__ray_call__.remote(lambda replica: setattr(replica, "scorer", _Slowed(replica.scorer, 3.0))))
    try:
        ev = ray_backend(model, pop, examples, iteration=0)
        slow_calls = ray.get(slow.__ray_call__.remote(lambda replica: replica.scorer.calls))
    finally:
        ray.get(slow.__ray_call__.remote(lambda replica: setattr(replica, "scorer", replica.scorer.scorer)))
    assert slow_calls < 4  # a static split would give it 4 of the 8 members
    want = SequentialBackend.from_config(CFG, Digits(), tok)(model, pop, examples, iteration=0)
    assert ev.rewards.tolist() == want.rewards.tolist()


def test_weights_fingerprint_catches_one_ulp_and_ignores_the_chunking():
    w = {"a": torch.randn(1000, generator=torch.Generator().manual_seed(0)), "b": torch.ones(3, dtype=torch.bfloat16)}
    want = weights_fingerprint(w)
    assert weights_fingerprint(w, chunk=7) == weights_fingerprint(w, chunk=1) == want  # exact modular sums
    for name, i in (("a", 0), ("a", 999), ("b", 2)):
        nudged = {k: v.clone() for k, v in w.items()}
        nudged[name].view(torch.int32 if name == "a" else torch.int16)[i] += 1  # one ulp in one element
        assert weights_fingerprint(nudged) != want, (name, i)
    swapped = {"a": w["a"].flip(0), "b": w["b"]}  # the same values at other positions
    assert weights_fingerprint(swapped) != want
    assert weights_fingerprint({"a": w["a"], "b": w["b"].float()}) != want  # dtype is part of it


def test_check_every_reaches_every_actors_engine(monkeypatch):
    """A ray-vllm actor builds its engine backend with the config's check_every (it defaulted to 1 before)."""
    import types

    made = []
    fake = types.ModuleType("esreason_lib.es.backends.vllm_engines")
    fake.VLLMBackend = lambda *args, **kwargs: made.append(kwargs)
    monkeypatch.setitem(sys.modules, "esreason_lib.es.backends.vllm_engines", fake)
    from esreason_lib.es.backends.ray_replica import Replica

    model = _model()
    cfg = dataclasses.replace(CFG, check_every=7)
    for share in (None, 0.2):
        Replica(type(model), model.config, torch.float32, "cpu", module_state(model), None, Digits(), cfg, None,
                engine="vllm", memory_share=share)
    assert [kw["check_every"] for kw in made] == [7, 7]
    assert made[1]["engine_kwargs"] == {"gpu_memory_utilization": 0.2}

    assert RayBackend.from_config(cfg, Digits(), None, workers=2).check_every == 7  # the driver's own checks
