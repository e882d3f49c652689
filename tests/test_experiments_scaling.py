"""Pure pieces of the population-scaling study (notebook 06), on hand-computable tables."""

import math

import numpy as np
import pandas as pd
import pytest

from esreason_lib.experiments import scaling as S
from esreason_lib.presets import get_preset


def test_tail_mean_and_smoothing_window():
    assert S.tail_mean([0, 0, 0, 0, 0, 0, 0, 0, 1, 3]) == 2.0  # last 20% of 10 = 2 values
    assert S.tail_mean([1, 2, 3], frac=0.2) == 3.0  # ceil(0.6) = 1 value
    assert S.tail_mean([4.0]) == 4.0
    assert math.isnan(S.tail_mean([]))
    assert S.smoothing_window(16) == 3 and S.smoothing_window(2) == 1 and S.smoothing_window(50) == 10


def test_settings_come_from_the_preset():
    smoke, paper = get_preset("smoke"), get_preset("paper-easy")
    assert S.scaling_prompts(smoke) == smoke.scaling_prompts_per_step == 4
    assert S.scaling_prompts(paper) == paper.es.prompts_per_step  # None falls back to the ES config
    assert S.scaling_eval_spec(smoke) is smoke.scaling_eval
    assert S.scaling_eval_spec(get_preset("smoke", scaling_eval=None)) is S.DEFAULT_SCALING_EVAL
    tiny = get_preset("tiny")
    assert tiny.es.population_size in tiny.scaling_populations


def test_check_task_kwargs_rejects_a_task_the_zoo_models_never_saw():
    S.check_task_kwargs(get_preset("tiny"))  # zoo defaults == countdown defaults
    S.check_task_kwargs(get_preset("paper-easy"))  # not countdown: nothing to check
    with pytest.raises(ValueError, match="qwen2-s.*pretrained on countdown"):
        S.check_task_kwargs(get_preset("tiny", task_kwargs={"high": 20}))


def test_ablations_share_the_zscore_run():
    assert S.ABLATIONS["zscore"] == {"normalization": "zscore"}
    antithetic = get_preset("tiny").es.antithetic
    twin = "antithetic" if antithetic else "plain"
    assert {**S.ABLATIONS[twin], "antithetic": antithetic} == {**S.ABLATIONS["zscore"], "antithetic": antithetic}


def _problems(acc: dict[tuple[str, int], list[int]]) -> pd.DataFrame:
    return pd.concat([pd.DataFrame({"model": m, "N": n, "problem_id": [f"p{i}" for i in range(len(v))],
                                    "greedy_correct": np.asarray(v, float)}) for (m, n), v in acc.items()],
                     ignore_index=True)


def test_population_gaps_paired_by_problem():
    probs = _problems({("s", 4): [0, 0, 1, 1], ("s", 32): [1, 1, 1, 0],
                       ("l", 4): [1, 0, 1, 0], ("l", 32): [1, 0, 1, 0]})
    gaps = S.population_gaps(probs, 4, 32)
    assert gaps["model"].tolist() == ["s", "l"]
    # s: d = [1, 1, 0, -1], mean 0.25, std(ddof=1) = sqrt(11/12), se = that / 2
    assert gaps.loc[0, "gap"] == pytest.approx(0.25)
    assert gaps.loc[0, "se"] == pytest.approx(math.sqrt(11 / 12) / 2)
    assert gaps.loc[1, "gap"] == 0.0 and gaps.loc[1, "se"] == 0.0


@pytest.mark.parametrize("gap, se, want", [
    ([0.3, 0.2, 0.1], [0.01] * 3, "yes"),
    ([0.3, 0.4, 0.1], [0.01] * 3, "partly"),
    ([0.1, 0.0, 0.2], [0.01] * 3, "no"),
    ([0.10, 0.09, 0.08], [0.03] * 3, "yes (within noise)"),
    ([0.1], [0.01], "n/a (one size)"),
])
def test_gap_trend(gap, se, want):
    assert S.gap_trend(pd.DataFrame({"model": list("abc")[:len(gap)], "gap": gap, "se": se})) == want


def _summary():
    rows = []
    for model, params, accs in (("s", 130_000, [0.1, 0.2, 0.4]), ("l", 3_300_000, [0.3, 0.5, 0.55])):
        for n, acc in zip((0, 4, 32), accs):
            rows.append({"model": model, "params": params, "N": n, "heldout": acc,
                         "generations": np.nan if n == 0 else n * 10, "center_tail": acc})
    return pd.DataFrame(rows)


def test_table6_shape():
    t = S.table6(_summary())
    assert t.index.tolist() == ["s (0.13M)", "l (3.30M)"]
    assert t.columns.tolist() == ["base", "N=4", "N=32"]
    assert t.loc["l (3.30M)", "N=32"] == 0.55


def test_describe_scaling_is_computed_from_the_tables():
    summary = _summary()
    probs = _problems({("s", 4): [1, 0, 0, 0, 0], ("s", 32): [1, 1, 1, 0, 0],
                       ("l", 4): [1, 1, 0, 0, 0], ("l", 32): [1, 1, 1, 0, 0]})
    ablation = pd.DataFrame({"ablation": ["zscore", "rank", "none", "antithetic", "plain"],
                             "heldout": [0.31, 0.29, 0.2, 0.31, 0.28]})
    text = S.describe_scaling(summary, probs, ablation, 16)
    assert text.startswith("held-out greedy accuracy after 16 ES iterations, gap N=32 - N=4: s +0.40±0.24, "
                           "l +0.20±0.20 (shrinks with size: yes (within noise); N=32 used 8x the generations")
    assert text.endswith("after 16 iterations on the base, normalization zscore 0.31 / rank 0.29 / none 0.20; "
                         "antithetic 0.31 vs plain 0.28")
    assert "after 150 iterations on the base" in S.describe_scaling(summary, probs, ablation, 16, 150)


def test_ablation_iterations():
    assert S.ablation_iterations(get_preset("tiny")) == 150
    assert S.ablation_iterations(get_preset("smoke")) == get_preset("smoke").scaling_iterations
