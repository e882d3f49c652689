"""The minimum detectable effect of a check from its 95% CI, and which checks of a finding can detect their delta.

`mde_from_ci` gives `MDE_FACTOR * SE` with SE = CI width / (2 * 1.96); `power_statement` says which checks have an
MDE below their delta. The rules are in `findings`'s module docstring.
"""

from __future__ import annotations

Z_95, Z_POWER_80 = 1.959964, 0.841621
MDE_FACTOR = Z_95 + Z_POWER_80
"""MDE = (z_0.975 + z_0.80) * SE: detected with 80% power at alpha = 0.05, two-sided."""


def power_statement(checks) -> str:
    """One sentence on the design's power: which checks have an MDE below their delta (they can tell an effect
    that matters from none) and which do not (a `not resolved` there says the design is weak)."""
    checks = tuple(checks)
    with_delta = [c for c in checks if c.delta is not None]
    if not with_delta:
        return f"power not assessed: none of {len(checks)} checks fixes a delta"
    weak = [c for c in with_delta if not c.powered]
    text = f"{len(with_delta) - len(weak)} of {len(with_delta)} checks with a delta have MDE < delta"
    if weak:
        text += "; underpowered: " + ", ".join(f"{c.name} (MDE {abs(c.mde):.3f} vs delta {c.delta:.3f})"
                                               for c in weak)
    if len(with_delta) < len(checks):
        text += f"; {len(checks) - len(with_delta)} without a delta"
    return text


def mde_from_ci(low: float, high: float) -> float:
    """Minimum detectable effect from a 95% CI: MDE_FACTOR * (high - low) / (2 * 1.96)."""
    return MDE_FACTOR * (float(high) - float(low)) / (2 * Z_95)
