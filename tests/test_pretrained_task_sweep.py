"""benchmarks/sweep_pretrained_task.py (the base sweep) and benchmarks/pilot_pretrained.py (its variance components
and operating-characteristic floor), on a scripted stand-in for the model: no weights are loaded."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from esreason_lib.paper.power import Components

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import pilot_pretrained  # noqa: E402
import sweep_pretrained_task as sweep  # noqa: E402

EOS, PAD = 0, 0


class _Tokenizer:
    """Characters as token ids (ord), EOS 0; left padding like the sweep's."""

    eos_token_id = EOS
    chat_template = None

    def __call__(self, texts, return_tensors, padding, add_special_tokens):
        width = max(len(t) for t in texts)
        ids = torch.tensor([[PAD] * (width - len(t)) + [ord(c) for c in t] for t in texts])
        return {"input_ids": ids, "attention_mask": (ids != PAD).long()}

    def decode(self, ids, skip_special_tokens):
        return "".join(chr(i) for i in ids)


class _Model:
    """Answers each prompt "a+b=" (the multistep task's plain prompt) with a scripted list of completions in turn."""

    def __init__(self, script: list[str]):
        self.script, self.calls = list(script), []

    def generate(self, input_ids, attention_mask, max_new_tokens, **kwargs):
        self.calls.append(kwargs)
        rows = [([ord(c) for c in self.script.pop(0)] + [EOS])[:max_new_tokens] for _ in range(input_ids.shape[0])]
        width = max(len(r) for r in rows)
        gen = torch.tensor([r + [PAD] * (width - len(r)) for r in rows])
        return torch.cat([input_ids, gen], dim=1)


def test_run_cell_scores_each_sample_and_reports_pass_at_k(monkeypatch):
    monkeypatch.setitem(sweep.CELLS, "toy", ("multistep", {"terms": 2, "digits": 1, "test_fraction": 0.5}, 8))
    from esreason_lib.tasks import get_task

    examples = get_task("multistep", terms=2, digits=1, test_fraction=0.5).examples("test", n=2)
    right = [str(e["answer"]) for e in examples]
    # problem 0: 2 of 4 right; problem 1: none right (one completion cut at the 8-token budget)
    script = [right[0], "x", right[0], "y", "wrong", "123456789", "no", "no"]
    model = _Model(script)
    record = sweep.run_cell("toy", model, _Tokenizer(), problems=2, samples=4, temperature=0.6, batch=3, seed=0,
                            path="hf")
    assert record["correct"] == [[1, 0, 1, 0], [0, 0, 0, 0]]
    assert record["pass_at"] == {"1": 0.25, "2": pytest.approx((1 - 1 / 6) / 2), "4": 0.5}
    lengths = [len(right[0]), 1, len(right[0]), 1, 5, 8, 2, 2]
    assert record["mean_tokens"] == pytest.approx(np.mean(lengths)) and record["cut_share"] == 1 / 8
    assert record["ids"] == [e["id"] for e in examples] and record["completion_examples"] == [right[0], "wrong"]
    assert len(model.calls) == 3 and model.calls[0]["temperature"] == 0.6 and model.calls[0]["top_k"] == 0


def test_seed_split_by_hand():
    correct = [[1, 1, 0, 0], [1, 0, 1, 1]]
    assert pilot_pretrained.seed_split(correct, 2).tolist() == [[1.0, 0.5], [0.0, 1.0]]
    assert pilot_pretrained.seed_split(correct, 4).shape == (4, 2)
    for bad in (3, 1, True, 2.0):
        with pytest.raises(ValueError, match="groups"):
            pilot_pretrained.seed_split(correct, bad)
    with pytest.raises(ValueError, match="correct"):
        pilot_pretrained.seed_split([1, 0], 2)


def test_floor_components_scale_the_base_to_the_design():
    base = Components(seed=0.001, problem=0.05, resid=0.02, arms=1)
    floor = pilot_pretrained.floor_components(base, measured_samples=4, design_samples=64)
    assert floor == Components(seed=0.002 / 16, problem=0.0, resid=0.04 / 16, arms=2)
    with pytest.raises(ValueError, match="design_samples"):
        pilot_pretrained.floor_components(base, 4, 0)


