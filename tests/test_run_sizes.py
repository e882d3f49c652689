"""Every size refused before work when the run cannot finish (issue 35): ES and GRPO size fields and their product
(`validation.check_run_size`), and `--shard`; one line naming the field and value, and no run directory left."""

from __future__ import annotations

import pytest

from esreason_lib.cli import main
from esreason_lib.es.config import ESConfig
from esreason_lib.grpo.config import GRPOConfig
from esreason_lib.paper.cli import MAX_SHARDS, parse_shard
from esreason_lib.validation import MAX_ROLLOUTS


@pytest.mark.parametrize("fields, match", [
    ({"iterations": 10**12}, r"ESConfig.iterations must be at most 1,000,000 .*got 1000000000000"),
    ({"population_size": 100_000}, r"ESConfig.population_size must be at most 10,000 .*got 100000"),
    ({"prompts_per_step": 1_000_000}, r"ESConfig.prompts_per_step must be at most 100,000 .*got 1000000"),
    ({"iterations": 10**6, "population_size": 10**4, "prompts_per_step": 8},
     r"ESConfig: iterations x population_size x prompts_per_step = 8e\+10 completions, more than 1e\+10"),
])
def test_es_sizes_that_cannot_finish_are_refused(fields, match):
    with pytest.raises(ValueError, match=match) as err:
        ESConfig(**fields)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("fields, match", [
    ({"iterations": 10**12}, r"GRPOConfig.iterations must be at most"),
    ({"group_size": 10**5}, r"GRPOConfig.group_size must be at most 10,000"),
    ({"iterations": 10**6, "prompts_per_step": 10**5, "group_size": 2}, r"GRPOConfig: iterations x prompts_per_step"),
])
def test_grpo_sizes_that_cannot_finish_are_refused(fields, match):
    with pytest.raises(ValueError, match=match):
        GRPOConfig(**fields)


def test_sizes_at_the_paper_scale_and_at_the_limits_are_accepted():
    ESConfig(iterations=1000, population_size=30, prompts_per_step=8)
    ESConfig(iterations=10**6, population_size=2, prompts_per_step=8)  # 1.6e7 completions
    GRPOConfig(iterations=1000, prompts_per_step=8, group_size=8)
    assert 10**6 * 10**4 * 1 == MAX_ROLLOUTS and ESConfig(iterations=10**6, population_size=10**4,
                                                          prompts_per_step=1)


@pytest.mark.parametrize("text", ["1/1000000000000", "2/2", "0/0", "5/3", f"0/{MAX_SHARDS + 1}", "١/٢", "-1/2"])
def test_a_shard_that_cannot_exist_is_refused(text):
    with pytest.raises(ValueError, match=r"--shard must be i/n with 0 <= i < n <= 1024"):
        parse_shard(text)
    assert parse_shard(f"{MAX_SHARDS - 1}/{MAX_SHARDS}") == (MAX_SHARDS - 1, MAX_SHARDS)


def test_the_cli_refuses_a_huge_run_in_one_line_and_leaves_no_run_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ESREASON_HOME", str(tmp_path / "store"))
    assert main(["prefill", "--preset", "smoke", "--shard", "1/1000000000000"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert not (tmp_path / "store").exists() or not list((tmp_path / "store").glob("*-*"))
