"""The setup `train_es` and `train_grpo` share: device resolution and the model/task/examples a run starts from."""

from __future__ import annotations

import pytest
import torch

from esreason_lib.es import ESConfig
from esreason_lib.grpo import GRPOConfig
from esreason_lib.zoo import build_char_tokenizer, tiny_random_qwen2
from esreason_lib.training import DTYPES, resolve_device, training_inputs


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
    from esreason_lib.es import train_es
    from esreason_lib.grpo import train_grpo
    from esreason_lib.training import METHODS, trainer

    assert METHODS == ("es", "grpo")
    assert trainer("es") is train_es and trainer("grpo") is train_grpo
    with pytest.raises(ValueError, match="method 'base' is not one of"):
        trainer("base")