def test_status_rates_separate_a_clear_effect_from_none():
    quiet = Components(seed=0.0, problem=0.0, resid=1e-4, arms=2)  # SE of a difference ~ 0.0006 at 3 x 500
    up = pilot_pretrained.status_rates(quiet, 3, 500, truth=0.01, delta=0.01, n_sims=20)
    down = pilot_pretrained.status_rates(quiet, 3, 500, truth=-0.01, delta=0.01, n_sims=20)
    assert up == {"reproduced": 1.0} and down == {"not reproduced": 1.0}
    loud = Components(seed=0.0, problem=0.0, resid=10.0, arms=2)  # SE ~ 0.2: nothing is decided at delta 0.01
    rates = pilot_pretrained.status_rates(loud, 3, 500, truth=0.01, delta=0.01, n_sims=20)
    assert rates["not resolved"] >= 0.9 and sum(rates.values()) == pytest.approx(1.0)


def test_pilot_main_reads_the_sweep_record(tmp_path, capsys):
    rng = np.random.default_rng(0)
    correct = (rng.random((40, 8)) < np.linspace(0.05, 0.6, 40)[:, None]).astype(int).tolist()
    path = tmp_path / "sweep.jsonl"
    path.write_text(json.dumps({"cell": "c", "samples": 8, "correct": correct}) + "\n")
    pilot_pretrained.main(["--sweep", str(path), "--cell", "c", "--designs", "3x100", "--sims", "10"])
    out = json.loads(capsys.readouterr().out)
    assert out["problems"] == 40 and out["pass1"] == pytest.approx(np.mean(correct))
    assert out["floor_components"]["problem"] == 0.0 and out["floor_components"]["arms"] == 2
    (row,) = out["oc"]
    assert (row["n_seeds"], row["n_problems"]) == (3, 100) and sum(row["rates"]["0"].values()) == pytest.approx(1)


def test_run_cell_on_the_native_path_samples_each_problem_through_the_library(monkeypatch):
    """The design's evaluation path (`generate` on the native forward with shared prefixes) on a tiny random Llama
    with a chat template: every problem gets its samples, lengths stay within the budget."""
    from esreason_lib.models.zoo import build_chat_char_tokenizer, tiny_random_llama

    monkeypatch.setitem(sweep.CELLS, "toy", ("multistep", {"terms": 2, "digits": 1, "style": "short",
                                                           "test_fraction": 0.5}, 6))
    tokenizer = build_chat_char_tokenizer()
    model = tiny_random_llama(len(tokenizer))
    record = sweep.run_cell("toy", model, tokenizer, problems=3, samples=4, temperature=0.6, batch=8, seed=0)
    assert record["path"] == "native" and np.asarray(record["correct"]).shape == (3, 4)
    assert 0 <= record["mean_tokens"] <= 6 and 0 <= record["cut_share"] <= 1
    again = sweep.run_cell("toy", model, tokenizer, problems=3, samples=4, temperature=0.6, batch=8, seed=0)
    assert again["correct"] == record["correct"] and again["completion_examples"] == record["completion_examples"]


def _pilot_record(arm, counts, samples=4, eval_on="train-task", seed=0, split="tuning"):
    return {"arm": arm, "seed": seed, "eval_on": eval_on, "samples": samples, "correct_counts": counts, "split": split}


def test_arm_matrix_stacks_each_seed_per_problem_pass_at_k():
    records = [_pilot_record("es", [4, 0, 2]), _pilot_record("es", [2, 2, 0], seed=1),
               _pilot_record("es", [1, 1, 1], eval_on="heldout"), _pilot_record("grpo", [0, 0, 0])]
    assert pilot_pretrained.arm_matrix(records, "es", "train-task", 1).tolist() == [[1.0, 0.0, 0.5], [0.5, 0.5, 0.0]]
    # Pass@2 of 2 right in 4: 1 - C(2,2)/C(4,2) = 5/6
    assert pilot_pretrained.arm_matrix(records, "es", "train-task", 2)[1].tolist() == pytest.approx([5 / 6, 5 / 6, 0])
    assert pilot_pretrained.arm_matrix(records, "es", "heldout", 1).tolist() == [[0.25, 0.25, 0.25]]
    assert pilot_pretrained.arm_matrix(records, "base", "train-task", 1) is None
    first = [{k: v for k, v in _pilot_record("es", [4, 4, 4]).items() if k != "split"}]  # before splits: test
    assert pilot_pretrained.arm_matrix(first, "es", "train-task", 1) is None
    assert pilot_pretrained.arm_matrix(first, "es", "train-task", 1, split="test").tolist() == [[1.0, 1.0, 1.0]]


