"""Peak-memory estimates of training configs (`paper.memory`) and the memory-safe sharding of the prefill
(`paper.plan.apart`, `paper.plan.shard`): every number below is computed by hand from the parameter counts."""

import os
from itertools import product

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from esreason_lib.es.config import ESConfig
from esreason_lib.grpo.config import GRPOConfig
from esreason_lib.models.zoo import ZOO, build_char_tokenizer, num_parameters
from esreason_lib.paper import memory, plan
from esreason_lib.paper.studies.presets import get_preset
from esreason_lib.store.identity import config_hash

SMOLLM2 = 134_515_008
SMOKE = 12_512  # the "smoke" zoo base with the 98-character vocabulary


def test_model_parameters_count_without_loading():
    assert memory.model_parameters("smoke") == num_parameters(ZOO["smoke"].build(len(build_char_tokenizer()))) \
        == SMOKE
    assert memory.model_parameters("qwen2-m") == 997_760  # "1.0M" in the zoo's docstring
    # SmolLM2-135M: 49,152 x 576 tied embeddings, 30 blocks (q, o 576^2; k, v 576 x 192; MLP 3 x 576 x 1,536; two
    # norms) and a final norm, the same as its architecture built on the meta device
    assert memory.model_parameters("smollm2-135m") == 49_152 * 576 + 30 * 3_540_096 + 576 == SMOLLM2
    with torch.device("meta"):
        llama = LlamaForCausalLM(LlamaConfig(vocab_size=49_152, hidden_size=576, intermediate_size=1_536,
                                             num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                                             tie_word_embeddings=True))
    assert num_parameters(llama) == SMOLLM2
    assert memory.model_parameters("Qwen/Qwen2.5-3B-Instruct") == 3_085_938_688
    assert memory.model_parameters("/some/local/dir") is None


def test_weight_copies_per_backend_and_method():
    es = ESConfig(population_size=8)
    assert memory.weight_copies(ESConfig(population_size=8, backend="fast")) == 2 * 8 + 8  # stacked + fused
    assert memory.weight_copies(ESConfig(population_size=4, backend="native")) == 2 * 4 + 8
    assert memory.weight_copies(ESConfig(population_size=32, backend="fast", members_at_once=8)) == 2 * 8 + 8
    assert memory.weight_copies(ESConfig(population_size=4, backend="fast", members_at_once=8)) == 2 * 4 + 8
    assert memory.weight_copies(ESConfig(population_size=8, backend="batched")) == 8 + 8
    assert memory.weight_copies(es) == 8 + 8  # "auto", greedy float32: the batched backend
    assert memory.weight_copies(ESConfig(population_size=8, dtype="bfloat16")) == 5  # "auto" -> sequential
    assert memory.weight_copies(ESConfig(population_size=8, backend="sequential")) == 5
    assert memory.weight_copies(ESConfig(population_size=8, noise="lowrank", rank=2)) == 5  # factors, no copies
    assert memory.weight_copies(ESConfig(population_size=8, backend="ray", workers=3)) == 5 + 2 * 3
    assert memory.weight_copies(GRPOConfig(beta=0.0)) == 5
    assert memory.weight_copies(GRPOConfig(beta=0.04)) == 6  # and the frozen reference


def test_peak_memory_covers_the_measured_runs_on_the_pretrained_base():
    fast = ESConfig(model="smollm2-135m", population_size=8, backend="fast")
    assert memory.peak_memory_bytes(fast) == 24 * SMOLLM2 * 4 == 12_913_440_768  # measured: 12.7 GB
    sequential = ESConfig(model="smollm2-135m", population_size=8, backend="sequential")
    assert memory.peak_memory_bytes(sequential) == 5 * SMOLLM2 * 4 == 2_690_300_160  # measured: 2.4 GB
    assert memory.peak_memory_bytes(ESConfig(model="smollm2-135m", backend="sequential", dtype="bfloat16")) \
        == 5 * SMOLLM2 * 2
    grpo = GRPOConfig(model="smollm2-135m", beta=0.0, dtype="bfloat16")
    assert memory.peak_memory_bytes(grpo) == 5 * SMOLLM2 * 4  # float32 optimiser state whatever the dtype
    assert memory.peak_memory_bytes(ESConfig(model="/some/local/dir")) is None


def test_memory_budget_is_a_share_of_the_machine():
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert memory.memory_budget() == int(0.8 * total)
    assert memory.memory_budget(0.5) == int(0.5 * total)


