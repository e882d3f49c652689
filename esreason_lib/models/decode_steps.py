"""Generation's forward paths behind one small interface, the decode loop's only view of the model.

A step object serves one chunk of rows (row i of the chunk continues prompt `expand[i]`) and keeps its own KV cache,
key mask and positions:

- `prefill(ids, mask, expand)`: the last-position logits [r, V] of each row's prompt (`ids`, `mask` [u, Lp]: the
  chunk's distinct left-padded prompts, each forwarded once);
- `step(tok, live)`: the logits [r, V] after appending token `tok` [r] to each running row (`live` [r] False: the
  row has finished, its token is padding and masked as a key);
- `select(keep)`: keep running rows `keep` [r'] (finished rows are dropped between steps).

`make_step` picks the class a `sampling.Forward` names: the model's modules with their KV cache (`HFStep`) or
recomputing every prefix (`HFRecomputeStep`), the fused forward of `models.fused_qwen2` (`FusedStep`: float32 Qwen2
or Llama, its attention optionally in `models.native`'s C kernel) and that forward sharing running prefixes
(`SharedPrefixStep`). Another forward (a model family the fused forward does not cover, a compiled graph) is one
more class with these three methods.
"""

from __future__ import annotations

import torch
import transformers

from esreason_lib.models.fused_qwen2 import FusedQwen2, KVBuffers
from esreason_lib.models.hf_compat import output_cache, with_cache
from esreason_lib.models.sampling import Forward
from esreason_lib.models.tokens import mask_positions, unique_rows


class _Rows:
    """The running rows' key mask and newest position, kept by each cached step."""

    def _start(self, mask, expand) -> None:
        self.attn = mask[expand]  # [r, L] every key's mask
        self.pos = mask_positions(self.attn)[:, -1:]  # [r, 1] the newest position

    def _advance(self, live) -> None:
        self.attn = torch.cat([self.attn, live[:, None]], dim=1)  # [r, L+1]
        self.pos = self.pos + 1

    def _keep(self, keep) -> None:
        self.attn, self.pos = self.attn[keep], self.pos[keep]


class HFStep(_Rows):
    """The model's own modules with a `transformers.DynamicCache`: each distinct prompt prefilled once, its cache
    copied to its rows."""

    def __init__(self, model):
        self.model = model
        self.cache = transformers.DynamicCache(config=model.config)

    def prefill(self, ids, mask, expand) -> torch.Tensor:
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=mask_positions(mask),
                         **with_cache(self.cache), use_cache=True, logits_to_keep=1)
        self.cache = output_cache(out)
        self.cache.batch_select_indices(expand)
        self._start(mask, expand)
        return out.logits[expand, -1]  # [r, V]

    def step(self, tok, live) -> torch.Tensor:
        self._advance(live)
        out = self.model(input_ids=tok[:, None], attention_mask=self.attn, position_ids=self.pos,
                         **with_cache(self.cache), use_cache=True, logits_to_keep=1)
        self.cache = output_cache(out)
        return out.logits[:, -1]  # [r, V]

    def select(self, keep) -> None:
        self.cache.batch_select_indices(keep)
        self._keep(keep)


class HFRecomputeStep:
    """The model's own modules without a cache: every step forwards each row's whole sequence (a reference)."""

    def __init__(self, model):
        self.model = model

    def prefill(self, ids, mask, expand) -> torch.Tensor:
        self.seq, self.attn = ids[expand], mask[expand]  # [r, L]
        self.pos = mask_positions(self.attn)  # [r, L]
        return self._forward()

    def step(self, tok, live) -> torch.Tensor:
        self.seq = torch.cat([self.seq, tok[:, None]], dim=1)  # [r, L+1]
        self.pos = torch.cat([self.pos, self.pos[:, -1:] + 1], dim=1)
        self.attn = torch.cat([self.attn, live[:, None]], dim=1)
        return self._forward()

    def select(self, keep) -> None:
        self.seq, self.attn, self.pos = self.seq[keep], self.attn[keep], self.pos[keep]

    def _forward(self) -> torch.Tensor:
        out = self.model(input_ids=self.seq, attention_mask=self.attn, position_ids=self.pos, **with_cache(None),
                         use_cache=False, logits_to_keep=1)
        return out.logits[:, -1]  # [r, V]


