"""Loading a model and its tokenizer: `load_model` / `load_tokenizer` for zoo names, local directories and hub ids.

`load_model` takes a zoo name (a trained-here base pretrained into the run store on first use, or a pretrained base
converted from its package's GGUF on first use, `models.pretrained`; reused afterwards), a local
directory written by `save_pretrained` (or a run directory holding `model/`), or a Hugging Face hub id such as
"Qwen/Qwen2.5-1.5B-Instruct" (needs network or a local HF cache). The implementation lives in
`esreason_lib.models.zoo` (tokenizer, architectures, `ZOO`) and `esreason_lib.models.pretrain` (the training loop);
import those names from there. Load zoo directories with `load_model` / `load_tokenizer`, never with
`AutoTokenizer` (transformers 5 forces Qwen2Tokenizer there, which drops every space of the char format).

What the zoo models reach (steps, loss, greedy accuracy and Pass@K per size) is recorded in notebook 00 and
`zoo/README.md`. Zoo pretraining runs exactly `steps` steps at one thread, so a spec's weights are the same bit
for bit on one machine kind (`weights_sha256` in the zoo manifest); the shipped weights (`zoo/`,
`esreason_lib.models.pretrain.SHIPPED_ZOO`) are loaded when the spec matches.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from urllib.parse import urlparse

import torch

from esreason_lib.models.pretrain import pretrain
from esreason_lib.models.zoo import (
    PRETRAINED,
    ZOO,
    PretrainedSpec,
    ZooSpec,
    get_spec,
    quiet_transformers,
    zoo_names,
)
from esreason_lib.store.identity import resolve_run_ref


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

    with quiet_transformers():
        tokenizer = load_tokenizer(source, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, **kwargs)
    return _finish(model, tokenizer, device, dtype)


def _model_directory(name_or_path, field: str) -> Path | None:
    """The save_pretrained directory `name_or_path` names (a run directory's model/ included), None for a string
    that may be a hub id; ValueError naming `field` for a directory without config.json or a path that is not."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists() and (path / "model" / "config.json").exists():
            path = path / "model"
        if not (path / "config.json").exists():
            raise ValueError(f"{field}: directory {str(path)!r} holds no config.json (expected save_pretrained "
                             f"output or a run directory with model/)")
        return path
    name = str(name_or_path)
    if isinstance(name_or_path, Path) or _looks_like_path(name):
        raise ValueError(f"{field}: {name!r} is not a zoo name (choices: {zoo_names()}) and no directory exists "
                         f"at {path}")
    return None


def _hub_unavailable(timeout_s: float = 3.0) -> str | None:
    """Why the Hugging Face hub cannot be reached (HF_HUB_OFFLINE set, or no TCP connection to its endpoint
    within `timeout_s`), or None when it answers: a hub load would otherwise spend about a minute retrying."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return "HF_HUB_OFFLINE is set"
    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)),
                                 timeout=timeout_s).close()
    except OSError as err:
        return f"{constants.ENDPOINT} is unreachable ({type(err).__name__}: {err})"
    return None


def _hub_error(name: str, field: str, why: str) -> ValueError:
    return ValueError(f"{field}: unknown model {name!r}: not a zoo name (choices: {zoo_names()}), not an existing "
                      f"directory, and not loadable from the Hugging Face hub ({why})")


def model_context_length(name_or_path: str | Path | ZooSpec | PretrainedSpec, *,
                         field: str = "model") -> int | None:
    """max_position_embeddings of the model `load_model(name_or_path)` would load, without loading (or
    pretraining) it; None when its config does not say. A name that is neither a zoo name, nor a directory, nor
    a hub id in the local cache or on a reachable hub is a ValueError naming `field` (in seconds, not retries)."""
    from transformers import AutoConfig

    if isinstance(name_or_path, ZooSpec) or (isinstance(name_or_path, str) and name_or_path in ZOO):
        return get_spec(name_or_path).max_position_embeddings
    if isinstance(name_or_path, PretrainedSpec) or (isinstance(name_or_path, str) and name_or_path in PRETRAINED):
        return PRETRAINED.get(name_or_path, name_or_path).max_position_embeddings
    source = _model_directory(name_or_path, field) or str(name_or_path)
    try:
        config = AutoConfig.from_pretrained(source, local_files_only=True)
    except (OSError, ValueError) as err:
        if isinstance(source, Path):
            raise ValueError(f"{field}: cannot read {source / 'config.json'}: {err}") from None
        why = _hub_unavailable()
        if why is not None:
            raise _hub_error(source, field, why) from None
        try:
            config = AutoConfig.from_pretrained(source)
        except (OSError, ValueError) as hub_err:
            raise _hub_error(source, field, f"{type(hub_err).__name__}: {hub_err}") from None
    return getattr(config, "max_position_embeddings", None)


def load_model(name_or_path: str | Path | ZooSpec | PretrainedSpec, device: str | torch.device = "cpu",
               dtype: torch.dtype = torch.float32, *, home: Path | str | None = None, progress: bool = True):
    """`(model, tokenizer)` in eval mode on `device` with `dtype`; tokenizer left-padded with a pad token.

    `name_or_path`: a `ZOO` name or `ZooSpec` (the shipped weights when their spec matches, else pretrained on
    first use into `home`, default the run store), a `PRETRAINED` name or `PretrainedSpec` (converted from its
    package's GGUF on first use into `home`, its hashes checked at every load: `models.pretrained.convert`; an
    ImportError saying how to install the package when it is missing),
    an existing local directory (`save_pretrained` output, or a run directory containing `model/`), a run store
    reference `run:<kind>-<hash>/model` (as stored configs hold them; resolved under `home`), or a hub
    id (from the local cache first; an offline or unreachable hub fails at once). Unknown names raise
    ValueError naming the zoo choices.
    """
    if isinstance(name_or_path, ZooSpec) or (isinstance(name_or_path, str) and name_or_path in ZOO):
        directory = pretrain(name_or_path, home=home, progress=progress)
        return _from_pretrained(directory, device, dtype, local_files_only=True)
    if isinstance(name_or_path, PretrainedSpec) or (isinstance(name_or_path, str) and name_or_path in PRETRAINED):
        from esreason_lib.models.pretrained import convert

        return _from_pretrained(convert(name_or_path, home=home), device, dtype, local_files_only=True)
    name_or_path = resolve_run_ref(name_or_path, home)
    directory = _model_directory(name_or_path, "model")
    if directory is not None:
        return _from_pretrained(directory, device, dtype, local_files_only=True)
    name = str(name_or_path)
    try:
        return _from_pretrained(name, device, dtype, local_files_only=True)
    except (OSError, ValueError):
        pass  # not in the local cache: try the hub when it can answer
    why = _hub_unavailable()
    if why is not None:
        raise _hub_error(name, "model", why)
    try:
        return _from_pretrained(name, device, dtype)
    except (OSError, ValueError) as err:
        raise _hub_error(name, "model", f"no such repo? {type(err).__name__}: {err}") from err
