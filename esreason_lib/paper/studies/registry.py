"""The tests of each claim, declared before any run of the design they test: the paper's test and its control.

Every claim is tested twice (`findings.Test`): *the paper's test* runs the paper's own design as it states it
(final checkpoints, GRPO tuned for Pass@1 on the selection split, Pass@K from n = 64 samples at T = 0.6, its
comparison in its words); *the control* runs the alternative explanation the claim must survive (ES only moved
less: GRPO's path at matched Pass@1; any update would do: the noise-injection control; the first stage alone;
...). Each has one primary check, named here, whose status is the test's; its secondary checks are shown beside
it and never enter the status. The study modules build their `Test`s from `declared(finding_id, role)`, and
`preregistration` writes these declarations into `papers/preregistration.md`.

Deltas are set by `DELTA_RULE`, written down before any run of the multi-setting design.
"""

from __future__ import annotations

from dataclasses import dataclass

from esreason_lib.paper.findings import Check, Test

DELTA_RULE = (
    "The smallest effect of interest (delta) of a primary check is fixed by one rule, before any run of the design: "
    "(A) half of the effect the paper reports for the same comparison, in the same units, where the paper reports "
    "one; (B) otherwise the smallest change a reader would call an effect of that kind, the same for every "
    "setting: 0.01 for Pass@1, 0.02 for Pass@K (K <= n / 2), 0.02 nats for mean token entropy, 0.1 for a "
    "correlation (Cohen's small); (C) a relative claim (one model's effect against another's) takes half of the "
    "reference effect measured in the same run, and is `undecidable at this design` when that reference is not "
    "detectably above 0. No delta is derived from this project's earlier measurements.")
"""How every delta of the registered design is set (quoted in `papers/preregistration.md`)."""


@dataclass(frozen=True)
class TestSpec:
    """One declared test of a claim: its role, its design in words and its primary and secondary checks."""

    role: str
    """"paper" or "control" (`findings.ROLES`)."""
    name: str
    """Short label shown in the claims table."""
    design: str
    """The paper's test: its design in the paper's words; the control: the alternative explanation it rules out."""
    primary: str
    """The primary check in words (the study's check of that meaning is the test's status)."""
    secondary: tuple[str, ...] = ()
    """Checks shown beside the primary, never in the status."""
    delta: str = "rule B"
    """Which clause of `DELTA_RULE` sets the primary's delta, and its value where fixed."""


