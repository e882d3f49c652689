"""The population-scaling study (notebook 06): pure pieces on hand-computable tables, and training and evaluation
on the smoke preset."""

import json
import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

import esreason_lib.models.load
from esreason_lib.models.zoo import num_parameters
from esreason_lib.paper.studies import common
from esreason_lib.paper.studies import scaling as S
from esreason_lib.paper.studies.common import evaluate_ref
from esreason_lib.paper.studies.presets import get_preset
from esreason_lib.store.identity import config_hash
from esreason_lib.store.runs import run_exists


def test_tail_mean_and_smoothing_window():
    assert S.tail_mean([0, 0, 0, 0, 0, 0, 0, 0, 1, 3]) == 2.0  # last 20% of 10 = 2 values
    assert S.tail_mean([1, 2, 3], frac=0.2) == 3.0  # ceil(0.6) = 1 value
    assert S.tail_mean([4.0]) == 4.0
    assert math.isnan(S.tail_mean([]))
    assert S.smoothing_window(16) == 3 and S.smoothing_window(2) == 1 and S.smoothing_window(50) == 10


def test_settings_come_from_the_preset():
    smoke, paper = get_preset("smoke"), get_preset("paper-easy")
    assert smoke.scaling.prompts_per_step == 4 and paper.scaling.prompts_per_step == paper.es.prompts_per_step
    assert (smoke.scaling.eval.n_samples, smoke.scaling.eval.ks) == (1, (1,))
    tiny, full = get_preset("tiny"), get_preset("full")
    assert tiny.scaling.models == ("qwen2-s", "qwen2-m")  # the capability axis of the zoo; full adds qwen2-l
    assert full.scaling.models == ("qwen2-s", "qwen2-m", "qwen2-l") and full.scaling.populations == (4, 8, 16, 32)


def test_check_task_kwargs_rejects_a_task_the_zoo_models_never_saw():
    S.check_task_kwargs(get_preset("tiny"))  # zoo defaults == countdown defaults
    S.check_task_kwargs(get_preset("paper-easy"))  # not countdown: nothing to check
    with pytest.raises(ValueError, match="qwen2-s.*pretrained on countdown"):
        S.check_task_kwargs(get_preset("tiny", task_kwargs={"high": 20}))


def test_ablation_runs_are_plain_and_tuned_per_shaping():
    """Issue 21: with antithetic pairs and the matched step z-score and raw fitness gave bit-identical updates; every
    shaping run is now plain sampling without step matching, at each alpha of its own grid."""
    preset = get_preset("tiny")
    configs = S.training_configs(preset)
    shaping = {k: c for k, c in configs.items() if k[0] == "ablation" and "@" in k[1]}
    assert len(shaping) == 6 * len(preset.seeds)
    assert all(not c.antithetic and not c.matched_step for c in shaping.values())
    assert {(c.normalization, c.alpha) for c in shaping.values()} == {
        (n, a) for n, alphas in preset.scaling.shaping_alphas for a in alphas}


