"""Notebook 05: does post-training on Countdown cost the base model anything it could do before?

Three measurements of the ES and GRPO models of notebook 01 against their common base:
- Pass@1 / Pass@K on the held-out synthetic families (`preset.heldout_tasks`), never seen in training;
- language-model loss (mean completion cross-entropy) on a fixed batch from the pretraining mixture (zoo
  bases only: a hub model's pretraining corpus is not available);
- KL(pi_tuned || pi_base) per token along completions sampled from the tuned model on held-out prompts of the
  training task and of each held-out task, estimated with k3 = r - 1 - log r, r = pi_base / pi_tuned of each
  sampled token (unbiased for the per-position KL and never negative).
The per-model LM loss and KL are cached in runs of kind `forgetting`.

The finding tests the paper's statement on held-out Pass@K (K = the largest of `forgetting.eval.ks`), per training
seed and problem, for ES and GRPO at the preset's configurations (`Preset.es`, `Preset.grpo`), per held-out task:
- ES against the absolute no-forgetting margin: Delta Pass@K (ES - base) > -`forgetting.margin` (delta
  `forgetting.delta_noninferiority`);
- ES against GRPO: Pass@K of ES - GRPO > 0 (ES forgets less; delta `forgetting.delta_vs_grpo`).
The paper's test pools the held-out tasks off the ceiling (`off_ceiling`: a task and K whose base score is >= 0.95
cannot show forgetting or a difference); the control (ES against GRPO) pools the same; GRPO against the margin and
each task's own checks are shown beside (`undecidable` on the ceiling). The LM-loss rise over the base and the KL
are reported measurements.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from esreason_lib.methods import METHODS, trainer
from esreason_lib.models.load import load_model
from esreason_lib.paper.analysis import per_problem_pass, seed_by_problem
from esreason_lib.paper.findings import Check, Finding, effect_check, make_finding
from esreason_lib.paper.studies.common import evaluate_ref, model_ref
from esreason_lib.paper.studies.forgetting_model_passes import heldout_lm_records, kl_to_base, lm_loss_by_family
from esreason_lib.paper.studies.preset_spec import HeldoutTask
from esreason_lib.paper.studies.presets import Preset
from esreason_lib.paper.studies.registry import make_test
from esreason_lib.seeding import derive_seed
from esreason_lib.store.cache import cached
from esreason_lib.tasks import get_task
from esreason_lib.training.inputs import resolve_device

LM_NOTE = ("LM loss skipped: the base {base!r} was not pretrained by this library (a hub or GGUF base), so its "
           "pretraining mixture is unavailable")
"""The note shown when the base is a hub model or a pretrained GGUF base (`zoo.PRETRAINED`)."""


def heldout_problems(preset: Preset, refs: dict[tuple[str, int], str], *, home=None,
                     progress: bool = True) -> pd.DataFrame:
    """One row per (method, seed, task, problem): pass@1, pass@K and K (largest ks) on each held-out task
    (`Preset.heldout`: `task` is its label) under `preset.forgetting.eval`; `refs` maps (method, seed) to a model
    reference, and the base is added as method "base", seed -1."""
    spec = preset.forgetting.eval
    frames = []
    for (method, seed), ref in {("base", -1): preset.base_model, **refs}.items():
        for held in preset.heldout():
            result = evaluate_ref(ref, held.task, held.kwargs, spec, device=resolve_device(preset.device), home=home,
                                  progress=progress)
            frames.append(per_problem_pass(result.table, max(spec.ks)).assign(method=method, seed=seed,
                                                                              task=held.label))
    return pd.concat(frames, ignore_index=True)[["method", "seed", "task", "problem_id", "pass@1", "pass@K", "K"]]


def heldout_scores(problems: pd.DataFrame) -> pd.DataFrame:
    """One row per (method, seed, task) of `heldout_problems`: pass@1, pass@K (means over problems) and K."""
    return problems.groupby(["method", "seed", "task"], sort=False).agg(
        **{"pass@1": ("pass@1", "mean"), "pass@K": ("pass@K", "mean")}, K=("K", "first")).reset_index()


def forgetting_deltas(scores: pd.DataFrame) -> pd.DataFrame:
    """Per (method, task), methods other than base: mean and std over seeds of Delta = score - base score,
    for pass@1 and pass@K. Columns: method, task, K, d_pass@1, d_pass@1_std, d_pass@K, d_pass@K_std, seeds."""
    base = scores[scores["method"] == "base"].set_index("task")
    tuned = scores[scores["method"] != "base"].copy()
    for col in ("pass@1", "pass@K"):
        tuned[f"d_{col}"] = tuned[col] - tuned["task"].map(base[col])
    g = tuned.groupby(["method", "task"], sort=False)
    out = pd.DataFrame({"K": g["K"].first(), "d_pass@1": g["d_pass@1"].mean(),
                        "d_pass@1_std": g["d_pass@1"].std(ddof=0), "d_pass@K": g["d_pass@K"].mean(),
                        "d_pass@K_std": g["d_pass@K"].std(ddof=0), "seeds": g["seed"].nunique()})
    return out.reset_index()


def _stats_config(preset: Preset, ref: str) -> dict:
    return {"model": ref, "base": preset.base_model, "task": preset.task, "task_kwargs": dict(preset.task_kwargs),
            "heldout_tasks": list(preset.heldout_tasks), "kl_prompts": preset.forgetting.kl_prompts,
            "kl_samples": preset.forgetting.kl_samples, "lm_sequences": preset.forgetting.lm_sequences,
            "seed": 0}


def model_stats(preset: Preset, ref: str, *, home=None) -> pd.DataFrame:
    """LM loss per family and KL to the base per task for model `ref`; cached as a `forgetting` run.

    Long table: quantity ("lm_loss" or "kl"), scope (family / "all" for lm_loss, task for kl), value.
    The KL of the base to itself is 0 by definition (not sampled).
    """
    def compute() -> dict[str, pd.DataFrame]:
        device = resolve_device(preset.device)
        model, tokenizer = load_model(ref, device=device, home=home)
        rows = []
        records = heldout_lm_records(preset.base_model, preset.forgetting.lm_sequences)
        if records is not None:
            for scope, value in lm_loss_by_family(model, tokenizer, records).items():
                rows.append({"quantity": "lm_loss", "scope": scope, "value": value})
        base = model if ref == preset.base_model else load_model(preset.base_model, device=device, home=home)[0]
        for held in (HeldoutTask(preset.task, preset.task, preset.test_task_kwargs()), *preset.heldout()):
            task_name, task = held.label, get_task(held.task, **held.kwargs)
            prompts = [task.prompt(ex, tokenizer)
                       for ex in task.examples("test", n=preset.forgetting.kl_prompts,
                                               seed=derive_seed(0, "kl") % 2**31)]
            kl = 0.0 if base is model else kl_to_base(
                model, base, tokenizer, prompts, n=preset.forgetting.kl_samples, max_new_tokens=task.max_new_tokens,
                stop=task.stop, seed=derive_seed(0, "forgetting", "kl", task_name))
            rows.append({"quantity": "kl", "scope": task_name, "value": kl})
        return {"stats": pd.DataFrame(rows)}

    return cached("forgetting", _stats_config(preset, ref), ("stats",), compute, seed=0, home=home)["stats"]


def stats_table(preset: Preset, refs: dict[tuple[str, int], str], *, home=None) -> pd.DataFrame:
    """`model_stats` for the base and every (method, seed) in `refs`, stacked with method and seed columns."""
    frames = [model_stats(preset, ref, home=home).assign(method=m, seed=s)
              for (m, s), ref in {("base", -1): preset.base_model, **refs}.items()]
    return pd.concat(frames, ignore_index=True)


def stats_summary(stats: pd.DataFrame) -> pd.DataFrame:
    """Wide table, one row per method (mean over seeds): `lm_loss/<family>` and `kl/<task>` columns and
    `kl/heldout` (mean KL over the held-out tasks, i.e. every KL scope but the first, the training task)."""
    wide = stats.assign(col=stats["quantity"] + "/" + stats["scope"]).pivot_table(
        index="method", columns="col", values="value", aggfunc="mean", sort=False)
    kl_cols = [c for c in dict.fromkeys(stats.loc[stats["quantity"] == "kl", "scope"])]
    if len(kl_cols) > 1:
        wide["kl/heldout"] = wide[[f"kl/{c}" for c in kl_cols[1:]]].mean(axis=1)
    order = [m for m in ("base", "es", "grpo") if m in wide.index] + [m for m in wide.index
                                                                      if m not in ("base", "es", "grpo")]
    return wide.loc[order].reset_index()


@dataclass(frozen=True)
class ForgettingTables:
    """What `compute` measures: held-out scores per problem, and LM loss and KL per model."""

    problems: pd.DataFrame
    """`heldout_problems`: per (method, seed, task, problem) pass@1, pass@K, K; the base is method "base"."""
    stats: pd.DataFrame
    """`stats_table`: per (method, seed) quantity ("lm_loss" / "kl"), scope, value."""
    margin: float
    """`ForgettingSpec.margin`: the tolerated absolute Pass@K loss per held-out task."""
    base_model: str
    """The common base (named in the LM-loss note when this library did not pretrain it)."""
    delta_noninferiority: float = 0.01
    """`ForgettingSpec.delta_noninferiority`."""
    delta_vs_grpo: float = 0.02
    """`ForgettingSpec.delta_vs_grpo`."""

    @property
    def scores(self) -> pd.DataFrame:
        """`heldout_scores(problems)`."""
        return heldout_scores(self.problems)

    @property
    def deltas(self) -> pd.DataFrame:
        """`forgetting_deltas(scores)`."""
        return forgetting_deltas(self.scores)


def compute(preset: Preset, *, home=None, progress: bool = True) -> ForgettingTables:
    """Held-out scores per problem and LM loss / KL of the base and every seed's ES and GRPO model of notebook 01
    at the preset's configurations (trained here when missing, cached)."""
    refs = {(m, s): model_ref(trainer(m)(preset.config(m, seed=s), home=home, progress=progress))
            for m in METHODS for s in preset.seeds}
    return ForgettingTables(problems=heldout_problems(preset, refs, home=home, progress=progress),
                            stats=stats_table(preset, refs, home=home), margin=float(preset.forgetting.margin),
                            base_model=preset.base_model,
                            delta_noninferiority=float(preset.forgetting.delta_noninferiority),
                            delta_vs_grpo=float(preset.forgetting.delta_vs_grpo))


