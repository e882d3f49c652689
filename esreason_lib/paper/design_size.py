"""The Size section of a registered design (`preregistration.render`): each setting's completions by part, counted
from the specs as the studies generate them (no run), and their hours at the design's measured speed.

`design_completions(preset, notebooks)` is the count, a pure function of the preset: the training (notebook 01's
grid and notebook 06's runs, `plan.expected_cost`) and, for each of notebooks 01, 02, 04 and 05 in `notebooks`, what
its study generates (`comparison_completions`, `prop1_completions`, `sparsity_completions`,
`forgetting_completions`: each gives its count and the sum it is, written under the table). A design counts every
notebook it runs (`presets.DESIGN_NOTEBOOKS`), except a design registered before these counts existed
(`AS_REGISTERED`): its registered text stays as it was, with the count it was registered with (`registered_columns`:
an ES-sized run per noise control and notebook 01 at every snapshot of every run, a greedy decode each).
"""

from __future__ import annotations

from dataclasses import replace

from esreason_lib.evaluation import EvalSpec
from esreason_lib.paper.studies.preset_spec import CompletionRate
from esreason_lib.paper.studies.presets import DESIGN_NOTEBOOKS, Preset
from esreason_lib.paper.studies.pretrained_design import PRETRAINED_RATE
from esreason_lib.training.run_entry import snapshot_steps

AS_REGISTERED: dict[str, tuple[str, ...]] = {"frontier": ("01",)}
"""Designs whose registered Size counts fewer notebooks than they run: design -> the notebooks it counts (the
`frontier` was registered counting notebook 01's evaluations only; later changes go to its dated deviations)."""
UNCOUNTED = {"03": "notebook 03's sequences and their evaluations",
             "06": "notebook 06's evaluations (its training is in the training column)"}
"""What the count leaves out of a notebook a design runs (notebook -> the part), named under the table."""


def design_rate(design: str) -> CompletionRate:
    """The measured speed that turns `design`'s completions into hours: for `frontier` the zoo bases' one rate
    (`power_report.COMPLETIONS_PER_CORE_SECOND`), for `pretrained` its base's own (`PRETRAINED_RATE`)."""
    from esreason_lib.paper.power_report import COMPLETIONS_PER_CORE_SECOND as ZOO

    rates = {"frontier": CompletionRate(
        ZOO, ZOO, "core", "The rate was measured on the 130k-parameter bases (`benchmarks/sweep_tiny.py`); qwen2-m "
        "(1.0M parameters) is slower per completion, so its row is a lower bound. Notebook 01's snapshot evaluations "
        "dominate; runs are cached, so the design can be filled setting by setting."), "pretrained": PRETRAINED_RATE}
    if design not in rates:
        raise ValueError(f"design {design!r} declares no completion rate (design_size.design_rate knows "
                         f"{sorted(rates)})")
    return rates[design]


def per_evaluation(spec: EvalSpec, field: str) -> int:
    """Completions of one model's evaluation under `spec`: `n_problems` x (`n_samples` + a greedy decode when
    `greedy`); ValueError naming `field` when `n_problems` is None (the whole split: not known from the spec)."""
    if spec.n_problems is None:
        raise ValueError(f"{field}.n_problems is None (the whole test split): the design's size cannot be counted")
    return spec.n_problems * (spec.n_samples + int(spec.greedy))


def comparison_completions(preset: Preset) -> tuple[int, str]:
    """Notebook 01's evaluations as `comparison.compute` makes them, each under `comparison.evaluation_spec` (the
    test and selection problems x (`eval.n_samples` + a greedy decode when `eval.greedy`)): the base, every run of
    the grid and each ES run's noise-injection control at `comparison.temperature` and at each other side
    temperature (`comparison.side_temperatures`; one equal to the evidence's is the same cached evaluation), and
    the snapshots (`run_entry.snapshot_steps`: the final model is none) of the runs whose method is in
    `comparison.path_methods` ("noise": the controls', at their ES run's steps). The controls generate no
    completions (random steps, `controls.noise_control`). (count, the sum in words)."""
    from esreason_lib.paper.studies.comparison import evaluation_spec, training_configs

    c, runs = preset.comparison, training_configs(preset)
    es_runs = [cfg for (m, _, _), cfg in runs.items() if m == "es"]
    paths = [cfg for (m, _, _), cfg in runs.items() if m in c.path_methods] + (
        es_runs if "noise" in c.path_methods else [])
    snapshots = sum(len(snapshot_steps(cfg.snapshot_every or 0, cfg.iterations)) for cfg in paths)
    temperatures = [c.temperature] + sorted(set(c.side_temperatures) - {c.temperature})
    finals = 1 + len(runs) + len(es_runs)
    spec = evaluation_spec(preset)
    each = per_evaluation(spec, "eval")
    greedy = " + a greedy decode" if spec.greedy else ""
    return (finals * len(temperatures) + snapshots) * each, (
        f"notebook 01: ({finals} final models (the base, {len(runs)} runs, {len(es_runs)} noise controls) x "
        f"{len(temperatures)} temperature(s) (T = {', '.join(f'{t:g}' for t in temperatures)}) + {snapshots} "
        f"snapshots (the {', '.join(c.path_methods)} paths)) x {each:,} completions ({spec.n_problems} test and "
        f"selection problems x {spec.n_samples} samples{greedy}); the noise controls themselves generate none")


