"""Presets: every preset validates, dotted overrides, clear errors, and the paper presets run one tiny CPU step.

The paper presets name 1.5B hub models; here a tiny random Qwen2 with the char tokenizer stands in for the weights
(passed as `model=` / `tokenizer=`), and the preset's config is shrunk with `dataclasses.replace` to one iteration
of a couple of members/prompts. Everything else (task, reward shaping, dtype, greedy/temperature, beta, micro
batching) is the paper preset's own. Nothing is written outside `tmp_path` (ESREASON_HOME).
"""

from __future__ import annotations

import dataclasses
import functools
import json

import pytest
import torch

from esreason_lib.es.config import ESConfig
from esreason_lib.evaluation import EvalSpec
from esreason_lib.grpo.config import GRPOConfig
from esreason_lib.paper.studies.frontier_design import FRONTIER_SETTINGS
from esreason_lib.paper.studies.presets import (
    _FAST_PATHS,
    _FULL_OVERRIDES,
    PRESETS,
    Preset,
    get_preset,
)
from esreason_lib.store.identity import config_hash


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("ESREASON_HOME", str(tmp_path / "runs"))
    torch.set_num_threads(1)


EVAL_FIELDS = ("eval", "sparsity.eval", "forgetting.eval", "scaling.eval")
STUDY_SPECS = ("comparison", "lemma", "prop1", "sequential", "sparsity", "forgetting", "scaling")


# ------------------------------------------------------------------------------------------- construction
def test_preset_names():
    assert set(PRESETS) == {"smoke", "tiny", "full", "paper-easy", "paper-hard", "powered", "tiny-exact",
                            "frontier-habit", "frontier-clean", "frontier-m", "frontier-multi", "paper-easy-3b",
                            "paper-easy-7b", "pretrained-smollm2"}


def test_frontier_settings_run_the_registered_design():
    """Issue 31: the paper's KL beta, the five GRPO lrs and three ES alphas, snapshots every 10 iterations, K = 16
    and 32 from 64 samples at T = 0.6 in notebooks 01, 04 and 05; three bases and a second task."""
    from esreason_lib.paper.studies.presets import DESIGNS
    from esreason_lib.tasks import get_task

    settings = [get_preset(n) for n in DESIGNS["frontier"]]
    assert {p.base_model for p in settings} == {"qwen2-s-habit", "qwen2-s", "qwen2-m"}
    assert len({tuple(sorted(p.task_kwargs.items())) for p in settings}) == 2
    for p in settings:
        assert p.grpo.beta == 0.001 and p.comparison.grpo_lrs == (5e-6, 1e-5, 2e-5, 5e-5, 1e-4)
        assert p.comparison.es_alphas == (1.2e-3, 2.4e-3, 4.8e-3) and p.es.snapshot_every == p.grpo.snapshot_every == 10
        assert max(p.eval.ks) == 32 <= p.eval.n_samples // 2 and p.comparison.temperature == 0.6
        assert p.sparsity.eval.temperature == p.forgetting.eval.temperature == 0.6
        assert p.prop1.independent_link and p.seeds == (0, 1, 2)
        pool = len(get_task(p.task, **p.test_task_kwargs()).examples("test", n=p.splits.pool))
        assert p.eval.n_problems + p.comparison.selection_problems <= pool


def test_full_is_tiny_with_the_full_overrides():
    tiny, full = (dataclasses.asdict(get_preset(n)) for n in ("tiny", "full"))
    changed = {f"{k}.{sub}" for k in tiny if isinstance(tiny[k], dict)
               for sub in tiny[k] if tiny[k][sub] != full[k][sub]}
    changed |= {k for k in tiny if not isinstance(tiny[k], dict) and tiny[k] != full[k]}
    assert changed == {"name"} | {k.rsplit(".", 1)[0] if k.count(".") > 1 else k
                                  for k in {**_FULL_OVERRIDES, **_FAST_PATHS}}


