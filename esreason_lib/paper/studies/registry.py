"""The paper's claims, one declaration each: its sentence, where the paper makes it, its figures and its tests.

`CLAIMS` holds one `ClaimSpec` per claim (and the setup check of notebook 00), keyed by the notebook that measures
it: adding a claim is its entry here and its notebook (plus a study module and spec when it needs computation of
its own). `paper.claims` renders the table from these entries and the stored records (`paper.records`).

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

from esreason_lib.paper.findings import KINDS, ROLES, Check, Test
from esreason_lib.paper.notebooks import figure_names
from esreason_lib.paths import NOTEBOOK_DIR

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
    also: tuple[str, ...] = ()
    """Co-primary checks in words: the claim needs them as well as the primary (`findings.Test.also`). Added after
    the `frontier` registration, where they were secondaries (`deviations`)."""

    def __post_init__(self):
        if self.role not in ROLES:
            raise ValueError(f"TestSpec.role must be one of {ROLES}, got {self.role!r}")


@dataclass(frozen=True)
class ClaimSpec:
    """One claim of the paper (or the setup check): the one place it is declared."""

    id: str
    """Stable key, also the notebook stem that measures it."""
    claim: str
    """The paper's claim in one sentence."""
    where: str
    """Where the paper makes it."""
    short: str
    """The claim in a few words: the README's one short line per claim."""
    tests: tuple[TestSpec, ...]
    """The paper's test first, then its control (`TestSpec`)."""
    kind: str = "claim"
    """"claim" (counted in the tallies) or "setup" (a property of the setup: shown, never counted)."""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"ClaimSpec.kind must be one of {KINDS}, got {self.kind!r}")
        if not self.tests or self.tests[0].role != "paper":
            raise ValueError(f"ClaimSpec {self.id!r}: tests must start with the paper's test, got "
                             f"{[t.role for t in self.tests]}")

    @property
    def figures(self) -> tuple[str, ...]:
        """The figure stems (in `figures/`) that show this project's result: those its notebook saves
        (`notebooks.figure_names`), in its order."""
        return figure_names(NOTEBOOK_DIR / f"{self.id}.py")

    @property
    def figure(self) -> str:
        """`figures`, comma-separated (papers/claims.md's column)."""
        return ", ".join(self.figures)


