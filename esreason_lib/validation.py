"""Field checks for the frozen config dataclasses (`ESConfig`, `GRPOConfig`, `ZooSpec`), called from their
`__post_init__`. Each check reads the named fields of `obj` and raises

    ValueError("<Class>.<field> <why>, got <repr of the value>")

on the first bad one, so every message names the class, the field and the offending value. Bools are not
numbers here (`True` is not a positive int); numpy integers and floats are (`numbers.Integral` / `numbers.Real`).
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Iterable


def is_int(value: Any) -> bool:
    """An integer (Python or numpy), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value: Any) -> bool:
    """A real number (int, float, numpy scalar), not a bool; nan and inf count (see `is_finite_real`)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_finite_real(value: Any) -> bool:
    """A real number, not a bool, neither nan nor +-inf."""
    return is_real(value) and math.isfinite(value)


def check(obj: Any, name: str, ok: bool, why: str) -> None:
    """Raise "<Class>.<name> <why>, got <value>" unless `ok` (for checks the named helpers do not cover)."""
    if not ok:
        raise ValueError(f"{type(obj).__name__}.{name} {why}, got {getattr(obj, name)!r}")


def _check_each(obj: Any, names: Iterable[str], predicate, why: str) -> None:
    for name in names:
        check(obj, name, predicate(getattr(obj, name)), why)


MAX_FIELD = {"iterations": 10**6, "population_size": 10**4, "prompts_per_step": 10**5, "group_size": 10**4}
"""The largest value of each size field a run may ask for: beyond any run this project can finish (the paper's
runs: 1,000 iterations, a population of 30, 8 prompts per step; ES at scale uses populations of ~10^3)."""
MAX_ROLLOUTS = 10**10
"""The most completions (the product of a run's size fields) a run may ask for: at 10^4 completions per second,
beyond the fastest path measured here by far, 10^10 takes 11 days; the paper's ES run is 2.4 x 10^5."""


def check_run_size(obj: Any, *names: str) -> None:
    """Each field is at most its `MAX_FIELD` entry, and their product (the run's completions) is at most
    `MAX_ROLLOUTS`: a one-line ValueError naming the field(s) and value(s) otherwise, before any work (call after
    the fields are checked to be positive ints)."""
    for name in names:
        check(obj, name, getattr(obj, name) <= MAX_FIELD[name], f"must be at most {MAX_FIELD[name]:,} (a run that "
              "large cannot finish: validation.MAX_FIELD)")
    total = math.prod(int(getattr(obj, name)) for name in names)
    if total > MAX_ROLLOUTS:
        sizes = ", ".join(f"{name}={getattr(obj, name)}" for name in names)
        raise ValueError(f"{type(obj).__name__}: {' x '.join(names)} = {total:.3g} completions, more than "
                         f"{MAX_ROLLOUTS:.0e} (validation.MAX_ROLLOUTS: days at any speed measured here), got {sizes}")


def check_int(obj: Any, *names: str) -> None:
    """Each field is an int."""
    _check_each(obj, names, is_int, "must be an int")


def check_positive_int(obj: Any, *names: str) -> None:
    """Each field is an int >= 1."""
    _check_each(obj, names, lambda v: is_int(v) and v >= 1, "must be a positive int")


def check_nonnegative_int(obj: Any, *names: str) -> None:
    """Each field is an int >= 0."""
    _check_each(obj, names, lambda v: is_int(v) and v >= 0, "must be an int >= 0")


def check_optional_positive_int(obj: Any, *names: str) -> None:
    """Each field is None or an int >= 1."""
    _check_each(obj, names, lambda v: v is None or (is_int(v) and v >= 1), "must be None or a positive int")


def check_finite_float(obj: Any, *names: str) -> None:
    """Each field is a finite real number."""
    _check_each(obj, names, is_finite_real, "must be a finite float")


def check_positive_float(obj: Any, *names: str) -> None:
    """Each field is a finite real number > 0."""
    _check_each(obj, names, lambda v: is_finite_real(v) and v > 0, "must be a positive finite float")


def check_step_size(obj: Any, *names: str, high: float = 1.0) -> None:
    """Each field is a finite real number in (0, high]: a step size (ES sigma/alpha, a learning rate) beyond it
    only ever diverges (e.g. alpha=1e300 turns every weight into nan)."""
    _check_each(obj, names, lambda v: is_finite_real(v) and 0 < v <= high, f"must be a finite float in (0, {high}]")


def check_nonnegative_float(obj: Any, *names: str) -> None:
    """Each field is a finite real number >= 0."""
    _check_each(obj, names, lambda v: is_finite_real(v) and v >= 0, "must be a finite float >= 0")


def check_bool(obj: Any, *names: str) -> None:
    """Each field is a bool (not 0/1)."""
    _check_each(obj, names, lambda v: isinstance(v, bool), "must be a bool")


def check_nonempty_str(obj: Any, *names: str) -> None:
    """Each field is a non-empty str."""
    _check_each(obj, names, lambda v: isinstance(v, str) and v != "", "must be a non-empty string")


def check_choice(obj: Any, name: str, choices: Iterable) -> None:
    """The field is one of `choices` (a tuple, or the keys of a dict); the message lists them."""
    choices = tuple(choices)
    check(obj, name, getattr(obj, name) in choices, f"must be one of {choices}")