def _arm(p: pd.DataFrame, method: str, task: str, column: str) -> np.ndarray:
    """[R, P] `column` of `method` on `task` over the base's problems (the base: [1, P])."""
    problems = list(dict.fromkeys(p.loc[(p["method"] == "base") & (p["task"] == task), "problem_id"]))
    return seed_by_problem(p[(p["method"] == method) & (p["task"] == task)], value=column, problems=problems)


CEILING = 0.95
"""A held-out task and K whose base score is at least this are on the ceiling: ES - GRPO cannot reach a delta of
0.02 there and ES - base cannot fall much below 0 from 1, so they are left out of the pooled checks and their own
checks are `undecidable at this design` (sorting's base Pass@16 was 1.000 on every problem)."""


def off_ceiling(tables: ForgettingTables) -> dict[str, str]:
    """{task: the column of the pooled checks}: "pass@K" when the base's mean Pass@K (largest K) is below
    `CEILING`, else "pass@1" when its Pass@1 is, else the task is left out (on the ceiling at every K)."""
    p = tables.problems
    base = p[p["method"] == "base"].groupby("task", sort=False)[["pass@1", "pass@K"]].mean()
    out = {}
    for task, row in base.iterrows():
        for column in ("pass@K", "pass@1"):
            if row[column] < CEILING:
                out[task] = column
                break
    return out


