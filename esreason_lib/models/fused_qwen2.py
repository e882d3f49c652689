"""A fused float32 forward of the Qwen2 and Llama families over member-stacked weights: fewer, larger ops than Hugging
Face's modules, equal to them up to float rounding (not bit for bit).

The two families share one architecture (RMSNorm, rotary embeddings, grouped-query attention, a SwiGLU MLP); Qwen2's
q, k and v projections carry biases, a Llama's (without `attention_bias` or `mlp_bias`: SmolLM2, Llama 3) carry
none. `FAMILIES` names each family's class and what its projections hold; everything below is shared.

`fused_weights` turns per-name weight stacks ([N, *shape]: N members, N = 1 for one model) into per-layer fused
tensors, and `FusedQwen2` runs the forward with a preallocated KV cache. It serves the population backend
`backend="fast"` (`es.backends.fast`, N members) and generation's `decode_steps.FusedStep` (one model: evaluation's
sampling, `Forward(kind="fused")`); with `native=True` (backend "native", forward "native") each layer's rotary,
cache write and attention run in the C kernel of `models.native` instead of torch ops. What it changes against the
Hugging Face forward:

- every linear layer is one `bmm` over the whole [N, R] row grid, padded rows included; gate and up are one gemm;
- each RMSNorm weight is folded into the next linear layer's weight (W_i diag(g_i)), and the final one into the
  output head; the norm itself is `F.rms_norm`; the attention's 1 / sqrt(D) is folded into the q weights;
- rotary embeddings are folded into the q|k projection: the fused weight also outputs rotate_half(q) and
  rotate_half(k) (rows permuted and negated), so rotary is q * cos + q_rot * sin on one [rows, (heads + kv) D] slab,
  with cos and sin looked up in a table of every cache position (built once; one row of it, broadcast, when every
  row sits at the same positions);
- the residual adds are fused into the o_proj and down_proj gemms (`baddbmm(x, ...)`);
- attention is two matmuls and a softmax per (row, kv head) with an additive mask (grouped-query, no repeat of
  keys; one 3-D `bmm` over all pairs that reads the cache slices in place), the same masked kernel for every row
  (Hugging Face switches kernels); below 16 keys the softmax is computed from its definition (`_softmax`);
- the prefill's last layer runs o_proj and the MLP on the last position only (the only one whose output is read);
- the forward runs members in chunks of about `FusedQwen2.rows` token positions.

Each of these changes float rounding (by ~1e-6 relative), so a greedy token can differ where two logits nearly tie
and a sampled one where a uniform draw falls within ~1e-6 of a cumulative-probability boundary.

The KV cache lives in `KVBuffers`, which a caller can keep across forwards; row compaction copies the positions the
kept rows hold into the buffers' other half. This changes no value (measured: bit-identical completions, logprobs
and entropies); a fresh 40 MB cache per population step at N = 32 cost ~6% of the step in page faults.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from transformers.models.llama.modeling_llama import LlamaForCausalLM
from transformers.models.qwen2.modeling_qwen2 import Qwen2ForCausalLM

from esreason_lib.models.native import RotaryAttention

FAMILIES = {Qwen2ForCausalLM: "q, k and v biases", LlamaForCausalLM: "no biases"}
"""The model classes `fused_weights` folds -> the biases their linear layers hold (a Llama only without
`config.attention_bias` and `config.mlp_bias`, the Llama 3 and SmolLM2 layout)."""


def check_fusable(model, who: str) -> None:
    """TypeError unless `model` is a float32 model of a class in `FAMILIES` with the biases listed there (the
    architectures and dtype `fused_weights` folds)."""
    if type(model) not in FAMILIES:
        names = " or ".join(cls.__name__ for cls in FAMILIES)
        raise TypeError(f"{who}: needs a {names}, got {type(model).__name__}")
    if isinstance(model, LlamaForCausalLM):
        for flag in ("attention_bias", "mlp_bias"):
            if getattr(model.config, flag, False):
                raise TypeError(f"{who}: needs a Llama without biases, got config.{flag}=True")
    if model.dtype != torch.float32:
        raise TypeError(f"{who}: needs a float32 model, got {model.dtype}")


_MASKED = -1e9
"""The additive bias of a masked position: its softmax weight is 0 (or exp(-80) = 2e-35 after `_softmax`'s clamp,
nothing beside a sum >= 1), and a fully masked row (a pad query of a left-padded prefill, never read) stays
finite, where -inf would make it NaN and the NaN reach the cache."""


def _rotated(w: torch.Tensor, head_dim: int) -> torch.Tensor:
    """The rows of a member-stacked projection w [N, heads * D, ...] that compute rotate_half of its output."""
    n, out = w.shape[:2]
    h = w.reshape(n, out // head_dim, head_dim, *w.shape[2:])
    half = head_dim // 2
    return torch.cat([-h[:, :, half:], h[:, :, :half]], dim=2).reshape(w.shape)


def _transposed(parts: list, scale: torch.Tensor | None = None) -> torch.Tensor:
    """[N, K, sum O_i]: the member-stacked weights `parts` [N, O_i, K], times `scale` [N, 1, K] when given,
    transposed and side by side (bmm's fastest layout here), each written once into its columns."""
    n, _, k = parts[0].shape
    out = torch.empty(n, k, sum(p.shape[1] for p in parts), dtype=parts[0].dtype, device=parts[0].device)
    at = 0
    for p in parts:
        columns = out[:, :, at: at + p.shape[1]]
        if scale is None:
            columns.copy_(p.transpose(1, 2))
        else:
            torch.mul(p.transpose(1, 2), scale.transpose(1, 2), out=columns)
        at += p.shape[1]
    return out


@torch.no_grad()
def model_weights(model) -> list:
    """`fused_weights` of `model`'s own weights (one member: every tensor [1, ...])."""
    return fused_weights(model, {name: p.detach()[None] for name, p in model.named_parameters()})


@torch.no_grad()
def fused_weights(model, weights: dict[str, torch.Tensor]) -> list:
    """From per-name weight stacks ([N, *shape]; `es.backends.batched.member_weights`, or `model_weights`' one
    model as N = 1): [embedding [N, V, d], head [N, d, V] (final norm folded in), then per layer (qkv weight
    [N, d, 2 (H + KV) D + KV D] (input norm folded in), its bias [N, 1, 2 (H + KV) D + KV D] (None for a family
    without biases), o_proj [N, H D, d], gate|up [N, d, 2 I] (post-attention norm folded in), down_proj [N, I, d])]:
    each weight [N, in, out], the output columns of qkv ordered q, k, rot(q), rot(k), v; the q columns carry the
    attention's 1 / sqrt(D) scale."""
    name = {id(p): n for n, p in model.named_parameters()}
    w = lambda t: weights[name[id(t)]]  # noqa: E731
    net = model.model
    out = [w(net.embed_tokens.weight), _transposed([w(model.lm_head.weight)], w(net.norm.weight)[:, None, :])]
    for layer in net.layers:
        att, mlp = layer.self_attn, layer.mlp
        d = att.head_dim
        q, k, v = (w(att.q_proj.weight) * att.scaling, w(att.k_proj.weight), w(att.v_proj.weight))
        bias = None
        if att.q_proj.bias is not None:
            bq, bk, bv = (w(att.q_proj.bias) * att.scaling, w(att.k_proj.bias), w(att.v_proj.bias))
            bias = torch.cat([bq, bk, _rotated(bq, d), _rotated(bk, d), bv], 1)[:, None, :]
        g1, g2 = (w(layer.input_layernorm.weight)[:, None, :], w(layer.post_attention_layernorm.weight)[:, None, :])
        out.append((_transposed([q, k, _rotated(q, d), _rotated(k, d), v], g1), bias,
                    _transposed([w(att.o_proj.weight)]),
                    _transposed([w(mlp.gate_proj.weight), w(mlp.up_proj.weight)], g2),
                    _transposed([w(mlp.down_proj.weight)])))
    return out


def _project(x, qkv_w, qkv_b, *, eps: float):
    """The fused qkv projection y [n, R*L, 2 QK + V] of x [n, R*L, d] (input norm folded into qkv_w; `qkv_b` None:
    no bias)."""
    y = torch.bmm(F.rms_norm(x, (x.shape[-1],), eps=eps), qkv_w)
    return y if qkv_b is None else y.add_(qkv_b)


def _split(y, cos, sin, *, rows: int, heads: int, kv_heads: int, head_dim: int):
    """Rotated queries [rows, L, KV, g, D], keys and values [rows, KV, L, D] of the qkv projection y
    [n, R*L, 2 QK + V] (rows = n*R); cos and sin [n or 1, R or 1, L, (heads + kv_heads) D]."""
    length, qk_width = y.shape[0] * y.shape[1] // rows, (heads + kv_heads) * head_dim
    y4 = y.view(y.shape[0], -1, length, y.shape[-1])  # [n, R, L, 2QK + V]
    qk = torch.addcmul(y4[..., :qk_width] * cos, y4[..., qk_width: 2 * qk_width], sin)  # [n, R, L, (H + KV) D]
    q = qk[..., : heads * head_dim].reshape(rows, length, kv_heads, heads // kv_heads, head_dim)
    k = qk[..., heads * head_dim:].reshape(rows, length, kv_heads, head_dim).transpose(1, 2)
    return q, k, y[..., 2 * qk_width:].reshape(rows, length, kv_heads, head_dim).transpose(1, 2)


def _attend(q, keys, values, bias, shape: tuple) -> torch.Tensor:
    """Attention of (pre-scaled) queries q [rows, L, KV, g, D] over keys, values [rows, KV, T, D] (bias: None or
    additive [rows, 1, L, T]), as [n, R*L, H D] (`shape` = (n, R*L))."""
    rows, length, kv_heads, group, head_dim = q.shape
    q = q.permute(0, 2, 3, 1, 4).reshape(rows * kv_heads, group * length, head_dim)  # [rows*KV, g*L, D]
    # keys, values: cache slices, flattened to [rows*KV, T, D] views (bmm reads their strides; 4-D matmul copied)
    s = torch.bmm(q, keys.flatten(0, 1).transpose(1, 2))  # [rows*KV, g*L, T]
    if bias is not None:
        s.view(rows, kv_heads, group, length, -1).add_(bias.view(rows, 1, 1, length, -1))
    o = torch.bmm(_softmax(s), values.flatten(0, 1))  # [rows*KV, g*L, D]
    return o.view(rows, kv_heads, group, length, head_dim).permute(0, 3, 1, 2, 4).reshape(*shape, -1)


def _feed_forward(x, o, o_w, gate_up_w, down_w, *, eps: float):
    """The rest of a decoder layer on x [n, R*L, d] and its attention o [n, R*L, H D]: o_proj, MLP and both
    residuals."""
    x = torch.baddbmm(x, o, o_w)  # residual fused into the gemm
    gate, up = torch.bmm(F.rms_norm(x, (x.shape[-1],), eps=eps), gate_up_w).chunk(2, dim=-1)  # [n, R*L, I] each
    return torch.baddbmm(x, F.silu(gate, inplace=True).mul_(up), down_w)


def _softmax(s: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension. torch's CPU kernel is ~10x slower per element below 16 columns (measured
    at 13: 59 vs 600-990 Melem/s at 16-37, one thread), which prefill (T = prompt length) and the first decode
    steps hit: there it is computed from its definition (450 Melem/s)."""
    if s.shape[-1] >= 16:
        return torch.softmax(s, dim=-1)
    e = (s - s.amax(-1, keepdim=True)).clamp_(min=-80.0).exp_()  # exp below -87 (a masked key) takes a 30x
    return e.div_(e.sum(-1, keepdim=True))  # slower path; exp(-80) = 2e-35 is as good as 0 beside a sum >= 1


class KVBuffers:
    """Reusable float32 storage for `FusedQwen2`'s KV caches, kept by a caller across forwards (one live
    `FusedQwen2` per `KVBuffers` at a time: a second one would overwrite the first's cache)."""

    def __init__(self):
        self._flat: dict[tuple, torch.Tensor] = {}
        """(layer, 0 = keys / 1 = values, half) -> flat storage, grown on demand."""

    def take(self, key: tuple, shape: tuple, device) -> torch.Tensor:
        """An uninitialised float32 tensor of `shape` on `device`, backed by the storage of `key`."""
        numel = math.prod(shape)
        flat = self._flat.get(key)
        if flat is None or flat.numel() < numel or flat.device != torch.device(device):
            flat = self._flat[key] = torch.empty(numel, device=device)
        return flat[:numel].view(shape)


class FusedQwen2:
    """A Qwen2 or Llama forward over member-stacked fused weights (`fused_weights`) with a preallocated KV cache: the
    interface of `es.backends.population_forward.Qwen2Population` (ids, positions and mask in, last-position logits out;
    `select` keeps cache rows; the caller advances `length`). One member (N = 1) is a single model."""

    def __init__(self, model, fused: list, capacity: int, rows: int = 1024, buffers: KVBuffers | None = None,
                 native: bool = False):
        cfg = model.config
        self.rows = rows
        """Token positions per member chunk of a forward."""
        self.kernel = RotaryAttention(model.model.layers[0].self_attn.head_dim) if native else None
        """With `native`: rotary, cache write and attention by a C kernel (`models.native.RotaryAttention`) instead
        of torch ops."""
        self.buffers = KVBuffers() if buffers is None else buffers
        """Where the KV cache lives (a caller's, reused across forwards, or this forward's own)."""
        self._half = 0
        """Which half of `buffers` holds the cache: `select` copies the kept rows into the other."""
        self.fused = fused
        """`fused_weights(model, ...)`."""
        self.model, self.capacity = model, capacity
        att = model.model.layers[0].self_attn
        self.eps = model.model.layers[0].input_layernorm.variance_epsilon
        self.shape = dict(heads=cfg.num_attention_heads, kv_heads=cfg.num_key_value_heads, head_dim=att.head_dim)
        self.cache: list[list[torch.Tensor]] = []
        """Per layer [keys, values], each [N, R, kv_heads, capacity, head_dim]."""
        self.length = 0
        at = torch.arange(capacity, device=model.device)[None]  # [1, C]: every position the cache can hold
        cos, sin = model.model.rotary_emb(torch.empty(0, dtype=model.dtype, device=model.device), at)  # [1, C, D]
        width = self.shape["heads"] + self.shape["kv_heads"]
        self.rotary = [t[0].repeat(1, width) for t in (cos, sin)]
        """cos and sin [capacity, (heads + kv_heads) D] of each position, tiled over the q|k heads (the values the
        rotary module computes: position x inverse frequency is one product, whatever the batch)."""

    def select(self, keep: torch.Tensor) -> None:
        """Keep rows `keep` [N, R'] of every member's slot in the cache (its first `length` positions: the rest
        holds nothing yet)."""
        n, width = keep.shape[0], self.cache[0][0].shape[1] if self.cache else 0
        kv = self.shape["kv_heads"]
        flat = (keep + width * torch.arange(n, device=keep.device)[:, None]).reshape(-1)  # [N * R'] rows of [N*R]
        flat = (flat[:, None] * kv + torch.arange(kv, device=keep.device)).reshape(-1)  # [N * R' * KV] (row, head)
        used = self.length * self.shape["head_dim"]  # floats of a (row, head) that hold positions
        self._half ^= 1

        def pick(t, key):  # the used prefix of each (row, head): a memcpy each, not an element gather
            out = self.buffers.take((*key, self._half), (n, keep.shape[1], *t.shape[2:]), t.device)
            torch.index_select(t.view(n * width * kv, -1)[:, :used], 0, flat, out=out.view(len(flat), -1)[:, :used])
            return out

        self.cache = [[pick(t, (li, j)) for j, t in enumerate(kv)] for li, kv in enumerate(self.cache)]

    def __call__(self, ids, pos, mask, groups, members: slice = slice(None)) -> torch.Tensor:
        """Last-position logits [n, R, V], as `population_forward.Qwen2Population.__call__` (`groups` is
        not needed: every gemm covers the whole grid); a (mask, rows) pair means the mask for every row. Runs
        members in chunks of about `rows` token positions, so that each chunk's activations stay in the core's
        cache."""
        n, width, length = ids.shape
        mask = mask[0] if isinstance(mask, tuple) else mask
        first, step = members.start or 0, max(1, self.rows // (width * length))
        out = []
        for a in range(0, n, step):
            b = min(a + step, n)
            out.append(self._forward(ids[a:b], pos[a:b], None if mask is None else mask[a * width: b * width],
                                     slice(first + a, first + b)))
        return torch.cat(out) if len(out) > 1 else out[0]

    def _forward(self, ids, pos, mask, members: slice) -> torch.Tensor:
        """`__call__` on one chunk of members."""
        n, width, length = ids.shape
        net, sh = self.model.model, self.shape
        emb, head = self.fused[0][members], self.fused[1][members]
        x = emb[torch.arange(n, device=ids.device)[:, None, None], ids].view(n, width * length, -1)  # [n, R*L, d]
        if bool((pos == pos[:1, :1]).all()):  # every row at the same positions (no left padding): one table row
            cos, sin = (t[pos[0, 0]][None, None] for t in self.rotary)  # [1, 1, L, (heads + kv) D]
        else:
            cos, sin = (t[pos] for t in self.rotary)  # [n, R, L, (heads + kv) D]
        if mask is None and length > 1 and self.kernel is None:  # an unpadded prefill is causal only (the kernel is)
            mask = torch.ones(length, length, dtype=torch.bool, device=ids.device).tril()[None, None]
            mask = mask.expand(n * width, 1, length, length)
        bias = None if mask is None else torch.zeros(mask.shape, device=ids.device).masked_fill_(~mask, _MASKED)
        start, end, layers = self.length, self.length + length, self.fused[2:]
        for li, (qkv_w, qkv_b, o_w, gate_up_w, down_w) in enumerate(layers):
            if li == len(self.cache):
                shape = (len(qkv_w), width, sh["kv_heads"], self.capacity, sh["head_dim"])
                self.cache.append([self.buffers.take((li, j, self._half), shape, x.device) for j in (0, 1)])
            keys, values = (t[members].view(n * width, *t.shape[2:]) for t in self.cache[li])
            qkv_bias = None if qkv_b is None else qkv_b[members]
            y = _project(x, qkv_w[members], qkv_bias, eps=self.eps)  # [n, R*L, 2QK + V]
            queries = 1 if li == len(layers) - 1 else length  # the prefill's last layer: only the last position is read
            if self.kernel is not None:
                o = self.kernel(y, cos, sin, keys, values, start, bias, queries, heads=sh["heads"])
            else:
                q, keys[:, :, start:end], values[:, :, start:end] = _split(y, cos, sin, rows=n * width, **sh)
                if queries < length:
                    q, bias = q[:, -1:], None if bias is None else bias[:, :, -1:]
                o = _attend(q, keys[:, :, :end], values[:, :, :end], bias, (n, width * queries))  # [n, R*Lq, HD]
            if queries < length:
                x, length = x.view(n, width, length, -1)[:, :, -1], 1  # [n, R, d]
            x = _feed_forward(x, o, o_w[members], gate_up_w[members], down_w[members], eps=self.eps)
        last = x.view(n, width, length, -1)[:, :, -1]  # [n, R, d]
        h = F.rms_norm(last, (last.shape[-1],), eps=net.norm.variance_epsilon)
        return torch.bmm(h, head)  # [n, R, V]
