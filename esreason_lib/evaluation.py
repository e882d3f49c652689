"""Evaluation: model x task x examples -> a per-problem table and a Pass@k curve, cached in a run directory.

Each problem gets `n` samples (temperature / top-p) and, optionally, one greedy decode. The per-problem
table counts correct samples `c` (the input of the unbiased Pass@k estimator), distinct correct answers
(coverage of the solution space), mean reward, token entropy and length; the curve holds Pass@k with
bootstrap-over-problems confidence intervals from `esreason_lib.metrics`. The per-sample table keeps every
sample's extracted answer and correctness (stored a row per problem, `eval_samples`), from which
`EvalResult.maj_curve` computes Maj@k. `EvalSpec` is the protocol (problems, samples, K values, temperature) a
preset gives each study.
"""

from __future__ import annotations

import functools
import io
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from esreason_lib import eval_samples, metrics
from esreason_lib.models.generation import Generator
from esreason_lib.models.sampling import FORWARDS, SAMPLERS, Forward, Sampling
from esreason_lib.seeding import derive_seed
from esreason_lib.store.identity import ADDED_OPTION
from esreason_lib.tasks.base import score_completion
from esreason_lib.tasks.contract import held_to_contract
from esreason_lib.validation import check

PROBLEM_COLUMNS = ("problem_id", "n", "c", "greedy_correct", "distinct_correct", "mean_reward", "mean_entropy",
                   "mean_length")
"""Columns of `EvalResult.table`, in order."""
CURVE_COLUMNS = ("k", "pass_at_k", "ci_low", "ci_high")
"""Columns of `EvalResult.curve`, in order."""
SAMPLE_COLUMNS = ("problem_id", "sample", "answer", "correct")
"""Columns of `EvalResult.samples`, in order."""
MAJ_COLUMNS = ("k", "maj_at_k", "ci_low", "ci_high")
"""Columns of `EvalResult.maj_curve()`, in order."""
EVAL_BACKENDS = ("local", "vllm")
"""Values of `evaluate`'s `backend` (and `EvalSpec.backend`)."""


