"""Low-rank (EGGROLL) ES: factors from seeds, the batched low-rank forward against materialised perturbed weights,
the low-rank update against its explicit sum, config validation, and ES runs with noise="lowrank"."""

import dataclasses
import math

import numpy as np
import pytest
import torch
from toy_tasks import Paren

from esreason_lib.es.backends.lowrank import LowRankBackend, LowRankStack, lowrank_weights
from esreason_lib.es.backends.population_forward import Qwen2Population, RowGroups, fuse_weights
from esreason_lib.es.backends.registry import make_backend
from esreason_lib.es.config import ESConfig
from esreason_lib.es.core import ES, Population
from esreason_lib.es.lowrank import apply_lowrank_update, lowrank_direction, lowrank_factors
from esreason_lib.es.noise import noise
from esreason_lib.models.generation import Sampling, generate
from esreason_lib.params import named_params


def _materialised(model, seed: int, sign: int, sigma: float, rank: int) -> None:
    """Write W + sign * sigma * E(seed) into `model` (the weights the low-rank forward never forms)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.add_(sign * sigma * lowrank_direction(seed, name, p, rank))


def test_factors_are_seeded_shaped_and_unit_scale():
    w = torch.zeros(300, 200)
    a, b = lowrank_factors(7, "w", w, 3)
    assert a.shape == (300, 3) and b.shape == (200, 3) and a.dtype == torch.float32
    assert torch.equal(a, lowrank_factors(7, "w", w, 3)[0]) and torch.equal(b, lowrank_factors(7, "w", w, 3)[1])
    assert not torch.equal(a, lowrank_factors(8, "w", w, 3)[0]) and not torch.equal(a, lowrank_factors(7, "v", w, 3)[0])
    e = lowrank_direction(7, "w", w, 3)
    assert torch.allclose(e, a @ b.T / math.sqrt(3)) and torch.linalg.matrix_rank(e) == 3
    second = np.mean([float(lowrank_direction(s, "w", w, 3).pow(2).mean()) for s in range(20)])
    assert abs(second - 1.0) < 0.1  # entries of A B^T / sqrt(r) have variance 1, like full-rank noise
    bias = torch.zeros(5)
    assert torch.equal(lowrank_direction(7, "b", bias, 3), noise(7, "b", bias))  # 1-D: the full-rank draw
    with pytest.raises(ValueError, match="2-D"):
        lowrank_factors(7, "b", bias, 3)
    with pytest.raises(ValueError, match="rank"):
        lowrank_factors(7, "w", w, 0)


@pytest.mark.parametrize("rank", [1, 2])  # rank 1 takes the outer-product branch of `LowRankStack.linear`
def test_stack_linear_embedding_and_fusion_equal_the_materialised_weights(rank):
    g = torch.Generator().manual_seed(0)
    x, bias = torch.randn(2, 3, 4, 5, generator=g), torch.randn(2, 6, generator=g)  # [N, R, L, in], [N, out]
    stacks = [lowrank_weights({"w": torch.randn(6, 5, generator=g)}, [1, 1], [1, -1], 0.1, rank)["w"],
              lowrank_weights({"v": torch.randn(4, 5, generator=g)}, [1, 1], [1, -1], 0.1, rank)["v"]]
    dense = [s.base + s.a @ s.bt for s in stacks]  # [N, out, in] the materialised members
    groups = RowGroups(torch.tensor([3, 2]), 3)  # member 1 runs 2 of its 3 rows
    y = stacks[0].linear(x, bias, groups)
    want = x @ dense[0].transpose(1, 2)[:, None] + bias[:, None, None]  # [N, R, L, out]
    assert torch.allclose(y[0], want[0], atol=1e-6) and torch.allclose(y[1, :2], want[1, :2], atol=1e-6)
    assert torch.equal(y[1, 2], torch.zeros_like(y[1, 2]))  # rows outside the member's batch are 0
    full = RowGroups(torch.tensor([3, 3]), 3)
    pair = stacks[0].linear(x[:1].expand(2, -1, -1, -1), None, full)  # an antithetic pair on the same input
    assert torch.allclose(pair[0] + pair[1], 2 * x[0] @ stacks[0].base.T, atol=1e-6)  # the +/- terms cancel
    fused = LowRankStack.cat(stacks)
    assert fused.shape == (2, 10, 5) and fused.a.shape == (2, 10, 2 * rank) and len(fused[1:]) == 1
    assert torch.allclose(fused.linear(x, None, full), torch.cat([s.linear(x, None, full) for s in stacks], -1),
                          atol=1e-6)
    ids = torch.tensor([[[0, 5, 2]], [[1, 1, 4]]])  # [N, R=1, L=3] rows of the [6, 5] weight
    rows = stacks[0][torch.arange(2)[:, None, None], ids]
    assert rows.shape == (2, 1, 3, 5) and torch.allclose(rows[1, 0], dense[0][1][ids[1, 0]], atol=1e-6)


def test_population_forward_equals_the_materialised_perturbed_models(tiny):
    tok, make = tiny
    model, seeds, signs, sigma, rank = make(), [5, 5, 9], [1, -1, 1], 0.05, 1
    weights = lowrank_weights(named_params(model), seeds, signs, sigma, rank)
    assert isinstance(weights["model.layers.0.self_attn.q_proj.weight"], LowRankStack)
    assert weights["model.norm.weight"].shape == (3, 32)  # 1-D: stacked full-rank copies
    forward = Qwen2Population(model, weights, fuse_weights(model, weights), capacity=16)
    ids = torch.randint(4, 60, (2, 7), generator=torch.Generator().manual_seed(1))  # [b, L]
    pos = torch.arange(7).expand(3, 2, 7)
    logits = forward(ids.expand(3, 2, 7), pos, None, RowGroups(torch.tensor([2, 2, 2]), 2))  # [N, b, V]
    for i, (s, sign) in enumerate(zip(seeds, signs)):
        ref = make()
        _materialised(ref, s, sign, sigma, rank)
        with torch.no_grad():
            want = ref(ids).logits[:, -1]  # [b, V]
        assert torch.allclose(logits[i], want, atol=1e-5, rtol=1e-5), (i, float((logits[i] - want).abs().max()))


def test_backend_completions_equal_generation_by_the_materialised_models(tiny):
    tok, make = tiny
    model, task, sigma, rank = make(), Paren(), 0.5, 2
    before = {k: v.clone() for k, v in model.state_dict().items()}
    pop = ES(ESConfig(population_size=4, antithetic=True, sigma=sigma, noise="lowrank", rank=rank), model).ask()
    backend = LowRankBackend(task, tok, rank=rank)
    examples = task.examples("train")
    fast = backend.completions(model, pop, examples)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # the model is never perturbed
    for i, (s, sign) in enumerate(zip(pop.seeds.tolist(), pop.signs.tolist())):
        ref = make()
        _materialised(ref, s, sign, sigma, rank)
        ro = generate(ref, tok, [task.prompt(e) for e in examples], Sampling(greedy=True, max_new_tokens=4))
        assert fast[i] == ro.completions, i
    assert fast[0] != fast[1]  # the +/- members of a pair decode differently at this sigma
    ev = backend(model, pop, examples, iteration=0)
    assert ev.rewards.shape == (4,) and ev.correct.shape == (4, 32) and ev.generations == 4 * 32


def test_update_equals_the_explicit_sum_and_pairs_cancel():
    base = {"w": torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), "b": torch.tensor([0.5, -0.5, 1.0])}
    cfg = ESConfig(population_size=4, alpha=0.3, noise="lowrank", rank=2, normalization="none")
    params = {k: v.clone() for k, v in base.items()}
    pop = Population([11, 11, 12, 13], [1, -1, 1, 1], cfg.sigma)
    rewards = np.array([1.0, 0.25, -2.0, 0.5])
    norm = ES(cfg, params).tell(pop, rewards)["es/update_norm"]
    a11, b11 = lowrank_factors(11, "w", base["w"], 2)
    a12, b12 = lowrank_factors(12, "w", base["w"], 2)
    a13, b13 = lowrank_factors(13, "w", base["w"], 2)
    step_w = 0.3 / 4 * ((1.0 - 0.25) * a11 @ b11.T - 2.0 * a12 @ b12.T + 0.5 * a13 @ b13.T) / math.sqrt(2)
    step_b = 0.3 / 4 * ((1.0 - 0.25) * noise(11, "b", base["b"]) - 2.0 * noise(12, "b", base["b"])
                        + 0.5 * noise(13, "b", base["b"]))
    assert torch.allclose(params["w"], base["w"] + step_w, atol=1e-6)
    assert torch.allclose(params["b"], base["b"] + step_b, atol=1e-6)
    assert norm == pytest.approx(math.sqrt(float(step_w.pow(2).sum() + step_b.pow(2).sum())), rel=1e-5)
    again = {k: v.clone() for k, v in base.items()}  # determinism: the seeds alone regenerate the step
    assert apply_lowrank_update(again, [11, 12, 13], [0.75, -2.0, 0.5], 0.3 / 4, 2) == pytest.approx(norm)
    assert all(torch.equal(again[k], params[k]) for k in base)
    tied = {k: v.clone() for k, v in base.items()}  # antithetic pairs whose two members score alike cancel
    pairs = Population([11, 11, 12, 12], [1, -1, 1, -1], cfg.sigma)
    ES(dataclasses.replace(cfg, normalization="zscore"), tied).tell(pairs, np.array([1.0, 1.0, 0.0, 0.0]))
    assert all(torch.equal(tied[k], base[k]) for k in base)
    full = {k: v.clone() for k, v in base.items()}
    ES(dataclasses.replace(cfg, noise="full"), full).tell(pop, rewards)
    assert not torch.allclose(full["w"], params["w"])  # "full" keeps its own (full-rank) directions


def test_config_validation_and_backend_choice(tiny):
    tok, _ = tiny
    assert ESConfig().noise == "full" and ESConfig().rank == 1
    assert isinstance(make_backend(ESConfig(noise="lowrank", rank=4), Paren(), tok), LowRankBackend)
    assert isinstance(make_backend(ESConfig(noise="lowrank", backend="batched"), Paren(), tok), LowRankBackend)
    assert not isinstance(make_backend(ESConfig(), Paren(), tok), LowRankBackend)
    for bad, match in [(dict(noise="sparse"), "noise"), (dict(rank=0), "rank"), (dict(rank=1.5), "rank"),
                       (dict(noise="lowrank", backend="sequential"), "backend must be 'auto' or 'batched' with noise="),
                       (dict(noise="lowrank", backend="ray"), "backend.*got 'ray'"),
                       (dict(noise="lowrank", greedy=False), "greedy must be True with noise='lowrank'")]:
        with pytest.raises(ValueError, match=match):
            ESConfig(**bad)
    with pytest.raises(ValueError, match="rank"):
        LowRankBackend(Paren(), tok, rank=0)


def test_lowrank_es_learns_the_sanity_objective(tiny, tmp_path):
    from esreason_lib.es.loop import train_es

    tok, make = tiny
    cfg = ESConfig(model="tiny-random", task="paren", population_size=16, sigma=0.02, alpha=0.01, iterations=40,
                   prompts_per_step=8, antithetic=True, checkpoint_every=0, device="cpu", seed=0, noise="lowrank",
                   rank=1)
    df = train_es(cfg, model=make(), tokenizer=tok, task=Paren(), home=tmp_path, progress=False).metrics()
    first, last = df["reward/mean"][:5].mean(), df["reward/mean"][-5:].mean()
    print(f"lowrank sanity: reward/mean first5={first:.3f} last5={last:.3f}")
    assert first < 0.05 and last > 0.5 and df["es/fixup_frac"].eq(0).all()


def test_train_es_runs_the_smoke_preset_with_lowrank_noise(tmp_path):
    from esreason_lib.es.loop import train_es
    from esreason_lib.paper.studies.presets import get_preset

    torch.set_num_threads(1)
    cfg = dataclasses.replace(get_preset("smoke").es, noise="lowrank", rank=2, sigma=0.3, reward_formatted=0.5)
    run = train_es(cfg, home=tmp_path, progress=False)
    df = run.metrics()
    assert run.is_complete() and df["step"].tolist() == [1, 2, 3]
    assert df["es/generations"].iloc[-1] == 3 * 4 * 4 and df["reward/mean"].between(0, 1).all()
    assert df["es/drift_rel"].iloc[-1] > 0  # members scored differently and the low-rank update moved theta
