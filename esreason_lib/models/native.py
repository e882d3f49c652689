"""The fused forward's native attention: a C kernel (`kernels/rotary_attention.c`) compiled at first use.

`RotaryAttention` does one decoder layer's rotary embedding, KV-cache write and attention in one pass per row,
where `models.fused_qwen2`'s torch path runs ~15 ops (a rotary `addcmul`, cache copies, and two batched matmuls
of [2 x 16] x [16 x T] per row and kv head around a softmax). The decode's attention is bound by reading the KV
cache (~40 MB per step at N = 32, P = 128: beyond the core's caches), so the kernel prefetches each next row's
cache while it computes the current one. It serves `FusedQwen2(..., native=True)`: backend "native"
(`es.backends.fast.NativeBackend`) and `generate(..., forward=Forward(kind="native"))`. The kernel runs on one core;
a call over many rows is split into blocks of rows, one per torch thread, each run by the kernel in its own thread
(`SPLIT_WORK`): every row is computed as in one call, bit for bit.

The kernel is built with the system C compiler (`$CC`, else `cc`) as `-O3 -march=native -ffast-math` with the
head dimension fixed at compile time, once per (source, flags, compiler, CPU, head dimension), into
`$ESREASON_KERNELS` (default `~/.cache/esreason/kernels`); later processes load the built library. Its float
rounding differs from the torch path's (reassociated sums, a vectorised `expf`), and with `-march=native` it may
differ between CPU models: like backend "fast", it is part of a run's identity and held to the sequential path's
completions by tests, not bit for bit. Tried and not kept: a float16 KV cache (rows converted with F16C), which
halves the cache's bytes and measured 4.2-4.35x the sequential path at N = 32 against this kernel's ~3.8x, but
changed ~0.05% of greedy completions, enough to swap two near-tied members of an 8-member population
(Spearman 0.98 in tests/test_es_fast.py).

A built library is machine code that the process runs, and its cache key is computable from public data, so
nothing in the cache is believed: the folder must belong to the user and be writable by no one else; each library
lies beside a record of the sha256 it had when built (`<name>.sha256`), and a library without a record, or that
no longer matches it (truncated, emptied, replaced), is rebuilt before anything loads it; the compiler is called
with a time limit (`COMPILER_TIMEOUT_S`) in a private build folder that is always removed (and folders of killed
builds are collected); every failure is one `KernelBuildError` line naming the fallback backend "fast"; and the
first call of each library a process loads is checked against the torch definition (`reference`) on a small
input, so a library that computes nothing or the wrong thing is removed and never used.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import signal
import stat
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from esreason_lib.store.integrity import atomic_write_bytes, collect_stale, sha256_file

SOURCE = Path(__file__).with_name("kernels") / "rotary_attention.c"
"""The kernel's C source."""
FLAGS = ("-O3", "-march=native", "-ffast-math", "-fPIC", "-shared")
"""Compiler flags (plus -DHEAD_DIM=D, the source and -lm)."""
COMPILER_TIMEOUT_S = 300.0
"""Seconds one compiler call (`$CC --version` or the build, ~2 s here) may take before it is stopped."""
STALE_BUILD_S = 3600.0
"""A build folder whose process is gone, or that is older than this, was left by a killed build: removed."""
_FALLBACK = "use backend 'fast' (or generate(..., forward=Forward(kind='fused'))), which needs no compiler"


class KernelBuildError(RuntimeError):
    """The native kernel could not be built, loaded or trusted; the one-line message says why and names the
    fallback backend."""

    def __init__(self, why: str):
        super().__init__(f"native attention kernel: {' '.join(why.split())}; {_FALLBACK}")


def kernel_dir() -> Path:
    """Where built kernels live: $ESREASON_KERNELS, else ~/.cache/esreason/kernels."""
    env = os.environ.get("ESREASON_KERNELS")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "esreason" / "kernels"


def _compiler() -> str:
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        raise KernelBuildError(f"it needs a C compiler: $CC or cc, and {cc!r} was not found (install gcc)")
    return cc


