"""Whether a finished run had anything to learn from: one line when it did not.

ES moves theta only when its members score differently (`ES.tell` weights each member's noise by its reward's
distance from the others'); GRPO only when the samples of a prompt's group do (a group whose rewards agree has
advantage 0 everywhere). A run whose signal was flat in most iterations ends where it started, or nearly: the
trainers say `es_note` / `grpo_note` at the end (`progress.say_no_update`: stderr on a terminal, one line per
cell in a notebook) so that it does not pass silently. Computed from the run's logged metrics (reward/std for
ES, grpo/zero_std_frac for GRPO, reward/correct_frac for the reason), so a resumed run counts every iteration.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

MOSTLY = 0.8
"""The share of iterations (or of GRPO's groups over all iterations) without signal from which a run is said to
have learned nothing (an ES run with 4 iterations needs all 4 flat; one with 10 needs 8)."""


def flat_share(values: Sequence[float]) -> float:
    """The share of `values` that are exactly 0 (NaN for none): reward/std per ES iteration, where 0 means every
    member scored the same."""
    x = np.asarray(values, dtype=np.float64)
    return float(np.mean(x == 0.0)) if x.size else float("nan")


def _why(correct_frac, who: str) -> str | None:
    """"never" / "always" succeeds from the fraction of verified-correct completions of the flat iterations (None
    for a run logged before the fraction was: an unknown reason)."""
    x = np.asarray(correct_frac if correct_frac is not None else [np.nan], dtype=np.float64)
    if np.isnan(x).any():
        return None
    if np.all(x == 0.0):
        return f"{who} scored 0: the base never succeeds on these prompts"
    if np.all(x == 1.0):
        return f"{who} scored 1: the base always succeeds on these prompts (nothing left to learn)"
    return ""


def es_note(reward_std: Sequence[float], correct_frac: Sequence[float] | None, sigma: float) -> str | None:
    """The line an ES run ends with when every member scored the same in at least `MOSTLY` of its iterations
    (`reward_std` 0), saying why it may be from `correct_frac` (each iteration's fraction of verified-correct
    completions): the base never succeeds (all 0), always succeeds (all 1), else `sigma` is too small to change
    any member's answer; None when the run had a signal."""
    if not flat_share(reward_std) >= MOSTLY:
        return None
    flat = np.asarray(reward_std) == 0.0
    why = _why(None if correct_frac is None else np.asarray(correct_frac, dtype=np.float64)[flat], "every member")
    if why is None:
        why = f"the base never or always succeeds on these prompts, or sigma {sigma:g} is too small for this model"
    elif why.startswith("every member scored 0"):
        why += " (ES needs a base that sometimes does)"
    elif not why:
        why = (f"the members' answers did not change: sigma {sigma:g} may be too small for this model "
               f"(try a larger --set sigma=...)")
    return (f"ES made no update in {int(flat.sum())} of {len(flat)} iterations (all members scored the same, "
            f"reward/std 0): {why}")


def grpo_note(zero_std_frac: Sequence[float], correct_frac: Sequence[float] | None) -> str | None:
    """The line a GRPO run ends with when at least `MOSTLY` of its groups (over all iterations) had one reward for
    every sample (advantage 0: no gradient from them), saying why it may be (as `es_note`); None otherwise."""
    fracs = np.asarray(zero_std_frac, dtype=np.float64)
    if not (fracs.size and fracs.mean() >= MOSTLY):
        return None
    why = _why(correct_frac, "every sample")
    if why is None:
        why = "the base never or always succeeds on these prompts, or each prompt's samples agreed"
    elif not why:
        why = "each prompt's samples agreed: a higher temperature or a larger group_size gives them room to differ"
    return (f"GRPO had no signal in {fracs.mean():.0%} of its groups (every sample of a prompt scored the same, "
            f"advantage 0) over {fracs.size} iterations: {why}")