@dataclass(frozen=True)
class EvalSpec:
    """How trained and base models are evaluated (Pass@K from n samples per held-out problem); the studies'
    presets (`presets.Preset.eval` and each study spec's `eval`) hold one each."""

    n_problems: int | None = 200
    """Held-out test problems per task (None = the whole test split)."""
    n_samples: int = 64
    """Samples per problem at `temperature`; Pass@K is reported for every K <= n_samples in `ks`."""
    ks: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    """The K values of the Pass@K curve."""
    temperature: float = 1.0
    """Sampling temperature of the evaluation (fixed across methods)."""
    top_p: float = 1.0
    """Nucleus threshold of the evaluation."""
    greedy: bool = True
    """Also record greedy-decoding accuracy per problem."""
    max_new_tokens: int | None = None
    """Generation budget; None uses the task's default."""
    n_boot: int = 1000
    """Bootstrap resamples (over problems) for the Pass@K confidence bands."""
    seed: int = 0
    """Seed of the test-problem draw and the sampling."""
    forward: str = field(default="hf", metadata=ADDED_OPTION)
    """How the samples' logits are computed (`sampling.FORWARDS`): "hf" (the model's modules), "fused"
    (`models.fused_qwen2`, float32 Qwen2 only: faster, equal to "hf" up to float rounding) or "native" (that
    forward with `models.native`'s attention kernel). Part of the evaluation's identity, since the samples
    differ."""
    backend: str = field(default="local", metadata=ADDED_OPTION)
    """Who draws the samples: "local" (the library's `generate`) or "vllm" (one vLLM engine holding the model's
    weights, extra `vllm`; `forward` must then be "hf"). Part of the evaluation's identity: vLLM's sampler draws
    other random numbers."""
    sampler: str = field(default="multinomial", metadata=ADDED_OPTION)
    """How the samples are drawn (`sampling.SAMPLERS`): "multinomial" (`torch.multinomial`) or "inverse-cdf" (one
    uniform per token; the same distribution, faster, other samples). Part of the evaluation's identity."""
    share_prefixes: bool = field(default=False, metadata=ADDED_OPTION)
    """With forward "fused" or "native": forward each distinct running prefix once per decode step
    (`Forward.share_prefixes`): the same draws and samples in every comparison made
    (tests/test_generation_sampler.py), log-probs and entropies to float rounding (the gemms run on fewer rows, and
    CPU BLAS picks kernels by row count), so it is part of the identity when on."""
    batch_size: int = field(default=512, metadata=ADDED_OPTION)
    """Rows per sampling call and forward batch (chunk i of the samples is seeded `derive_seed(seed, "eval", i)`,
    so the samples depend on it: part of the identity when not the default, which every stored evaluation used)."""

    def __post_init__(self):
        check(self, "n_problems", self.n_problems is None or self.n_problems >= 1, "must be None or >= 1")
        check(self, "n_samples", self.n_samples >= 1, "must be >= 1")
        check(self, "ks", bool(self.ks) and all(1 <= k <= self.n_samples for k in self.ks),
              f"must be non-empty values in [1, n_samples={self.n_samples}]")
        check(self, "temperature", self.temperature > 0, "must be > 0")
        check(self, "forward", self.forward in FORWARDS, f"must be one of {FORWARDS}")
        check(self, "backend", self.backend in EVAL_BACKENDS, f"must be one of {EVAL_BACKENDS}")
        check(self, "forward", self.backend == "local" or self.forward == "hf", "must be 'hf' with backend 'vllm'")
        check(self, "sampler", self.sampler in SAMPLERS, f"must be one of {SAMPLERS}")
        check(self, "sampler", self.backend == "local" or self.sampler == "multinomial",
              "must be 'multinomial' with backend 'vllm'")
        check(self, "share_prefixes", isinstance(self.share_prefixes, bool) and (
            not self.share_prefixes or self.forward != "hf"), "must be a bool, False with forward 'hf'")
        check(self, "batch_size", isinstance(self.batch_size, int) and not isinstance(self.batch_size, bool)
              and self.batch_size >= 1, "must be a positive int")

    def sampling(self, max_new_tokens: int) -> Sampling:
        """The samples' `Sampling` (`max_new_tokens` when the spec leaves it None: the task's default)."""
        return Sampling(temperature=self.temperature, top_p=self.top_p, sampler=self.sampler,
                        max_new_tokens=max_new_tokens if self.max_new_tokens is None else self.max_new_tokens)

    def forward_path(self) -> Forward:
        """The `Forward` backend "local" computes the logits with."""
        return Forward(kind=self.forward, share_prefixes=self.share_prefixes, batch_size=self.batch_size)


DEFAULT_EVAL = EvalSpec()
"""The default evaluation protocol (200 problems x 64 samples at T = 1, a greedy decode, the model's modules)."""


