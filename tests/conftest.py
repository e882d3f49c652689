"""Shared pytest fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def shared_data() -> Path:
    """The read-only reference data folder `<repo>/../shared/data` (skips the test when it is absent)."""
    path = (Path(__file__).resolve().parents[1] / ".." / "shared" / "data").resolve()
    if not path.is_dir():
        pytest.skip(f"reference data not found at {path}")
    return path


@pytest.fixture
def state_pair() -> tuple[dict, dict]:
    """A hand-sized (base, tuned) state-dict pair: the embedding is unchanged, the MLP weight moves by
    +0.1, 0, -0.5, +0.01 (3 of 4 coordinates change) and the norm weight by 0, +2.0."""
    import torch  # here, so that test files which never touch torch do not import it

    base = {"model.embed_tokens.weight": torch.tensor([[1.0, 2.0], [3.0, 4.0]]),
            "model.layers.0.mlp.up_proj.weight": torch.tensor([1.0, 1.0, 1.0, 1.0]),
            "model.norm.weight": torch.tensor([1.0, 1.0])}
    tuned = {"model.embed_tokens.weight": torch.tensor([[1.0, 2.0], [3.0, 4.0]]),
             "model.layers.0.mlp.up_proj.weight": torch.tensor([1.1, 1.0, 0.5, 1.01]),
             "model.norm.weight": torch.tensor([1.0, 3.0])}
    return base, tuned


class _ChatTokenizer:
    """A stand-in for a tokenizer with a chat template: the user turn between <|user|> and <|assistant|>."""

    chat_template = "{{ messages }}"

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        assert tokenize is False and add_generation_prompt is True
        return "<|user|>" + messages[0]["content"] + "<|assistant|>"


@pytest.fixture
def chat_tok() -> _ChatTokenizer:
    """A fake chat tokenizer (`render_prompt` takes its chat branch): "<|user|>{content}<|assistant|>"."""
    return _ChatTokenizer()