class FusedStep(_Rows):
    """`models.fused_qwen2.FusedQwen2` with one member (`weights`: `fused_qwen2.model_weights(model)`), its KV
    cache of `capacity` positions in `buffers`; with `native`, its attention in `models.native`'s C kernel."""

    def __init__(self, model, weights: list, capacity: int, buffers: KVBuffers, native: bool):
        self.net = FusedQwen2(model, weights, capacity, buffers=buffers, native=native)

    def prefill(self, ids, mask, expand) -> torch.Tensor:
        logits = self._prefill(ids, mask)  # [u, V]
        self._start(mask, expand)
        self.net.select(expand[None])
        return logits[expand]  # [r, V]

    def step(self, tok, live) -> torch.Tensor:
        self._advance(live)
        return self._forward(tok, self.pos, self.attn)

    def select(self, keep) -> None:
        self.net.select(keep[None])
        self._keep(keep)

    def _prefill(self, ids, mask) -> torch.Tensor:
        """Last-position logits [u, V] of the distinct prompts `ids`, `mask` [u, Lp], one cache row each."""
        lp = ids.shape[1]
        causal = torch.ones(lp, lp, dtype=torch.bool, device=ids.device).tril()  # [Lp, Lp]
        full = None if bool(mask.all()) else causal & mask[:, None, None, :]  # [u, 1, Lp, Lp]
        logits = self.net(ids[None], mask_positions(mask)[None], full, None)[0]  # [u, V]
        self.net.length = lp
        return logits

    def _forward(self, tok, pos, attn) -> torch.Tensor:
        """Logits [c, V] after token `tok` [c] at positions `pos` [c, 1] of cache rows 0..c-1; `attn` [c, T]."""
        mask = None if bool(attn.all()) else attn[:, None, None, :]  # [c, 1, 1, T]
        logits = self.net(tok[:, None][None], pos[None], mask, None)[0]
        self.net.length += 1
        return logits


class SharedPrefixStep(FusedStep):
    """`FusedStep` whose cache holds one row per distinct running prefix (prompt and tokens so far): each step
    forwards the distinct prefixes' newest tokens and hands every running row its prefix's logits (`slot`), so the
    rows, their draws and their compaction are those of the unshared decode."""

    def prefill(self, ids, mask, expand) -> torch.Tensor:
        logits = self._prefill(ids, mask)  # [u, V]
        self._start(mask, expand)
        self.slot, self.slots = expand, ids.shape[0]  # [r] each running row's cache row; cache rows
        return logits[self.slot]

    def step(self, tok, live) -> torch.Tensor:
        self._advance(live)
        vocab = self.net.fused[1].shape[-1]
        _, first, inverse = unique_rows(self.slot * vocab + tok)  # [u'] one row of each distinct prefix, [r]
        parents = self.slot[first]  # [u'] the cache row each distinct prefix extends
        if len(parents) != self.slots or not torch.equal(parents, torch.arange(self.slots, device=tok.device)):
            self.net.select(parents[None])  # no copy when every prefix has exactly one continuation
        self.slots, self.slot = len(parents), inverse
        return self._forward(tok[first], self.pos[first], self.attn[first])[self.slot]

    def select(self, keep) -> None:
        self.slot = self.slot[keep]
        self._keep(keep)


def make_step(model, forward: Forward, weights: list | None, capacity: int, buffers: KVBuffers | None):
    """A fresh step object of the path `forward` names, for a chunk of at most `capacity` positions per row
    (`weights` and `buffers`: the fused forward's folded weights and KV cache storage; None for kind "hf")."""
    if forward.kind == "hf":
        return HFStep(model) if forward.use_cache else HFRecomputeStep(model)
    cls = SharedPrefixStep if forward.share_prefixes else FusedStep
    return cls(model, weights, capacity, buffers, native=forward.kind == "native")