def prop1_completions(preset: Preset) -> tuple[int, str]:
    """Notebook 02's Proposition-1 trajectories (`diversity.compute_prop1`), per followed seed (`prop1.seeds`): its
    own ES run of `prop1.iterations` iterations, and the centre's samples of the probes (`prop1_trajectory`): a first
    draw, one of theta+ per iteration and, with `prop1.independent_link`, an independent one of theta per iteration,
    each `probe_prompts` x `samples`. Scoring the samples under the members is no generation (not counted), nor
    are the ES run's centre decodes (one per prompt and iteration, as in `plan.expected_cost`) or the Lemma 1-2
    populations (`lemma.sigmas`, named when there are any). (count, the sum in words)."""
    from esreason_lib.paper.plan import expected_cost

    q = preset.prop1
    es = int(expected_cost(replace(preset.es, iterations=q.iterations)))
    draws = 1 + q.iterations * (2 if q.independent_link else 1)
    probes = draws * q.probe_prompts * q.samples
    lemmas = f"; the Lemma 1-2 populations at sigma in {list(preset.lemma.sigmas)} are not counted" \
        if preset.lemma.sigmas else ""
    return q.seeds * (es + probes), (
        f"notebook 02: {q.seeds} followed seeds x (an ES run of {q.iterations} iterations x "
        f"{preset.es.prompts_per_step} prompts x {preset.es.population_size} members = {es:,} + {draws} draws of the "
        f"centre x {q.probe_prompts} probes x {q.samples} samples = {probes:,}){lemmas}")


def sparsity_completions(preset: Preset) -> tuple[int, str]:
    """Notebook 04's evaluations under `sparsity.eval` (`sparsity.compute`): the base, and per seed of each method
    of `sparsity.methods` its unreset model, its magnitude and random resets at every threshold (`quantiles` and
    `taus`) and, for ES, its noise-injection control. (count, the sum in words)."""
    s = preset.sparsity
    thresholds = len(s.quantiles) + len(s.taus)
    models = 1 + sum(len(preset.seeds) * (1 + 2 * thresholds + (m == "es")) for m in s.methods)
    each = per_evaluation(s.eval, "sparsity.eval")
    return models * each, (
        f"notebook 04: {models} models (the base; per seed of {', '.join(s.methods)}: the unreset model and the "
        f"magnitude and random resets at {thresholds} thresholds; ES's noise-injection control) x {each:,} "
        f"completions ({s.eval.n_problems} problems x {s.eval.n_samples + int(s.eval.greedy)})")


def forgetting_completions(preset: Preset) -> tuple[int, str]:
    """Notebook 05's generations (`forgetting.compute`): the base's and every seed's ES and GRPO model's
    evaluations on each held-out task under `forgetting.eval`, and the KL samples of each trained model (`kl_samples`
    per prompt on `kl_prompts` prompts of the training task and of each held-out task). (count, the sum in
    words)."""
    from esreason_lib.methods import METHODS

    f, held = preset.forgetting, len(preset.heldout())
    trained = len(METHODS) * len(preset.seeds)
    each = per_evaluation(f.eval, "forgetting.eval")
    kl = trained * (1 + held) * f.kl_prompts * f.kl_samples
    return (1 + trained) * held * each + kl, (
        f"notebook 05: {1 + trained} models (the base, {len(preset.seeds)} seeds of {' and '.join(METHODS)}) x "
        f"{held} held-out task(s) x {each:,} completions ({f.eval.n_problems} problems x "
        f"{f.eval.n_samples + int(f.eval.greedy)}) + KL samples: {trained} trained models x {1 + held} tasks x "
        f"{f.kl_prompts} prompts x {f.kl_samples} = {kl:,}")


COUNTS = {"01": ("evaluation (notebook 01)", comparison_completions),
          "02": ("notebook 02 (ES runs, probes)", prop1_completions),
          "04": ("notebook 04 (evaluations)", sparsity_completions),
          "05": ("notebook 05 (held-out evaluations, KL)", forgetting_completions)}