def _paths(preset) -> list[tuple]:
    """The GRPO and evaluation path fields `_FAST_PATHS` sets, in one list."""
    specs = [functools.reduce(getattr, spec.split("."), preset) for spec in EVAL_FIELDS]
    return [(preset.grpo.forward, preset.grpo.sampler, preset.grpo.share_prefixes, preset.grpo.shared_prompts),
            *((s.sampler, s.share_prefixes) for s in specs)]


FAST = [("fused", "inverse-cdf", True, True), *[("inverse-cdf", True)] * len(EVAL_FIELDS)]


@pytest.mark.parametrize("name", ["tiny", *FRONTIER_SETTINGS])
def test_tiny_and_the_frontier_take_the_fast_paths(name):
    """Issue 34: tiny's and the frontier design's GRPO and every evaluation on the fast torch paths (the frontier's
    own whole-`EvalSpec` overrides for notebooks 04 and 05 included)."""
    assert _paths(get_preset(name)) == FAST


@pytest.mark.parametrize("name", ["full", "powered", "tiny-exact"])
def test_the_presets_derived_before_keep_the_module_paths(name):
    """The presets derived from tiny before `_FAST_PATHS` keep the paths their stored runs were computed with."""
    assert _paths(get_preset(name)) == [("hf", "multinomial", False, False), *[("multinomial", False)] * 4]


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_constructs_and_validates(name):
    preset = get_preset(name)
    assert preset is PRESETS[name]  # no overrides: the registered object itself
    assert isinstance(preset, Preset) and preset.name == name
    assert isinstance(preset.es, ESConfig) and isinstance(preset.grpo, GRPOConfig)
    for cfg in (preset.es, preset.grpo):
        assert cfg.model == preset.base_model and cfg.task == preset.task
        assert cfg.task_kwargs == tuple(sorted(preset.task_kwargs.items()))
        config_hash(cfg)  # JSON-able (it names the run directory)
    for field in EVAL_FIELDS:
        spec = preset
        for part in field.split("."):
            spec = getattr(spec, part)
        assert isinstance(spec, EvalSpec), field
        assert spec.ks and all(1 <= k <= spec.n_samples for k in spec.ks), field
    for name in STUDY_SPECS:  # every study parameter is explicit: no None standing for another field
        values = dataclasses.asdict(getattr(preset, name))
        assert all(v is not None for v in values.values()), (name, values)
    assert preset.seeds and preset.sequential.es_budget >= 2
    assert preset.task not in preset.heldout_tasks
    # re-running every __post_init__ on a copy passes: the registered values are valid
    again = dataclasses.replace(preset, es=dataclasses.replace(preset.es), grpo=dataclasses.replace(preset.grpo),
                                eval=dataclasses.replace(preset.eval))
    assert again == preset
    with pytest.raises(dataclasses.FrozenInstanceError):
        preset.seeds = (9,)


def test_paper_size_presets_are_paper_easy_on_a_larger_base():
    """Issue 44.6: the paper's 3B and 7B rows, paper-easy's design and hyperparameters on Qwen2.5-3B / 7B-Instruct,
    GRPO on TRL's engine (the native loop does not fit past 1.5B on 8 x 80 GB)."""
    easy = get_preset("paper-easy")
    for name, model in (("paper-easy-3b", "Qwen/Qwen2.5-3B-Instruct"), ("paper-easy-7b", "Qwen/Qwen2.5-7B-Instruct")):
        preset = get_preset(name)
        assert preset.es == dataclasses.replace(easy.es, model=model)
        assert preset.grpo == dataclasses.replace(easy.grpo, model=model, engine="trl")
        assert (preset.es.population_size, preset.es.sigma, preset.es.alpha) == (32, 1.5e-3, 2.5e-4)
        assert preset.eval == easy.eval and preset.comparison == easy.comparison