def _cpu() -> str:
    """What -march=native compiles for: the CPU's model and flags (Linux), else the platform's processor."""
    try:
        info = Path("/proc/cpuinfo").read_text().splitlines()
        return "\n".join(sorted({ln for ln in info if ln.startswith(("model name", "flags"))}))
    except OSError:
        return platform.processor()


def _compile(argv: list[str], what: str) -> str:
    """Run the compiler `argv` under `COMPILER_TIMEOUT_S` (in its own process group, all of which is killed at the
    limit: a driver's cc1 would otherwise hold the pipes open); its stdout, else `KernelBuildError` naming `what`
    and the first error line of its output."""
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
    except OSError as err:
        raise KernelBuildError(f"{what} could not start: {err.strerror or err}") from None
    try:
        stdout, stderr = proc.communicate(timeout=COMPILER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise KernelBuildError(f"{what} did not finish within {COMPILER_TIMEOUT_S:g} s (COMPILER_TIMEOUT_S)") from None
    if proc.returncode:
        lines = [ln for ln in (stderr + stdout).splitlines() if ln.strip()]
        detail = next((ln for ln in lines if "error" in ln.lower()), lines[-1] if lines else "no output")
        raise KernelBuildError(f"{what} failed (exit status {proc.returncode}): {detail}")
    return stdout


def private_dir(folder: Path) -> Path:
    """`folder`, created (mode 0o700) if absent; `KernelBuildError` unless it is a folder of this user that no one
    else can write (anyone who can write it could plant a library that this process would run)."""
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = folder.stat()
    except OSError as err:
        raise KernelBuildError(f"its cache folder {folder} cannot be created: {err.strerror or err}") from None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise KernelBuildError(f"its cache folder {folder} (mode {oct(stat.S_IMODE(st.st_mode))}, owner uid "
                               f"{st.st_uid}) must be a folder of uid {os.getuid()} that group and others cannot "
                               "write (chmod go-w it, or set $ESREASON_KERNELS to a private folder)")
    return folder


def record_of(path: Path) -> Path:
    """The file beside the library `path` that holds its sha256 as built."""
    return path.with_suffix(".sha256")


def is_intact(path: Path) -> bool:
    """Whether the library `path` is a non-empty regular file whose sha256 equals its build record."""
    try:
        if not path.is_file() or path.is_symlink() or path.stat().st_size == 0:
            return False
        return record_of(path).read_text().strip() == sha256_file(path)
    except OSError:
        return False


def build(cc: str, head_dim: int, path: Path) -> None:
    """Compile the kernel for heads of `head_dim` with `cc` into a private build folder beside `path`, then move it
    to `path` and record its sha256; the build folder is removed whatever happens (module docstring)."""
    try:
        folder = Path(tempfile.mkdtemp(prefix=f".build-{os.getpid()}-", dir=path.parent))
    except OSError as err:
        raise KernelBuildError(f"its cache folder {path.parent} is not writable: {err.strerror or err}") from None
    try:
        built = folder / path.name
        _compile([cc, *FLAGS, f"-DHEAD_DIM={head_dim}", str(SOURCE), "-o", str(built), "-lm"],
                 f"building it with {cc}")
        if not built.is_file() or built.stat().st_size == 0:
            raise KernelBuildError(f"{cc} reported success but wrote no library")
        digest = sha256_file(built)
        os.replace(built, path)
        atomic_write_bytes(record_of(path), f"{digest}\n".encode())
    except OSError as err:  # e.g. a full disk
        raise KernelBuildError(f"writing it to {path.parent} failed: {err.strerror or err}") from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def cache_entry(head_dim: int) -> tuple[str, Path]:
    """(the compiler, the path of the library for heads of `head_dim` in the kernel folder): the path is keyed by
    (source, flags, `$CC --version`, CPU, head dimension); the folder is checked private (`private_dir`) and its
    stale build folders collected (`integrity.collect_stale`)."""
    cc = _compiler()
    version = _compile([cc, "--version"], f"{cc} --version").splitlines()[:1]
    key = hashlib.sha256("\0".join([SOURCE.read_text(), *FLAGS, *version, _cpu(), str(head_dim)]).encode())
    folder = private_dir(kernel_dir())
    collect_stale(folder, ".build-", STALE_BUILD_S)
    return cc, folder / f"rotary_attention_d{head_dim}_{key.hexdigest()[:16]}.so"


@functools.cache
def library(head_dim: int) -> ctypes.CDLL:
    """The kernel library for heads of `head_dim`, loaded once per process: built on first use (and rebuilt when
    its file does not match its build record; concurrent processes each build and one rename wins), then checked
    against `reference` on a small input before it is returned (module docstring). `KernelBuildError` (one line)
    when it cannot be built or trusted."""
    cc, path = cache_entry(head_dim)
    if not is_intact(path):
        build(cc, head_dim, path)
    try:
        lib = load(path)
    except OSError as err:
        raise KernelBuildError(f"loading {path} failed: {err}") from None
    why = self_check(lib, head_dim)
    if why is not None:
        path.unlink(missing_ok=True)
        record_of(path).unlink(missing_ok=True)
        raise KernelBuildError(f"{path} {why} on its first call (removed)")
    return lib


def load(path: str | Path) -> ctypes.CDLL:
    """The built library at `path`, with the kernel's C signature declared."""
    lib = ctypes.CDLL(str(path))
    p, i = ctypes.c_void_p, ctypes.c_long
    lib.rotary_attention.argtypes = [p, i, i, p, p, i, p, p, i, i, p, i, i, p, i, i, i, i]
    lib.rotary_attention.restype = ctypes.c_int
    return lib


class RotaryAttention:
    """The kernel built for heads of one dimension, as a torch-facing call (inputs checked, output allocated)."""

    def __init__(self, head_dim: int, lib: ctypes.CDLL | None = None):
        self.head_dim = head_dim
        """D, compiled into the library."""
        self.lib = library(head_dim) if lib is None else lib
        """The loaded library (`library(head_dim)` unless given)."""

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
        cs_row = 0 if cos.shape[0] * cos.shape[1] == 1 else length * cos.shape[-1]
        bias_row = 0 if bias is None else bias.shape[-2] * bias.shape[-1]
        cache_row = kv_heads * capacity * head_dim

        def block(lo: int, hi: int) -> int:  # rows lo .. hi - 1: every row-indexed pointer advanced by lo rows
            def at(t, row_floats: int) -> int:
                return t.data_ptr() + 4 * lo * row_floats  # float32: 4 bytes

            return self.lib.rotary_attention(
                at(y, length * y.shape[-1]), length, y.shape[-1], at(cos, cs_row), at(sin, cs_row), cs_row,
                at(keys, cache_row), at(values, cache_row), capacity, start,
                None if bias is None else at(bias, bias_row), bias_row, 0 if bias is None else bias.shape[-1],
                at(out, queries * heads * head_dim), queries, hi - lo, heads, kv_heads)

        parts = min(torch.get_num_threads(), rows, max(1, rows * queries * (start + length) * heads // SPLIT_WORK))
        bounds = [rows * i // parts for i in range(parts + 1)]
        later = [_pool().submit(block, lo, hi) for lo, hi in zip(bounds[1:-1], bounds[2:])]
        if any([block(0, bounds[1])] + [f.result() for f in later]):
            raise MemoryError("rotary_attention: the kernel could not allocate its scratch buffer")
        return out


SPLIT_WORK = 1 << 14
"""Attention scores (rows x queries x keys x query heads) of a `RotaryAttention` call per thread: a call is split
into blocks of rows, one per torch thread (`torch.get_num_threads()`) and no smaller than this, each block run by
the kernel in its own thread (ctypes releases the GIL); every row is computed as in one call, so the output and the
cache are the same bit for bit (a block costs a thread hand-off, ~50 us)."""


@functools.cache
def _pool_of(pid: int) -> ThreadPoolExecutor:
    """The threads that run `RotaryAttention`'s later row blocks in process `pid` (a forked child makes its own)."""
    return ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="rotary-attention")


def _pool() -> ThreadPoolExecutor:
    return _pool_of(os.getpid())


def _check(who: str, **tensors) -> None:
    """ValueError unless every given tensor (None skipped) is contiguous float32 on the CPU: what the kernel reads."""
    for name, t in tensors.items():
        if t is not None and (t.dtype != torch.float32 or t.device.type != "cpu" or not t.is_contiguous()):
            raise ValueError(f"{who}: {name} must be a contiguous float32 CPU tensor, got {t.dtype} on {t.device}, "
                             f"contiguous={t.is_contiguous()}")


def reference(y, cos, sin, keys, values, start: int, bias, queries: int, *, heads: int) -> torch.Tensor:
    """`RotaryAttention.__call__` by its definition in torch ops (same arguments, same output; writes the cache
    the same way): rotate q and k, write k and v at positions start .., then causal grouped-query attention of
    the last `queries` positions. The self-check's yardstick; tests hold it to `models.fused_qwen2`'s path."""
    rows, kv_heads, _, d = keys.shape
    length, qk = y.shape[0] * y.shape[1] // rows, (heads + kv_heads) * d
    end = start + length
    y3 = y.reshape(rows, length, -1)
    cos3, sin3 = (t.expand(y.shape[0], y.shape[1] // length, length, qk).reshape(rows, length, qk) for t in (cos, sin))
    rotated = y3[..., :qk] * cos3 + y3[..., qk: 2 * qk] * sin3  # [rows, L, (H + KV) D]
    q = rotated[..., : heads * d].reshape(rows, length, heads, d).transpose(1, 2)  # [rows, H, L, D]
    keys[:, :, start:end] = rotated[..., heads * d:].reshape(rows, length, kv_heads, d).transpose(1, 2)
    values[:, :, start:end] = y3[..., 2 * qk:].reshape(rows, length, kv_heads, d).transpose(1, 2)
    k, v = (t[:, :, :end].repeat_interleave(heads // kv_heads, dim=1) for t in (keys, values))  # [rows, H, T, D]
    scores = q @ k.transpose(-1, -2)  # [rows, H, L, T]
    causal = torch.ones(length, end, dtype=torch.bool).tril(diagonal=start)
    scores = scores.masked_fill(~causal, float("-inf"))
    if bias is not None:
        scores = scores + bias[..., :end]
    out = (torch.softmax(scores, dim=-1) @ v)[:, :, length - queries:]  # [rows, H, queries, D]
    return out.transpose(1, 2).reshape(y.shape[0], -1, heads * d)


def self_check(lib: ctypes.CDLL, head_dim: int, *, atol: float = 1e-4) -> str | None:
    """Why the library `lib` is not the kernel (its output or cache write differs from `reference` by more than
    `atol` on a small random input: 2 rows, a padded prefill after 2 cached positions); None when it agrees. The
    input is drawn afresh for every check and the kernel runs before the reference, so an output the kernel never
    wrote cannot hold the right answer left in reused memory by an earlier check or by the reference."""
    g = torch.Generator().manual_seed(int.from_bytes(os.urandom(7), "little"))
    heads, kv_heads, length, start, capacity = 2, 1, 3, 2, 6
    qk = (heads + kv_heads) * head_dim
    y = torch.randn(1, 2 * length, 2 * qk + kv_heads * head_dim, generator=g)
    angle = torch.rand(1, 2, length, qk, generator=g) * 6.3
    cos, sin = angle.cos(), angle.sin()
    keys, values = (torch.randn(2, kv_heads, capacity, head_dim, generator=g) for _ in range(2))
    bias = torch.zeros(2, 1, length, start + length)
    bias[0, :, :, 0] = -1e9  # the first row's first position is padding
    got_k, got_v = keys.clone(), values.clone()
    got = RotaryAttention(head_dim, lib)(y, cos, sin, got_k, got_v, start, bias, length, heads=heads)
    want = reference(y, cos, sin, keys, values, start, bias, length, heads=heads)
    for name, a, b in (("output", got, want), ("key cache", got_k, keys), ("value cache", got_v, values)):
        if a.shape != b.shape or not torch.allclose(a, b, atol=atol, rtol=atol):
            return f"returned a wrong {name} (not the kernel's result: poisoned, stale or miscompiled)"
    return None
