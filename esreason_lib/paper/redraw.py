"""How likely a full redraw keeps each test's status: per test of a design (`redraw_keeps`) and counted (`keep_line`).

`redraw_keeps` gives `findings.redraw_keep` of each test's stored primary and co-primary checks; `claims` shows each
in its design row and `keep_line`'s sentence below the rows (papers/claims.md) and in the README.
"""

from __future__ import annotations

from esreason_lib.paper.deviations import co_primary_names
from esreason_lib.paper.findings import redraw_keep
from esreason_lib.paper.records import stored_check


def redraw_keeps(records: list[dict]) -> dict[tuple[str, str, str], float | None]:
    """{(setting, finding id, role): P(a full redraw keeps the test's status)} (`findings.redraw_keep` of its
    primary and co-primary checks) for each test of `records`."""
    out = {}
    for rec in records:
        for test in rec["tests"]:
            names = [test["primary"], *co_primary_names(rec, test)]
            out[rec["preset"], rec["id"], test["role"]] = redraw_keep([stored_check(rec, n) for n in names])
    return out


def keep_line(keeps: dict, at: float = 0.8) -> str:
    """One sentence on `redraw_keeps`: how many tests keep their status on a redraw with probability >= `at`."""
    known = [p for p in keeps.values() if p is not None]
    if not known:
        return ""
    return (f"On a full redraw (new seeds and problems, the same design), a test keeps its status with the "
            f"probability its own variance gives (`findings.redraw_keep`, in brackets in each row of "
            f"papers/claims.md): {sum(p >= at for p in known)} of these {len(known)} tests keep it with probability "
            f">= {at:g}, {sum(p < 0.5 for p in known)} with probability below 0.5.")