def test_paper_presets_use_the_paper_setup():
    easy, hard = get_preset("paper-easy"), get_preset("paper-hard")
    assert (easy.task, easy.base_model) == ("gsm8k", "Qwen/Qwen2.5-1.5B-Instruct")
    assert (hard.task, dict(hard.es.task_kwargs)) == ("math", {"dataset": "deepscaler"})
    # GSM8K's 7,473 train problems at 64 per iteration: 234 iterations = 2 epochs; DeepScaleR's 40,315: 630 = 1
    for p, iterations in ((easy, 234), (hard, 630)):
        assert (p.es.population_size, p.es.sigma, p.es.alpha, p.es.iterations) == (32, 1.5e-3, 2.5e-4, iterations)
        assert (p.grpo.group_size, p.grpo.lr, p.grpo.beta, p.grpo.iterations) == (8, 1e-6, 0.001, iterations)
        assert (p.grpo.prompts_per_step, p.grpo.minibatch_size) == (64, 32)  # two optimizer steps per rollout
        assert p.es.prompt_order == p.grpo.prompt_order == "epoch"
        assert p.es.dtype == p.grpo.dtype == "bfloat16" and p.sequential.es_budget == p.sequential.grpo_budget == 234
        assert (p.es.reward_correct, p.es.reward_formatted, p.es.reward_invalid) == (1.0, 0.1, 0.0)
        assert (p.eval.n_samples, p.eval.temperature, p.eval.ks) == (32, 0.6, tuple(range(1, 33)))
        assert p.scaling.populations == (8, 16, 32, 64)  # Table 6
        assert p.sparsity.taus == (2.5e-4, 5e-4, 1e-3, 1.5e-3, 2e-3) and p.sparsity.quantiles == ()
    assert easy.es.greedy and not hard.es.greedy and hard.es.temperature == 0.6
    # DeepScaleR has no test split: paper-hard evaluates on MATH-500; elsewhere the test split is the task's own
    assert (hard.test_task_kwargs() == {"dataset": "math500"}
            and easy.test_task_kwargs() == {"protocol": "artifact"})  # the artifact's grading
    tiny = get_preset("tiny")
    assert tiny.test_task_kwargs() == tiny.task_kwargs and tiny.es.prompt_order == tiny.grpo.prompt_order == "random"
    assert tiny.grpo.minibatch_size is None and tiny.sparsity.taus == ()


# ------------------------------------------------------------------------------------------- overrides
def test_dotted_and_dunder_overrides():
    base = get_preset("smoke")
    dotted = get_preset("smoke", **{"es.sigma": 2e-3})
    assert dotted.es.sigma == 2e-3 and dotted.es == dataclasses.replace(base.es, sigma=2e-3)
    assert dotted.grpo == base.grpo and dotted.eval == base.eval
    assert get_preset("smoke", es__sigma=2e-3) == dotted
    assert PRESETS["smoke"].es.sigma == 3e-3  # the registry is never mutated
    p = get_preset("smoke", **{"eval.n_samples": 8, "eval__ks": (1, 8), "grpo.lr": 1e-3, "seeds": (0, 1),
                               "sequential.es_budget": 10})
    assert (p.eval.n_samples, p.eval.ks, p.grpo.lr, p.seeds, p.sequential.es_budget) == (8, (1, 8), 1e-3, (0, 1), 10)
    assert p.eval.n_problems == base.eval.n_problems  # other nested fields untouched
    # overrides apply (and validate) one at a time, in order: shrink ks before n_samples, or replace the spec
    assert get_preset("smoke", **{"eval.ks": (1, 2), "eval.n_samples": 2}).eval.ks == (1, 2)
    spec = EvalSpec(n_problems=3, n_samples=2, ks=(1, 2))
    assert get_preset("smoke", eval=spec).eval is spec


def test_base_model_and_task_overrides_propagate():
    p = get_preset("smoke", base_model="qwen2-s", task="sorting", task_kwargs={"high": 9})
    assert (p.base_model, p.task, p.task_kwargs) == ("qwen2-s", "sorting", {"high": 9})
    for cfg in (p.es, p.grpo):
        assert (cfg.model, cfg.task, cfg.task_kwargs) == ("qwen2-s", "sorting", (("high", 9),))
    assert p.es.sigma == PRESETS["smoke"].es.sigma and p.grpo.lr == PRESETS["smoke"].grpo.lr
    hard = get_preset("paper-hard", base_model="/models/local-r1")  # task_kwargs kept
    assert hard.es.model == hard.grpo.model == "/models/local-r1"
    assert dict(hard.grpo.task_kwargs) == {"dataset": "deepscaler"}
    assert get_preset("smoke", base_model="qwen2-m").es.model == "qwen2-m"


