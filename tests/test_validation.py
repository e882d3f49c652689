"""The shared config-field checks: what they accept, what they reject, and the message they raise."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from esreason_lib.es.config import ESConfig
from esreason_lib.grpo.config import GRPOConfig
from esreason_lib.models.zoo import ZooSpec
from esreason_lib.validation import (
    check,
    check_bool,
    check_choice,
    check_finite_float,
    check_int,
    check_nonempty_str,
    check_nonnegative_float,
    check_nonnegative_int,
    check_optional_positive_int,
    check_positive_float,
    check_positive_int,
    is_finite_real,
    is_int,
    is_real,
)


@dataclass
class Cfg:
    a: Any = 1
    b: Any = 2


def rejects(checker, value, *args, why: str):
    """`checker(Cfg(a=value), "a", *args)` raises the full "Cfg.a <why>, got <repr>" message."""
    with pytest.raises(ValueError, match=re.escape(f"Cfg.a {why}, got {value!r}") + "$"):
        checker(Cfg(a=value), "a", *args)


def test_predicates_by_hand():
    assert is_int(3) and is_int(np.int64(3)) and is_int(np.uint8(0)) and is_int(-1)
    assert not is_int(True) and not is_int(np.bool_(True)) and not is_int(3.0) and not is_int("3")
    assert is_real(0.5) and is_real(np.float32(0.5)) and is_real(2) and is_real(math.nan)
    assert not is_real(False) and not is_real("1.0") and not is_real(None) and not is_real(1j)


@pytest.mark.parametrize("value", [1, 7, np.int64(2), np.int32(1)])
def test_positive_int_accepts(value):
    check_positive_int(Cfg(a=value), "a")


@pytest.mark.parametrize("value", [0, -3, True, False, 2.0, np.float64(2.0), "2", None])
def test_positive_int_rejects_bools_floats_and_nonpositive(value):
    rejects(check_positive_int, value, why="must be a positive int")


def test_int_family():
    check_int(Cfg(a=-5), "a")
    check_int(Cfg(a=np.int16(0)), "a")
    rejects(check_int, 1.5, why="must be an int")
    rejects(check_int, True, why="must be an int")
    check_nonnegative_int(Cfg(a=0), "a")
    rejects(check_nonnegative_int, -1, why="must be an int >= 0")
    rejects(check_nonnegative_int, False, why="must be an int >= 0")
    check_optional_positive_int(Cfg(a=None), "a")
    check_optional_positive_int(Cfg(a=np.int64(4)), "a")
    rejects(check_optional_positive_int, 0, why="must be None or a positive int")
    rejects(check_optional_positive_int, True, why="must be None or a positive int")


@pytest.mark.parametrize("value", [1e-3, 2, np.float32(0.5), np.int64(1)])
def test_positive_float_accepts(value):
    check_positive_float(Cfg(a=value), "a")


@pytest.mark.parametrize("value", [0.0, -1e-9, math.nan, math.inf, np.float64("nan"), True, "0.1", None])
def test_positive_float_rejects_nonpositive_nonfinite_and_nonnumbers(value):
    rejects(check_positive_float, value, why="must be a positive finite float")


def test_finite_and_nonnegative_float():
    check_finite_float(Cfg(a=-2.5), "a")
    check_finite_float(Cfg(a=0), "a")
    for bad in (math.inf, -math.inf, math.nan, False):
        rejects(check_finite_float, bad, why="must be a finite float")
    check_nonnegative_float(Cfg(a=0.0), "a")
    for bad in (-0.1, math.inf, math.nan, True):
        rejects(check_nonnegative_float, bad, why="must be a finite float >= 0")


def test_bool_str_and_choice():
    check_bool(Cfg(a=False), "a")
    rejects(check_bool, 1, why="must be a bool")
    rejects(check_bool, "yes", why="must be a bool")
    check_nonempty_str(Cfg(a="x"), "a")
    rejects(check_nonempty_str, "", why="must be a non-empty string")
    rejects(check_nonempty_str, None, why="must be a non-empty string")
    check_choice(Cfg(a="zscore"), "a", {"zscore": 0, "rank": 1})  # a dict's keys are the choices
    rejects(check_choice, "softmax", {"zscore": 0, "rank": 1}, why="must be one of ('zscore', 'rank')")
    rejects(check_choice, "x", ("group", "none"), why="must be one of ('group', 'none')")


def test_several_fields_report_the_first_bad_one():
    check_positive_int(Cfg(), "a", "b")
    with pytest.raises(ValueError, match=r"^Cfg\.b must be a positive int, got 0$"):
        check_positive_int(Cfg(a=1, b=0), "a", "b")
    with pytest.raises(ValueError, match=r"^Cfg\.a "):
        check_positive_int(Cfg(a=0, b=0), "a", "b")


def test_check_message_names_class_field_and_value():
    check(Cfg(a=3), "a", True, "never shown")
    with pytest.raises(ValueError, match=r"^Cfg\.a must be even \(pairs\), got 3$"):
        check(Cfg(a=3), "a", False, "must be even (pairs)")
    with pytest.raises(ValueError, match=r"^Cfg\.b must be in \[0, 1\], got 'x'$"):
        check(Cfg(b="x"), "b", is_real("x"), "must be in [0, 1]")


@pytest.mark.parametrize("cls, kwargs, field", [(ESConfig, {}, "iterations"), (GRPOConfig, {}, "iterations"),
                                               (ZooSpec, {"name": "x"}, "steps")])
def test_the_three_configs_share_the_wording(cls, kwargs, field):
    with pytest.raises(ValueError, match=rf"^{cls.__name__}\.{field} must be a positive int, got True$"):
        cls(**kwargs, **{field: True})


def test_is_finite_real_by_hand():
    assert is_finite_real(0.0) and is_finite_real(-3) and is_finite_real(np.float16(1.5)) and is_finite_real(1e308)
    for bad in (math.nan, math.inf, -math.inf, np.float32("nan"), True, "1", None):
        assert not is_finite_real(bad), bad


def test_freeze_task_kwargs_sorts_pairs_and_names_the_config():
    from esreason_lib.tasks.base import freeze_task_kwargs

    assert freeze_task_kwargs({"high": 9, "count": 3}, "ESConfig") == (("count", 3), ("high", 9))
    assert freeze_task_kwargs([["high", 9]], "ESConfig") == (("high", 9),)
    assert freeze_task_kwargs((), "ESConfig") == () and freeze_task_kwargs({}, "GRPOConfig") == ()
    with pytest.raises(ValueError, match=r"GRPOConfig\.task_kwargs must be a dict or a tuple of \(str, value\) "
                                         r"pairs, got 'high=9'"):
        freeze_task_kwargs("high=9", "GRPOConfig")
    with pytest.raises(ValueError, match=r"ESConfig\.task_kwargs must be a dict"):
        freeze_task_kwargs(((1, 2),), "ESConfig")
    with pytest.raises(ValueError, match=r"ESConfig\.task_kwargs must have hashable values"):
        freeze_task_kwargs({"numbers": [1, 2]}, "ESConfig")
