"""Tuned arms and their grids: where a choice sits in the grid it was tuned on, and the grid a design should use.

A step size "tuned for Pass@1" is the best of a grid. When the best is the grid's largest (or smallest) value, the
optimum may lie beyond it, and the arm is only the best of what was tried: every place that uses such an arm names
it (`grid_edge`), and a design extends the grid past that edge, one doubling (halving) at a time, until the chosen
value is inside it (`GRID_RULE`, `extended_grid`).
"""

from __future__ import annotations

GRID_RULE = ("A tuned step size must lie inside the grid it was tuned on: when a pilot or an earlier run chooses "
             "the grid's largest (smallest) value, the next design's grid adds twice (half) that value, and again, "
             "until the chosen value has a grid value on each side (`studies.grids.extended_grid`).")
"""The design rule for grids (quoted in `papers/preregistration.md`'s Deviations section)."""


def _check(value: float, grid) -> tuple[float, ...]:
    values = tuple(sorted(float(v) for v in grid))
    if not values or any(not v > 0 for v in values):
        raise ValueError(f"grid must hold one or more step sizes > 0, got {tuple(grid)!r}")
    if float(value) not in values:
        raise ValueError(f"value {value!r} is not in grid {values!r}")
    return values


def grid_edge(value: float, grid) -> str:
    """"top" or "bottom" when `value` is the largest or smallest of `grid` (more than one value), "only" when the
    grid holds `value` alone, "" when it lies inside."""
    values = _check(value, grid)
    if len(values) == 1:
        return "only"
    return "top" if float(value) == values[-1] else "bottom" if float(value) == values[0] else ""


def edge_note(name: str, value: float, grid) -> str:
    """The words every use of a tuned arm adds when it sits at an edge of its grid, e.g. ", the top of its grid
    [5e-06, ..., 0.0001]: the optimum may lie above", or "" inside."""
    edge = grid_edge(value, grid)
    if not edge:
        return ""
    shown = ", ".join(f"{v:g}" for v in sorted(float(v) for v in grid))
    if edge == "only":
        return f", the only {name} tried (untuned)"
    return f", the {edge} of its grid [{shown}]: the optimum may lie {'above' if edge == 'top' else 'below'}"


def extended_grid(value: float, grid) -> tuple[float, ...]:
    """`grid` with one value added beyond the edge `value` sits at (twice the largest, half the smallest) so that
    the next design brackets it; `grid` (sorted) when `value` already lies inside."""
    values = _check(value, grid)
    edge = grid_edge(value, values)
    if not edge:
        return values
    if edge == "only":
        return (values[0] / 2, values[0], values[0] * 2)
    return values + (values[-1] * 2,) if edge == "top" else (values[0] / 2,) + values
