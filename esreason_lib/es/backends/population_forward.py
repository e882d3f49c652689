"""The functional Qwen2 forward over member-stacked weights that `es.backends.batched` decodes with: each linear
layer one `bmm` over members (q|k|v and gate|up fused by `fuse_weights`), members grouped by their running row
count (`RowGroups`) so that each member's gemm has the sequential path's shape, and a preallocated KV cache
(`Qwen2Population`). `es.backends.lowrank.LowRankStack` stands in for a stacked weight; `models.fused_qwen2` is the
faster, not bit-identical, forward with the same interface. Why the results are bit-identical to the sequential
path's: `es.backends.batched`'s docstring."""

from __future__ import annotations

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.models.qwen2.modeling_qwen2 import apply_rotary_pos_emb


class RowGroups:
    """Members grouped by their running row count r_i (members with r_i = 0 are finished and skipped)."""

    def __init__(self, counts: torch.Tensor, width: int):
        self.width = width
        """R: the slot width of the [N, R] row grid."""
        values = sorted({int(c) for c in counts.tolist() if c > 0})
        self.parts = [(torch.nonzero(counts == r).squeeze(1), r) for r in values]
        """(member indices [g], r) per distinct running row count."""
        self.whole = len(self.parts) == 1 and self.parts[0][1] == width and len(self.parts[0][0]) == len(counts)
        """True when every member runs all R rows (one bmm covers the grid)."""


def member_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, groups: RowGroups) -> torch.Tensor:
    """Per-member x_i W_i^T + b_i. x [N, R, L, K], w [N, O, K], b [N, O] -> [N, R, L, O]; rows >= r_i are 0.
    A `w` that is not a tensor (`es.backends.lowrank.LowRankStack`) computes this itself."""
    if not isinstance(w, torch.Tensor):
        return w.linear(x, b, groups)
    n, width, length, k = x.shape

    def mm(xs, ws, bs):  # xs [g, M, K] -> [g, M, O]
        return torch.bmm(xs, ws.transpose(1, 2)) if bs is None else torch.baddbmm(bs[:, None], xs, ws.transpose(1, 2))

    if groups.whole:
        return mm(x.reshape(n, width * length, k), w, b).view(n, width, length, -1)
    y = x.new_zeros(n, width, length, w.shape[1])  # [N, R, L, O]
    for idx, r in groups.parts:
        xs = x[idx, :r].reshape(len(idx), r * length, k)  # [g, r*L, K]
        y[idx, :r] = mm(xs, w[idx], None if b is None else b[idx]).view(len(idx), r, length, -1)
    return y


def _rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """Qwen2RMSNorm's op sequence with a per-member weight. x [N, R, L, d], w [N, d]."""
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w[:, None, None, :] * h.to(x.dtype)


def fuse_weights(model, weights: dict[str, torch.Tensor]) -> list[tuple[torch.Tensor, ...]]:
    """Per layer: q|k|v weights [N, (heads + 2 kv_heads) D, d] and biases, gate|up weights [N, 2 I, d], so that
    each is one bmm (a gemm's output columns do not change each other's sums: bit-identical too). The fused
    tensors replace those entries of `weights`, which is emptied of them (N copies of most of the weights)."""
    name = {id(p): n for n, p in model.named_parameters()}
    fused = []
    for layer in model.model.layers:
        att, mlp = layer.self_attn, layer.mlp
        cat = lambda *ts: _cat_out([weights.pop(name[id(t)]) for t in ts])  # noqa: E731
        fused.append((cat(att.q_proj.weight, att.k_proj.weight, att.v_proj.weight),
                      cat(att.q_proj.bias, att.k_proj.bias, att.v_proj.bias),
                      cat(mlp.gate_proj.weight, mlp.up_proj.weight)))
    return fused


def _cat_out(stacks: list) -> torch.Tensor:
    """Member-stacked weights [N, O_j, ...] concatenated along the output dimension (`es.backends.lowrank.LowRankStack`s
    by their own `cat`)."""
    return torch.cat(stacks, dim=1) if isinstance(stacks[0], torch.Tensor) else type(stacks[0]).cat(stacks)


