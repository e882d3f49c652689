import math

import pandas as pd
import pytest
import torch

from esreason_lib.experiments import forgetting as fg
from esreason_lib.models import build_char_tokenizer, tiny_random_qwen2
from esreason_lib.pretrain import build_batch, completion_loss


def _scores():
    rows = [("base", -1, "addition", 0.50, 0.90), ("base", -1, "sorting", 0.40, 0.80),
            ("es", 0, "addition", 0.50, 0.90), ("es", 1, "addition", 0.52, 0.92),
            ("es", 0, "sorting", 0.41, 0.80), ("es", 1, "sorting", 0.41, 0.80),
            ("grpo", 0, "addition", 0.46, 0.80), ("grpo", 1, "addition", 0.50, 0.84),
            ("grpo", 0, "sorting", 0.30, 0.70), ("grpo", 1, "sorting", 0.40, 0.70)]
    return pd.DataFrame([{"method": m, "seed": s, "task": t, "pass@1": p1, "pass@K": pk, "K": 16}
                         for m, s, t, p1, pk in rows])


def test_forgetting_deltas_hand_computed():
    d = fg.forgetting_deltas(_scores()).set_index(["method", "task"])
    assert list(d.index) == [("es", "addition"), ("es", "sorting"), ("grpo", "addition"), ("grpo", "sorting")]
    assert d.loc[("es", "addition"), "d_pass@1"] == pytest.approx(0.01)
    assert d.loc[("es", "addition"), "d_pass@1_std"] == pytest.approx(0.01)
    assert d.loc[("grpo", "sorting"), "d_pass@1"] == pytest.approx(-0.05)
    assert d.loc[("grpo", "addition"), "d_pass@K"] == pytest.approx(-0.08)
    assert d.loc[("grpo", "addition"), "d_pass@K_std"] == pytest.approx(0.02)
    assert (d["seeds"] == 2).all() and (d["K"] == 16).all()


def test_kl_k3_hand_computed():
    logp_tuned = torch.log(torch.tensor([[0.5, 0.25], [0.5, 0.9]]))
    logp_base = torch.log(torch.tensor([[0.25, 0.25], [1.0, 0.1]]))
    mask = torch.tensor([[True, True], [True, False]])
    # r = base / tuned on the masked tokens: 0.5, 1, 2 -> k3 = r - 1 - log r
    want = sum(r - 1 - math.log(r) for r in (0.5, 1.0, 2.0)) / 3
    assert fg.kl_k3(logp_tuned, logp_base, mask) == pytest.approx(want)
    assert fg.kl_k3(logp_tuned, logp_tuned, mask) == 0.0
    with pytest.raises(ValueError, match="no tokens"):
        fg.kl_k3(logp_tuned, logp_base, torch.zeros(2, 2, dtype=torch.bool))


def test_kl_to_base_zero_for_itself_positive_otherwise():
    tok = build_char_tokenizer()
    a, b = tiny_random_qwen2(len(tok), seed=0), tiny_random_qwen2(len(tok), seed=1)
    prompts = ["A12+34=", "S3142>"]
    assert fg.kl_to_base(a, a, tok, prompts, n=3, max_new_tokens=4) == pytest.approx(0.0, abs=1e-6)
    kl = fg.kl_to_base(a, b, tok, prompts, n=3, max_new_tokens=4)
    assert kl > 0.01
    # chunked log-probabilities (one row per forward) give the same estimate
    assert fg.kl_to_base(a, b, tok, prompts, n=3, max_new_tokens=4, max_logits=1) == pytest.approx(kl, rel=1e-5)


def test_lm_loss_by_family_matches_completion_loss():
    tok = build_char_tokenizer()
    model = tiny_random_qwen2(len(tok), seed=0)
    records = [("addition", "A1+2=", "3"), ("sorting", "S21>", "12"), ("addition", "A10+5=", "15")]
    out = fg.lm_loss_by_family(model, tok, records, batch_size=1)
    with torch.no_grad():
        add = completion_loss(model, build_batch(tok, ["A1+2=", "A10+5="], ["3", "15"]))
        srt = completion_loss(model, build_batch(tok, ["S21>"], ["12"]))
    assert out["addition"] == pytest.approx(float(add), rel=1e-5)
    assert out["sorting"] == pytest.approx(float(srt), rel=1e-5)
    # token-weighted: addition has 2 + 3 labelled tokens (answer + EOS), sorting 3
    assert out["all"] == pytest.approx((5 * float(add) + 3 * float(srt)) / 8, rel=1e-5)


def test_heldout_lm_records_fixed_and_zoo_only():
    a = fg.heldout_lm_records("smoke", 20)
    assert a == fg.heldout_lm_records("smoke", 20)
    assert len(a) == 20 and {r[0] for r in a} <= {"countdown", "addition", "sorting"}
    assert fg.heldout_lm_records("Qwen/Qwen2.5-1.5B-Instruct", 20) is None


def _stats(with_lm=True):
    rows = []
    for method, seed, lm, kls in (("base", -1, 0.60, (0.0, 0.0, 0.0)), ("es", 0, 0.61, (0.02, 0.001, 0.003)),
                                  ("es", 1, 0.61, (0.04, 0.003, 0.001)), ("grpo", 0, 0.64, (0.2, 0.03, 0.03))):
        if with_lm:
            rows.append({"quantity": "lm_loss", "scope": "all", "value": lm, "method": method, "seed": seed})
        for task, kl in zip(("countdown", "addition", "sorting"), kls):
            rows.append({"quantity": "kl", "scope": task, "value": kl, "method": method, "seed": seed})
    return pd.DataFrame(rows)


def test_stats_summary_means_over_seeds():
    s = fg.stats_summary(_stats()).set_index("method")
    assert list(s.index) == ["base", "es", "grpo"]
    assert s.loc["es", "kl/countdown"] == pytest.approx(0.03)
    assert s.loc["es", "kl/heldout"] == pytest.approx(0.002)
    assert s.loc["grpo", "lm_loss/all"] == pytest.approx(0.64)


def test_describe_forgetting_text():
    deltas = fg.forgetting_deltas(_scores())
    text = fg.describe_forgetting(deltas, fg.stats_summary(_stats()), "qwen2-s-habit")
    assert text.startswith("Delta pass@1 on addition: ES +0.01, GRPO -0.02 (pass@16: ES +0.01, GRPO -0.08); "
                           "Delta pass@1 on sorting: ES +0.01, GRPO -0.05")
    assert "LM loss base 0.600 / ES 0.610 / GRPO 0.640" in text
    assert text.endswith("KL to base per token, held-out tasks ES 0.0020 / GRPO 0.0300 "
                         "(countdown: ES 0.0300 / GRPO 0.2000)")
    hub = fg.describe_forgetting(deltas, fg.stats_summary(_stats(with_lm=False)), "Qwen/Qwen2.5-1.5B-Instruct")
    assert "LM loss skipped" in hub and "Qwen/Qwen2.5-1.5B-Instruct" in hub