CLAIMS: tuple[ClaimSpec, ...] = (
    ClaimSpec("00_base_models", "The base model solves some problems greedily and many more when sampled "
              "(latent capability).", "setup (base models)", "The base solves more when sampled than greedily", (
        TestSpec("paper", "latent capability", "the base solves many more problems when sampled than greedily",
                 "default base: held-out Pass@16 - greedy above 0.10", ("the other bases: the same",), "none"),),
              kind="setup"),
    ClaimSpec("01_passk_es_vs_grpo", "ES raises Pass@1 over the base and keeps higher Pass@K than GRPO; GRPO's "
              "token entropy collapses, ES's does not.", "main results: Pass@K curves, entropy",
              "ES: Pass@1 up, Pass@K above GRPO's, entropy kept", (
        TestSpec("paper", "final ES vs GRPO tuned for Pass@1",
                 "final checkpoints; each method's step size tuned for Pass@1 on the selection split; Pass@K "
                 "from n = 64 samples at T = 0.6, K the largest of 16 / 32 with K <= n / 2: ES keeps a higher "
                 "Pass@K than GRPO",
                 "ES Pass@K - GRPO (best-Pass@1 arm) Pass@K, final models",
                 ("GRPO (best-Pass@1 arm) eval token entropy below the base",), "rule B: 0.02 (Pass@K)",
                 also=("ES Pass@1 - base",)),
        TestSpec("control", "ES vs GRPO's path at ES's Pass@1",
                 "ES only moved less: a GRPO that moved as little (its path, snapshots every 10 iterations, "
                 "interpolated at ES's Pass@1) would keep the same Pass@K",
                 "ES Pass@K - GRPO's path at ES's Pass@1",
                 ("ES eval token entropy - GRPO's path at ES's Pass@1", "ES Pass@K - its noise-injection control",
                  "ES eval token entropy - its noise-injection control"), "rule B: 0.02 (Pass@K)"))),
    ClaimSpec("02_js_diversity", "The ES population's JS diversity scales as Lemma 1 predicts, its coverage gain "
              "follows Lemma 2, and Proposition 1 bounds an update's Pass@K (the paper's account of ES's Pass@K "
              "gain).", "Lemmas 1-3, Proposition 1", "ES's diversity and coverage follow Lemmas 1-2 and Prop. 1", (
        TestSpec("paper", "Pass@K rises along ES training",
                 "along ES's first iterations, Pass@K of the centre rises (fresh samples of theta and theta+)",
                 "mean per-iteration change of Pass@K (largest K), fresh samples",
                 ("Proposition 1's sufficient condition: how often it holds (never evidence against the paper)",),
                 "rule B: 0.02 (Pass@K) spread over the run's iterations"),
        TestSpec("control", "JS diversity predicts the next Pass@K change (independent samples)",
                 "regression to the mean: JS_succ and a Pass@K change computed from the same samples correlate "
                 "negatively whatever the true change; on independent samples (JS_succ at t from one sample set, "
                 "the change from fresh samples at t and t+1) that artefact is 0",
                 "corr(JS_succ(t), fresh Pass@K change at t) across iterations", (), "rule B: 0.1 (correlation)"))),
    ClaimSpec("03_sequential", "GRPO->ES (and ES->GRPO) at an equal update budget combine Pass@1 and Pass@K "
              "gains.", "sequential training", "GRPO then ES combines Pass@1 and Pass@K gains", (
        TestSpec("paper", "GRPO->ES against GRPO-only at one budget",
                 "at an equal update budget, GRPO->ES keeps more Pass@K than GRPO-only (and more Pass@1 than "
                 "ES-only)", "GRPO->ES Pass@K - GRPO-only Pass@K",
                 ("GRPO->ES Pass@1 - ES-only", "ES->GRPO Pass@1 - ES-only", "ES->GRPO Pass@K - GRPO-only"),
                 "rule B: 0.02 (Pass@K)"),
        TestSpec("control", "GRPO->ES against GRPO-only's path at its Pass@1",
                 "a sequence is GRPO trained less: GRPO-only's path at the sequence's Pass@1 keeps as much Pass@K",
                 "GRPO->ES Pass@K - GRPO-only's path at its Pass@1",
                 ("GRPO->ES Pass@K - its own first stage", "ES->GRPO Pass@1 - its own first stage",
                  "ES->GRPO Pass@K - GRPO-only's path at its Pass@1"), "rule B: 0.02 (Pass@K)"))),
    ClaimSpec("04_sparsity", "Resetting the many small ES updates to the base weights keeps the task gain "
              "(functional sparsity).", "functional sparsity",
              "Resetting ES's small updates keeps the gain (sparsity)", (
        TestSpec("paper", "the reset keeps the gain",
                 "resetting ES's small updates (below the checked threshold) to the base keeps its task gain "
                 "(Pass@1 at T = 0.6)", "reset keeps >= 75% of the gain over the base (non-inferiority)",
                 ("reset - base",), "rule B: 0.25 x 0.01 (a quarter of a Pass@1 unit: the margin's slack)"),
        TestSpec("control", "the reset against a random reset of the same count",
                 "any reset of that many coordinates would keep it: a random set of the same count",
                 "reset - random reset of the same count", ("reset - noise-injection control",),
                 "rule B: 0.01 (Pass@1)"))),
    ClaimSpec("05_forgetting", "ES does not cause catastrophic forgetting on held-out tasks.", "forgetting",
              "ES does not forget held-out tasks", (
        TestSpec("paper", "ES no worse than the base on held-out tasks",
                 "ES does not forget: held-out Pass@K (T = 0.6) of ES no worse than the base's by the margin "
                 "0.02, pooled over the held-out tasks and K whose base score is below 0.95 (off the ceiling)",
                 "ES - base held-out Pass@K > -0.02, pooled off the ceiling", ("per task, the same",),
                 "rule B: 0.01 (half the margin)"),
        TestSpec("control", "ES forgets less than GRPO",
                 "any post-training forgets this little: GRPO at its configuration on the same problems",
                 "ES - GRPO held-out Pass@K, pooled off the ceiling", ("GRPO - base against the margin",),
                 "rule B: 0.02 (Pass@K)"))),
    ClaimSpec("06_population_scaling", "Larger models need a smaller ES population; z-score reward normalization "
              "matters.", "Table 6, normalization ablation",
              "Larger models need smaller populations; z-scoring matters", (
        TestSpec("paper", "a larger model needs a smaller population",
                 "the gain of a large population (N max - N min, held-out greedy) shrinks on the larger model",
                 "gap on the larger model - gap on the smaller (below 0)", ("each model's own gap",),
                 "rule C: half the smaller model's own gap; undecidable when that gap is not detectably above 0"),
        TestSpec("control", "z-score normalization against the best alternative shaping",
                 "the normalization ablation: rank shaping, each shaping at its own best alpha (tuning split), "
                 "does as well", "z-score - rank, best alphas", ("z-score - raw rewards, best alphas",),
                 "rule B: 0.01 (held-out greedy accuracy, a Pass@1 unit)"))),
)
"""The claims in notebook order, each with its declared tests (the paper's first)."""
_BY_ID = {c.id: c for c in CLAIMS}


def declared(finding_id: str, role: str) -> TestSpec:
    """The declared test of `finding_id` with `role`; ValueError naming what is missing."""
    for spec in claim(finding_id).tests:
        if spec.role == role:
            return spec
    raise ValueError(f"no {role!r} test declared for {finding_id!r}")


def claim(finding_id: str) -> ClaimSpec:
    """The declared claim `finding_id`; ValueError naming the known ids."""
    if finding_id not in _BY_ID:
        raise ValueError(f"finding_id {finding_id!r} is not one of {sorted(_BY_ID)}")
    return _BY_ID[finding_id]


def make_test(finding_id: str, role: str, primary: Check, secondary=(), also=()) -> Test:
    """The `findings.Test` of the declared test (`declared`) with the study's primary, secondary and co-primary
    (`also`) checks; ValueError when the co-primary checks do not match the declaration's count."""
    spec = declared(finding_id, role)
    if len(tuple(also)) != len(spec.also):
        raise ValueError(f"{finding_id} {role} test declares {len(spec.also)} co-primary check(s) "
                         f"({spec.also}), got {len(tuple(also))}")
    return Test(role, spec.name, primary, tuple(secondary), tuple(also))