class Qwen2Population:
    """A functional Qwen2 forward over member-stacked weights with a preallocated KV cache."""

    def __init__(self, model, weights: dict[str, torch.Tensor], fused: list[tuple[torch.Tensor, ...]],
                 capacity: int):
        net = model.model
        name = {id(p): n for n, p in model.named_parameters()}
        self.w = lambda t: None if t is None else weights[name[id(t)]]
        self.model, self.net, self.capacity = model, net, capacity
        self.fused = fused
        """`fuse_weights(model, weights)`: the fused q|k|v and gate|up weights per layer."""
        self.cache: list[list[torch.Tensor]] = []
        """Per layer [keys, values], each [N, R, kv_heads, capacity, head_dim]."""
        self.length = 0
        """Positions filled in the cache."""

    def select(self, keep: torch.Tensor) -> None:
        """Keep rows `keep` [N, R'] of every member's slot in the cache."""
        member = torch.arange(keep.shape[0], device=keep.device)[:, None]  # [N, 1]
        self.cache = [[t[member, keep] for t in kv] for kv in self.cache]

    def __call__(self, ids, pos, mask, groups: RowGroups, members: slice = slice(None)) -> torch.Tensor:
        """Last-position logits [n, R, V] of `members` (n of them) for ids / pos [n, R, L] written at cache
        positions [length, length + L) (the caller advances `length`); `mask` is the attention mask each row
        gets (None, or bool [n*R, 1, L, length + L]); `groups` describes these members' row counts."""
        n, width, length = ids.shape
        cfg, net = self.model.config, self.net
        lw = lambda t: self.w(t)[members]  # noqa: E731
        emb = lw(net.embed_tokens.weight)  # [n, V, d]
        member = torch.arange(n, device=ids.device)[:, None, None]  # [N, 1, 1]
        x = emb[member, ids]  # [N, R, L, d]
        flat = (n * width, length)
        cos, sin = net.rotary_emb(x.view(*flat, -1), pos.reshape(flat))  # [N*R, L, D]
        start, end = self.length, self.length + length
        for li, layer in enumerate(net.layers):
            att = layer.self_attn
            h = _rms_norm(x, lw(layer.input_layernorm.weight), layer.input_layernorm.variance_epsilon)
            qkv_w, qkv_b, gate_up_w = (t[members] for t in self.fused[li])
            qkv = member_linear(h, qkv_w, qkv_b, groups)  # [N, R, L, (heads + 2 kv_heads) D]
            sizes = [cfg.num_attention_heads * att.head_dim] + [cfg.num_key_value_heads * att.head_dim] * 2
            heads = [t.reshape(*flat, -1, att.head_dim).transpose(1, 2) for t in qkv.split(sizes, dim=-1)]
            q, k = apply_rotary_pos_emb(heads[0], heads[1], cos, sin)
            if li == len(self.cache):
                shape = (len(self.fused[li][0]), width, cfg.num_key_value_heads, self.capacity, att.head_dim)
                self.cache.append([k.new_empty(shape), k.new_empty(shape)])
            keys, values = (t[members] for t in self.cache[li])  # [n, R, kv_heads, capacity, D]
            keys[:, :, :, start:end] = k.view(n, width, *k.shape[1:])
            values[:, :, :, start:end] = heads[2].view(n, width, *k.shape[1:])
            kv = [t.view(n * width, *t.shape[2:])[:, :, :end] for t in (keys, values)]  # [n*R, kv_heads, T, D]
            o = self._attention(att, q, kv, mask)  # [N*R, L, heads*D]
            x = x + member_linear(o.view(n, width, length, -1), lw(att.o_proj.weight), None, groups)
            mlp, post = layer.mlp, layer.post_attention_layernorm
            h = _rms_norm(x, lw(post.weight), post.variance_epsilon)
            gate, up = member_linear(h, gate_up_w, None, groups).chunk(2, dim=-1)  # [N, R, L, I] each
            act = mlp.act_fn(gate) * up
            x = x + member_linear(act, lw(mlp.down_proj.weight), None, groups)
        h = _rms_norm(x[:, :, -1:], lw(net.norm.weight), net.norm.variance_epsilon)  # [N, R, 1, d]
        return member_linear(h, lw(self.model.lm_head.weight), None, groups)[:, :, 0]  # [N, R, V]

    def _attention(self, att, q, kv, mask) -> torch.Tensor:
        """HF's SDPA attention for every row; `mask` is None, a bool mask, or (bool mask, rows that get None)."""
        if isinstance(mask, tuple):  # mixed: compute both kernel paths and pick per row (rows are independent)
            both = [sdpa_attention_forward(att, q, *kv, m, dropout=0.0, scaling=att.scaling)[0]
                    for m in (None, mask[0])]
            o = torch.where(mask[1][:, None, None, None], both[0], both[1])  # [N*R, L, heads, D]
        else:
            o = sdpa_attention_forward(att, q, *kv, mask, dropout=0.0, scaling=att.scaling)[0]
        return o.reshape(o.shape[0], o.shape[1], -1)  # [N*R, L, heads*D]
