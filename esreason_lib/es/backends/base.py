"""Population evaluators: seeds in, rewards out. The ES update (`es.core.ES.tell`) never knows which one ran.

A backend is any callable `(model, population, examples, *, iteration) -> Evaluation`. `SequentialBackend`
perturbs the one model in place member by member (exact restore, see `es.noise`), generates on the step's
prompts and scores with the task. `es.backends.batched.BatchedBackend` decodes the whole population in one batched
forward with the same rewards (bit-identical in float32, greedy). `make_backend` picks one from an `ESConfig`.

All members and the center model share one sampling seed per iteration, `derive_seed(seed, "es", "sample",
iteration)` (common random numbers): with temperature sampling, reward differences between members then come
from their weights rather than from independent sampling luck. With greedy decoding the seed is unused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from esreason_lib.seeding import derive_seed
from esreason_lib.tasks.base import score_completion


@dataclass
class Evaluation:
    """The scores of one population on one batch of prompts."""

    rewards: np.ndarray
    """[N] float64: each member's mean shaped reward over the step's prompts (the fitness given to `tell`)."""
    correct: np.ndarray
    """[N, P] float64: each member's fraction of correct completions per prompt (0/1 with one greedy sample)."""
    fixup_frac: float = 0.0
    """Mean over members of the fraction of weights the exact restore had to fix up (remote backends report their
    workers' fractions)."""
    generations: int = 0
    """Completions generated for this evaluation."""


@runtime_checkable
class PopulationEvaluator(Protocol):
    """Scores every member (seed, sign) of `population` at theta + sign * sigma * eps(seed) on `examples`, sigma
    being the population's own (`population.sigma`, set by the strategy that asked for it).

    Must leave `model` bit-identical to how it found it and be deterministic in (population, examples,
    iteration)."""

    def __call__(self, model, population, examples: list[dict], *, iteration: int) -> Evaluation: ...


BACKEND_CLASSES = {
    "batched": "esreason_lib.es.backends.batched:BatchedBackend",
    "fast": "esreason_lib.es.backends.fast:FastBackend",
    "native": "esreason_lib.es.backends.fast:NativeBackend",
    "sequential": "esreason_lib.es.backends.sequential:SequentialBackend",
    "ray": "esreason_lib.es.backends.ray_actors:RayBackend",
    "vllm": "esreason_lib.es.backends.vllm_engines:VLLMBackend",
    "ray-vllm": "esreason_lib.es.backends.ray_actors:RayBackend",
}
"""The registry of population backends, as the tasks' (`tasks._REGISTRY`): `ESConfig.backend` name -> "module:class"
of the backend, imported only when a run uses it (`es.backends.registry.make_backend` calls its
`from_config(config, task, tokenizer)`). A new backend is a module and one line here."""
BACKENDS = ("auto", *BACKEND_CLASSES)
"""Values of `ESConfig.backend`: "auto" is "batched" for greedy float32 runs of a Qwen2ForCausalLM (where it is
exact and faster) and "sequential" otherwise (any causal LM); "fast" is `es.backends.fast.FastBackend` (greedy;
batched with fused, reordered float ops: faster, its completions equal the sequential path's on >= 99.5% of rows,
not all); "native" is `es.backends.fast.NativeBackend` ("fast" with its attention in a C kernel compiled at first
use: the fastest, held to the same agreement); "ray" scores members on `ESConfig.workers` Ray actors
(`es.backends.ray_actors`, extra `ray`); "vllm" scores them with one vLLM engine, perturbed in place
(`es.backends.vllm_engines`, extra `vllm`); "ray-vllm" runs one such engine in each of the `workers` Ray actors
(one per GPU; extras `ray` and `vllm`)."""
CENTER_FORWARD = {"fast": "fused", "native": "native"}
"""`generate`'s forward for the unperturbed model under each backend that scores members with a forward of its own
(the others: "hf"), so that the center is scored the way its members are."""
EXACT_BACKENDS = ("auto", "batched", "sequential", "ray")
"""The backends whose rewards are bit-identical to `sequential`'s (tested): which of them scored a run is an execution
setting, left out of its identity (`store.identity.execution`); vLLM's kernels and sampler give other numbers."""


def sample_seed(seed: int, iteration: int) -> int:
    """The sampling seed shared by every member (and the center) at `iteration` of the run seeded `seed`."""
    return derive_seed(int(seed), "es", "sample", int(iteration))


def score_center(model, tokenizer, task, examples: list[dict], config, iteration: int, forward: str = "hf"):
    """The unperturbed model's (rewards [P], correct [P], mean token entropy) on `examples` at `iteration` of the
    run `config` (an `ESConfig`) describes, sampled as its members are (`sample_seed`); `forward` is `generate`'s.
    A backend that decodes elsewhere (vLLM engines, Ray actors) offers a method `score_center(model, examples, *,
    iteration)` returning the same three, which `es.loop.es_step` calls instead."""
    return score_examples(model, tokenizer, task, examples, greedy=config.greedy, temperature=config.temperature,
                          max_new_tokens=config.max_new_tokens or task.max_new_tokens,
                          seed=sample_seed(config.seed, iteration), with_entropy=True, forward=forward)


def score_examples(model, tokenizer, task, examples: list[dict], *, greedy: bool, temperature: float,
                   max_new_tokens: int, seed: int, with_entropy: bool = False, forward: str = "hf"):
    """Generate one completion per example with `model` and score it: (rewards [P], correct [P]) float64.

    With `with_entropy`, also returns the mean full-distribution token entropy (nats) over generated tokens.
    `forward` is `generate`'s (`CENTER_FORWARD` names the one each backend's members are scored with).
    """
    from esreason_lib.metrics import mean_token_entropy
    from esreason_lib.models.generation import Forward, Sampling, generate

    prompts = [task.prompt(ex, tokenizer) for ex in examples]
    sampling = Sampling(temperature=temperature, greedy=greedy, max_new_tokens=max_new_tokens)
    ro = generate(model, tokenizer, prompts, sampling, stop=task.stop, seed=seed, forward=Forward(kind=forward))
    scores = [score_completion(task, c, ex) for c, ex in zip(ro.completions, examples)]
    rewards = np.array([r for r, _ in scores], dtype=np.float64)  # [P]
    correct = np.array([ok for _, ok in scores], dtype=np.float64)  # [P]
    if with_entropy:
        return rewards, correct, mean_token_entropy(ro.entropies, ro.completion_mask)
    return rewards, correct  # [P], [P]