def test_training_oc_names_missing_arms_and_gives_rates_per_design():
    rng = np.random.default_rng(0)
    records = [_pilot_record("es", rng.integers(0, 5, 40).tolist(), seed=s) for s in (0, 1)]
    records.append(_pilot_record("base", rng.integers(0, 5, 40).tolist(), seed=None))
    out = pilot_pretrained.training_oc(records, [(3, 40)], big_k=2, sims=20)
    by_name = {row["check"]: row for row in out}
    coprimary = by_name["01 co-primary: ES Pass@1 - base"]
    assert coprimary["seeds"] == [2, 1] and coprimary["k"] == 1 and coprimary["delta"] == 0.01
    oc = coprimary["oc"][0]
    assert oc["design"] == "3x40" and all(0.0 <= oc[key] <= 1.0 for key in oc if key.startswith("P("))
    assert by_name["01 paper: ES Pass@K - GRPO Pass@K"] == {"check": "01 paper: ES Pass@K - GRPO Pass@K",
                                                           "missing": ["grpo"]}
    assert by_name["05 paper: ES - base held-out Pass@K"]["missing"] == ["es", "base"]


def test_training_oc_what_if_scales_the_seed_component_only():
    rng = np.random.default_rng(0)
    records = [_pilot_record("es", rng.integers(0, 5, 40).tolist(), seed=s) for s in (0, 1, 2)]
    records.append(_pilot_record("base", rng.integers(0, 5, 40).tolist(), seed=None))
    name = "01 co-primary: ES Pass@1 - base"
    measured = next(r for r in pilot_pretrained.training_oc(records, [(3, 40)], big_k=2, sims=5) if r["check"] == name)
    half = next(r for r in pilot_pretrained.training_oc(records, [(3, 40)], big_k=2, sims=5, seed_sd_scale=0.5)
                if r["check"] == name)
    assert "seed_sd_scale" not in measured and half["seed_sd_scale"] == 0.5
    assert half["components"] == measured["components"]  # the measurement is reported as it was
    sim = half["simulated_components"]
    assert sim["seed"] == pytest.approx(measured["components"]["seed"] / 4)
    assert (sim["problem"], sim["resid"]) == (measured["components"]["problem"], measured["components"]["resid"])
    # the row's reason names the dominant term of the simulated variance, not the measured one's
    why = pilot_pretrained.reason(half)
    seeds_term = sim["seed"] / 3
    assert (f"seed component's ({sim['seed']:.3g} / 3" in why) == (seeds_term > max(sim["problem"] / 40,
                                                                                   sim["resid"] / 120))
    with pytest.raises(ValueError, match="seed_sd_scale must be > 0, got 0"):
        pilot_pretrained.training_oc(records, [(3, 40)], big_k=2, sims=5, seed_sd_scale=0)


def test_training_json_out_writes_the_rows_it_prints(tmp_path, capsys):
    rng = np.random.default_rng(0)
    records = [_pilot_record("es", rng.integers(0, 5, 40).tolist(), seed=s) for s in (0, 1)]
    records.append(_pilot_record("base", rng.integers(0, 5, 40).tolist(), seed=None))
    pilot = tmp_path / "pilot.jsonl"
    pilot.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "oc.json"
    pilot_pretrained.main(["--training", str(pilot), "--k", "2", "--designs", "3x200", "--sims", "10",
                           "--json-out", str(out)])
    rows = json.loads(out.read_text())
    assert rows == json.loads(capsys.readouterr().out) and len(rows) == len(pilot_pretrained.TRAINING_CHECKS)
    by_name = {row["check"]: row for row in rows}
    assert by_name["01 co-primary: ES Pass@1 - base"]["oc"][0]["design"] == "3x200"
    assert by_name["01 paper: ES Pass@K - GRPO Pass@K"]["missing"] == ["grpo"]
    from esreason_lib.paper import pilot_oc  # the file renders as the registration's section
    from esreason_lib.paper.studies.preset_spec import PilotOC
    from esreason_lib.paper.studies.presets import get_preset

    section = "\n".join(pilot_oc.section(PilotOC(str(out), "p"), [get_preset("pretrained-smollm2")]))
    assert "| 01 co-primary: ES Pass@1 - base | 1 | 0.01 |" in section
    assert "- 01 paper: ES Pass@K - GRPO Pass@K: not a primary in this design: the pilot has no records of grpo" \
        in section
    with pytest.raises(SystemExit):
        pilot_pretrained.main(["--sweep", str(pilot), "--cell", "c", "--json-out", str(out)])