TESTS: dict[str, tuple[TestSpec, ...]] = {
    "00_base_models": (
        TestSpec("paper", "latent capability", "the base solves many more problems when sampled than greedily",
                 "default base: held-out Pass@16 - greedy above 0.10", ("the other bases: the same",), "none"),),
    "01_passk_es_vs_grpo": (
        TestSpec("paper", "final ES vs GRPO tuned for Pass@1",
                 "final checkpoints; each method's step size tuned for Pass@1 on the selection split; Pass@K "
                 "from n = 64 samples at T = 0.6, K the largest of 16 / 32 with K <= n / 2: ES keeps a higher "
                 "Pass@K than GRPO",
                 "ES Pass@K - GRPO (best-Pass@1 arm) Pass@K, final models",
                 ("ES Pass@1 - base", "GRPO (best-Pass@1 arm) eval token entropy below the base"),
                 "rule B: 0.02 (Pass@K)"),
        TestSpec("control", "ES vs GRPO's path at ES's Pass@1",
                 "ES only moved less: a GRPO that moved as little (its path, snapshots every 10 iterations, "
                 "interpolated at ES's Pass@1) would keep the same Pass@K",
                 "ES Pass@K - GRPO's path at ES's Pass@1",
                 ("ES eval token entropy - GRPO's path at ES's Pass@1", "ES Pass@K - its noise-injection control",
                  "ES eval token entropy - its noise-injection control"), "rule B: 0.02 (Pass@K)")),
    "02_js_diversity": (
        TestSpec("paper", "Pass@K rises along ES training",
                 "along ES's first iterations, Pass@K of the centre rises (fresh samples of theta and theta+)",
                 "mean per-iteration change of Pass@K (largest K), fresh samples",
                 ("Proposition 1's sufficient condition: how often it holds (never evidence against the paper)",),
                 "rule B: 0.02 (Pass@K) spread over the run's iterations"),
        TestSpec("control", "JS diversity predicts the next Pass@K change (independent samples)",
                 "regression to the mean: JS_succ and a Pass@K change computed from the same samples correlate "
                 "negatively whatever the true change; on independent samples (JS_succ at t from one sample set, "
                 "the change from fresh samples at t and t+1) that artefact is 0",
                 "corr(JS_succ(t), fresh Pass@K change at t) across iterations", (), "rule B: 0.1 (correlation)")),
    "03_sequential": (
        TestSpec("paper", "GRPO->ES against GRPO-only at one budget",
                 "at an equal update budget, GRPO->ES keeps more Pass@K than GRPO-only (and more Pass@1 than "
                 "ES-only)", "GRPO->ES Pass@K - GRPO-only Pass@K",
                 ("GRPO->ES Pass@1 - ES-only", "ES->GRPO Pass@1 - ES-only", "ES->GRPO Pass@K - GRPO-only"),
                 "rule B: 0.02 (Pass@K)"),
        TestSpec("control", "GRPO->ES against GRPO-only's path at its Pass@1",
                 "a sequence is GRPO trained less: GRPO-only's path at the sequence's Pass@1 keeps as much Pass@K",
                 "GRPO->ES Pass@K - GRPO-only's path at its Pass@1",
                 ("GRPO->ES Pass@K - its own first stage", "ES->GRPO Pass@1 - its own first stage",
                  "ES->GRPO Pass@K - GRPO-only's path at its Pass@1"), "rule B: 0.02 (Pass@K)")),
    "04_sparsity": (
        TestSpec("paper", "the reset keeps the gain",
                 "resetting ES's small updates (below the checked threshold) to the base keeps its task gain "
                 "(Pass@1 at T = 0.6)", "reset keeps >= 75% of the gain over the base (non-inferiority)",
                 ("reset - base",), "rule B: 0.25 x 0.01 (a quarter of a Pass@1 unit: the margin's slack)"),
        TestSpec("control", "the reset against a random reset of the same count",
                 "any reset of that many coordinates would keep it: a random set of the same count",
                 "reset - random reset of the same count", ("reset - noise-injection control",),
                 "rule B: 0.01 (Pass@1)")),
    "05_forgetting": (
        TestSpec("paper", "ES no worse than the base on held-out tasks",
                 "ES does not forget: held-out Pass@K (T = 0.6) of ES no worse than the base's by the margin "
                 "0.02, pooled over the held-out tasks and K whose base score is below 0.95 (off the ceiling)",
                 "ES - base held-out Pass@K > -0.02, pooled off the ceiling", ("per task, the same",),
                 "rule B: 0.01 (half the margin)"),
        TestSpec("control", "ES forgets less than GRPO",
                 "any post-training forgets this little: GRPO at its configuration on the same problems",
                 "ES - GRPO held-out Pass@K, pooled off the ceiling", ("GRPO - base against the margin",),
                 "rule B: 0.02 (Pass@K)")),
    "06_population_scaling": (
        TestSpec("paper", "a larger model needs a smaller population",
                 "the gain of a large population (N max - N min, held-out greedy) shrinks on the larger model",
                 "gap on the larger model - gap on the smaller (below 0)", ("each model's own gap",),
                 "rule C: half the smaller model's own gap; undecidable when that gap is not detectably above 0"),
        TestSpec("control", "z-score normalization against the best alternative shaping",
                 "the normalization ablation: rank shaping, each shaping at its own best alpha (tuning split), "
                 "does as well", "z-score - rank, best alphas", ("z-score - raw rewards, best alphas",),
                 "rule B: 0.01 (held-out greedy accuracy, a Pass@1 unit)")),
}
"""Per finding id: the declared tests, the paper's first."""


def declared(finding_id: str, role: str) -> TestSpec:
    """The declared test of `finding_id` with `role`; ValueError naming what is missing."""
    for spec in TESTS.get(finding_id, ()):
        if spec.role == role:
            return spec
    raise ValueError(f"no {role!r} test declared for {finding_id!r} (have {sorted(TESTS)})")


def make_test(finding_id: str, role: str, primary: Check, secondary=()) -> Test:
    """The `findings.Test` of the declared test (`declared`) with the study's primary and secondary checks."""
    return Test(role, declared(finding_id, role).name, primary, tuple(secondary))
