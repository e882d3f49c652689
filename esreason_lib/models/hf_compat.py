"""Transformers version compatibility: the KV-cache keyword and output field, detected once at import.

transformers 5.24 renamed the model forward's `past_key_values=` keyword and output field to `cache`, and
`masking_utils.create_causal_mask`'s `past_key_values` argument to `cache`. The `vllm` extra resolves to
transformers 5.20.2-5.22.x (vllm 0.33 / 0.34 pin < 5.21 / < 5.23), which know only `past_key_values`; newer
releases know `cache` (and, for now, still accept `past_key_values` with a deprecation warning). The library
passes and reads the cache through these names only, so it runs unchanged on either side of the rename.
"""

from __future__ import annotations

import inspect

from transformers.masking_utils import create_causal_mask
from transformers.modeling_outputs import CausalLMOutputWithPast

CACHE_KW = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"
"""The model forward's KV-cache keyword, which is also its output's field name ("cache" from transformers 5.24)."""

MASK_CACHE_KW = "cache" if "cache" in inspect.signature(create_causal_mask).parameters else "past_key_values"
"""`create_causal_mask`'s KV-cache keyword."""


def with_cache(cache) -> dict:
    """{keyword: cache} to splat into a model forward call."""
    return {CACHE_KW: cache}


def output_cache(out):
    """The KV cache a model forward returned (`out.cache` or `out.past_key_values`)."""
    return getattr(out, CACHE_KW)


def causal_mask(*, config, inputs_embeds, attention_mask, cache, position_ids):
    """`create_causal_mask` with the cache passed under this version's keyword."""
    return create_causal_mask(config=config, inputs_embeds=inputs_embeds, attention_mask=attention_mask,
                              position_ids=position_ids, **{MASK_CACHE_KW: cache})


def set_checkpointing(model, on: bool) -> None:
    """Turn non-reentrant activation checkpointing of `model`'s decoder blocks on or off (`activation_checkpointing_*`
    from transformers 5.24, `gradient_checkpointing_*` before)."""
    new = hasattr(model, "activation_checkpointing_enable")
    if not on:
        (model.activation_checkpointing_disable if new else model.gradient_checkpointing_disable)()
    elif new:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def is_checkpointing(model) -> bool:
    """Whether activation checkpointing is on for `model`."""
    return bool(getattr(model, "is_activation_checkpointing", None) if hasattr(model, "activation_checkpointing_enable")
                else model.is_gradient_checkpointing)