def test_where_parses_an_arm_and_its_fields_and_refuses_the_rest():
    assert pilot_pretrained.where("es:alpha=0.003,iterations=20") == ("es", {"alpha": 0.003, "iterations": 20.0})
    for bad in ("es", "es:", "es:alpha", "es:alpha=x", ":alpha=1"):
        with pytest.raises(ValueError, match="--where must be ARM:key=value"):
            pilot_pretrained.where(bad)


def test_selected_keeps_the_records_an_arms_fields_admit():
    records = [{"arm": "es", "alpha": 0.001, "iterations": 6}, {"arm": "es", "alpha": 0.003, "iterations": 20},
               {"arm": "grpo", "lr": 3e-5, "iterations": 10}, {"arm": "base"}]
    kept = pilot_pretrained.selected(records, {"es": {"alpha": 0.003}, "grpo": {"lr": 1e-4}})
    assert kept == [records[1], records[3]]  # grpo's lr 1e-4 admits none; base has no filter


def test_reason_names_the_rates_and_the_dominant_variance_term_or_is_empty():
    row = {"components": {"seed": 0.004, "problem": 0.02, "resid": 0.01, "arms": 2},
           "oc": [{"design": "3x200", "P(reproduced | +delta)": 0.2, "P(reproduced | 0)": 0.0,
                   "P(not reproduced | -delta)": 0.6},
                  {"design": "3x2449", "P(reproduced | +delta)": 0.55, "P(reproduced | 0)": 0.0,
                   "P(not reproduced | -delta)": 0.7}]}
    assert pilot_pretrained.reason(row) == (
        "at 3x200 P(reproduced | +delta) 0.20 and P(not reproduced | -delta) 0.60 (bar 0.5); the largest term of the "
        "estimate's variance there is the seed component's (0.004 / 3 = 0.0013); at 3x2449: 0.55 / 0.70")
    row["components"]["seed"] = 0.0001  # 0.0001 / 3 < 0.02 / 200 = 0.0001: the problems' term dominates
    assert "is the problem component's (0.02 / 200 = 0.0001)" in pilot_pretrained.reason(row)
    row["oc"][0]["P(reproduced | +delta)"] = 0.5
    assert pilot_pretrained.reason(row) == ""


def test_training_oc_sizes_held_out_checks_by_their_pool_and_flags_missing_arms():
    rng = np.random.default_rng(1)

    def record(arm, seed, eval_on, problems):
        counts = rng.integers(0, 9, size=problems).tolist()
        split = "tuning" if eval_on == "train-task" else "heldout-test"
        return {"arm": arm, "seed": seed, "eval_on": eval_on, "split": split, "samples": 8, "correct_counts": counts}

    records = [record("base", None, "train-task", 30), record("base", None, "heldout", 12),
               *(record("es", s, where, n) for s in (0, 1) for where, n in (("train-task", 30), ("heldout", 12)))]
    rows = {r["check"]: r for r in pilot_pretrained.training_oc(records, [(3, 200), (3, 400)], 4, sims=5,
                                                                 heldout_problems=112)}
    held = rows["05 paper: ES - base held-out Pass@K"]
    assert [e["design"] for e in held["oc"]] == ["3x112"] and held["registered"] == "3x112"
    assert [e["design"] for e in rows["01 co-primary: ES Pass@1 - base"]["oc"]] == ["3x200", "3x400"]
    assert "registered" not in rows["01 co-primary: ES Pass@1 - base"]
    assert rows["01 paper: ES Pass@K - GRPO Pass@K"]["missing"] == ["grpo"]
