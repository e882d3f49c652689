"""The native attention kernel (models.native) against the torch path it replaces (models.fused_qwen2's rotary,
cache write and attention), on hand-built inputs: prefill and decode, with and without a padding mask, the prefill's
last-position-only layer; its input checks, build cache and build errors."""

from __future__ import annotations

import pytest
import torch

from esreason_lib.models import native
from esreason_lib.models.fused_qwen2 import _MASKED, _attend, _split
from esreason_lib.models.native import RotaryAttention

HEADS, KV, D, CAP = 4, 2, 16, 12


def _inputs(n, r, length, start, seed=0, padded=False):
    """y [n, R*L, W], per-row cos/sin, caches holding `start` earlier positions, and a (causal, padded) bias."""
    g = torch.Generator().manual_seed(seed)
    qk = (HEADS + KV) * D
    y = torch.randn(n, r * length, 2 * qk + KV * D, generator=g)
    angle = torch.rand(n, r, length, qk, generator=g) * 6.3
    past = torch.randn(n * r, KV, CAP, D, generator=g)
    past_v = torch.randn(n * r, KV, CAP, D, generator=g)
    mask = torch.ones(n * r, 1, length, start + length, dtype=torch.bool).tril(diagonal=start)
    if padded:
        mask[::2, :, :, 0] = False  # every other row's first position is padding
    bias = torch.zeros(mask.shape).masked_fill_(~mask, _MASKED)
    return y, angle.cos(), angle.sin(), past, past_v, bias


@pytest.mark.parametrize("length, start, queries, padded", [(5, 0, 5, False), (5, 0, 1, True), (1, 6, 1, False),
                                                            (1, 6, 1, True), (3, 4, 3, True)])
