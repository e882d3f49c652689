import pytest

from esreason_lib.cli import main
from esreason_lib.es.config import ESConfig
from esreason_lib.grpo.config import GRPOConfig
from esreason_lib.paper import plan
from esreason_lib.paper.cli import parse_shard
from esreason_lib.paper.studies import comparison, scaling
from esreason_lib.paper.studies.presets import get_preset
from esreason_lib.store.identity import config_hash


def test_plan_is_the_studies_configs_once_each():
    tiny = get_preset("tiny")
    configs = plan.training_plan(tiny)
    hashes = [config_hash(c) for c in configs]
    assert len(set(hashes)) == len(hashes)
    wanted = {config_hash(c) for c in [*comparison.training_configs(tiny).values(),
                                        *scaling.training_configs(tiny).values()]}
    assert set(hashes) == wanted
    # 01: 2 ES alphas + 2 GRPO lrs at 3 seeds; 06: 2 sizes x 2 N x 3 seeds + 8 ablations (3 shapings x 2 alphas,
    # antithetic, low-rank) x 3 seeds
    assert len(configs) == 12 + 12 + 24


def test_a_design_without_notebook_06_plans_no_scaling_runs():
    """The `pretrained` design runs notebooks 01, 02, 04 and 05: its plan is notebook 01's grid alone (3 GRPO lrs
    and 1 ES alpha at 3 seeds), never 06's zoo-size cells."""
    preset = get_preset("pretrained-smollm2")
    configs = plan.training_plan(preset)
    assert [config_hash(c) for c in configs] == [config_hash(c) for c in comparison.training_configs(preset).values()]
    assert len(configs) == 12 and {c.model for c in configs} == {"smollm2-135m"}


def test_expected_cost_counts_completions_and_grpo_twice():
    es = ESConfig(population_size=4, prompts_per_step=3, iterations=5)
    grpo = GRPOConfig(group_size=2, prompts_per_step=3, iterations=5)
    assert plan.expected_cost(es) == 4 * 3 * 5
    assert plan.expected_cost(grpo) == 2 * 2 * 3 * 5


def test_shards_partition_the_plan_and_balance_it():
    configs = [ESConfig(population_size=n, iterations=10, seed=s) for n in (2, 4, 8) for s in (0, 1)]
    shards = [plan.shard(configs, i, 2) for i in range(2)]
    assert sorted(config_hash(c) for s in shards for c in s) == sorted(config_hash(c) for c in configs)
    loads = [sum(plan.expected_cost(c) for c in s) for s in shards]
    assert loads == [sum(loads) / 2] * 2  # longest first: N=8, 4, 2 on each shard
    assert plan.shard(configs, 0, 1) == sorted(configs, key=lambda c: (-plan.expected_cost(c), config_hash(c)))
    for bad in ((2, 2), (-1, 2), (0, 0)):
        with pytest.raises(ValueError, match="shard must be i/n"):
            plan.shard(configs, *bad)


def test_parse_shard_and_cli_errors(capsys):
    assert parse_shard("1/2") == (1, 2)
    with pytest.raises(ValueError, match="--shard must be i/n"):
        parse_shard("1of2")
    assert main(["prefill", "--preset", "smoke", "--shard", "x"]) == 2
    assert "--shard must be i/n" in capsys.readouterr().err


def test_prefill_trajectories_builds_every_nth_followed_seed(monkeypatch, capsys):
    """`prefill --trajectories --shard i/n` builds notebook 02's trajectories of the followed seeds i, i + n, ...
    (`diversity.compute_prop1` with those seeds), not the training runs."""
    from esreason_lib.paper.studies import diversity

    built = []
    monkeypatch.setattr(diversity, "compute_prop1", lambda preset, seeds: built.append((preset.name, seeds)))
    monkeypatch.setattr(plan, "prefill", lambda *a, **k: pytest.fail("trained runs"))
    for shard, want in (("0/2", (4, 6)), ("1/2", (5,)), ("3/4", ())):  # its followed seeds: 4, 5, 6
        assert main(["prefill", "--preset", "pretrained-smollm2", "--trajectories", "--shard", shard]) == 0
        assert built.pop() == ("pretrained-smollm2", want)
        assert f"trajectories shard {shard}: seeds {list(want) or 'none'} complete" in capsys.readouterr().out


def test_time_left_follows_the_pace_of_the_runs_trained():
    assert plan.time_left([], 100.0) is None  # nothing trained yet (runs found complete do not count)
    assert plan.time_left([(10.0, 20.0), (30.0, 60.0)], 50.0) == 100.0  # 2 s per unit of cost
    assert plan.time_left([(10.0, 20.0)], 0.0) == 0.0


def test_progress_line_gives_the_counts_the_run_and_the_time_left():
    assert plan.progress_line("prefill tiny 0/2", 3, 12, 24, "es-1a2b", 41.2, 360.0) == (
        "prefill tiny 0/2: 3 of 12 runs done (the plan has 24): es-1a2b trained in 41 s; about 6 min left")
    assert plan.progress_line("p", 1, 2, 4, "grpo-9", None, None) == (
        "p: 1 of 2 runs done (the plan has 4): grpo-9 found complete; time left: no estimate yet")
    assert plan.progress_line("p", 2, 2, 4, "es-3", 3900.0, 0.0) == "p: 2 of 2 runs done (the plan has 4): es-3 " \
                                                                  "trained in 1 h 5 min"


def test_prefill_trains_its_shard_and_the_study_finds_the_runs(isolated_store, forbid_loading, capsys):
    smoke = get_preset("smoke", **{"scaling.populations": (2,)})
    runs = [r for i in range(2) for r in plan.prefill(smoke, i, 2, home=isolated_store.store, progress=False)]
    assert len(runs) == len(plan.training_plan(smoke)) and all(r.is_complete() for r in runs)
    import esreason_lib.models.load

    forbid_loading(esreason_lib.models.load)  # a trainer that runs loads its base: nothing is trained again
    capsys.readouterr()
    again = plan.prefill(smoke, 0, 1, home=isolated_store.store, progress=True)
    assert sorted(r.path for r in again) == sorted(r.path for r in runs)
    lines = capsys.readouterr().err.splitlines()  # one line per run, nothing else (no progress bar)
    n = len(runs)
    assert lines == [f"prefill smoke 0/1: {i} of {n} runs done (the plan has {n}): {r.path.name} found complete"
                     + ("" if i == n else "; time left: no estimate yet") for i, r in enumerate(again, 1)]
    assert not isolated_store.default.exists() or not any(isolated_store.default.iterdir())