def _pooled(tables: ForgettingTables, method: str, columns: dict[str, str]) -> np.ndarray:
    """[R, sum of P]: `method`'s values of each task's column in `columns`, tasks side by side."""
    return np.concatenate([_arm(tables.problems, method, task, c) for task, c in columns.items()], axis=1)


def _ceiling_note(tables: ForgettingTables, task: str, column: str) -> str:
    """The `Check.fixed` reason of `task`'s own check on `column` ("" when its base is below `CEILING`)."""
    p = tables.problems
    score = float(p.loc[(p["method"] == "base") & (p["task"] == task), column].mean())
    return f"base {column} {score:.3f} >= {CEILING} on {task}: a ceiling" if score >= CEILING else ""


def heldout_checks(tables: ForgettingTables, method: str = "es", column: str = "pass@K") -> list[Check]:
    """Per held-out task: Delta `column` of `method` (per seed and problem) against the base (paired by problem)
    > -margin (absolute), with delta `delta_noninferiority`; `undecidable` where the base is on the ceiling."""
    p = tables.problems
    return [effect_check(f"{method.upper()} - base {column} on {task} (margin {-tables.margin:+.3f})",
                         _arm(p, method, task, column), _arm(p, "base", task, column), threshold=-tables.margin,
                         delta=tables.delta_noninferiority, fixed=_ceiling_note(tables, task, column))
            for task in dict.fromkeys(p["task"])]


