"""The fused forward's native attention: a C kernel (`kernels/rotary_attention.c`) compiled at first use.

`RotaryAttention` does one decoder layer's rotary embedding, KV-cache write and attention in one pass per row,
where `models.fused_qwen2`'s torch path runs ~15 ops (a rotary `addcmul`, cache copies, and two batched matmuls
of [2 x 16] x [16 x T] per row and kv head around a softmax). The decode's attention is bound by reading the KV
cache (~40 MB per step at N = 32, P = 128: beyond the core's caches), so the kernel prefetches each next row's
cache while it computes the current one. It serves
`FusedQwen2(..., native=True)`: backend "native" (`es.backends.fast.NativeBackend`) and
`generate(..., forward="native")`.

The kernel is built with the system C compiler (`$CC`, else `cc`) as `-O3 -march=native -ffast-math` with the
head dimension fixed at compile time, once per (source, flags, compiler, CPU, head dimension), into
`$ESREASON_KERNELS` (default `~/.cache/esreason/kernels`); later processes load the built library. Its float
rounding differs from the torch path's (reassociated sums, a vectorised `expf`), and with `-march=native` it may
differ between CPU models: like backend "fast", it is part of a run's identity and held to the sequential path's
completions by tests, not bit for bit. Tried and not kept: a float16 KV cache (rows converted with F16C), which
halves the cache's bytes and measured 4.2-4.35x the sequential path at N = 32 against this kernel's ~3.8x, but
changed ~0.05% of greedy completions, enough to swap two near-tied members of an 8-member population
(Spearman 0.98 in tests/test_es_fast.py).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("kernels") / "rotary_attention.c"
"""The kernel's C source."""
FLAGS = ("-O3", "-march=native", "-ffast-math", "-fPIC", "-shared")
"""Compiler flags (plus -DHEAD_DIM=D, the source and -lm)."""


def kernel_dir() -> Path:
    """Where built kernels live: $ESREASON_KERNELS, else ~/.cache/esreason/kernels."""
    env = os.environ.get("ESREASON_KERNELS")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "esreason" / "kernels"


def _compiler() -> str:
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        raise RuntimeError(f"the native attention kernel needs a C compiler: $CC or cc, and {cc!r} was not found "
                           "(install gcc, or use backend 'fast' / forward 'fused')")
    return cc


def _cpu() -> str:
    """What -march=native compiles for: the CPU's model and flags (Linux), else the platform's processor."""
    try:
        info = Path("/proc/cpuinfo").read_text().splitlines()
        return "\n".join(sorted({ln for ln in info if ln.startswith(("model name", "flags"))}))
    except OSError:
        return platform.processor()


@functools.cache
def library(head_dim: int) -> ctypes.CDLL:
    """The kernel library for heads of `head_dim`, built on first use (atomically: concurrent processes each
    build and one rename wins) and loaded once per process."""
    cc = _compiler()
    version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
    key = hashlib.sha256("\0".join([SOURCE.read_text(), *FLAGS, *version, _cpu(), str(head_dim)]).encode())
    path = kernel_dir() / f"rotary_attention_d{head_dim}_{key.hexdigest()[:16]}.so"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=path.parent)
        os.close(fd)
        try:
            built = subprocess.run([cc, *FLAGS, f"-DHEAD_DIM={head_dim}", str(SOURCE), "-o", tmp, "-lm"],
                                   capture_output=True, text=True)
            if built.returncode:
                raise RuntimeError(f"building the native attention kernel with {cc} failed:\n{built.stderr[-2000:]}")
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return load(path)


def load(path: str | Path) -> ctypes.CDLL:
    """The built library at `path`, with the kernel's C signature declared."""
    lib = ctypes.CDLL(str(path))
    p, i = ctypes.c_void_p, ctypes.c_long
    lib.rotary_attention.argtypes = [p, i, i, p, p, i, p, p, i, i, p, i, i, p, i, i, i, i]
    lib.rotary_attention.restype = ctypes.c_int
    return lib


class RotaryAttention:
    """The kernel built for heads of one dimension, as a torch-facing call (inputs checked, output allocated)."""

    def __init__(self, head_dim: int):
        self.head_dim = head_dim
        """D, compiled into the library."""
        self.lib = library(head_dim)
        """The loaded library."""

    def __call__(self, y, cos, sin, keys, values, start: int, bias, queries: int, *, heads: int):
        """One layer's rotary, cache write and attention (see `kernels/rotary_attention.c`).

        y [n, R*L, 2 QK + KV D] (QK = (heads + KV) D): the qkv projection's output, columns q | k | rot(q) |
        rot(k) | v; cos, sin [1, 1, L, QK] or [n, R, L, QK]; keys, values [n*R, KV, C, D] (cache views, written
        at positions start .. start + L - 1); bias None or additive [n*R, 1, L, start + L]. Returns the attention
        output [n, R*queries, heads D] of the last `queries` positions (each over keys 0 .. its own position)."""
        rows, kv_heads, capacity, head_dim = keys.shape
        length = y.shape[0] * y.shape[1] // rows
        _check("rotary_attention", y=y, cos=cos, sin=sin, keys=keys, values=values, bias=bias)
        if head_dim != self.head_dim:
            raise ValueError(f"rotary_attention: keys have head dimension {head_dim}, the kernel {self.head_dim}")
        if start + length > capacity:
            raise ValueError(f"rotary_attention: positions up to {start + length} exceed the cache capacity "
                             f"{capacity}")
        if bias is not None and (bias.shape[0] != rows or bias.shape[-2] != length or bias.shape[-1] < start + length):
            raise ValueError(f"rotary_attention: bias must be [{rows}, 1, {length}, >= {start + length}], got "
                             f"{list(bias.shape)}")
        out = y.new_empty(y.shape[0], y.shape[1] // length * queries, heads * head_dim)
        shared = cos.shape[0] * cos.shape[1] == 1
        status = self.lib.rotary_attention(
            y.data_ptr(), length, y.shape[-1], cos.data_ptr(), sin.data_ptr(),
            0 if shared else length * cos.shape[-1], keys.data_ptr(), values.data_ptr(), capacity, start,
            None if bias is None else bias.data_ptr(), 0 if bias is None else bias.shape[-2] * bias.shape[-1],
            0 if bias is None else bias.shape[-1], out.data_ptr(), queries, rows, heads, kv_heads)
        if status:
            raise MemoryError("rotary_attention: the kernel could not allocate its scratch buffer")
        return out


def _check(who: str, **tensors) -> None:
    """ValueError unless every given tensor (None skipped) is contiguous float32 on the CPU: what the kernel reads."""
    for name, t in tensors.items():
        if t is not None and (t.dtype != torch.float32 or t.device.type != "cpu" or not t.is_contiguous()):
            raise ValueError(f"{who}: {name} must be a contiguous float32 CPU tensor, got {t.dtype} on {t.device}, "
                             f"contiguous={t.is_contiguous()}")