def _tables(acc: dict, variants: dict, *, seeds=(0, 1, 2), n_problems=200, params=None) -> dict:
    """Hand-built study tables: greedy_correct ~ Bernoulli(acc[(model, N)]) per seed and problem (the same
    draw for equal probabilities, so equal cells are identical), variants likewise by label."""
    rng = np.random.default_rng(0)
    draws = {}

    def draw(p, seed):
        key = (p, seed)
        if key not in draws:
            draws[key] = (rng.random(n_problems) < p).astype(float)
        return draws[key]

    ids = [f"p{i:03d}" for i in range(n_problems)]
    probs = pd.DataFrame([{"model": m, "N": n, "seed": s, "problem_id": pid, "greedy_correct": v}
                          for (m, n), p in acc.items() for s in seeds for pid, v in zip(ids, draw(p, s))])
    abl = pd.DataFrame([{"variant": v, "seed": s, "problem_id": pid, "greedy_correct": x}
                        for v, p in variants.items() for s in seeds for pid, x in zip(ids, draw(p, s))])
    abl["split"] = ["tuning" if int(pid[1:]) >= n_problems // 2 else "test" for pid in abl["problem_id"]]
    models = list(dict.fromkeys(m for m, _ in acc))
    params = params or {m: 10 ** (5 + i) for i, m in enumerate(models)}
    scaling = probs.groupby(["model", "N", "seed"], sort=False, as_index=False)["greedy_correct"].mean()
    scaling = scaling.rename(columns={"greedy_correct": "heldout"}).assign(
        params=lambda d: d["model"].map(params), iterations=16, generations=lambda d: d["N"] * 10)
    ablation = abl.groupby(["variant", "seed"], sort=False, as_index=False)["greedy_correct"].mean().rename(
        columns={"greedy_correct": "heldout"}).assign(iterations=60, update_norm=2.0)
    bases = pd.DataFrame({"model": models, "params": [params[m] for m in models], "heldout": 0.2})
    settings = pd.DataFrame([{"delta_gap": 0.07, "delta_shaping": 0.15}])  # a delta 100 problems can decide
    return {"bases": bases.sort_values("params").reset_index(drop=True), "scaling": scaling,
            "scaling_problems": probs, "ablation": ablation, "ablation_problems": abl, "settings": settings}


VARIANTS = {"zscore@0.001": 0.6, "zscore@0.002": 0.5, "rank@0.003": 0.3, "none@0.03": 0.1, "antithetic": 0.6,
            "lowrank": 0.5}


def test_finding_reproduced_when_the_gap_shrinks_and_zscore_wins():
    tables = _tables({("s", 4): 0.2, ("s", 32): 0.7, ("l", 4): 0.3, ("l", 32): 0.3}, VARIANTS)
    f = S.finding(tables)
    assert [c.status for c in f.checks] == ["reproduced"] * 4 and f.status == "reproduced"
    gap, own, rank, none = f.checks
    assert [t.primary for t in f.tests] == [gap, rank]
    assert gap.name == "gap N=32 - N=4 on l minus on s" and gap.direction == "less" and gap.n_seeds == 3
    acc = tables["scaling"].groupby(["model", "N"])["heldout"].mean()  # the l gap is exactly 0
    assert gap.effect == pytest.approx(-(acc["s", 32] - acc["s", 4]))
    assert gap.delta == pytest.approx(own.effect / 2)  # half the small model's own gap: no number from the paper
    assert rank.effect > 0.2 and none.effect > 0.4
    assert rank.name == "z-score (zscore@0.001) above rank@0.003, best alphas" and rank.delta == 0.15
    assert "not in the status" in f.sentence and "alpha chosen per shaping on the tuning split" in f.sentence
    assert f.notes == ("zscore tuned on the tuning split is zscore@0.001, the bottom of its grid [0.001, 0.002]: the "
                       "optimum may lie below", "rank tuned on the tuning split is rank@0.003, the only alpha tried "
                       "(untuned)", "none tuned on the tuning split is none@0.03, the only alpha tried (untuned)")


def test_alpha_is_chosen_on_the_tuning_rows_only():
    tables = _tables({("s", 4): 0.2, ("s", 32): 0.7, ("l", 4): 0.3, ("l", 32): 0.3}, VARIANTS)
    abl = tables["ablation_problems"]
    # make zscore@0.002 perfect on the test rows only: the choice must not see it
    abl.loc[(abl["variant"] == "zscore@0.002") & (abl["split"] == "test"), "greedy_correct"] = 1.0
    assert S.best_alphas(tables)["zscore"] == "zscore@0.001"


@pytest.mark.parametrize("acc, variants, test, status", [
    ({("s", 4): 0.2, ("s", 32): 0.7, ("l", 4): 0.2, ("l", 32): 0.95}, VARIANTS, 0, "not reproduced"),  # grows
    ({("s", 4): 0.2, ("s", 32): 0.7, ("l", 4): 0.3, ("l", 32): 0.3}, {**VARIANTS, "rank@0.003": 0.9}, 1,
     "not reproduced"),  # rank wins
])
def test_each_test_can_fail_on_its_own(acc, variants, test, status):
    f = S.finding(_tables(acc, variants))
    assert f.tests[test].status == status and f.tests[1 - test].status == "reproduced", f.sentence


def test_population_test_is_undecidable_without_a_gap_on_the_small_model_and_with_one_seed():
    """Issue 31 item 4: with no population gain on the small model, the larger one cannot need less of it."""
    flat = S.finding(_tables({("s", 4): 0.3, ("s", 32): 0.3, ("l", 4): 0.3, ("l", 32): 0.5}, VARIANTS))
    assert flat.status == "undecidable at this design" and flat.tests[0].primary.reason.startswith(S.NO_OWN_GAP)
    one = S.finding(_tables({("s", 4): 0.2, ("s", 32): 0.7, ("l", 4): 0.3, ("l", 32): 0.3}, VARIANTS, seeds=(0,)))
    assert one.status == "undecidable at this design"  # one seed: no CI for the small model's own gap


def test_population_gaps_and_table6_views():
    tables = _tables({("s", 4): 0.0, ("s", 32): 1.0, ("l", 4): 1.0, ("l", 32): 1.0}, VARIANTS,
                     params={"s": 130_000, "l": 3_300_000})
    gaps = S.population_gaps(tables)
    assert gaps["model"].tolist() == ["s", "l"] and gaps["gap"].tolist() == [1.0, 0.0]
    assert (gaps["ci_low"] == gaps["ci_high"]).all() and (gaps["mde"] == 0).all()
    t = S.table6(tables)
    assert t.index.tolist() == ["s (0.13M)", "l (3.30M)"] and t.columns.tolist() == ["base", "N=4", "N=32"]
    assert t.loc["s (0.13M)"].tolist() == [0.2, 0.0, 1.0]
    assert S.table6(tables, "generations").loc["l (3.30M)"].tolist() == [40, 320]


def test_seed_mean_curves_average_seeds_per_step():
    curves = pd.DataFrame({"N": [4, 4, 4, 4, 32, 32], "seed": [0, 0, 1, 1, 0, 0], "step": [1, 2, 1, 2, 1, 2],
                           **{k: [0.0, 1.0, 1.0, 3.0, 5.0, 6.0] for k in S.CURVE_METRICS}})
    out = S.seed_mean_curves(curves, "N", prefix="N=")
    assert list(out) == ["N=4", "N=32"]
    assert out["N=4"]["step"].tolist() == [1, 2] and out["N=4"]["reward/center"].tolist() == [0.5, 2.0]


# ------------------------------------------------------------------------------------------- the study, smoke
@pytest.fixture(scope="module")
def study(isolated_store):
    """The smoke preset with two seeds computed once into `store`; ESREASON_HOME points to a separate folder,
    `default`, so that anything written outside the given store shows up."""
    preset = get_preset("smoke", seeds=(0, 1))
    return SimpleNamespace(**vars(isolated_store), preset=preset,
                           tables=S.compute(preset, home=isolated_store.store, progress=False))


def _es_configs(store) -> list[dict]:
    return [json.loads((d / "manifest.json").read_text())["config"] for d in sorted(store.glob("es-*"))]


def test_compute_trains_every_cell_and_ablation_for_every_seed(study):
    preset, spec = study.preset, study.preset.scaling
    wanted = S.training_configs(preset)
    assert all(run_exists("es", config, home=study.store) for config in wanted.values())
    assert len(_es_configs(study.store)) == len({config_hash(c) for c in wanted.values()})
    cells = [c for key, c in wanted.items() if key[0] == "cell"]
    assert sorted((c.model, c.population_size, c.seed) for c in cells) == [
        ("smoke", n, s) for n in spec.populations for s in preset.seeds]
    for c in cells:  # the scaling settings on top of the preset's ES
        assert (c.iterations, c.prompts_per_step, c.sigma, c.normalization, c.antithetic) == (
            spec.iterations, spec.prompts_per_step, preset.es.sigma, preset.es.normalization, preset.es.antithetic)
    ablations = {key[1]: c for key, c in wanted.items() if key[0] == "ablation" and key[2] == preset.seeds[0]}
    shapings = [S.shaping_label(n, a) for n, alphas in spec.shaping_alphas for a in alphas]
    assert list(ablations) == [*shapings, *S.EXTRAS]
    for label in shapings:  # every shaping at each of its alphas, no mirrored pairs, no step matching
        c = ablations[label]
        assert (c.normalization, f"{c.alpha:g}", c.antithetic, c.matched_step) == (*label.split("@"), False, False)
    assert ablations["antithetic"].antithetic and ablations["lowrank"].noise == "lowrank"
    assert all((c.model, c.population_size, c.iterations, c.prompts_per_step) == (
        preset.base_model, preset.es.population_size, spec.ablation_iterations, spec.prompts_per_step)
        for c in ablations.values())
    assert not study.default.exists() or not any(study.default.iterdir())


def test_compute_tables(study):
    preset, spec, t = study.preset, study.preset.scaling, study.tables
    labels = list(dict.fromkeys(key[1] for key in S.training_configs(preset) if key[0] == "ablation"))
    n_cells, n_variants, n_seeds = len(spec.populations), len(labels), len(preset.seeds)
    params = num_parameters(esreason_lib.models.load.load_model("smoke", home=study.store, progress=False)[0])
    assert t["bases"][["model", "params"]].values.tolist() == [["smoke", params]]
    assert list(t["scaling"].columns) == ["model", "params", "N", "seed", "heldout", "pass@1", "iterations",
                                          "generations", "center_tail", "pop_tail", "update_norm"]
    assert len(t["scaling"]) == n_cells * n_seeds and (t["scaling"]["iterations"] == spec.iterations).all()
    # an iteration costs N completions per prompt
    assert (t["scaling"]["generations"] == t["scaling"]["N"] * spec.prompts_per_step * spec.iterations).all()
    assert len(t["scaling_problems"]) == n_cells * n_seeds * spec.eval.n_problems
    per_cell = t["scaling_problems"].groupby(["model", "N", "seed"])["greedy_correct"].mean()
    assert t["scaling"].set_index(["model", "N", "seed"])["heldout"].to_dict() == pytest.approx(per_cell.to_dict())
    assert len(t["scaling_curves"]) == n_cells * n_seeds * spec.iterations
    assert list(t["scaling_curves"].columns) == ["model", "N", "seed", "step", *S.CURVE_METRICS]
    assert t["ablation"]["variant"].tolist() == [v for v in labels for _ in preset.seeds]
    assert len(t["ablation_problems"]) == n_variants * n_seeds * spec.eval.n_problems
    assert len(t["ablation_curves"]) == n_variants * n_seeds * spec.ablation_iterations
    base = evaluate_ref("smoke", preset.task, preset.task_kwargs, spec.eval, home=study.store, progress=False)
    assert t["bases"].loc[0, "heldout"] == pytest.approx(base.table["greedy_correct"].astype(float).mean())
    assert S.finding(t).status == "undecidable at this design"  # smoke: two seeds and one size


def test_compute_again_loads_everything_from_the_store(study, forbid_loading):
    forbid_loading(esreason_lib.models.load, common)  # a trainer loads its base; an evaluation loads its model
    again = S.compute(study.preset, home=study.store, progress=False)
    for name, table in study.tables.items():
        pd.testing.assert_frame_equal(again[name], table)


def test_compute_rejects_a_task_the_zoo_model_never_saw(tmp_path):
    with pytest.raises(ValueError, match="'smoke' was pretrained on countdown"):
        S.compute(get_preset("smoke", task_kwargs={"high": 20}), home=tmp_path, progress=False)
    assert not any(tmp_path.iterdir())  # checked before anything is trained
