import numpy as np
import pandas as pd
import pytest
import torch

from esreason_lib.experiments import sparsity as sp
from esreason_lib.models import build_char_tokenizer, tiny_random_qwen2


def test_dedupe_tied_drops_aliases_only():
    w = torch.ones(3, 2)
    state = {"model.embed_tokens.weight": w, "lm_head.weight": w, "model.norm.weight": torch.ones(2),
             "copy": w.clone()}
    out = sp.dedupe_tied(state)
    assert list(out) == ["model.embed_tokens.weight", "model.norm.weight", "copy"]


def test_dedupe_tied_on_a_tied_model():
    model = tiny_random_qwen2(len(build_char_tokenizer()))
    model.config.tie_word_embeddings = True
    model.tie_weights()
    out = sp.dedupe_tied(model.state_dict())
    assert "lm_head.weight" not in out and "model.embed_tokens.weight" in out


def test_top_update_share_hand_computed(state_pair):
    base, tuned = state_pair
    # changed |delta|: mlp 0.1, 0.5, 0.01; norm 2.0 -> the top 50% (2 coords) are 2.0 (norm) and 0.5 (mlp)
    share = sp.top_update_share(base, tuned, top=0.5)
    assert share.to_dict() == pytest.approx({"mlp": 0.5, "norm": 0.5, "embedding": 0.0})
    assert sp.top_update_share(base, tuned, top=0.01).to_dict() == pytest.approx(
        {"mlp": 0.0, "norm": 1.0, "embedding": 0.0})
    assert sp.top_update_share(base, base).empty


def test_drift_by_module_rows_and_overall(state_pair):
    base, tuned = state_pair
    table = sp.drift_by_module(base, {("es", 0): tuned, ("grpo", 0): base})
    es = table[table["method"] == "es"].set_index("module")
    assert set(es.index) == {"embedding", "mlp", "norm", "all"}
    d2 = 0.1 ** 2 + 0.5 ** 2 + 0.01 ** 2 + 2.0 ** 2
    assert es.loc["all", "rel_l2"] == pytest.approx(np.sqrt(d2 / 36), rel=1e-6)
    assert es.loc["norm", "rel_l2"] == pytest.approx(2.0 / np.sqrt(2.0), rel=1e-6)
    assert es.loc["all", "frac_changed"] == pytest.approx(4 / 10)
    assert es.loc["mlp", "frac_changed"] == pytest.approx(3 / 4)
    assert es.loc["norm", "top_share"] == pytest.approx(1.0)
    grpo = table[table["method"] == "grpo"].set_index("module")
    assert grpo.loc["all", "rel_l2"] == 0.0 and (grpo["top_share"].drop("all") == 0).all()


def _save(model, tokenizer, path):
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def test_reset_models_saves_cached_runs(tmp_path):
    tok = build_char_tokenizer()
    base = tiny_random_qwen2(len(tok), seed=0)
    tuned = tiny_random_qwen2(len(tok), seed=0)
    with torch.no_grad():
        for i, p in enumerate(tuned.parameters()):
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(i)) * 1e-2)
    base_ref, tuned_ref = _save(base, tok, tmp_path / "base"), _save(tuned, tok, tmp_path / "tuned")
    table = sp.reset_models(base_ref, tuned_ref, [0.5, 0.9], home=tmp_path / "runs")
    assert list(table["mode"]) == ["magnitude", "random"] * 2
    mag = table[table["mode"] == "magnitude"]
    assert mag["sparsity"].to_numpy() == pytest.approx([0.5, 0.9], abs=0.01)
    rnd = table[table["mode"] == "random"]
    assert rnd["sparsity"].to_numpy() == pytest.approx(mag["sparsity"].to_numpy(), abs=0.02)
    # the saved magnitude model keeps exactly the large updates
    b, t, m = (sp.load_state(r) for r in (base_ref, tuned_ref, mag["ref"].iloc[0]))
    tau = mag["tau"].iloc[0]
    for name in b:
        keep = (t[name] - b[name]).abs() > tau
        assert torch.equal(m[name], torch.where(keep, t[name], b[name])), name
    again = sp.reset_models(base_ref, tuned_ref, [0.5, 0.9], home=tmp_path / "runs")
    pd.testing.assert_frame_equal(table, again)


def _sweep(method, unreset, reset, rand, base):
    rows = []
    for mode, mid in (("magnitude", reset), ("random", rand)):
        rows += [{"method": method, "mode": mode, "quantile": 0.0, "sparsity": 0.0, "pass@1": unreset, "pass@K": 0.5,
                  "K": 16},
                 {"method": method, "mode": mode, "quantile": 0.5, "sparsity": 0.5, "pass@1": 0.0, "pass@K": 0.0,
                  "K": 16},
                 {"method": method, "mode": mode, "quantile": 0.9, "sparsity": 0.9, "pass@1": mid, "pass@K": 0.4,
                  "K": 16},
                 {"method": method, "mode": mode, "quantile": 1.0, "sparsity": 1.0, "pass@1": base, "pass@K": 0.3,
                  "K": 16}]
    return rows


def test_describe_sparsity_reads_the_tables(state_pair):
    base, tuned = state_pair
    drift = sp.drift_by_module(base, {("es", 0): tuned, ("grpo", 0): base})
    sweep = pd.DataFrame(_sweep("es", 0.26, 0.25, 0.19, 0.10) + _sweep("grpo", 0.3, 0.2, 0.1, 0.10))
    text = sp.describe_sparsity(drift, sweep)
    overall = 100 * np.sqrt((0.1 ** 2 + 0.5 ** 2 + 0.01 ** 2 + 2.0 ** 2) / 36)
    assert text.startswith(f"drift (relative L2) ES {overall:.2f}% vs GRPO 0.00%")
    assert ("ES: resetting the smallest 90% of changed coordinates gives pass@1 0.25 / pass@16 0.40 "
            "(unreset 0.26 / 0.50, random 90% 0.19 / 0.40, base 0.10 / 0.30)") in text
    assert "largest relative update in: ES norm, GRPO none (no update)" in text
