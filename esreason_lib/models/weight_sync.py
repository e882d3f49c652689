"""Driver -> vLLM engine weight copies: in chunks below the RPC transport's limit, and by CUDA IPC handle (no host
copy) when the engine's worker runs in another process on the driver's GPU.

vLLM sends a collective RPC's arguments to an engine-core process through msgpack, whose binary objects stop at
4 GiB; one pickled state of a 1.5B model is 3.1 GB in bfloat16 and 6.2 GB in float32. `weight_chunks` groups the
parameters (in name order) into chunks of at most `CHUNK_BYTES`, one RPC each (a tensor larger than that goes
alone: none of Qwen2.5-1.5B's is). A CUDA tensor pickled as such is copied to the host; `pack` instead sends its
CUDA IPC handle (`torch.multiprocessing.reductions.reduce_tensor`, a few hundred bytes) and `unpack` in the
worker maps the driver's memory, so a sync copies device to device. The handle only opens in another process
(same node, same GPU visible), so an in-process engine (VLLM_ENABLE_V1_MULTIPROCESSING=0) gets pickled chunks.
Deviation: the IPC path has not run here (no GPU); on CPU every tensor is sent pickled.
"""

from __future__ import annotations

import torch
from torch.multiprocessing.reductions import reduce_tensor

CHUNK_BYTES = 1 << 30
"""Bytes of parameters per RPC (1 GiB: a quarter of msgpack's 4 GiB limit on one binary object)."""


def weight_chunks(params: dict[str, torch.Tensor], limit: int = CHUNK_BYTES) -> list[dict[str, torch.Tensor]]:
    """`params` split, in name order, into dicts of at most `limit` bytes each (a larger tensor alone)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be a positive int, got {limit!r}")
    chunks, size = [{}], 0
    for name in sorted(params):
        t = params[name]
        nbytes = t.numel() * t.element_size()
        if chunks[-1] and size + nbytes > limit:
            chunks.append({})
            size = 0
        chunks[-1][name] = t
        size += nbytes
    return chunks if chunks[-1] else []


def pack(t: torch.Tensor, *, ipc: bool):
    """What crosses to the worker for tensor `t`: ("ipc", rebuild, args) for a CUDA tensor when `ipc`, else `t`."""
    t = t.detach()
    if ipc and t.is_cuda:
        rebuild, args = reduce_tensor(t.contiguous())
        return ("ipc", rebuild, args)
    return t


def unpack(obj) -> torch.Tensor:
    """The tensor `pack` sent (for an IPC handle: a tensor mapping the driver's memory)."""
    if isinstance(obj, tuple) and obj and obj[0] == "ipc":
        return obj[1](*obj[2])
    return obj