def test_unknown_preset_name():
    with pytest.raises(ValueError, match=r"preset 'nope' is not one of \['frontier-clean', 'frontier-habit', "
                                         r"'frontier-m', 'frontier-multi', 'full', 'paper-easy', 'paper-easy-3b', "
                                         r"'paper-easy-7b', 'paper-hard', "
                                         r"'powered', 'pretrained-smollm2', 'smoke', 'tiny', 'tiny-exact'\]"):
        get_preset("nope")


@pytest.mark.parametrize("key, where, field", [
    ("bogus", "preset 'smoke'", "bogus"),
    ("es.bogus", "preset 'smoke'.es", "bogus"),
    ("es__bogus", "preset 'smoke'.es", "bogus"),
    ("eval.bogus", "preset 'smoke'.eval", "bogus"),
    ("esx.sigma", "preset 'smoke'", "esx"),
])
def test_unknown_fields_are_named(key, where, field):
    with pytest.raises(ValueError, match=rf"^{where}: unknown field '{field}'; valid fields: \["):
        get_preset("smoke", **{key: 1})


@pytest.mark.parametrize("key", ["seeds.x", "es.task_kwargs.high", "es.sigma.real"])
def test_dotting_into_a_plain_value_is_a_value_error(key):
    with pytest.raises(ValueError, match=rf"cannot set '{key.rsplit('.', 1)[1]}'"):
        get_preset("smoke", **{key: 1})


@pytest.mark.parametrize("overrides, pattern", [
    ({"es.sigma": -1}, r"ESConfig\.sigma must be a finite float in \(0, 1\.0\], got -1"),
    ({"es.population_size": 3}, r"ESConfig\.population_size .*even.*got 3"),  # smoke ES is antithetic
    ({"grpo.clip_eps": 1.5}, r"GRPOConfig\.clip_eps must be in \(0, 1\), got 1\.5"),
    ({"eval.ks": (1, 8)}, r"EvalSpec\.ks must be .*n_samples=4.*got \(1, 8\)"),
    ({"eval.ks": (0, 1)}, r"EvalSpec\.ks .*got \(0, 1\)"),
    ({"eval.n_samples": 2}, r"EvalSpec\.ks .*n_samples=2.*got \(1, 2, 4\)"),
    ({"seeds": ()}, r"Preset\.seeds must name at least one seed, got \(\)"),
    ({"sequential.es_budget": 1}, r"SequentialSpec\.es_budget must be >= 2, got 1"),
    ({"sparsity.taus": (1e-3, 0.0)}, r"Preset\.sparsity\.taus must all be > 0, got \(0\.001, 0\.0\)"),
    ({"es.model": "qwen2-s"}, r"Preset\.es must use the preset's base_model and task \('smoke', 'countdown'\), "
                              r"got \('qwen2-s', 'countdown'\)"),
    ({"grpo.task": "sorting"}, r"Preset\.grpo must use .*got \('smoke', 'sorting'\)"),
])
def test_bad_values_name_field_and_value(overrides, pattern):
    with pytest.raises(ValueError, match=pattern):
        get_preset("smoke", **overrides)


def test_preset_config():
    smoke = get_preset("smoke")
    assert smoke.config("es") == smoke.es and smoke.config("grpo") == smoke.grpo
    cfg = smoke.config("grpo", lr=1e-3, iterations=1)
    assert isinstance(cfg, GRPOConfig) and (cfg.lr, cfg.iterations) == (1e-3, 1)
    assert cfg == dataclasses.replace(smoke.grpo, lr=1e-3, iterations=1) and smoke.grpo.lr == 2e-5
    assert smoke.config("es", seed=3).seed == 3
    with pytest.raises(ValueError, match=r"ESConfig\.sigma .*got 0"):
        smoke.config("es", sigma=0)
    for bad in ("adam", "ES", ""):
        with pytest.raises(ValueError, match=rf"method must be 'es' or 'grpo', got {bad!r}"):
            smoke.config(bad)
    with pytest.raises(ValueError, match=r"GRPOConfig has no field\(s\) \['bogus'\]"):
        smoke.config("grpo", bogus=1)


