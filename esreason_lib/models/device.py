"""Which device a run trained on, recorded beside its metrics (device.json), independent of the manifest.

A run resumed from a checkpoint ends bit-identical to an uninterrupted one only on the same device model: noise
is a function of the device type, and kernels (matmul tiling, reductions) of the device model and SM count. Each
start of a trainer appends `device_record` to the run's device.json; a start whose device model or SM count
differs from the last one's warns (the run continues: the result is valid, only not bit-reproducible).
"""

from __future__ import annotations

import json
import platform
import warnings

import torch


def device_record(device: torch.device) -> dict:
    """{type, name, sm_count, capability} of `device` (sm_count and capability None off CUDA) and the torch /
    CUDA versions."""
    device = torch.device(device)
    rec = {"type": device.type, "name": platform.processor() or platform.machine(), "sm_count": None,
           "capability": None, "torch": torch.__version__, "cuda": torch.version.cuda}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        rec.update(name=props.name, sm_count=int(props.multi_processor_count),
                   capability=f"{props.major}.{props.minor}")
    return rec


def record_device(run, model) -> dict:
    """Append `model`'s device record to `run.path / "device.json"` (a list, one entry per start) and warn when the
    device model or SM count differs from the previous start's. Returns the record."""
    rec = device_record(next(model.parameters()).device)
    path = run.path / "device.json"
    history = json.loads(path.read_text()) if path.exists() else []
    if history and (history[-1]["name"], history[-1]["sm_count"]) != (rec["name"], rec["sm_count"]):
        last = history[-1]
        warnings.warn(f"run {run.path.name}: resumed on {rec['name']} ({rec['sm_count']} SMs), earlier on "
                      f"{last['name']} ({last['sm_count']} SMs): a resume is bit-identical only on the same device "
                      f"model", RuntimeWarning, stacklevel=2)
    path.write_text(json.dumps([*history, rec], indent=1) + "\n")
    return rec
