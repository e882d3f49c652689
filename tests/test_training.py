"""The setup `train_es` and `train_grpo` share: device resolution and the model/task/examples a run starts from."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from esreason_lib.es.config import ESConfig
from esreason_lib.grpo.config import GRPOConfig
from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2
from esreason_lib.training.inputs import resolve_device, training_inputs
from esreason_lib.training.settings import DTYPES, prompt_indices


def test_resolve_device():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    assert set(DTYPES) == {"float32", "bfloat16"}


@pytest.mark.parametrize("config", [GRPOConfig(task="addition", reward_formatted=0.25, train_size=3, device="cpu",
                                               dtype="bfloat16"),
                                    ESConfig(task="addition", reward_formatted=0.25, train_size=3, device="cpu",
                                             dtype="bfloat16")])
def test_training_inputs_moves_the_model_and_builds_the_shaped_task(config):
    tok = build_char_tokenizer()
    model, tokenizer, task, examples = training_inputs(config, model=tiny_random_qwen2(len(tok)), tokenizer=tok)
    assert tokenizer is tok and next(model.parameters()).dtype == torch.bfloat16
    assert task.name == "addition" and task.shaping.formatted == 0.25 and len(examples) == 3


def test_training_inputs_errors():
    tok = build_char_tokenizer()
    with pytest.raises(ValueError, match="^train_grpo: a tokenizer is required"):
        training_inputs(GRPOConfig(device="cpu"), model=tiny_random_qwen2(len(tok)), caller="train_grpo")

    class NoTrain:
        def examples(self, split, n=None, seed=0):
            return []

    with pytest.raises(ValueError, match="task 'countdown' has no train examples"):
        training_inputs(ESConfig(device="cpu"), model=tiny_random_qwen2(len(tok)), tokenizer=tok, task=NoTrain())


def test_trainer_registry():
    from esreason_lib.es.loop import train_es
    from esreason_lib.grpo.loop import train_grpo
    from esreason_lib.methods import METHODS, trainer

    assert METHODS == ("es", "grpo")
    assert trainer("es") is train_es and trainer("grpo") is train_grpo
    with pytest.raises(ValueError, match="method 'base' is not one of"):
        trainer("base")




def test_prompt_indices_random_is_todays_draw():
    from esreason_lib.seeding import numpy_rng

    for n, per_step in ((16, 4), (3, 5)):  # without, then with replacement
        want = numpy_rng(7, "grpo", "prompts", 2).choice(n, size=per_step, replace=per_step > n)
        assert np.array_equal(prompt_indices(n, per_step, 2, 7, "grpo"), want)
    assert not np.array_equal(prompt_indices(16, 4, 2, 7, "grpo"), prompt_indices(16, 4, 2, 7, "es"))


def test_prompt_indices_epoch_shows_every_example_once_per_epoch_reshuffled():
    from esreason_lib.seeding import numpy_rng

    n, per_step = 10, 4  # iteration 2 straddles the boundary: 2 from epoch 0, 2 from epoch 1
    drawn = np.concatenate([prompt_indices(n, per_step, it, 3, "es", "epoch") for it in range(5)])  # [20]
    perm0, perm1 = (numpy_rng(3, "es", "epoch", e).permutation(n) for e in (0, 1))
    assert np.array_equal(drawn, np.concatenate([perm0, perm1]))
    assert sorted(drawn[:10]) == list(range(10)) and sorted(drawn[10:]) == list(range(10))
    assert not np.array_equal(drawn[:10], drawn[10:])  # reshuffled per epoch
    big = prompt_indices(3, 7, 0, 3, "es", "epoch")  # a batch larger than the data: epochs 0, 1 and 2's first
    perms = [numpy_rng(3, "es", "epoch", e).permutation(3) for e in range(3)]
    assert np.array_equal(big, np.concatenate([perms[0], perms[1], perms[2][:1]]))


def test_prompt_indices_errors():
    with pytest.raises(ValueError, match="order must be one of"):
        prompt_indices(4, 2, 0, 0, "es", "sorted")
    with pytest.raises(ValueError, match="got 0, 2, 0"):
        prompt_indices(0, 2, 0, 0, "es")


def test_prompt_order_is_a_validated_config_field():
    assert ESConfig().prompt_order == GRPOConfig().prompt_order == "random"
    for cls in (ESConfig, GRPOConfig):
        with pytest.raises(ValueError, match=rf"{cls.__name__}\.prompt_order must be one of"):
            cls(prompt_order="sorted")


def test_open_training_run_checks_first_and_returns_no_inputs_for_a_complete_run(tmp_path):
    from esreason_lib.es.loop import train_es
    from esreason_lib.paper.studies.presets import get_preset
    from esreason_lib.training.run_entry import open_training_run

    config = get_preset("smoke").config("es", iterations=1)
    with pytest.raises(ValueError, match="device"):
        open_training_run("es", replace(config, device="tpu9"), home=tmp_path)
    assert not list(tmp_path.iterdir())  # a bad input leaves no run directory
    run, inputs = open_training_run("es", config, home=tmp_path, progress=False)
    model, tokenizer, task, examples = inputs
    assert not run.is_complete() and examples and task.name == "countdown"
    run.release()  # this process trains it next, through train_es
    done = train_es(config, home=tmp_path, progress=False)
    again, nothing = open_training_run("es", config, home=tmp_path, progress=False)
    assert again.path == done.path and nothing is None