# ------------------------------------------------------------------------------------------- EvalSpec
def test_evalspec_defaults_and_json():
    spec = EvalSpec()
    assert (spec.n_problems, spec.n_samples, spec.ks, spec.temperature) == (200, 64, (1, 2, 4, 8, 16, 32, 64), 1.0)
    assert EvalSpec(n_problems=None, n_samples=1, ks=(1,)).n_problems is None
    json.dumps(dataclasses.asdict(spec))  # part of the eval-run config


@pytest.mark.parametrize("kwargs, pattern", [
    ({"n_problems": 0}, r"EvalSpec\.n_problems must be None or >= 1, got 0"),
    ({"n_samples": 0, "ks": (1,)}, r"EvalSpec\.n_samples must be >= 1, got 0"),
    ({"ks": ()}, r"EvalSpec\.ks must be non-empty .*got \(\)"),
    ({"ks": (1, 128)}, r"EvalSpec\.ks .*\[1, n_samples=64\].*got \(1, 128\)"),
    ({"n_samples": 4, "ks": (0,)}, r"EvalSpec\.ks .*got \(0,\)"),
    ({"temperature": 0.0}, r"EvalSpec\.temperature must be > 0, got 0\.0"),
    ({"temperature": -1}, r"EvalSpec\.temperature must be > 0, got -1"),
])
def test_evalspec_validation(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        EvalSpec(**kwargs)


# ------------------------------------------------------------------------------------------- paper presets on CPU
ES_KEYS = {"step", "reward/mean", "reward/std", "reward/max", "reward/min", "reward/center", "policy/entropy",
           "es/js_succ", "es/drift_rel", "es/update_norm", "es/fixup_frac", "es/generations", "time/step_s"}
GRPO_KEYS = {"step", "reward/mean", "reward/std", "policy/entropy", "policy/kl", "policy/clip_frac",
             "policy/ratio_mean", "policy/grad_norm", "loss/policy", "grpo/zero_std_frac", "completion/length",
             "grpo/generations", "time/rollout_s", "time/step_s"}


@pytest.fixture
def paper_data(shared_data, tmp_path, monkeypatch):
    """gsm8k from the shared data; DeepScaleR (paper-hard's train set) from the shared data when present, else a
    stand-in `deepscaler/train.jsonl` of MATH-500 problems under a temporary ESREASON_DATA (same row format)."""
    if not (shared_data / "gsm8k" / "train.jsonl").is_file():
        pytest.skip("gsm8k train split not in the shared data")
    if not (shared_data / "deepscaler" / "train.jsonl").is_file():
        math500 = shared_data / "math500" / "test.jsonl"
        if not math500.is_file():
            pytest.skip("neither deepscaler nor math500 in the shared data")
        root = tmp_path / "data"
        (root / "deepscaler").mkdir(parents=True)
        (root / "gsm8k").symlink_to(shared_data / "gsm8k")
        rows = [json.loads(line) for line in math500.read_text().splitlines()[:16]]
        (root / "deepscaler" / "train.jsonl").write_text(
            "".join(json.dumps({"problem": r["problem"], "answer": r["answer"]}) + "\n" for r in rows))
        monkeypatch.setenv("ESREASON_DATA", str(root))
    return shared_data


def _tiny_model():
    from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2

    tok = build_char_tokenizer()
    model = tiny_random_qwen2(len(tok), seed=0)
    model.config.max_position_embeddings = 1024  # rotary positions: the paper's prompts are longer than 64 chars
    return model, tok


@pytest.mark.parametrize("name", ["paper-easy", "paper-hard"])
@pytest.mark.parametrize("method", ["es", "grpo"])
def test_paper_preset_runs_one_tiny_step_on_cpu(name, method, paper_data, tmp_path):
    from esreason_lib.es.loop import train_es
    from esreason_lib.grpo.loop import train_grpo

    preset = get_preset(name)
    small = dict(iterations=1, prompts_per_step=2, max_new_tokens=8, train_size=8, device="cpu", checkpoint_every=0)
    if method == "es":
        config = preset.config("es", population_size=4, **small)  # 4 members x 2 prompts
        trainer, keys = train_es, ES_KEYS
    else:
        config = preset.config("grpo", group_size=2, minibatch_size=1, **small)  # 2 prompts x 2 completions,
        # two minibatches of one prompt (as the paper's 64 in minibatches of 32); beta > 0: a ref copy
        trainer, keys = train_grpo, GRPO_KEYS
    assert config.dtype == "bfloat16" and config.model == preset.base_model  # the hub id is never loaded
    model, tok = _tiny_model()
    before = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}  # theta_0 at the run's dtype

    run = trainer(config, model=model, tokenizer=tok, progress=False)

    assert run.is_complete() and run.path.parent == tmp_path / "runs" and run.path.name.startswith(method + "-")
    assert run.config["model"] == preset.base_model and run.config["task"] == preset.task
    assert run.config["task_kwargs"] == [list(kv) for kv in sorted(preset.task_kwargs.items())]
    df = run.metrics()
    assert df["step"].tolist() == [1] and keys <= set(df.columns), keys - set(df.columns)
    row = df.iloc[0]
    assert 0.0 <= row["reward/mean"] <= 1.0  # paper shaping: correct 1.0, well-formed 0.1, invalid 0.0
    assert next(model.parameters()).dtype == torch.bfloat16
    assert (run.model_dir / "config.json").exists() and (run.model_dir / "tokenizer_config.json").exists()
    changed = any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    if method == "es":
        assert row["es/generations"] == 4 * 2
        # ES moves theta exactly when the population's rewards differ (z-scores of tied rewards are all zero)
        assert changed == (row["reward/std"] > 0) == (row["es/update_norm"] > 0)
        assert (row["es/drift_rel"] > 0) == changed
    else:
        assert row["grpo/generations"] == 2 * 2 and row["policy/kl"] == pytest.approx(0.0, abs=1e-3)
        assert row["policy/ratio_mean"] == pytest.approx(1.0, abs=1e-2)  # on-policy (bf16 noise)


