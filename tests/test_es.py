"""ES core: config validation, fitness shaping, ask/tell, the update convention, noise streams."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from toy_tasks import Paren

from esreason_lib.es.config import ESConfig
from esreason_lib.es.core import ES, Population
from esreason_lib.es.noise import apply_update, noise, perturb, restore
from esreason_lib.es.shaping import FITNESS_SHAPING, centered_ranks, raw, zscore
from esreason_lib.params import named_params
from esreason_lib.seeding import derive_seed


# ---------------------------------------------------------------- config
def test_config_is_frozen_hashable_and_json_able():
    c = ESConfig(task_kwargs={"b": 2, "a": (1, 2)})
    assert c.task_kwargs == (("a", (1, 2)), ("b", 2))
    hash(c)
    json.dumps(dataclasses.asdict(c))
    from esreason_lib.store.identity import config_hash

    assert config_hash(c) == config_hash(ESConfig(task_kwargs=(("a", (1, 2)), ("b", 2)))) != config_hash(ESConfig())
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.sigma = 1.0


@pytest.mark.parametrize("kwargs, field", [
    ({"population_size": 1}, "population_size"),
    ({"population_size": 7, "antithetic": True}, "population_size"),
    ({"population_size": 2.0}, "population_size"),
    ({"sigma": 0.0}, "sigma"),
    ({"sigma": float("nan")}, "sigma"),
    ({"alpha": -1e-3}, "alpha"),
    ({"temperature": 0}, "temperature"),
    ({"iterations": 0}, "iterations"),
    ({"prompts_per_step": 0}, "prompts_per_step"),
    ({"normalization": "softmax"}, "normalization"),
    ({"antithetic": 1}, "antithetic"),
    ({"matched_step": 1}, "matched_step"),
    ({"max_new_tokens": 0}, "max_new_tokens"),
    ({"checkpoint_every": -1}, "checkpoint_every"),
    ({"dtype": "float16"}, "dtype"),
    ({"task_kwargs": {"x": [1, 2]}}, "task_kwargs"),
    ({"task_kwargs": "n=3"}, "task_kwargs"),
    ({"reward_correct": float("inf")}, "reward_correct"),
    ({"model": ""}, "model"),
    ({"seed": 1.5}, "seed"),
])
def test_config_validation_names_field_and_value(kwargs, field):
    with pytest.raises(ValueError, match=rf"ESConfig\.{field} .*got"):
        ESConfig(**kwargs)


# ---------------------------------------------------------------- fitness shaping
def test_zscore_by_hand():
    z = zscore(np.array([0.0, 1.0, 2.0, 3.0]))
    np.testing.assert_allclose(z, (np.arange(4) - 1.5) / np.sqrt(1.25), rtol=1e-7)
    assert np.array_equal(zscore(np.full(5, 0.3)), np.zeros(5))


def test_centered_ranks_by_hand():
    np.testing.assert_allclose(centered_ranks(np.array([10.0, -1.0, 3.0])), [0.5, -0.5, 0.0])
    np.testing.assert_allclose(centered_ranks(np.array([0.0, 1.0, 1.0, 5.0])), [-0.5, 0.0, 0.0, 0.5])
    assert np.array_equal(centered_ranks(np.ones(4)), np.zeros(4))
    r = centered_ranks(np.random.default_rng(0).normal(size=9))
    assert r.min() == -0.5 and r.max() == 0.5 and abs(r.sum()) < 1e-12


def test_raw_and_registry():
    x = np.array([1, 2], dtype=np.int64)
    assert raw(x).dtype == np.float64 and np.array_equal(raw(x), [1.0, 2.0])
    assert set(FITNESS_SHAPING) == {"zscore", "rank", "none"}


# ---------------------------------------------------------------- noise
def test_noise_is_deterministic_float32_and_named():
    like = torch.zeros(64, 8, dtype=torch.bfloat16)
    a, b = noise(7, "w", like), noise(7, "w", like)
    assert a.dtype == torch.float32 and a.shape == like.shape and torch.equal(a, b)
    assert not torch.equal(a, noise(8, "w", like))


def test_noise_independent_across_tensors():
    like = torch.zeros(200_000)
    a, b = noise(123, "layers.0.mlp.weight", like), noise(123, "layers.1.mlp.weight", like)
    corr = float(torch.corrcoef(torch.stack([a, b]))[0, 1])
    assert abs(corr) < 0.01, corr
    assert abs(float(a.mean())) < 0.01 and abs(float(a.std()) - 1) < 0.01


def test_noise_stable_across_processes():
    code = ("import torch; from esreason_lib.es.noise import noise; from esreason_lib.seeding import derive_seed;"
            "e = noise(2**62 + 5, 'model.embed_tokens.weight', torch.zeros(3, 5));"
            "print(repr(e.flatten().tolist()), derive_seed(2**62 + 5, 'model.embed_tokens.weight'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split(" ")
    here = noise(2**62 + 5, "model.embed_tokens.weight", torch.zeros(3, 5)).flatten().tolist()
    assert out[-1].strip() == str(derive_seed(2**62 + 5, "model.embed_tokens.weight"))
    assert eval(" ".join(out[:-1])) == here


def test_named_params_rejects_tied_and_non_float():
    w = torch.zeros(3)
    with pytest.raises(ValueError, match="share storage"):
        named_params({"a": w, "b": w})
    with pytest.raises(TypeError, match="'i'"):
        named_params({"i": torch.zeros(3, dtype=torch.long)})


def test_named_params_accepts_disjoint_views_of_one_tensor():
    fused = torch.zeros(6, 2)  # e.g. vLLM's qkv_proj: q rows 0-3, k rows 4-5 (es_vllm names them so)
    assert list(named_params({"q": fused[:4], "k": fused[4:]})) == ["q", "k"]
    with pytest.raises(ValueError, match="'q' and 'k' share storage"):
        named_params({"k": fused[3:], "q": fused[:4]})  # row 3 in both
    fx = perturb({"q": fused[:4], "k": fused[4:]}, 7, 1, 0.5)
    assert torch.equal(fused[4:], 0.5 * noise(7, "k", fused[4:]))  # the view's noise lands in the fused rows
    restore({"q": fused[:4], "k": fused[4:]}, fx)
    assert torch.equal(fused, torch.zeros(6, 2))


# ---------------------------------------------------------------- ask / tell
def _params(d=10):
    return {"a": torch.zeros(d), "b": torch.zeros(2, 3)}


def test_ask_is_deterministic_and_antithetic_pairs_share_seeds():
    cfg = ESConfig(population_size=6, antithetic=True, seed=3)
    es1, es2 = ES(cfg, _params()), ES(cfg, _params())
    p1, p2 = es1.ask(), es2.ask()
    assert p1.seeds.dtype == np.int64 and len(p1) == 6 and np.array_equal(p1.seeds, p2.seeds)
    assert np.array_equal(p1.seeds[0::2], p1.seeds[1::2]) and len(set(p1.seeds[0::2].tolist())) == 3
    assert p1.signs.tolist() == [1, -1] * 3 and p1.iteration == 0
    es1.tell(p1, np.arange(6.0))
    assert es1.iteration == 1 and not np.array_equal(es1.ask().seeds, p1.seeds)
    plain = ES(ESConfig(population_size=5, seed=3), _params()).ask()
    assert (plain.signs == 1).all() and len(set(plain.seeds.tolist())) == 5


def test_tell_matches_the_update_formula():
    cfg = ESConfig(population_size=4, antithetic=True, alpha=0.3, normalization="none")
    params = _params()
    es = ES(cfg, params)
    pop, r = es.ask(), np.array([1.0, 0.5, -2.0, 0.25])
    expect = {k: v.clone() for k, v in params.items()}
    for s, sign, ri in zip(pop.seeds, pop.signs, r):
        for k in expect:
            expect[k] += 0.3 / 4 * ri * sign * noise(int(s), k, params[k])
    m = es.tell(pop, r)
    for k in expect:
        torch.testing.assert_close(params[k], expect[k], rtol=1e-6, atol=1e-7)
    assert m["reward/mean"] == pytest.approx(-0.0625) and m["reward/max"] == 1.0 and m["es/update_norm"] > 0


def test_matched_step_rescales_the_seed_coefficients_to_norm_sqrt_n():
    cfg = ESConfig(population_size=4, antithetic=True, alpha=0.3, normalization="none", matched_step=True)
    params = _params()
    es = ES(cfg, params)
    pop, r = es.ask(), np.array([1.0, 0.5, -2.0, 0.25])
    c = np.array([1.0 - 0.5, -2.0 - 0.25])  # per seed: z+ - z-; norm sqrt(5.3125), rescaled to sqrt(4) = 2
    c = c * 2 / np.sqrt(5.3125)
    expect = {k: v.clone() for k, v in params.items()}
    for s, ck in zip(pop.seeds[::2], c):
        for k in expect:
            expect[k] += 0.3 / 4 * ck * noise(int(s), k, params[k])
    es.tell(pop, r)
    for k in expect:
        torch.testing.assert_close(params[k], expect[k], rtol=1e-6, atol=1e-7)
    # plain z-score coefficients already have norm sqrt(N) (up to zscore's 1e-8): the option changes nothing
    shaped, matched = _params(), _params()
    plain = ESConfig(population_size=5, alpha=0.3)
    pop = ES(plain, shaped).ask()
    ES(plain, shaped).tell(pop, np.arange(5.0))
    ES(dataclasses.replace(plain, matched_step=True), matched).tell(pop, np.arange(5.0))
    for k in shaped:
        torch.testing.assert_close(matched[k], shaped[k], rtol=1e-6, atol=1e-7)
    # all-equal rewards: zero coefficients stay zero
    before = _params()
    ES(dataclasses.replace(plain, matched_step=True), matched).tell(pop, np.ones(5))
    ES(plain, before).tell(pop, np.arange(5.0))
    for k in before:
        torch.testing.assert_close(matched[k], before[k], rtol=1e-6, atol=1e-7)


def test_tell_accepts_plain_seeds_a_callable_shaping_and_checks_lengths():
    params = _params()
    es = ES(ESConfig(population_size=3, alpha=1.0), params, fitness_shaping=lambda r: np.array([1.0, 0, 0]))
    es.tell(np.array([11, 12, 13]), [0.0, 0.0, 0.0])
    torch.testing.assert_close(params["a"], noise(11, "a", params["a"]) / 3)
    with pytest.raises(ValueError, match="2 rewards for a population of 3"):
        es.tell(np.array([1, 2, 3]), [0.0, 1.0])
    with pytest.raises(ValueError, match="finite"):
        es.tell(np.array([1, 2, 3]), [0.0, 1.0, np.nan])
    bad = ES(ESConfig(population_size=3), params, fitness_shaping=lambda r: r[:2])
    with pytest.raises(ValueError, match="fitness shaping must map 3 rewards"):
        bad.tell(np.array([1, 2, 3]), [0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="signs"):
        Population([1, 2], [1, 0], 0.1)
    for sigma in (0, -0.1, float("nan"), 2.0):
        with pytest.raises(ValueError, match=r"Population\.sigma must be a finite float in \(0, 1\.0\]"):
            Population([1, 2], [1, 1], sigma)


def test_all_equal_rewards_leave_theta_unchanged():
    params = _params()
    before = {k: v.clone() for k, v in params.items()}
    ES(ESConfig(population_size=4), params).tell(np.arange(4), np.ones(4))
    assert all(torch.equal(params[k], before[k]) for k in params)


def test_bf16_update_rounds_once():
    p = {"w": torch.ones(1000, dtype=torch.bfloat16)}
    apply_update(p, [5], [1.0], 1e-3)
    exact = (1.0 + 1e-3 * noise(5, "w", p["w"])).to(torch.bfloat16)
    assert p["w"].dtype == torch.bfloat16 and torch.equal(p["w"], exact)


# ---------------------------------------------------------------- the quadratic toy objective
def _quadratic(target):
    def f(params):  # maximise -0.5 ||theta - target||^2 over the concatenated tensors
        theta = torch.cat([params["a"].flatten(), params["b"].flatten()])
        return -0.5 * float(((theta - target) ** 2).sum())
    return f


def _score(params, pop, sigma, f):
    from esreason_lib.es.noise import perturbed

    out = []
    for s, sign in zip(pop.seeds.tolist(), pop.signs.tolist()):
        with perturbed(params, s, sign, sigma):
            out.append(f(params))
    return np.array(out)


def test_es_gradient_estimate_matches_true_gradient():
    torch.manual_seed(0)
    target = torch.randn(16)
    params = {"a": torch.zeros(10, dtype=torch.float64), "b": torch.zeros(2, 3, dtype=torch.float64)}
    sigma, alpha, n = 0.05, 0.1, 4000
    es = ES(ESConfig(population_size=n, sigma=sigma, alpha=alpha, antithetic=True, normalization="none"), params)
    pop = es.ask()
    es.tell(pop, _score(params, pop, sigma, _quadratic(target.double())))
    step = torch.cat([params["a"], params["b"].flatten()])
    g_hat, g = step / (alpha * sigma), target.double()  # true gradient at 0 is target
    cos = float(g_hat @ g / (g_hat.norm() * g.norm()))
    assert cos > 0.97, cos
    assert float(g_hat.norm() / g.norm()) == pytest.approx(1.0, abs=0.1)


@pytest.mark.parametrize("normalization", ["zscore", "rank"])
def test_es_optimises_the_quadratic(normalization):
    target = torch.randn(16, generator=torch.Generator().manual_seed(1))
    params, f = _params(), _quadratic(target)
    cfg = ESConfig(population_size=20, sigma=0.1, alpha=0.2, antithetic=True, normalization=normalization, seed=1)
    es, start = ES(cfg, params), f(params)
    for _ in range(150):
        pop = es.ask()
        es.tell(pop, _score(params, pop, cfg.sigma, f))
    assert f(params) > 0.1 * start, (start, f(params))  # loss fell by > 90%


# ---------------------------------------------------------------- backend and loop (tiny random Qwen2, char tokenizer)


def test_sequential_backend_scores_members_and_restores(tiny):
    from esreason_lib.es.backends.base import Evaluation, PopulationEvaluator, sample_seed, score_examples
    from esreason_lib.es.backends.sequential import SequentialBackend

    tok, make = tiny
    model, task = make(), Paren()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    backend = SequentialBackend(task, tok, greedy=True)
    assert isinstance(backend, PopulationEvaluator)
    pop = ES(ESConfig(population_size=6, antithetic=True, sigma=0.05), model).ask()
    assert pop.sigma == 0.05  # the strategy's sigma travels with its population: the backend keeps none
    ev = backend(model, pop, task.examples("train", 5), iteration=0)
    assert isinstance(ev, Evaluation) and ev.rewards.shape == (6,) and ev.correct.shape == (6, 5)
    np.testing.assert_array_equal(ev.rewards, ev.correct.mean(axis=1))
    assert ev.generations == 30 and 0 < ev.fixup_frac < 1
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    r, c = score_examples(model, tok, task, task.examples("train", 5), greedy=True, temperature=1.0,
                          max_new_tokens=4, seed=sample_seed(0, 0))
    assert r.shape == c.shape == (5,)


def test_train_es_learns_the_sanity_objective(tiny, tmp_path):
    from esreason_lib.es.loop import train_es

    tok, make = tiny
    cfg = ESConfig(model="tiny-random", task="paren", population_size=16, sigma=0.02, alpha=0.01, iterations=40,
                   prompts_per_step=8, antithetic=True, checkpoint_every=0, device="cpu", seed=0)
    run = train_es(cfg, model=make(), tokenizer=tok, task=Paren(), home=tmp_path, progress=False)
    df = run.metrics()
    assert run.is_complete() and df["step"].tolist() == list(range(1, 41))
    first, last = df["reward/mean"][:5].mean(), df["reward/mean"][-5:].mean()
    print(f"sanity: reward/mean first5={first:.3f} last5={last:.3f} center_last={df['reward/center'].iloc[-1]}")
    assert first < 0.05 and last > 0.6 and df["reward/center"].iloc[-1] == 1.0
    assert df["es/generations"].iloc[-1] == 40 * 16 * 8 and df["es/drift_rel"].iloc[-1] > 0
    for key in ("reward/std", "reward/max", "es/js_succ", "es/fixup_frac", "time/step_s"):
        assert df[key].notna().all(), key
    assert (run.model_dir / "config.json").exists()
    t = __import__("time").perf_counter()
    assert train_es(cfg, model=make(), tokenizer=tok, task=Paren(), home=tmp_path).path == run.path
    assert __import__("time").perf_counter() - t < 1.0 and len(run.metrics()) == 40
    with pytest.raises(ValueError, match="tokenizer is required"):
        train_es(dataclasses.replace(cfg, seed=1), model=make(), home=tmp_path)


def test_train_es_closes_the_backend_it_made_and_only_that(tiny, tmp_path, monkeypatch):
    import esreason_lib.es.loop as es_module
    from esreason_lib.es.backends.sequential import SequentialBackend

    closed = []

    class Closing(SequentialBackend):  # a backend holding resources (as the vLLM and Ray ones do)
        def close(self):
            closed.append(self)

    tok, make = tiny
    cfg = ESConfig(model="tiny-random", task="paren", population_size=2, iterations=1, prompts_per_step=2,
                   checkpoint_every=0, device="cpu", seed=0, backend="sequential")
    monkeypatch.setattr(es_module, "make_backend",
                        lambda config, task, tok, model=None: Closing.from_config(config, task, tok))
    es_module.train_es(cfg, model=make(), tokenizer=tok, task=Paren(), home=tmp_path / "made", progress=False)
    assert len(closed) == 1
    mine = Closing.from_config(cfg, Paren(), tok)
    es_module.train_es(cfg, model=make(), tokenizer=tok, task=Paren(), backend=mine, home=tmp_path / "given",
                       progress=False)
    assert len(closed) == 1  # the caller's backend stays open for the caller


def test_es_step_is_one_train_es_iteration(tiny, tmp_path):
    """Two hand-driven `es_step`s log what the first two iterations of `train_es` log and leave the same weights;
    `before_tell` sees the model still at theta."""
    from esreason_lib.es.backends.registry import make_backend
    from esreason_lib.es.loop import es_step, train_es

    tok, make = tiny
    cfg = ESConfig(model="tiny-random", task="paren", population_size=4, sigma=0.02, alpha=0.01, iterations=2,
                   prompts_per_step=3, antithetic=True, checkpoint_every=0, device="cpu", seed=3)
    run = train_es(cfg, model=make(), tokenizer=tok, task=Paren(), home=tmp_path, progress=False)
    model, task = make(), Paren()
    es = ES(cfg, model)
    theta0 = {k: v.detach().clone() for k, v in es.params.items()}
    seen = []

    def before_tell(pop, ev):
        seen.append((len(pop), ev.rewards.shape, all(torch.equal(v, theta0[k]) for k, v in es.params.items())))

    logged = []
    for _ in range(2):
        m, ev = es_step(es, model, tok, task, task.examples("train"), make_backend(cfg, task, tok),
                        theta0=theta0, before_tell=before_tell if not seen else None)
        logged.append(m)
        assert ev.generations == 4 * 3
    assert seen == [(4, (4,), True)] and es.iteration == 2
    df = run.metrics()
    for key, value in logged[1].items():
        assert key.startswith("time/") or df[key].iloc[1] == pytest.approx(value), key  # timings differ
    trained = __import__("transformers").AutoModelForCausalLM.from_pretrained(run.model_dir)
    assert all(torch.equal(v, trained.state_dict()[k]) for k, v in model.state_dict().items())


def test_train_es_named_task_bf16_uses_config_shaping(tiny, tmp_path, monkeypatch):
    import esreason_lib.es.backends.sequential as backends
    from esreason_lib.es.loop import train_es

    tok, make = tiny
    seen = []
    real = backends.score_examples

    def spy(model, tokenizer, task, examples, **kw):
        seen.append((task, next(model.parameters()).dtype))
        return real(model, tokenizer, task, examples, **kw)

    monkeypatch.setattr(backends, "score_examples", spy)
    cfg = ESConfig(model="tiny-random", task="countdown", population_size=4, sigma=0.02, alpha=0.01, iterations=2,
                   prompts_per_step=2, max_new_tokens=3, reward_formatted=0.25, dtype="bfloat16",
                   checkpoint_every=1, device="cpu", keep_checkpoints=True)
    run = train_es(cfg, model=make(), tokenizer=tok, home=tmp_path, progress=False)
    assert run.is_complete() and len(run.metrics()) == 2
    assert seen and all(t.name == "countdown" and t.shaping.formatted == 0.25 and d == torch.bfloat16 for t, d in seen)
    assert len(list((run.path / "checkpoints").iterdir())) == 1  # step 1 only; the last step is the final model


def test_train_es_epoch_order_scores_every_train_prompt_once_per_epoch(tiny, tmp_path, monkeypatch):
    import esreason_lib.es.loop as es_module

    tok, make = tiny
    batches = []
    real = es_module.score_center

    def spy(model, tokenizer, task, examples, *args):  # the center's scoring: once per iteration, on its prompts
        batches.append([ex["id"] for ex in examples])
        return real(model, tokenizer, task, examples, *args)

    monkeypatch.setattr(es_module, "score_center", spy)
    cfg = ESConfig(model="tiny-random", task="paren", population_size=2, sigma=0.02, alpha=0.01, iterations=4,
                   prompts_per_step=3, train_size=6, prompt_order="epoch", checkpoint_every=0, device="cpu")
    es_module.train_es(cfg, model=make(), tokenizer=tok, task=Paren(), home=tmp_path, progress=False)
    ids = [i for b in batches for i in b]  # 4 iterations x 3 prompts = 2 epochs of the 6 train examples
    train = [ex["id"] for ex in Paren().examples("train", 6)]
    assert sorted(ids[:6]) == sorted(train) and sorted(ids[6:]) == sorted(train)


def test_snapshot_refs_name_exactly_the_saved_snapshots(tiny, tmp_path):
    """The steps come from the config, and they are the folders `save_snapshot` wrote (so an imported run
    without weights names the same snapshots)."""
    from esreason_lib.es.loop import train_es
    from esreason_lib.training.run_entry import SNAPSHOTS, snapshot_refs, snapshot_steps

    assert list(snapshot_steps(2, 5)) == [2, 4] and list(snapshot_steps(25, 150)) == [25, 50, 75, 100, 125]
    assert not snapshot_steps(0, 5) and not snapshot_steps(5, 5)

    tok, make = tiny
    cfg = ESConfig(model="tiny-random", task="paren", population_size=2, iterations=5, prompts_per_step=2,
                   snapshot_every=2, checkpoint_every=0, device="cpu", seed=0)
    run = train_es(cfg, model=make(), tokenizer=tok, task=Paren(), home=tmp_path, progress=False)
    refs = snapshot_refs(run)
    assert list(refs) == [2, 4, 5] and refs[5] == str(run.model_dir)
    saved = sorted(p.name for p in (run.path / SNAPSHOTS).iterdir())
    assert saved == ["step-000002", "step-000004"] and [refs[2], refs[4]] == [
        str(run.path / SNAPSHOTS / s) for s in saved]
