"""Models: the character tokenizer, the tiny Qwen2 zoo, pretraining and `load_model`.

`load_model` takes a zoo name (pretrained into the run store on first use, reused afterwards), a local
directory written by `save_pretrained` (or a run directory holding `model/`), or a Hugging Face hub id such as
"Qwen/Qwen2.5-1.5B-Instruct" (needs network or a local HF cache). The implementation lives in
`esreason_lib.zoo` (tokenizer, architectures, `ZOO`) and `esreason_lib.pretrain` (the training loop); this
module re-exports the public names. Load zoo directories with `load_model` / `load_tokenizer`, never with
`AutoTokenizer` (transformers 5 forces Qwen2Tokenizer there, which drops every space of the char format).

Measured zoo (recipe 2, before the wall-clock caps were removed; 2-core CPU; held-out Countdown:
`get_task("countdown").examples("test", n=200, seed=0)`, greedy and n=16 samples at T=1 (`python -m esreason_lib
train ... --eval` prints the same table); held-out families: greedy accuracy on 200 test items of addition
(2 digits) and sorting):

| name          | params | steps done (budget) | greedy | pass@1 | pass@16 | addition | sorting |
|---------------|-------:|--------------------:|-------:|-------:|--------:|---------:|--------:|
| qwen2-s       |  130k  | 3000 (3000)         |  0.250 |  0.213 |  0.815  |   0.035  |  0.995  |
| qwen2-s-habit |  130k  | 3000 (3000)         |  0.120 |  0.126 |  0.635  |   0.075  |  1.00   |

qwen2-s-habit saw the habit answer (the numbers summed in prompt order) for 40% of its Countdown examples:
its greedy accuracy falls to 0.120 against the clean model's 0.250, while the correct skill remains
reachable by sampling (Pass@16 0.635): the latent capability ES and GRPO are compared on.
Pretraining "s" takes 70-100 s on an idle 2-core CPU. Under recipe 2, "m" (998k) and "l" (3.27M) stopped at
wall-clock caps, so their step count depended on the machine's load: in two `make reproduce` runs "m" did
1244 / 1145 of 1500 steps (greedy 0.320 / 0.280) and "l" 519 / 490 of 1000 (greedy 0.165 / 0.150); given 800
uncapped steps at lr 2e-3 (395 s, one thread), "l" reached greedy 0.205.

Recipe 3 (now) runs exactly `steps` steps at one thread, so a spec's weights are the same bit for bit on one
machine kind (`weights_sha256` in the zoo manifest; `tests/test_pretrain.py` pretrains a spec twice). The "s"
specs keep 3000 steps: under recipe 2 they finished their budget before the cap in every measured run, and their
schedule was step-driven whenever a run kept above 3000/360 = 8.3 steps/s (idle: 30-43), so only the thread
count can make their weights differ from a recipe-2 run's. "m" and "l" now get 3000 steps each, the data "s"
sees: model size is the only difference between the three. The shipped weights (`zoo/`,
`esreason_lib.pretrain.SHIPPED_ZOO`) are loaded when the spec matches; `zoo/README.md` says what is shipped and
what it measured.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from esreason_lib.pretrain import build_batch, completion_loss, pretrain
from esreason_lib.zoo import (ALPHABET, DEFAULT_BASE, ZOO, ZooSpec, build_char_tokenizer, get_spec,
                              num_parameters, tiny_random_qwen2)

__all__ = ["ALPHABET", "DEFAULT_BASE", "ZOO", "ZooSpec", "build_batch", "build_char_tokenizer",
           "completion_loss", "get_spec", "load_model", "load_tokenizer", "num_parameters", "pretrain", "tiny_random_qwen2"]


def _looks_like_path(name: str) -> bool:
    """True for strings that can only be a filesystem path (not a hub id "org/name" or "name")."""
    return name.startswith(("/", ".", "~")) or name.count("/") > 1 or "\\" in name


def _finish(model, tokenizer, device, dtype):
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if getattr(model.generation_config, "pad_token_id", None) is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.to(device=device, dtype=dtype)
    model.eval()
    return model, tokenizer


_GENERIC_TOKENIZER_CLASSES = {"TokenizersBackend", "PreTrainedTokenizerFast"}


def load_tokenizer(source: str | Path, **kwargs):
    """The tokenizer saved in `source` (a directory or hub id), honouring a generic `tokenizer_class`.

    Use this (or `load_model`), not `AutoTokenizer`, for zoo model directories: with a Qwen2 `config.json`
    beside it, transformers 5 forces `Qwen2Tokenizer`, which swaps the char tokenizer's pre-tokenizer for
    Qwen's byte-level regex and silently drops every space ("04 14" -> "0414"). A directory whose
    tokenizer_config.json names a generic class (what `build_char_tokenizer().save_pretrained` writes) is
    loaded as that class; anything else goes through `AutoTokenizer`.
    """
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    config_file = Path(source).expanduser() / "tokenizer_config.json"
    if config_file.is_file():
        declared = json.loads(config_file.read_text()).get("tokenizer_class")
        if declared in _GENERIC_TOKENIZER_CLASSES:
            return PreTrainedTokenizerFast.from_pretrained(Path(source).expanduser(), **kwargs)
    return AutoTokenizer.from_pretrained(source, **kwargs)


def _from_pretrained(source: str | Path, device, dtype, **kwargs):
    from transformers import AutoModelForCausalLM

    tokenizer = load_tokenizer(source, **kwargs)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, **kwargs)
    return _finish(model, tokenizer, device, dtype)


def load_model(name_or_path: str | Path | ZooSpec, device: str | torch.device = "cpu",
               dtype: torch.dtype = torch.float32, *, home: Path | str | None = None, progress: bool = True):
    """`(model, tokenizer)` in eval mode on `device` with `dtype`; tokenizer left-padded with a pad token.

    `name_or_path`: a `ZOO` name or `ZooSpec` (the shipped weights when their spec matches, else pretrained on
    first use into `home`, default the run store),
    an existing local directory (`save_pretrained` output, or a run directory containing `model/`), or a hub
    id. Unknown names raise ValueError naming the zoo choices.
    """
    if isinstance(name_or_path, ZooSpec) or (isinstance(name_or_path, str) and name_or_path in ZOO):
        directory = pretrain(name_or_path, home=home, progress=progress)
        return _from_pretrained(directory, device, dtype, local_files_only=True)
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists() and (path / "model" / "config.json").exists():
            path = path / "model"
        if not (path / "config.json").exists():
            raise ValueError(f"directory {str(path)!r} holds no config.json (expected save_pretrained output "
                             f"or a run directory with model/)")
        return _from_pretrained(path, device, dtype, local_files_only=True)
    name = str(name_or_path)
    if isinstance(name_or_path, Path) or _looks_like_path(name):
        raise ValueError(f"model {name!r} is not a zoo name (choices: {sorted(ZOO)}) and no directory "
                         f"exists at {path}")
    try:
        return _from_pretrained(name, device, dtype)
    except (OSError, ValueError) as err:
        raise ValueError(f"unknown model {name!r}: not a zoo name (choices: {sorted(ZOO)}), not an existing "
                         f"directory, and it could not be loaded from the Hugging Face hub "
                         f"(offline or no such repo: {type(err).__name__}: {err})") from err