# On the "smoke" base: ES "fast" at N = 8 holds 24 copies, GRPO (beta 0) and sequential ES 5, of 12,512 float32
FAST, LIGHT = 1_201_152, 250_240  # 24 x 12,512 x 4 and 5 x 12,512 x 4 bytes


def _mixed():
    """Two heavy ES runs (cost 8 x 8 x 10 = 640 each) and four GRPO runs (2 x 8 x 8 x 10 = 1,280 each)."""
    es = [ESConfig(model="smoke", backend="fast", population_size=8, iterations=10, seed=s) for s in (0, 1)]
    grpo = [GRPOConfig(model="smoke", beta=0.0, iterations=10, seed=s) for s in range(4)]
    return es, grpo


def _across(shards) -> int:
    """The largest sum of two configs' estimates in different shards."""
    return max(memory.peak_memory_bytes(a) + memory.peak_memory_bytes(b) for a, b in product(*shards))


def test_apart_keeps_heavy_configs_and_those_that_do_not_fit_beside_them():
    es, grpo = _mixed()
    assert plan.apart([*es, *grpo], budget=2_000_000) == [True, True] + [False] * 4  # FAST > 1e6; FAST + LIGHT fits
    assert plan.apart([*es, *grpo], budget=1_300_000) == [True] * 6  # FAST + LIGHT = 1,451,392 > 1.3e6
    assert plan.apart([*es, *grpo], budget=3_000_000) == [False] * 6  # no config above half: none kept
    assert plan.apart([ESConfig(model="/some/local/dir"), grpo[0]], budget=10**15) == [True, True]  # unknown: heavy


def test_shard_never_trains_two_configs_that_overrun_the_budget_side_by_side():
    es, grpo = _mixed()
    configs = [*es, *grpo]
    free = [plan.shard(configs, i, 2, budget=10**15) for i in range(2)]  # no memory rule: one heavy run per shard
    assert [sum(c in es for c in s) for s in free] == [1, 1] and _across(free) == 2 * FAST
    shards = [plan.shard(configs, i, 2, budget=2_000_000) for i in range(2)]
    # both heavy runs in shard 0 (its load 1,280 from the start); the GRPO runs, longest first (hash order among
    # equals), each to the lighter shard, shard 0 on a tie: 1 -> shard 1, 2 -> 0, 3 -> 1, 4 -> 0
    g, e = sorted(grpo, key=config_hash), sorted(es, key=config_hash)
    assert shards == [[g[1], g[3], *e], [g[0], g[2]]]
    assert _across(shards) == FAST + LIGHT <= 2_000_000
    assert plan.shard(configs, 0, 2, budget=1_300_000) == plan.shard(configs, 0, 1) and \
        plan.shard(configs, 1, 2, budget=1_300_000) == []
    assert [plan.shard(configs, i, 2, budget=2_000_000) for i in range(2)] == shards  # deterministic


@pytest.mark.parametrize("name", ["tiny", "frontier-habit"])
def test_presets_without_heavy_runs_keep_their_shards(name):
    """The memory rule keeps nothing apart in tiny and the frontier (largest estimate 0.29 GB), under this machine's
    budget or an 8 GB machine's: their shards are those of the plain balancing (the rule off)."""
    configs = plan.training_plan(get_preset(name))
    for budget in (None, int(0.8 * 8e9)):
        assert [plan.shard(configs, i, 2, budget=budget) for i in range(2)] == \
               [plan.shard(configs, i, 2, budget=10**18) for i in range(2)]


def test_pretrained_design_trains_its_es_runs_in_one_shard():
    """`pretrained-smollm2` on the 24 GB machine (budget 0.8 x 24 GB): its three ES runs ("fast", N = 8, 12.9 GB
    each) all in shard 0, beside three of its nine GRPO runs (2.7 GB), the other six in shard 1 (equal costs)."""
    configs = plan.training_plan(get_preset("pretrained-smollm2"))
    shards = [plan.shard(configs, i, 2, budget=int(0.8 * 24e9)) for i in range(2)]
    assert [sum(isinstance(c, ESConfig) for c in s) for s in shards] == [3, 0]
    assert [len(s) for s in shards] == [6, 6]
    es, grpo = (next(c for c in configs if isinstance(c, kind)) for kind in (ESConfig, GRPOConfig))
    assert _across(shards) == memory.peak_memory_bytes(es) + memory.peak_memory_bytes(grpo) == 15_603_740_928