def test_zoo_bases_are_the_base_and_control_zoo_names():
    assert get_preset("tiny").zoo_bases() == ["qwen2-s", "qwen2-s-habit"]
    assert get_preset("smoke").zoo_bases() == ["smoke"]
    assert get_preset("paper-easy").zoo_bases() == []  # hub ids are not pretrained


def test_presets_compare_field_by_field():
    """Two presets differ study by study in named fields (asdict of the nested specs)."""
    smoke, tiny = (dataclasses.asdict(get_preset(n)) for n in ("smoke", "tiny"))
    assert smoke["scaling"]["models"] == ("smoke",) and tiny["scaling"]["models"] == ("qwen2-s", "qwen2-m")
    assert {k for k in tiny["lemma"] if tiny["lemma"][k] != smoke["lemma"][k]} == {
        "sigmas", "prompts", "samples", "population", "repeats", "fisher_samples"}
    assert {k: tiny["sequential"][k] for k in ("es_budget", "grpo_budget")} == {"es_budget": 150, "grpo_budget": 150}


@pytest.mark.parametrize("name", ["smoke", "tiny", "full", "powered", "pretrained-smollm2"])
def test_held_out_evaluations_fit_their_task_pools(name):
    """A preset asks no held-out task for more test problems than it has (powered once asked addition for 1000
    of its 960, and notebook 05 failed after two hours of other work)."""
    from esreason_lib.tasks import get_task

    preset = get_preset(name)
    n = preset.forgetting.eval.n_problems
    for held in preset.heldout():
        assert len(get_task(held.task, **held.kwargs).examples("test", n=n)) == n
