"""ES host-side costs (es/loop.py): drift on the model's device and only every drift_every iterations, the time
breakdown, es/resyncs, and the device record (models/device.py). On CPU the "device" is the host; the GPU numbers
these changes aim at (drift ~88 s per iteration at 1.5B before) were not measured here."""

from __future__ import annotations

import json
import math

import pytest
import torch

from esreason_lib.es.backends.sequential import SequentialBackend
from esreason_lib.es.config import ESConfig
from esreason_lib.es.core import ES
from esreason_lib.es.loop import es_step
from esreason_lib.models.device import device_record, record_device
from esreason_lib.models.weights import relative_drift
from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2
from esreason_lib.tasks import get_task


def test_drift_is_the_float64_relative_norm():
    theta0 = {"a": torch.tensor([3.0, 4.0]), "b": torch.tensor([[0.0]], dtype=torch.bfloat16)}
    params = {"a": torch.tensor([3.0, 7.0]), "b": torch.tensor([[4.0]], dtype=torch.bfloat16)}
    assert relative_drift(params, theta0) == pytest.approx(math.sqrt(9 + 16) / 5.0)
    assert math.isnan(relative_drift({"z": torch.ones(2)}, {"z": torch.zeros(2)}))


def test_es_step_logs_the_breakdown_and_drift_only_when_due():
    tok = build_char_tokenizer()
    model = tiny_random_qwen2(len(tok), seed=0)
    task = get_task("countdown")
    cfg = ESConfig(model="tiny-random", task="countdown", population_size=2, prompts_per_step=1, iterations=3,
                   max_new_tokens=4, device="cpu", drift_every=2, sigma=0.01, alpha=0.005)
    es = ES(cfg, model)
    theta0 = {k: v.detach().clone() for k, v in es.params.items()}
    backend = SequentialBackend.from_config(cfg, task, tok)
    examples = task.examples("train", n=4)
    logged = [es_step(es, model, tok, task, examples, backend, theta0=theta0)[0] for _ in range(3)]
    assert ["es/drift_rel" in m for m in logged] == [False, True, True]  # iteration 2 (every 2nd) and the last
    assert logged[1]["es/drift_rel"] >= 0
    for m in logged:
        assert m["es/resyncs"] == 0 and m["time/sync_s"] == 0.0
        assert all(m[f"time/{k}_s"] >= 0 for k in ("centre", "population", "update"))
    with pytest.raises(ValueError, match="ESConfig.drift_every"):
        ESConfig(drift_every=0)


def test_device_record_and_a_resume_on_another_device_warns(tmp_path):
    rec = device_record(torch.device("cpu"))
    assert rec["type"] == "cpu" and rec["sm_count"] is None and rec["torch"] == torch.__version__

    class Run:
        path = tmp_path

    model = torch.nn.Linear(1, 1)
    record_device(Run, model)
    record_device(Run, model)  # the same device: no warning
    history = json.loads((tmp_path / "device.json").read_text())
    assert len(history) == 2 and history[0] == history[1]
    history[-1].update(name="NVIDIA H100 80GB HBM3", sm_count=132)
    (tmp_path / "device.json").write_text(json.dumps(history))
    with pytest.warns(RuntimeWarning, match=r"resumed on .* earlier on NVIDIA H100 80GB HBM3 \(132 SMs\)"):
        record_device(Run, model)


def test_host_cost_benchmark_prints_the_extrapolation_and_share(capsys):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_host_cost

    params = {"w": torch.tensor([3.0, 7.0])}
    assert bench_host_cost.drift_before(params, {"w": torch.tensor([3.0, 4.0])}) == pytest.approx(3 / 5)
    assert bench_host_cost.best(lambda: None, 2) >= 0
    bench_host_cost.main(["--sizes", "1", "--repeats", "1", "--population-s", "60"])
    out = capsys.readouterr().out
    assert "extrapolated to 1.54e9 parameters" in out and "host-side share now:" in out
