"""A model's tensors by name (`named_params`): what ES perturbs and what an engine syncs. Ground floor: torch only."""

from __future__ import annotations

from typing import Mapping

import torch


def named_params(model_or_params) -> dict[str, torch.Tensor]:
    """The tensors ES perturbs, by name: a module's `named_parameters()` (tied weights appear once) or a dict.

    A dict whose entries overlap in memory (e.g. a `state_dict()` with tied embeddings) is rejected, since the
    shared elements would be perturbed twice; disjoint views of one tensor are accepted (`es.backends.vllm_engines`
    names the q, k and v rows of a fused qkv weight this way).
    """
    if isinstance(model_or_params, torch.nn.Module):
        return dict(model_or_params.named_parameters())
    if not isinstance(model_or_params, Mapping):
        raise TypeError(f"expected an nn.Module or a dict of tensors, got {type(model_or_params).__name__}")
    params, spans = dict(model_or_params), []
    for name, t in params.items():
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            raise TypeError(f"parameter {name!r} must be a floating-point tensor, got {t!r:.60}")
        last = sum((n - 1) * s for n, s in zip(t.shape, t.stride()))  # offset of the last element
        start = t.data_ptr()  # the byte span [start, end) the elements lie in
        spans.append((str(t.device), start, start + (last + 1) * t.element_size() if t.numel() else start, name))
    spans.sort()
    for (dev, _, end, prev), (dev2, start, _, name) in zip(spans, spans[1:]):
        if dev == dev2 and start < end:
            raise ValueError(f"parameters {prev!r} and {name!r} share storage (tied weights): their memory "
                             f"overlaps; pass each once")
    return params
