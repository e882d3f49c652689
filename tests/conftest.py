"""Shared pytest fixtures."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

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


@pytest.fixture(scope="module")
def isolated_store(tmp_path_factory, request):
    """A module's temporary run folders: `store` (the run store its study writes into), `default` (where
    ESREASON_HOME points for the module, so that anything written outside the given store shows up: it must stay
    empty) and `root` (their parent, for any other scratch files); torch runs on one thread."""
    import torch  # here, so that test files which never touch torch do not import it

    root = tmp_path_factory.mktemp(request.module.__name__.rpartition(".")[2].removeprefix("test_"))
    mp = pytest.MonkeyPatch()
    mp.setenv("ESREASON_HOME", str(root / "default"))
    torch.set_num_threads(1)
    yield SimpleNamespace(root=root, store=root / "store", default=root / "default")
    mp.undo()


@pytest.fixture
def forbid_loading(monkeypatch):
    """A function `forbid_loading(*modules)` that replaces `load_model` in each given module (for this test only)
    by one that fails the test: to show that nothing is trained, pretrained or evaluated again."""

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded: something was trained or evaluated again")

    def forbid(*modules):
        assert modules, "name the modules whose load_model to replace"
        for module in modules:
            monkeypatch.setattr(module, "load_model", no_loading)

    return forbid


@pytest.fixture(scope="module")
def moving_preset():
    """The smoke preset with overrides under which both ES and GRPO move off the base (so that, e.g., there is
    forgetting to measure and there are updates to reset). Under the preset's binary reward nothing moves: the smoke
    model never solves countdown, so every reward is equal (and greedy ES members all decode alike); here a
    well-formed wrong answer earns 0.5 and ES samples its members with a larger sigma."""
    from esreason_lib.paper.studies.presets import get_preset

    return get_preset("smoke", **{"es.sigma": 0.05, "es.greedy": False, "es.reward_formatted": 0.5,
                                  "grpo.reward_formatted": 0.5})


@pytest.fixture(scope="module")
def tiny():
    """(char tokenizer, a factory of fresh tiny random Qwen2 models, seed 0); torch on one thread. Modules may
    define their own `tiny`."""
    import torch  # here, so that test files which never touch torch do not import it

    from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2

    torch.set_num_threads(1)
    tok = build_char_tokenizer()
    return tok, lambda: tiny_random_qwen2(len(tok), seed=0)


@pytest.fixture(scope="module")
def habit_countdown():
    """(qwen2-s-habit in float32, its tokenizer, the Countdown task it was pretrained on); torch on one thread.
    The model is shared by the module's tests: a test that perturbs it restores it."""
    import torch

    from esreason_lib.models.load import load_model
    from esreason_lib.models.zoo import get_spec
    from esreason_lib.tasks import get_task

    torch.set_num_threads(1)
    model, tok = load_model("qwen2-s-habit", device="cpu", dtype=torch.float32, progress=False)
    return model, tok, get_task("countdown", **get_spec("qwen2-s-habit").task_kwargs())
