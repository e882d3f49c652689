"""fp32 master weights: bf16 steps far below bf16's resolution accumulate instead of rounding away."""

from __future__ import annotations

import pytest
import torch

from esreason_lib.models.optim import master_weight_adamw, optimizer_step


def _linear(dtype: torch.dtype) -> torch.nn.Linear:
    layer = torch.nn.Linear(4, 2, bias=False)
    with torch.no_grad():
        layer.weight.fill_(0.01)  # bf16 spacing at 0.01 is 2**-14 ~ 6.1e-5: a 1e-6 step is far below half of it
    return layer.to(dtype)


def _steps(layer, opt, n: int) -> None:
    for _ in range(n):
        layer.weight.grad = torch.ones_like(layer.weight)  # Adam's steps are then lr each (same sign every time)
        optimizer_step([layer.weight], opt, max_grad_norm=None)


def test_float32_parameters_are_their_own_masters_and_step_like_plain_adamw():
    a, b = _linear(torch.float32), _linear(torch.float32)
    opt_a = master_weight_adamw(a, lr=1e-3)
    assert opt_a.param_groups[0]["params"][0] is a.weight
    opt_b = torch.optim.AdamW(b.parameters(), lr=1e-3, weight_decay=0.0)
    _steps(a, opt_a, 3)
    for _ in range(3):
        b.weight.grad = torch.ones_like(b.weight)
        opt_b.step()
    assert torch.equal(a.weight, b.weight)


def test_bf16_updates_of_1e6_accumulate_in_the_master_and_reach_the_model():
    layer = _linear(torch.bfloat16)
    opt = master_weight_adamw(layer, lr=1e-6)
    (master,) = opt.param_groups[0]["params"]
    assert master.dtype == torch.float32 and master is not layer.weight
    start = float(master[0, 0])
    _steps(layer, opt, 1)
    assert abs(float(master[0, 0]) - (start - 1e-6)) < 1e-9  # fp32 spacing at 0.01 is 9.3e-10
    assert torch.equal(layer.weight, master.to(torch.bfloat16))  # the model is the master rounded
    _steps(layer, opt, 99)  # 100 steps of 1e-6 = 1e-4, more than one bf16 spacing (6.1e-5) at 0.01
    assert abs(float(master[0, 0]) - (start - 1e-4)) < 1e-7  # 100 fp32 roundings of <= 4.7e-10 each
    assert torch.all(layer.weight < torch.tensor(0.01, dtype=torch.bfloat16))  # the bf16 model moved
    assert torch.equal(layer.weight, master.to(torch.bfloat16))


def test_plain_bf16_adamw_loses_the_same_updates():
    """The failure the masters prevent: stepping the bf16 weights directly rounds every 1e-6 step away."""
    layer = _linear(torch.bfloat16)
    before = layer.weight.detach().clone()
    opt = torch.optim.AdamW(layer.parameters(), lr=1e-6, weight_decay=0.0)
    for _ in range(100):
        layer.weight.grad = torch.ones_like(layer.weight)
        opt.step()
    assert torch.equal(layer.weight, before)


def test_optimizer_step_rejects_a_mismatched_parameter_list():
    layer = _linear(torch.bfloat16)
    opt = master_weight_adamw(layer, lr=1e-6)
    with pytest.raises(ValueError, match="optimizer holds 1 tensors but the model has 0 trainable ones"):
        optimizer_step([], opt, None)


def test_a_bf16_step_leaves_no_gradient_copy_behind():
    """The bf16 gradient is released as its fp32 copy is made, and the fp32 one after the step (memory)."""
    layer = _linear(torch.bfloat16)
    opt = master_weight_adamw(layer, lr=1e-3)
    (master,) = opt.param_groups[0]["params"]
    _steps(layer, opt, 1)
    assert layer.weight.grad is None and master.grad is None
    assert torch.equal(layer.weight, master.to(torch.bfloat16))
