"""`training.early_checks`: the configs' own field checks, read from their source and run on the command line's
values before torch loads, say what building the config says, and reject no value the config accepts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from esreason_lib.es.config import ESConfig
from esreason_lib.grpo.config import GRPOConfig
from esreason_lib.paper.studies.presets import PRESETS
from esreason_lib.training import early_checks
from esreason_lib.training.early_checks import (
    ConditionCheck,
    ConfigCheck,
    check_model_path,
    check_values,
    config_checks,
    constant_values,
)
from esreason_lib.validation import check_choice, check_run_size

BAD = {"es": [{"population_size": -3}, {"population_size": 1}, {"population_size": "abc"}, {"sigma": "abc"},
              {"sigma": 2.0}, {"alpha": float("nan")}, {"iterations": 0}, {"iterations": 10**7}, {"dtype": "float8"},
              {"backend": "foo"}, {"normalization": "softmax"}, {"antithetic": 1}, {"workers": 0},
              {"gpus_per_worker": 1.5}, {"gpu_memory_utilization": 1.0}, {"prompt_order": "sorted"},
              {"antithetic": True, "population_size": 3}, {"backend": "batched", "greedy": False},
              {"noise": "lowrank", "backend": "sequential"}, {"seed": 0.5}, {"model": ""}],
       "grpo": [{"lr": -1}, {"group_size": 1}, {"clip_eps": 2}, {"top_p": 0}, {"beta": -0.1}, {"backend": "ray"},
                {"sampler": "inverse-cdf", "backend": "vllm"}, {"minibatch_size": 3, "prompts_per_step": 8},
                {"engine": "deepspeed"}, {"scale": "batch"}, {"max_new_tokens": 0}]}
"""Bad values per method, each rejected by the config itself (checked below against building it)."""
CONFIG_CLASSES = {"es": ESConfig, "grpo": GRPOConfig}


@pytest.mark.parametrize("method, values", [(m, v) for m, cases in BAD.items() for v in cases])
def test_a_bad_value_is_the_configs_own_error(method, values):
    """The early message is the one building the config from its defaults with `values` raises."""
    with pytest.raises(ValueError) as built:
        CONFIG_CLASSES[method](**values)
    with pytest.raises(ValueError) as early:
        check_values({method: values})
    assert str(early.value) == str(built.value)
    field = next(iter(values)) if len(values) == 1 else None
    assert field is None or (field in str(early.value) and repr(values[field]) in str(early.value))


def test_every_presets_configs_pass():
    """No value a preset builds is rejected: each preset's ES and GRPO config, every field set."""
    for preset in PRESETS.values():
        for method in ("es", "grpo"):
            config = getattr(preset, method)
            check_values({method: {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}})


def test_config_checks_read_the_post_init_in_source_order():
    checks = config_checks("es/config.py", "ESConfig")
    kinds = [(c.function.__name__, c.fields) for c in checks if isinstance(c, ConfigCheck)]
    assert kinds[0] == ("check_nonempty_str", ("model", "task", "device"))  # RunSettings' first
    assert kinds.index(("check_positive_int", ("population_size", "iterations", "prompts_per_step"))) < \
        kinds.index(("check_run_size", ("iterations", "population_size", "prompts_per_step")))
    backend = next(c for c in checks if isinstance(c, ConfigCheck) and c.fields == ("backend",))
    assert backend.function is check_choice and backend.args[0][0] == "auto" and "ray-vllm" in backend.args[0]
    conditions = {(c.target, c.fields) for c in checks if isinstance(c, ConditionCheck)}
    assert ("population_size", ("antithetic", "population_size")) in conditions
    assert all(c.fields for c in checks)


def test_a_check_runs_on_the_fields_that_are_set_only():
    """Fields left to the preset are not read: a size check runs on the set sizes, a condition only when all of
    its fields are set."""
    size = ConfigCheck(check_run_size, ("iterations", "population_size"))
    stand_in = type("ESConfig", (), {"iterations": 10**7})()
    with pytest.raises(ValueError, match=r"ESConfig\.iterations must be at most 1,000,000"):
        size.run(stand_in, {"iterations": 10**7})
    size.run(object(), {})  # nothing set: nothing read
    pairs = next(c for c in config_checks("es/config.py", "ESConfig")
                 if isinstance(c, ConditionCheck) and c.fields == ("antithetic", "population_size"))
    pairs.run(type("ESConfig", (), {"population_size": 3})(), {"population_size": 3})  # antithetic unknown


def test_constant_values_follow_imports_starred_names_and_dict_keys():
    package = Path(early_checks.PACKAGE)
    assert constant_values(package / "es/config.py", "BACKENDS")[:2] == ("auto", "batched")
    assert constant_values(package / "training/settings.py", "DTYPES") == ("float32", "bfloat16")
    assert constant_values(package / "training/settings.py", "DEFAULT_BASE") is None  # a string, not a collection
    assert constant_values(package / "training/settings.py", "no_such_name") is None


def test_check_model_path_names_the_missing_directory(tmp_path):
    with pytest.raises(ValueError, match=r"ESConfig\.model: '/nonexistent/model' is not a zoo name .* no "
                                         r"directory exists at /nonexistent/model"):
        check_model_path("ESConfig", "/nonexistent/model")
    for fine in (str(tmp_path), "qwen2-s", "Qwen/Qwen2.5-1.5B-Instruct", None):
        check_model_path("ESConfig", fine)
