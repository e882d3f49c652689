"""Exact perturb/restore: after any number of member evaluations the weights are bit-identical."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from esreason_lib.es.noise import _INT_VIEW, FixUp, noise, perturb, perturbed, restore
from esreason_lib.models.zoo import build_char_tokenizer, init_qwen2, qwen2_config, tiny_random_qwen2
from esreason_lib.params import named_params


def _bits(model) -> dict[str, torch.Tensor]:
    return {k: p.detach().view(_INT_VIEW[p.dtype]).clone() for k, p in named_params(model).items()}


def _same_bits(model, bits) -> bool:
    return all(torch.equal(p.detach().view(_INT_VIEW[p.dtype]), bits[k]) for k, p in named_params(model).items())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_1000_cycles_are_bit_identical(dtype):
    model = tiny_random_qwen2(98, seed=0).to(dtype)
    bits = _bits(model)
    rng = np.random.default_rng(0)
    fracs = []
    for cycle in range(1000):
        seed, sign = int(rng.integers(0, 2**63 - 1)), int(rng.choice([1, -1]))
        sigma = float(rng.choice([1e-4, 1e-3, 1e-2, 0.1]))
        with perturbed(model, seed, sign, sigma) as fx:
            if cycle % 100 == 0:  # the perturbation really is there, with the regenerated noise
                w = model.model.layers[0].mlp.up_proj.weight
                assert not _same_bits(model, bits)
                eps = noise(seed, "model.layers.0.mlp.up_proj.weight", w)  # float32
                base = bits["model.layers.0.mlp.up_proj.weight"].view(dtype).float()
                torch.testing.assert_close(w.detach().float(), base + sign * sigma * eps, rtol=1e-2, atol=sigma / 50)
        fracs.append(fx.fraction)
        assert fx.restored and _same_bits(model, bits), f"cycle {cycle} not bit-identical"
    assert 0 < np.mean(fracs) < 1
    print(f"{dtype}: mean fix-up fraction {np.mean(fracs):.4f}")


def test_plain_add_subtract_is_not_exact():
    """Why the fix-up list exists: fl(fl(x + d) - d) != x for a sizeable share of elements."""
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(10_000, generator=torch.Generator().manual_seed(0)).to(dtype) * 0.02
        d = (1e-3 * torch.randn(10_000, generator=torch.Generator().manual_seed(1))).to(dtype)
        assert ((x + d) - d != x).float().mean() > 0.01, dtype


def test_tied_weights_are_perturbed_once_and_restored():
    model = init_qwen2(qwen2_config(98, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1,
                                    intermediate_size=32), seed=1)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    bits = _bits(model)
    emb = model.model.embed_tokens.weight
    for seed in range(50):
        with perturbed(model, seed, 1, 0.01):
            eps = noise(seed, "model.embed_tokens.weight", emb)
            torch.testing.assert_close(emb.detach(), bits["model.embed_tokens.weight"].view(torch.float32) + 0.01 * eps)
        assert _same_bits(model, bits)


def test_forward_changes_inside_and_is_identical_after():
    model = tiny_random_qwen2(98, seed=2)
    ids = torch.arange(2, 20).unsqueeze(0)  # [1, 18]
    with torch.no_grad():
        before = model(ids).logits
        with perturbed(model, 5, -1, 0.05):
            inside = model(ids).logits
        after = model(ids).logits
    assert not torch.equal(before, inside) and torch.equal(before, after)


def test_special_values_and_exceptions():
    t = torch.tensor([0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1e-45, 3.4e38, -1.0, 1e-8])
    params = {"w": t.clone(), "h": torch.tensor([1.0, -0.0, 65504.0]).to(torch.bfloat16)}
    bits = {k: v.view(_INT_VIEW[v.dtype]).clone() for k, v in params.items()}
    with pytest.raises(KeyError):
        with perturbed(params, 3, 1, 1.0):
            raise KeyError("evaluation crashed")
    for k, v in params.items():
        assert torch.equal(v.view(_INT_VIEW[v.dtype]), bits[k])
    assert torch.signbit(params["w"][1]) and torch.isnan(params["w"][2])


def test_fixup_bookkeeping_and_double_restore():
    params = {"w": torch.randn(1000) * 0.02}
    fx = perturb(params, 9, 1, 1e-3)
    assert isinstance(fx, FixUp) and fx.n_total == 1000 and fx.fraction == fx.n_fixed / 1000
    assert fx.coef == 1e-3 and fx.seed == 9
    restore(params, fx)
    with pytest.raises(RuntimeError, match="already restored"):
        restore(params, fx)
    with pytest.raises(ValueError, match="sign must be"):
        perturb(params, 9, 0, 1e-3)


def test_dense_fallback_when_the_sparse_list_would_outgrow_a_copy():
    params = {"w": torch.randn(1000) * 0.02, "b": torch.randn(1000).to(torch.bfloat16)}
    bits = {k: v.view(_INT_VIEW[v.dtype]).clone() for k, v in params.items()}
    fx = perturb(params, 4, -1, 0.5)  # sigma >> weights: nearly every round trip is inexact
    assert fx.fraction > 0.5
    assert fx.fixes["w"][0] is None and torch.equal(fx.fixes["w"][1], bits["w"].view(-1))
    restore(params, fx)
    assert all(torch.equal(v.view(_INT_VIEW[v.dtype]), bits[k]) for k, v in params.items())
    small = perturb(params, 4, 1, 1e-6)  # sigma << weights: sparse (or empty) list
    assert all(idx is not None for idx, _ in small.fixes.values())
    restore(params, small)
    assert all(torch.equal(v.view(_INT_VIEW[v.dtype]), bits[k]) for k, v in params.items())


# ---------------------------------------------------------------- kill -9 and resume: bit-identical to uninterrupted
_CHILD = '''
import os, signal, sys
import torch
torch.set_num_threads(1)
from esreason_lib.es.config import ESConfig; from esreason_lib.es.loop import train_es
from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2
from esreason_lib.store.runs import Run
from toy_tasks import Hash  # a reward that varies across members from the first step: every update moves theta

home, kill_at = sys.argv[1], int(sys.argv[2])
if kill_at:  # die by SIGKILL right after logging step `kill_at` (past the step-2 checkpoint)
    log = Run.log
    def log_then_die(self, step, metrics):
        log(self, step, metrics)
        if step == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
    Run.log = log_then_die
tok = build_char_tokenizer()
cfg = ESConfig(model="tiny-random", task="hash", population_size=8, sigma=0.02, alpha=0.01, iterations=6,
               prompts_per_step=4, antithetic=True, checkpoint_every=2, device="cpu", seed=5)
train_es(cfg, model=tiny_random_qwen2(len(tok), seed=0), tokenizer=tok, task=Hash(), home=home, progress=False)
'''


def test_kill_and_resume_is_bit_identical(tmp_path):
    import os
    import subprocess
    import sys

    from safetensors.torch import load_file

    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.path.dirname(__file__)])}  # + toy_tasks

    def child(home, kill_at):
        return subprocess.run([sys.executable, str(script), str(home), str(kill_at)], env=env, capture_output=True,
                              text=True, timeout=120)

    assert child(tmp_path / "a", 0).returncode == 0
    killed = child(tmp_path / "b", 3)
    assert killed.returncode == -9, killed.stderr[-2000:]
    (run_b,) = (tmp_path / "b").iterdir()
    assert not (run_b / "manifest.json").exists() and (run_b / "checkpoints" / "step-000002.pt").exists()
    assert sum(1 for _ in open(run_b / "metrics.jsonl")) == 3  # step 3 was logged past the checkpoint
    resumed = child(tmp_path / "b", 0)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    (run_a,) = (tmp_path / "a").iterdir()
    wa, wb = load_file(run_a / "model" / "model.safetensors"), load_file(run_b / "model" / "model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    base = tiny_random_qwen2(len(build_char_tokenizer()), seed=0).state_dict()
    assert all(not torch.equal(wa[k], base[k]) for k in wa)  # training moved every tensor
    ma, mb = ([__import__("json").loads(line) for line in open(r / "metrics.jsonl")] for r in (run_a, run_b))
    assert [m["step"] for m in mb] == list(range(1, 7))
    drop = lambda m: {k: v for k, v in m.items() if not k.startswith("time/")}  # noqa: E731
    assert [drop(m) for m in ma] == [drop(m) for m in mb]


def test_failure_midway_through_perturb_restores_what_was_done(monkeypatch):
    import esreason_lib.es.noise as es_noise

    params = {"a": torch.randn(100) * 0.02, "b": torch.randn(100) * 0.02, "c": torch.randn(100) * 0.02}
    bits = {k: v.view(torch.int32).clone() for k, v in params.items()}
    real, calls = es_noise.noise, []

    def flaky(seed, name, like):
        calls.append(name)
        if name == "b" and len(calls) == 2:  # perturbing "b" fails after "a" was perturbed
            raise MemoryError("simulated OOM")
        return real(seed, name, like)

    monkeypatch.setattr(es_noise, "noise", flaky)
    with pytest.raises(MemoryError):
        perturb(params, 1, 1, 1e-3)  # small sigma: "a" keeps a sparse list, so its restore regenerates noise
    assert calls == ["a", "b", "a"]  # restore regenerated only "a"; "b" came back from its plain copy
    assert all(torch.equal(v.view(torch.int32), bits[k]) for k, v in params.items())
    with pytest.raises(TypeError, match="unsupported parameter dtype"):
        perturb({"a": params["a"], "x": torch.zeros(3, dtype=torch.float8_e4m3fn)}, 1, 1, 0.1)
    assert torch.equal(params["a"].view(torch.int32), bits["a"])  # checked before anything was touched


def test_cpu_noise_is_todays_draw():
    """The CPU draw every committed result depends on: torch.randn with a generator seeded derive_seed(seed, name)."""
    from esreason_lib.es.noise import noise
    from esreason_lib.seeding import derive_seed

    like = torch.zeros(3, 5)
    gen = torch.Generator().manual_seed(derive_seed(7, "w"))
    assert torch.equal(noise(7, "w", like), torch.randn((3, 5), generator=gen))


def test_counter_noise_does_not_depend_on_the_chunking():
    """The GPU draw's reference (`counter_normal`, eager) is a function of (key, index) only: two chunkings, and a
    stream drawn in two pieces, give the same numbers; they are standard normal and differ between keys."""
    from esreason_lib.es.noise import counter_normal, standard_normal

    def draw(*args, **kw):
        return counter_normal(*args, fused=False, **kw)

    whole = draw(123, 10_000, "cpu", chunk=1 << 22)  # [10000]
    assert torch.equal(whole, draw(123, 10_000, "cpu", chunk=97))
    assert torch.equal(whole[:50], draw(123, 50, "cpu", chunk=1))
    assert torch.equal(whole[4000:], draw(123, 6000, "cpu", start=4000, chunk=333))
    assert not torch.equal(whole, draw(124, 10_000, "cpu"))
    # the bits of 9183035's generator: the draw's values are unchanged
    assert whole[1000:1006].view(torch.int32).tolist() == [-1093427427, -1084331919, 1061466879, -1092991737,
                                                           1059075055, -1096741629]
    assert abs(float(whole.mean())) < 0.05 and abs(float(whole.std()) - 1) < 0.05 and whole.isfinite().all()
    big = draw(5, 400_000, "cpu")
    assert abs(float((big > 2).float().mean()) - 0.02275) < 0.002  # the normal's tail P(Z > 2)
    # the CPU keeps torch.randn, skipping `start` numbers of the same stream (the low-rank B after A)
    gen = torch.Generator().manual_seed(9)
    a, b = torch.randn((4, 2), generator=gen), torch.randn((3, 2), generator=gen)
    assert (torch.equal(standard_normal(9, (3, 2), "cpu", start=8), b)
            and torch.equal(standard_normal(9, (4, 2), "cpu"), a))