def vs_grpo_checks(tables: ForgettingTables, column: str = "pass@K") -> list[Check]:
    """Per held-out task: `column` of ES - GRPO > 0 (ES forgets less than GRPO; seeds independent);
    `undecidable` where the base is on the ceiling."""
    p = tables.problems
    return [effect_check(f"ES - GRPO {column} on {task}", _arm(p, "es", task, column), _arm(p, "grpo", task, column),
                         delta=tables.delta_vs_grpo, fixed=_ceiling_note(tables, task, column))
            for task in dict.fromkeys(p["task"])]


def pooled_checks(tables: ForgettingTables) -> tuple[Check, Check, Check]:
    """The primary checks, pooled over the held-out tasks off the ceiling (`off_ceiling`): ES - base > -margin,
    ES - GRPO > 0 and (the control's secondary) GRPO - base > -margin. With every task on the ceiling they are
    `undecidable at this design` (NaN estimates)."""
    columns = off_ceiling(tables)
    where = ", ".join(f"{t} {c}" for t, c in columns.items()) or "none"
    names = (f"ES - base held-out Pass@K off the ceiling ({where}; margin {-tables.margin:+.3f})",
             f"ES - GRPO held-out Pass@K off the ceiling ({where})",
             f"GRPO - base held-out Pass@K off the ceiling ({where}; margin {-tables.margin:+.3f})")
    kw = [dict(threshold=-tables.margin, delta=tables.delta_noninferiority), dict(delta=tables.delta_vs_grpo),
          dict(threshold=-tables.margin, delta=tables.delta_noninferiority)]
    if not columns:
        nan = float("nan")
        return tuple(Check(n, nan, nan, nan, nan, fixed=f"every held-out task's base score >= {CEILING}: a ceiling",
                           **k) for n, k in zip(names, kw))
    arms = [("es", "base"), ("es", "grpo"), ("grpo", "base")]
    return tuple(effect_check(n, _pooled(tables, a, columns), _pooled(tables, b, columns), **k)
                 for n, (a, b), k in zip(names, arms, kw))


def lm_rise(stats: pd.DataFrame) -> dict[str, float]:
    """{method: mean over seeds of LM loss ("all") minus the base's}; empty without an LM loss (hub bases)."""
    lm = stats[(stats["quantity"] == "lm_loss") & (stats["scope"] == "all")]
    if lm.empty:
        return {}
    base = float(lm.loc[lm["method"] == "base", "value"].mean())
    return {m: float(g["value"].mean()) - base for m, g in lm.groupby("method", sort=False) if m != "base"}


CLAIM = {"reproduced": "ES keeps held-out Pass@K within the absolute margin (off the ceiling)",
         "not reproduced": "ES forgets beyond the margin on the held-out tasks off the ceiling (contradicts the paper)"}
"""The paper's test's outcome in words, by its status (other statuses: `finding` words them)."""


def finding(tables: ForgettingTables) -> Finding:
    """Notebook 05's finding: the paper's test is ES against the margin, pooled off the ceiling (`pooled_checks`;
    secondary: each task's own check), the control ES against GRPO, pooled (secondaries: GRPO against the margin,
    each task's ES - GRPO); then the LM-loss rise over the base and the held-out KL per method (means over seeds)."""
    es_base, es_grpo, grpo_base = pooled_checks(tables)
    tests = (make_test("05_forgetting", "paper", es_base, heldout_checks(tables, "es")),
             make_test("05_forgetting", "control", es_grpo, [grpo_base, *vs_grpo_checks(tables)]))
    s = stats_summary(tables.stats).set_index("method")
    rise = lm_rise(tables.stats)
    lm = ("LM-loss rise over the base (nats/token) " + " / ".join(f"{m} {v:+.3f}" for m, v in rise.items()) if rise
          else LM_NOTE.format(base=tables.base_model))
    kl = "kl/heldout" if "kl/heldout" in s else [c for c in s if c.startswith("kl/")][0]
    status = tests[0].status
    sentence = "; ".join([CLAIM.get(status, f"Whether ES keeps held-out Pass@K within the margin: {status}"), lm,
                          f"{kl} " + " / ".join(f"{m} {s.loc[m, kl]:.4f}" for m in s.index if m != "base")])
    return make_finding(sentence, (), tests=tests)