@dataclass(frozen=True)
class EvalResult:
    """The outcome of `evaluate`: one row per problem and one row per k."""

    table: pd.DataFrame
    """Per problem: problem_id (str), n, c (correct samples), greedy_correct (bool; NaN without greedy),
    distinct_correct (distinct `task.canonical_answer` among correct samples), mean_reward, mean_entropy
    (nats per token), mean_length (tokens per completion, EOS included)."""
    curve: pd.DataFrame
    """Per k: k, pass_at_k (mean unbiased Pass@k over problems), ci_low, ci_high (bootstrap over problems)."""
    samples: pd.DataFrame | None = None
    """Per (problem, sample), problems in table order and samples in drawing order: problem_id (str), sample
    (0..n-1), answer (`task.extract_answer` of the completion, str, or None when there is none), correct (bool).
    None for a result reloaded from a cache written before samples were stored."""

    def maj_curve(self, ks=None, *, n_resamples: int = 200, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
        """Maj@k from the stored samples (`metrics.maj_at_k`, expectation over random k-subsets): per k of `ks`
        (default the curve's), k, maj_at_k (mean over problems), ci_low, ci_high (bootstrap over problems)."""
        if self.samples is None:
            raise ValueError("this EvalResult has no per-sample answers (a cache from before they were stored); "
                             "evaluate again to compute Maj@k")
        ks = [int(k) for k in (self.curve["k"] if ks is None else ks)]
        groups = [g for _, g in self.samples.groupby("problem_id", sort=False)]
        answers, correct = [g["answer"].tolist() for g in groups], [g["correct"].tolist() for g in groups]
        per_problem = np.stack([metrics.maj_at_k(answers, correct, k, n_resamples=n_resamples,
                                                 random_state=derive_seed(seed, "maj", k))
                                for k in ks], axis=1)  # [P, K]
        low, high = metrics.bootstrap_ci(per_problem, n_boot=n_boot, random_state=derive_seed(seed, "maj", "boot"))
        return pd.DataFrame({"k": ks, "maj_at_k": per_problem.mean(axis=0), "ci_low": np.atleast_1d(low),
                             "ci_high": np.atleast_1d(high)})

    def summary(self) -> dict[str, float]:
        """Headline numbers: `eval/greedy` (when computed), `eval/pass@k` for every k, `eval/mean_reward`,
        `eval/entropy`, `eval/length` and `eval/distinct_correct` (means over problems)."""
        out: dict[str, float] = {}
        greedy = pd.to_numeric(self.table["greedy_correct"], errors="coerce")
        if greedy.notna().any():
            out["eval/greedy"] = float(greedy.mean())
        for k, p in zip(self.curve["k"], self.curve["pass_at_k"]):
            out[f"eval/pass@{int(k)}"] = float(p)
        out["eval/mean_reward"] = float(self.table["mean_reward"].mean())
        out["eval/entropy"] = float(self.table["mean_entropy"].mean())
        out["eval/length"] = float(self.table["mean_length"].mean())
        out["eval/distinct_correct"] = float(self.table["distinct_correct"].mean())
        return out


def _progress(iterable, enabled: bool, desc: str, total: int, leave: bool):
    if not enabled:
        return iterable
    from esreason_lib.progress import progress_bar
    return progress_bar(iterable, desc=desc, total=total, leave=leave)


def _normalise_table(df: pd.DataFrame) -> pd.DataFrame:
    """Column order and dtypes (also for tables read back from CSV)."""
    df = df.loc[:, list(PROBLEM_COLUMNS)].copy()
    df["problem_id"] = df["problem_id"].astype(str)
    for col in ("n", "c", "distinct_correct"):
        df[col] = df[col].astype(np.int64)
    greedy = df["greedy_correct"]
    if greedy.notna().all():
        df["greedy_correct"] = greedy.map(lambda v: str(v).lower() in ("true", "1", "1.0")).astype(bool)
    else:
        df["greedy_correct"] = np.nan
    for col in ("mean_reward", "mean_entropy", "mean_length"):
        df[col] = df[col].astype(np.float64)
    return df.reset_index(drop=True)


def _reload(run, name: str, ids: list[str], n: int, ks: list[int]) -> EvalResult | None:
    """The cached result in `run`, or None when absent or computed for other problems, n or ks."""
    table, curve = run.read_table(f"{name}_problems"), run.read_table(f"{name}_curve")
    if table is None or curve is None or len(table) != len(ids):
        return None
    if (table["n"] != n).any() or curve["k"].astype(int).tolist() != ks:
        return None
    table = table.copy()
    # read_csv may have parsed the ids (e.g. "007" -> 7): compare with the expected ids parsed the same way
    expected = pd.read_csv(io.StringIO(pd.DataFrame({"problem_id": ids}).to_csv(index=False)))["problem_id"]
    if table["problem_id"].astype(str).tolist() != expected.astype(str).tolist():
        return None
    table["problem_id"] = ids
    curve = curve.loc[:, list(CURVE_COLUMNS)].copy()
    curve["k"] = curve["k"].astype(np.int64)
    samples = run.read_table(f"{name}_samples")
    if samples is not None:
        samples = eval_samples.decode(samples, ids, n)
        if samples is None:
            return None
    return EvalResult(table=_normalise_table(table), curve=curve.astype({c: np.float64 for c in CURVE_COLUMNS[1:]}),
                      samples=samples)


def _verdict(task, text: str, example: dict) -> tuple:
    """(reward, correct, extracted answer, canonical answer when correct else None) of one completion."""
    reward, ok = score_completion(task, text, example)
    return reward, ok, task.extract_answer(text), task.canonical_answer(text, example) if ok else None


def evaluate(model, tokenizer, task, examples, spec: EvalSpec = DEFAULT_EVAL, *, run=None, name="eval",
             progress=True) -> EvalResult:
    """Evaluate `model` on `examples` of `task` as `spec` says: `spec.n_samples` samples per problem (and a greedy
    decode if `spec.greedy`); `spec.n_problems` and `spec.n_boot` are the caller's (who drew `examples`).

    Prompts come from `task.prompt(example, tokenizer)`, generation stops at EOS or `task.stop`, and
    `spec.max_new_tokens` defaults to `task.max_new_tokens`. Samples are drawn `spec.batch_size` rows at a time,
    chunk i with seed `derive_seed(spec.seed, "eval", i)`, so results are deterministic for a given spec. With
    `run`, the tables are stored as `<name>_problems` / `<name>_curve` / `<name>_samples` and reloaded (not
    recomputed; `model` may then be None) when present for the same problem ids, n and ks (other settings are not
    checked: put them in the run's config); a cache without `<name>_samples` (written before samples were stored)
    reloads with `samples` None.

    `spec.backend` "vllm" (extra `vllm`) samples with one vLLM engine holding `model`'s weights
    (`models.rollouts_vllm.VLLMRollouts`, closed at the end) instead of `generation.Generator`. Deviations: vLLM's
    sampler draws other random numbers (same distribution), so the samples differ from "local"'s for the same
    seed; entropies and lengths come from one extra no-grad forward of `model`; each call re-sends the weights.
    "local" samples with `spec.sampling(...)` and `spec.forward_path()`.
    The task's verifier is held to its contract (`tasks.contract.held_to_contract`).
    """
    if not isinstance(spec, EvalSpec):
        raise TypeError(f"spec must be an EvalSpec, got {type(spec).__name__}")
    examples = list(examples)
    if not examples:
        raise ValueError("examples must not be empty")
    ids = [str(ex["id"]) for ex in examples]
    if len(set(ids)) != len(ids):
        raise ValueError("examples must have distinct ids")
    if run is not None and (cached := _reload(run, name, ids, spec.n_samples, sorted(set(spec.ks)))) is not None:
        return cached
    if spec.backend == "vllm":
        from esreason_lib.models.logprobs import SCORING  # the bounds of the entropy pass, rows capped by the spec
        from esreason_lib.models.rollouts_vllm import VLLMRollouts  # the engine starts at the first call (extra `vllm`)

        chunks = replace(SCORING, rows=min(spec.batch_size, SCORING.rows))
        engine = VLLMRollouts(engine_seed=spec.seed, chunks=chunks)
        try:
            return _evaluate(functools.partial(engine, model, tokenizer), tokenizer, held_to_contract(task), examples,
                             spec, run=run, name=name, progress=progress)
        finally:
            engine.close()
    return _evaluate(Generator(model, tokenizer, spec.forward_path()), tokenizer, held_to_contract(task), examples,
                     spec, run=run, name=name, progress=progress)


def results_table(results: Mapping[str, EvalResult], columns: Sequence[str] | None = None) -> str:
    """An aligned text table of `results` ({row name: `EvalResult`}, e.g. {"before": ..., "after": ...}): one row
    each, one column per `EvalResult.summary` key of `columns` (default: `eval/greedy` when every result has it,
    then `eval/pass@k` for each k of the first result's curve), three decimals."""
    if not results:
        raise ValueError("results_table: results must name at least one EvalResult")
    summaries = {name: result.summary() for name, result in results.items()}
    if columns is None:
        greedy = all("eval/greedy" in summary for summary in summaries.values())
        first = next(iter(results.values()))
        columns = (["eval/greedy"] if greedy else []) + [f"eval/pass@{int(k)}" for k in first.curve["k"]]
    missing = sorted({c for summary in summaries.values() for c in columns if c not in summary})
    if missing:
        raise ValueError(f"results_table: columns {missing} are not in every result's summary")
    width = max(len("model"), *map(len, summaries))
    lines = [f"{'model':<{width}}  " + "  ".join(f"{c.split('/')[-1]:>8}" for c in columns)]
    lines += [f"{name:<{width}}  " + "  ".join(f"{summary[c]:>8.3f}" for c in columns)
              for name, summary in summaries.items()]
    return "\n".join(lines)


def _evaluate(sample, tokenizer, task, examples, spec: EvalSpec, *, run, name, progress) -> EvalResult:
    """`evaluate`'s body with `sample(prompts, sampling, *, n, stop, seed)` (a `generation.Generator`, or vLLM's
    rollouts bound to the model) drawing the samples."""
    ids = [str(ex["id"]) for ex in examples]
    n, ks, seed, batch_size = spec.n_samples, sorted(set(spec.ks)), spec.seed, spec.batch_size
    sampling = spec.sampling(task.max_new_tokens)
    prompts = [task.prompt(ex, tokenizer) for ex in examples]
    P = len(prompts)
    per_chunk = max(1, batch_size // n)  # prompts per sampling call, so one call is one forward batch
    c = np.zeros(P, dtype=np.int64)
    answers: list[set] = [set() for _ in range(P)]  # distinct canonical answers among correct samples
    sample_answers: list[list] = [[] for _ in range(P)]  # [P][n] extracted answer per sample, in drawing order
    sample_correct: list[list[bool]] = [[] for _ in range(P)]  # [P][n]
    reward_sum, entropy_sum, token_count = np.zeros(P), np.zeros(P), np.zeros(P)
    starts = range(0, P, per_chunk)
    for i, s in enumerate(_progress(starts, progress, f"{name}: sampling", len(starts), leave=True)):
        ro = sample(prompts[s: s + per_chunk], sampling, n=n, stop=task.stop, seed=derive_seed(seed, "eval", i))
        lengths = ro.completion_mask.sum(1).cpu().numpy()  # [b]
        ent_rows = ro.entropies.double().sum(1).cpu().numpy()  # [b]
        verdicts: dict[tuple[int, str], tuple] = {}  # (problem, completion) -> its scores: samples often repeat
        for j, (text, p) in enumerate(zip(ro.completions, ro.prompt_index())):
            q = s + int(p)
            token_count[q] += lengths[j]
            entropy_sum[q] += ent_rows[j]
            if (q, text) not in verdicts:
                verdicts[q, text] = _verdict(task, text, examples[q])
            reward, ok, answer, canonical = verdicts[q, text]
            reward_sum[q] += reward
            sample_answers[q].append(answer)
            sample_correct[q].append(ok)
            if ok:
                c[q] += 1
                answers[q].add(canonical)
    distinct = np.array([len(a - {None}) for a in answers], dtype=np.int64)
    greedy_correct = np.full(P, np.nan, dtype=object)
    if spec.greedy:
        greedy = Sampling(greedy=True, max_new_tokens=sampling.max_new_tokens)
        gstarts = range(0, P, batch_size)
        for s in _progress(gstarts, progress, f"{name}: greedy", len(gstarts), leave=False):
            ro = sample(prompts[s: s + batch_size], greedy, stop=task.stop)
            for j, text in enumerate(ro.completions):
                greedy_correct[s + j] = bool(task.is_correct(text, examples[s + j]))
    table = _normalise_table(pd.DataFrame({
        "problem_id": ids, "n": np.full(P, n), "c": c, "greedy_correct": greedy_correct,
        "distinct_correct": distinct, "mean_reward": reward_sum / n,
        "mean_entropy": entropy_sum / np.maximum(token_count, 1), "mean_length": token_count / n}))
    curve = metrics.pass_at_k_table(table["n"].to_numpy(), table["c"].to_numpy(), ks,
                                    random_state=derive_seed(seed, "eval", "bootstrap"))
    curve = curve.loc[:, list(CURVE_COLUMNS)]
    samples = pd.DataFrame({"problem_id": np.repeat(ids, n), "sample": np.tile(np.arange(n), P),
                            "answer": [a for row in sample_answers for a in row],
                            "correct": [ok for row in sample_correct for ok in row]})
    result = EvalResult(table=table, curve=curve, samples=samples)
    if run is not None:
        run.write_table(f"{name}_samples", eval_samples.encode(samples, n))
        run.write_table(f"{name}_problems", table)
        run.write_table(f"{name}_curve", curve)
    return result