def test_kernel_matches_the_torch_path(length, start, queries, padded):
    n, r = 2, 3
    y, cos, sin, keys, values, bias = _inputs(n, r, length, start, padded=padded)
    end = start + length
    q, k, v = _split(y, cos, sin, rows=n * r, heads=HEADS, kv_heads=KV, head_dim=D)
    ref_k, ref_v = keys.clone(), values.clone()
    ref_k[:, :, start:end], ref_v[:, :, start:end] = k, v
    ref_bias = bias if queries == length else bias[:, :, -1:]
    ref = _attend(q[:, -queries:], ref_k[:, :, :end], ref_v[:, :, :end], ref_bias, (n, r * queries))
    out_k, out_v = keys.clone(), values.clone()
    out = RotaryAttention(D)(y, cos.contiguous(), sin.contiguous(), out_k, out_v, start,
                             bias if padded or length > 1 else None, queries, heads=HEADS)
    assert out.shape == ref.shape == (n, r * queries, HEADS * D)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out_k, ref_k, atol=1e-6, rtol=1e-6)  # the cache was written (rotated keys)
    assert torch.equal(out_v, ref_v)  # values are copied as they are; earlier positions untouched
    assert torch.equal(out_k[:, :, :start], keys[:, :, :start])
    def_k, def_v = keys.clone(), values.clone()  # the self-check's yardstick is the same torch path
    by_definition = native.reference(y, cos.contiguous(), sin.contiguous(), def_k, def_v, start,
                                     bias if padded or length > 1 else None, queries, heads=HEADS)
    torch.testing.assert_close(by_definition, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(def_k, ref_k, atol=1e-6, rtol=1e-6)
    assert torch.equal(def_v, ref_v)


def test_kernel_causal_prefill_needs_no_mask():
    """Without a bias the kernel is causal by itself: the same output as the torch path's explicit tril bias."""
    y, cos, sin, keys, values, bias = _inputs(1, 2, 4, 0)
    kernel = RotaryAttention(D)
    with_bias = kernel(y, cos, sin, keys.clone(), values.clone(), 0, bias, 4, heads=HEADS)
    without = kernel(y, cos, sin, keys.clone(), values.clone(), 0, None, 4, heads=HEADS)
    torch.testing.assert_close(with_bias, without, atol=1e-6, rtol=1e-6)


def test_kernel_shares_one_rotary_table_row():
    y, cos, sin, keys, values, _ = _inputs(1, 3, 2, 0)
    shared_cos, shared_sin = cos[:1, :1].contiguous(), sin[:1, :1].contiguous()
    kernel = RotaryAttention(D)
    one = kernel(y, shared_cos, shared_sin, keys.clone(), values.clone(), 0, None, 2, heads=HEADS)
    every = kernel(y, shared_cos.expand_as(cos).contiguous(), shared_sin.expand_as(sin).contiguous(), keys.clone(),
                   values.clone(), 0, None, 2, heads=HEADS)
    assert torch.equal(one, every)


@pytest.mark.parametrize("length, start, queries, shared", [(1, 6, 1, True), (3, 4, 3, False), (5, 0, 1, False)])
def test_rows_split_over_threads_equal_one_call_bit_for_bit(monkeypatch, length, start, queries, shared):
    """Blocks of rows in threads (`SPLIT_WORK`, forced down to one score) against one call: the same output and
    cache, bit for bit, with per-row or shared rotary tables and a padded bias (7 rows: uneven blocks)."""
    y, cos, sin, keys, values, bias = _inputs(1, 7, length, start, padded=True)
    if shared:
        cos, sin = cos[:1, :1].contiguous(), sin[:1, :1].contiguous()
    kernel, threads = RotaryAttention(D), torch.get_num_threads()
    want_k, want_v = keys.clone(), values.clone()
    want = kernel(y, cos, sin, want_k, want_v, start, bias, queries, heads=HEADS)  # a few hundred scores: one block
    monkeypatch.setattr(native, "SPLIT_WORK", 1)
    calls = []
    monkeypatch.setattr(native, "_pool", lambda: calls.append(1) or native._pool_of(0))
    try:
        for n_threads in (2, 3, 7):
            torch.set_num_threads(n_threads)
            got_k, got_v = keys.clone(), values.clone()
            got = kernel(y, cos, sin, got_k, got_v, start, bias, queries, heads=HEADS)
            assert torch.equal(got, want) and torch.equal(got_k, want_k) and torch.equal(got_v, want_v), n_threads
    finally:
        torch.set_num_threads(threads)
    assert len(calls) == 1 + 2 + 6  # the later blocks went to the pool


def test_kernel_checks_its_inputs():
    y, cos, sin, keys, values, _ = _inputs(1, 2, 1, 3)
    kernel = RotaryAttention(D)
    with pytest.raises(ValueError, match="keys must be a contiguous float32"):
        kernel(y, cos, sin, keys.double(), values.clone(), 3, None, 1, heads=HEADS)
    with pytest.raises(ValueError, match="values must be a contiguous float32"):
        kernel(y, cos, sin, keys, values.transpose(2, 3), 3, None, 1, heads=HEADS)
    with pytest.raises(ValueError, match="y must be a contiguous float32"):
        kernel(y.double(), cos, sin, keys.clone(), values.clone(), 3, None, 1, heads=HEADS)
    with pytest.raises(ValueError, match="exceed the cache capacity 12"):
        kernel(y, cos, sin, keys.clone(), values.clone(), CAP, None, 1, heads=HEADS)
    with pytest.raises(ValueError, match="head dimension 16, the kernel 8"):
        RotaryAttention(8)(y, cos, sin, keys.clone(), values.clone(), 3, None, 1, heads=HEADS)


def test_library_is_built_once_into_the_kernel_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ESREASON_KERNELS", str(tmp_path))
    native.library.cache_clear()
    try:
        native.library(D)
        built = list(tmp_path.glob("rotary_attention_d16_*.so"))
        assert len(built) == 1
        stamp = built[0].stat().st_mtime_ns
        native.library.cache_clear()
        native.library(D)  # a later process: loads the built library
        assert [p.stat().st_mtime_ns for p in tmp_path.glob("*.so")] == [stamp]
    finally:
        native.library.cache_clear()


def test_missing_compiler_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("ESREASON_KERNELS", str(tmp_path))
    monkeypatch.setenv("CC", "no-such-cc")
    native.library.cache_clear()
    try:
        with pytest.raises(RuntimeError, match="needs a C compiler.*no-such-cc"):
            native.library(D)
    finally:
        native.library.cache_clear()


def test_build_failure_is_reported_with_the_compiler_output(tmp_path, monkeypatch):
    bad = tmp_path / "broken.c"
    bad.write_text("int rotary_attention( {\n")
    monkeypatch.setenv("ESREASON_KERNELS", str(tmp_path / "built"))
    monkeypatch.setattr(native, "SOURCE", bad)
    native.library.cache_clear()
    try:
        with pytest.raises(native.KernelBuildError, match="building it with .* failed .*backend 'fast'"):
            native.library(D)
        assert not list((tmp_path / "built").glob("*"))  # no partial library left behind
    finally:
        native.library.cache_clear()


def test_kernel_refuses_a_bias_of_the_wrong_shape():
    y, cos, sin, keys, values, bias = _inputs(1, 2, 1, 3)
    with pytest.raises(ValueError, match=r"bias must be \[2, 1, 1, >= 4\]"):
        RotaryAttention(D)(y, cos, sin, keys.clone(), values.clone(), 3, bias[:, :, :, :2].contiguous(), 1, heads=HEADS)