"""The notebooks counted: notebook -> (its column, its count)."""


def registered_columns(preset: Preset) -> dict[str, float]:
    """The `frontier` registration's count beside the training (`AS_REGISTERED`), kept as registered: "noise
    controls" (one ES-sized run per ES arm and seed, though a control generates no completions) and "evaluation
    (notebook 01)" (every final model and 1 + iterations // snapshot_every snapshots of every run and control on
    the test and selection problems at `eval.n_samples` + 1, plus the finals at each side temperature)."""
    from esreason_lib.paper.plan import expected_cost
    from esreason_lib.paper.studies.comparison import training_configs

    runs = training_configs(preset)
    es_runs = [c for (m, _, _), c in runs.items() if m == "es"]
    snapshots = {m: getattr(preset, m).iterations // getattr(preset, m).snapshot_every for m in ("es", "grpo")}
    models = sum(1 + snapshots[m] for (m, _, _) in runs) + len(es_runs) * (1 + snapshots["es"])
    per_model = (preset.eval.n_problems + preset.comparison.selection_problems) * (preset.eval.n_samples + 1)
    finals = (len(runs) + len(es_runs) + 1) * per_model * len(preset.comparison.side_temperatures)
    return {"noise controls": float(sum(expected_cost(c) for c in es_runs)),
            "evaluation (notebook 01)": float((models + 1) * per_model + finals)}


def counts(notebooks, registered: bool) -> list[tuple[str, object]]:
    """The (column, count) of `COUNTS` for each notebook of `notebooks`, notebook 01's left to
    `registered_columns` when `registered`."""
    return [cc for n, cc in COUNTS.items() if n in notebooks and not (registered and n == "01")]


def design_completions(preset: Preset, notebooks=("01",), *, registered: bool = False) -> dict[str, float]:
    """The completions one setting generates, by column: "training" (notebook 01's grid and notebook 06's cells and
    ablations, `plan.expected_cost`: a GRPO completion counted twice, and ES's population only: each ES iteration
    also decodes its centre once per prompt, `es.loop.es_step`'s reward/center and policy/entropy, iterations x
    prompts_per_step more completions per run, 1 / population_size of its count, left out), with `registered`
    `registered_columns`, then one column per notebook of `COUNTS` in `notebooks`."""
    from esreason_lib.paper.plan import expected_cost, training_plan

    out = {"training": sum(expected_cost(c) for c in training_plan(preset))}
    out |= registered_columns(preset) if registered else {}
    return out | {column: float(count(preset)[0]) for column, count in counts(notebooks, registered)}


def counted_notebooks(design: str) -> tuple[str, ...]:
    """The notebooks `design`'s Size counts: `AS_REGISTERED`'s, else every notebook it runs."""
    if design in AS_REGISTERED:
        return AS_REGISTERED[design]
    return DESIGN_NOTEBOOKS.get(design, ("00", "01", "02", "03", "04", "05", "06"))


def size_section(design: str, presets: list[Preset]) -> list[str]:
    """The Size section: each setting's completions by column and their hours at the design's rate (`design_rate`),
    the sum behind each notebook's column, the parts left out, and where the rate comes from."""
    rate, notebooks, registered = design_rate(design), counted_notebooks(design), design in AS_REGISTERED
    time, per, hours = ("CPU time", "core-second", "CPU hours") if rate.clock == "core" else (
        "wall time", "wall-second", "wall hours")
    speed = f"{rate.slow:g}" if rate.slow == rate.fast else f"{rate.slow:.1f}-{rate.fast:.1f}"
    columns = list(design_completions(presets[0], notebooks, registered=registered))
    lines = [f"## Size (completions per setting; {time} at {speed} completions per {per})", "",
             f"| setting | {' | '.join(columns)} | {hours} |", "|---" * (len(columns) + 2) + "|"]
    sums = []
    for p in presets:
        c = design_completions(p, notebooks, registered=registered)
        most, least = (sum(c.values()) / r / 3600 for r in (rate.slow, rate.fast))
        spent = f"{most:.1f}" if rate.slow == rate.fast else f"{least:.1f}-{most:.1f}"
        lines.append(f"| `{p.name}` | {' | '.join(f'{v:,.0f}' for v in c.values())} | {spent} |")
        sums += [f"- `{p.name}`, {count(p)[1]}" for _, count in counts(notebooks, registered)]
    left = [part for n, part in UNCOUNTED.items() if n in notebooks]
    sums += [f"- not counted: {'; '.join(left)}"] if left else []
    return lines + [""] + (sums + [""] if sums else []) + [rate.provenance]
