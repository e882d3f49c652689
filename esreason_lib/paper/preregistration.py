"""`papers/preregistration.md`: the registered design of a multi-setting study, generated from the specs.

`render(design)` writes, from `presets.DESIGNS[design]` and `studies.registry` only (no run, no store): the rule
that sets every delta (`registry.DELTA_RULE`), the settings (base, task, seeds, evaluation), the arms, each claim's
paper test and control (design in words, primary and secondary checks, delta and its clause; a claim whose notebook
the design does not run, `presets.DESIGN_NOTEBOOKS`, as "not in this design" with the reason its design declares,
`LEFT_OUT`), the deltas as the specs hold them, the design's size in completions with a time estimate from the
design's measured speed (`design_size`), for a design with a pilot (`PILOT_OC`) each primary check's operating
characteristic at its registered size (`pilot_oc`), then, for `frontier`, the dated changes made after it was
registered (`deviations.render_section`: the text above them stays as registered). The file is committed before any
run of the design it registers (the lead commits it); `tests/test_preregistration.py` checks that the committed file
equals `render`, and `records.record_finding` stores in each record of a design's setting the commit that last
changed the file (`provenance.registration`, with its date and sha256).

`python -m esreason_lib.paper.preregistration --write` rewrites the file; without `--write` it prints it.
"""

from __future__ import annotations

import argparse

from esreason_lib.paper import pilot_oc
from esreason_lib.paper.design_size import size_section
from esreason_lib.paper.design_tallies import NOT_IN_DESIGN, in_design
from esreason_lib.paper.deviations import render_section
from esreason_lib.paper.provenance import DESIGN_REGISTRATIONS
from esreason_lib.paper.provenance import PREREGISTRATION_PATH as PATH
from esreason_lib.paper.studies.preset_spec import PilotOC
from esreason_lib.paper.studies.presets import DESIGNS, Preset, get_preset
from esreason_lib.paper.studies.pretrained_design import PRETRAINED_LEFT_OUT, PRETRAINED_OC
from esreason_lib.paper.studies.registry import CLAIMS, DELTA_RULE
from esreason_lib.paths import REPO_ROOT

LEFT_OUT: dict[str, dict[str, str]] = {"pretrained": PRETRAINED_LEFT_OUT}
"""Each design of `presets.DESIGN_NOTEBOOKS`: the notebooks it does not run -> why (declared in its design module)."""
PILOT_OC: dict[str, PilotOC] = {"pretrained": PRETRAINED_OC}
"""Designs whose pilot estimated the primary checks' operating characteristics: design -> its file (`pilot_oc`);
the others render no such section."""
CONTROLS = (("01", "each ES run's noise injection (its own update norms, random directions)"),
            ("03", "each sequence's first stage"), ("04", "the random reset of the same count"))
"""The Arms section's controls: (the notebook that runs it, the control); a design lists those it runs."""


def _settings_table(presets: list[Preset]) -> list[str]:
    rows = ["| setting | base | task | seeds | test / selection problems | samples, K, T |",
            "|---|---|---|---|---|---|"]
    for p in presets:
        rows.append(f"| `{p.name}` | `{p.base_model}` | {p.task} {p.task_kwargs or ''} | "
                    f"{', '.join(map(str, p.seeds))} "
                    f"| {p.eval.n_problems} / {p.comparison.selection_problems} | n = {p.eval.n_samples}, K in "
                    f"{list(p.eval.ks)}, T = {p.comparison.temperature} |")
    return rows


def _deltas(design: str, p: Preset) -> list[str]:
    """The deltas of the notebooks `design` runs, as `p`'s specs hold them."""
    c, q, s, f, g = p.comparison, p.prop1, p.sequential, p.forgetting, p.scaling
    deltas = {"01": f"Pass@1 {c.delta_pass1:g}, Pass@K {c.delta_passk:g}, entropy {c.delta_entropy:g} nats",
              "02": f"Pass@K change per iteration {q.delta_change:.3g} (0.02 over {q.iterations} iterations), "
                    f"correlation {q.delta_link:g}",
              "03": f"second stage {s.delta_stage:g}, Pass@1 {s.delta_pass1:g}, Pass@K {s.delta_passk:g}",
              "04": f"Pass@1 {p.sparsity.delta_pass1:g}, non-inferiority slack {p.sparsity.delta_keep:g} (margin: "
                    f"{1 - p.sparsity.margin_fraction:.0%} of the gain kept)",
              "05": f"margin {f.margin:g}, non-inferiority {f.delta_noninferiority:g}, ES - GRPO {f.delta_vs_grpo:g}",
              "06": f"population: half the smaller model's own gap (clause C); shaping {g.delta_shaping:g}"}
    return [f"- {n}: {d}" for n, d in deltas.items() if in_design(design, n)]


