"""models/weight_sync: chunks below the transport limit and the pack/unpack round trip (CPU: pickled tensors; the
CUDA IPC path needs a GPU and an engine process: untested here)."""

from __future__ import annotations

import pickle

import pytest
import torch

from esreason_lib.models.weight_sync import CHUNK_BYTES, pack, unpack, weight_chunks


def test_chunks_stay_below_the_limit_and_cover_every_name_once():
    params = {f"p{i}": torch.zeros(i + 1) for i in range(10)}  # 4 * (i + 1) bytes each
    chunks = weight_chunks(params, limit=40)
    assert [n for c in chunks for n in c] == sorted(params)
    for c in chunks:
        assert sum(t.numel() * 4 for t in c.values()) <= 40 or len(c) == 1
    big = weight_chunks({"big": torch.zeros(100), "a": torch.zeros(1), "b": torch.zeros(1)}, limit=40)
    assert [list(c) for c in big] == [["a", "b"], ["big"]]  # a tensor over the limit goes alone
    assert weight_chunks({}) == [] and CHUNK_BYTES < 4 * 2**30
    with pytest.raises(ValueError, match="limit must be a positive int, got 0"):
        weight_chunks(params, limit=0)


def test_qwen_1p5b_sync_takes_few_chunks_each_below_msgpack_limit():
    """Qwen2.5-1.5B in float32 (6.2 GB, over msgpack's 4 GiB in one payload) goes in chunks of at most 1 GiB."""
    shapes = {"model.embed_tokens.weight": (151_936, 1536)}
    for i in range(28):
        shapes |= {f"model.layers.{i}.mlp.{k}.weight": (8960, 1536) for k in ("gate_proj", "up_proj")}
        shapes |= {f"model.layers.{i}.mlp.down_proj.weight": (1536, 8960),
                   f"model.layers.{i}.self_attn.q_proj.weight": (1536, 1536)}
    params = {k: torch.empty(s, device="meta") for k, s in shapes.items()}
    chunks = weight_chunks(params)
    sizes = [sum(t.numel() * 4 for t in c.values()) for c in chunks]
    assert max(sizes) <= CHUNK_BYTES and sum(sizes) > 4 * 2**30 and 5 <= len(chunks) <= 8


def test_pack_unpack_round_trip_on_cpu():
    t = torch.arange(6.0).view(2, 3)[:, 1:]  # a non-contiguous view
    sent = pickle.loads(pickle.dumps(pack(t, ipc=True)))  # CPU tensors are never sent by IPC handle
    assert torch.equal(unpack(sent), t)
    assert unpack(pack(t, ipc=False)) is not None and torch.equal(unpack(pack(t, ipc=False)), t)
