"""What scripts/gpu_check.py builds and probes: the random Qwen2 of a shape (`SHAPES`, `VOCAB`, `build_model`),
the character tokenizer padded to that vocabulary (`build_tokenizer`), the synthetic GSM8K rows (`write_gsm8k`) and
the installed packages (`installed`)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
from pathlib import Path

SHAPES = {
    "tiny": dict(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=128,
                 tie_word_embeddings=False),  # head size 32: the smallest vLLM's attention kernels take
    "qwen2.5-1.5b": dict(hidden_size=1536, num_layers=28, num_heads=12, num_kv_heads=2, intermediate_size=8960,
                         tie_word_embeddings=True),
}
"""Random model shapes (Qwen2 keyword arguments of `zoo.qwen2_config`)."""
VOCAB = {"tiny": None, "qwen2.5-1.5b": 151_936}
"""Vocabulary size per shape (None: the character tokenizer's own)."""


def write_gsm8k(root: Path, n: int = 64) -> None:
    """`n` synthetic GSM8K-format rows ("What is a + b?", "... #### a+b") as `root/gsm8k/{train,test}.jsonl`."""
    (root / "gsm8k").mkdir(parents=True, exist_ok=True)
    pairs = [(a, a % 7 + 2) for a in range(3, 3 + n)]
    rows = [{"question": f"What is {a} + {b}?", "answer": f"{a} + {b} = {a + b}\n#### {a + b}"} for a, b in pairs]
    for split in ("train", "test"):
        (root / "gsm8k" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def build_tokenizer(vocab_size: int | None):
    """The character tokenizer, padded with filler tokens `<x{id}>` to `vocab_size` entries (None: as is)."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from esreason_lib.models.zoo import build_char_tokenizer

    base = build_char_tokenizer()
    if vocab_size is None:
        return base
    vocab = dict(base.get_vocab())
    vocab.update({f"<x{i}>": i for i in range(len(vocab), vocab_size)})
    backend = Tokenizer(models.WordLevel(vocab, unk_token=None))
    backend.pre_tokenizer, backend.decoder = base.backend_tokenizer.pre_tokenizer, base.backend_tokenizer.decoder
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token=base.pad_token, eos_token=base.eos_token,
                                   padding_side="left", clean_up_tokenization_spaces=False, model_max_length=1_000_000)


def build_model(shape: str, device: str, tokenizer):
    """A random Qwen2 of `shape` in bfloat16 on `device` (seed 0) with `tokenizer`'s vocabulary."""
    import torch
    from transformers import Qwen2ForCausalLM

    from esreason_lib.models.zoo import qwen2_config

    config = qwen2_config(len(tokenizer), max_position_embeddings=4096, **SHAPES[shape])
    with torch.random.fork_rng(devices=[]), torch.device(device):
        torch.manual_seed(0)
        model = Qwen2ForCausalLM._from_config(config, dtype=torch.bfloat16)
    model.generation_config.pad_token_id, model.generation_config.eos_token_id = 0, 1
    model.generation_config.bos_token_id = None
    return model.eval()


def installed(name: str) -> str | None:
    """The installed version of distribution `name` (None when absent)."""
    if importlib.util.find_spec(name) is None:
        return None
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