def _claim(design: str, c) -> list[str]:
    """One claim's lines: its tests as registered, or "not in this design" and why (`LEFT_OUT`)."""
    if not in_design(design, c.id):
        why = LEFT_OUT.get(design, {}).get(c.id[:2])
        if why is None:
            raise ValueError(f"design {design!r} does not run notebook {c.id[:2]} and declares no reason "
                             "(preregistration.LEFT_OUT)")
        return [f"### `{c.id}`: {NOT_IN_DESIGN}", "", f"Not run: {why}.", ""]
    lines = [f"### `{c.id}`", ""]
    for t in c.tests:
        secondary = "; ".join(t.also + t.secondary) or "none"  # as registered: co-primaries came later
        lines += [f"- **{t.role}** ({t.name}): {t.design}.", f"  - primary: {t.primary}; delta: {t.delta}",
                  f"  - secondary: {secondary}"]
    return lines + [""]


def _samples_note(design: str, presets: list[Preset]) -> list[str]:
    """For a design other than `frontier`: the tests' text is the frontier's registered text, so the n and K it
    names are the frontier's; this design's are its settings table's."""
    if design == "frontier":
        return []
    own = "; ".join(f"`{p.name}`: n = {p.eval.n_samples}, K in {list(p.eval.ks)}, T = {p.comparison.temperature}"
                    for p in presets)
    return ["The tests' text is the registered text of the `frontier` design: where it names a number of samples "
            f"n or a K, this design's are the settings table's ({own}).", ""]


def _controls(design: str) -> str:
    """The Arms section's controls: those of the notebooks `design` runs (`CONTROLS`)."""
    return "; ".join(text for notebook, text in CONTROLS if in_design(design, notebook))


def render(design: str = "frontier") -> str:
    """The Markdown of the registered `design` (module docstring)."""
    if design not in DESIGNS:
        raise ValueError(f"design {design!r} is not one of {sorted(DESIGNS)}")
    presets = [get_preset(name) for name in DESIGNS[design]]
    first = presets[0]
    write = "--write" if design == "frontier" else f"--design {design} --write"
    lines = [f"# Pre-registration: the `{design}` design", "",
             f"Generated by `python -m esreason_lib.paper.preregistration {write}` from the specs "
             "(`esreason_lib/paper/studies/presets.py`, `registry.py`); do not edit. Committed before any run of "
             "this design; each finding record names the commit it was registered in (`registered_commit`).", "",
             "## How every delta is set (written down first)", "", DELTA_RULE, "",
             "## Settings", "", *_settings_table(presets), "",
             "## Arms (every setting)", "",
             f"- GRPO: lr in {list(first.comparison.grpo_lrs)}, KL beta {first.grpo.beta:g}, group "
             f"{first.grpo.group_size}, {first.grpo.iterations} iterations, snapshot every "
             f"{first.grpo.snapshot_every}",
             f"- ES: alpha in {list(first.comparison.es_alphas)}, sigma {first.es.sigma:g}, population "
             f"{first.es.population_size}, {first.es.iterations} iterations, snapshot every {first.es.snapshot_every}",
             f"- controls: {_controls(design)}",
             f"- paths evaluated at every snapshot (notebook 01): {', '.join(first.comparison.path_methods)}; the "
             "other arms' final models only", "",
             "## Tests per claim (status = the primary check's; secondaries shown, never in the status)", "",
             *_samples_note(design, presets)]
    for c in CLAIMS:
        lines += _claim(design, c)
    lines += ["## Deltas as the specs hold them (every setting)", "", *_deltas(design, first), "",
              *size_section(design, presets)]
    if design in PILOT_OC:
        lines += ["", *pilot_oc.section(PILOT_OC[design], presets)]
    section = render_section(design)
    return "\n".join(lines) + "\n" + ("\n" + section if section else "")


def main(argv=None) -> int:
    """Print a design's registration, or with `--write` rewrite its file (`provenance.DESIGN_REGISTRATIONS`:
    `papers/preregistration.md` for the frontier)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--design", default="frontier", choices=sorted(DESIGN_REGISTRATIONS),
                        help="a design of presets.DESIGNS")
    parser.add_argument("--write", action="store_true", help="rewrite the design's registration file "
                        f"({PATH.relative_to(REPO_ROOT)} for the frontier)")
    args = parser.parse_args(argv)
    text = render(args.design)
    if args.write:
        DESIGN_REGISTRATIONS[args.design].write_text(text)
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
