import numpy as np
import pytest
import torch

from esreason_lib.models.weights import relative_drift
from esreason_lib.paper import analysis


def test_module_type():
    assert analysis.module_type("model.layers.3.self_attn.q_proj.weight") == "attention"
    assert analysis.module_type("model.layers.3.mlp.down_proj.weight") == "mlp"
    assert analysis.module_type("model.layers.3.input_layernorm.weight") == "norm"
    assert analysis.module_type("model.embed_tokens.weight") == "embedding"
    assert analysis.module_type("lm_head.weight") == "lm_head"
    assert analysis.module_type("something") == "other"


def test_update_deltas_and_drift_table(state_pair):
    base, tuned = state_pair
    deltas = analysis.update_deltas(base, tuned)
    assert torch.allclose(deltas["model.norm.weight"], torch.tensor([0.0, 2.0]))
    table = analysis.drift_table(base, tuned).set_index("name")
    assert table.loc["model.norm.weight", "changed"] == 1
    assert table.loc["model.norm.weight", "rel_l2"] == pytest.approx(2.0 / np.sqrt(2.0))
    assert table.loc["model.embed_tokens.weight", "changed"] == 0
    assert table.loc["model.layers.0.mlp.up_proj.weight", "changed"] == 3


def test_relative_drift_hand_computed(state_pair):
    base, tuned = state_pair
    d2 = 0.1 ** 2 + 0.5 ** 2 + 0.01 ** 2 + 2.0 ** 2
    b2 = 1 + 4 + 9 + 16 + 4 + 2
    assert relative_drift(tuned, base) == pytest.approx(np.sqrt(d2 / b2), rel=1e-6)  # models.weights


def test_module_summary_shares_sum_to_one(state_pair):
    base, tuned = state_pair
    summary = analysis.module_summary(analysis.drift_table(base, tuned))
    assert summary["update_share"].sum() == pytest.approx(1.0)
    assert summary.iloc[0]["module"] == "norm"  # the 2.0 update dominates


def test_reset_small_updates_counts_over_changed(state_pair):
    base, tuned = state_pair
    new, sparsity = analysis.reset_small_updates(base, tuned, tau=0.1 + 1e-6)
    # changed coordinates: 0.1, -0.5, 0.01, 2.0 -> 0.1 and 0.01 are reset
    assert sparsity == pytest.approx(2 / 4)
    assert torch.allclose(new["model.layers.0.mlp.up_proj.weight"], torch.tensor([1.0, 1.0, 0.5, 1.0]))
    assert torch.equal(new["model.norm.weight"], tuned["model.norm.weight"])
    _, none = analysis.reset_small_updates(base, tuned, tau=0.0)
    assert none == 0.0
    with pytest.raises(ValueError, match="tau"):
        analysis.reset_small_updates(base, tuned, tau=-1.0)


def test_delta_quantiles(state_pair):
    base, tuned = state_pair
    q = analysis.delta_quantiles(base, tuned, [0.0, 1.0])
    assert q[0] == pytest.approx(0.01, rel=1e-4) and q[1] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="no changed"):
        analysis.delta_quantiles(base, base, [0.5])


def test_random_reset_resets_exactly_the_requested_count():
    g = torch.Generator().manual_seed(0)
    base = {"w": torch.zeros(20000), "v": torch.zeros(7, 3)}
    tuned = {"w": torch.randn(20000, generator=g), "v": torch.randn(7, 3, generator=g)}
    tuned["w"][:1000] = 0.0  # unchanged coordinates are never counted or picked
    new, sparsity = analysis.random_reset(base, tuned, 0.3, seed=1)
    changed = 19000 + 21
    assert sparsity == round(0.3 * changed) / changed
    reset = sum(int(((new[k] == 0) & (tuned[k] != 0)).sum()) for k in base)
    assert reset == round(0.3 * changed)
    again, _ = analysis.random_reset(base, tuned, 0.3, seed=1)
    assert all(torch.equal(new[k], again[k]) for k in base)
    other, _ = analysis.random_reset(base, tuned, 0.3, seed=2)
    assert not torch.equal(new["w"], other["w"])
    assert analysis.random_reset(base, tuned, 1.0)[1] == 1.0 and analysis.random_reset(base, base, 0.5)[1] == 0.0
    with pytest.raises(ValueError, match="sparsity"):
        analysis.random_reset(base, tuned, 1.5)


def test_random_control_resets_the_same_count_as_an_absolute_threshold():
    base = {"a": torch.zeros(6), "b": torch.zeros(2, 2)}
    tuned = {"a": torch.tensor([1e-4, -3e-4, 6e-4, 0.0, 2e-3, -1e-3]), "b": torch.tensor([[4e-4, 0.0], [1.2e-3, 5e-3]])}
    # changed: 8 coordinates; |delta| <= 5e-4: 1e-4, 3e-4, 4e-4 -> 3; <= 1e-3: also 6e-4, 1e-3 -> 5
    for tau, want in ((5e-4, 3), (1e-3, 5)):
        mag, sparsity = analysis.reset_small_updates(base, tuned, tau)
        assert sparsity == want / 8
        rnd, achieved = analysis.random_reset(base, tuned, sparsity, seed=3)
        assert achieved == sparsity
        count = sum(int(((rnd[k] == base[k]) & (tuned[k] != base[k])).sum()) for k in base)
        assert count == want


def test_mismatched_state_dicts_error(state_pair):
    base, tuned = state_pair
    with pytest.raises(ValueError, match="keys"):
        analysis.update_deltas(base, {"x": torch.zeros(1)})
    bad = dict(tuned, **{"model.norm.weight": torch.zeros(3)})
    with pytest.raises(ValueError, match="shape"):
        analysis.update_deltas(base, bad)


def test_non_dominated():
    mask = analysis.non_dominated([0.2, 0.3, 0.35, 0.1, 0.3], [0.8, 0.9, 0.7, 0.95, 0.9])
    assert mask.tolist() == [False, True, True, True, True]
    with pytest.raises(ValueError, match="equal length"):
        analysis.non_dominated([1, 2], [1])


def test_per_problem_pass_hand_computed():
    import pandas as pd

    table = pd.DataFrame({"problem_id": [7, "b"], "n": [4, 4], "c": [1, 0]})
    out = analysis.per_problem_pass(table, 2)
    # pass@2 with 1 of 4 correct: 1 - C(3, 2) / C(4, 2) = 1 - 3/6
    assert out.to_dict("list") == {"problem_id": ["7", "b"], "pass@1": [0.25, 0.0], "pass@K": [0.5, 0.0],
                                   "K": [2, 2]}


def test_seed_by_problem_orders_seeds_and_problems_and_names_gaps():
    import pandas as pd

    table = pd.DataFrame({"seed": [2, 2, 0, 0], "problem_id": ["a", "b", "b", "a"], "pass@1": [0.1, 0.2, 0.3, 0.4]})
    assert analysis.seed_by_problem(table).tolist() == [[0.4, 0.3], [0.1, 0.2]]
    assert analysis.seed_by_problem(table, problems=["b", "a"]).tolist() == [[0.3, 0.4], [0.2, 0.1]]
    with pytest.raises(ValueError, match="no 'pass@1' for seed 2, problem 'a'"):
        analysis.seed_by_problem(table.iloc[1:])
    with pytest.raises(ValueError, match="appears more than once"):
        analysis.seed_by_problem(pd.concat([table, table.iloc[:1]]))
    with pytest.raises(ValueError, match="no rows"):
        analysis.seed_by_problem(table.iloc[:0])
