"""The run store under corruption and concurrency: bad checkpoints are skipped (never used), a truncated model is
not complete, bad metrics lines never raise nor lose a step, runs are locked, files follow the umask, and a
complete run opens from a read-only store. No model is trained here (see test_reliability_training.py)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from esreason_lib.store import integrity
from esreason_lib.store import runs as R
from esreason_lib.store.checkpoints import UnsafeCheckpointError
from esreason_lib.store.integrity import CorruptFileError, DirectoryLock, RunStoreWarning, seal, unseal


def _run_with_checkpoints(tmp_path, config=None, steps=(2, 4)):
    run = R.Run.open("es", config or {"x": 1}, seed=0, home=tmp_path)
    for step in range(1, max(steps) + 1):
        run.log(step, {"reward/mean": float(step)})
        if step in steps:
            run.save_checkpoint(step, {"theta": torch.full((3,), float(step))})
    return run


def _with_model(run):
    run.model_dir.mkdir(exist_ok=True)
    (run.model_dir / "model.safetensors").write_bytes(b"w")
    return run


def _newest(run):
    return run.path / "checkpoints" / "step-000004.pt"


def test_seal_round_trip_and_every_refusal():
    data = seal(b"payload", {"kind": "es", "step": 3})
    assert unseal(data, {"kind": "es", "step": 3}) == b"payload"
    flipped = bytearray(data)
    flipped[-2] ^= 0x01
    for bad, why in [(bytes(flipped), "does not match its sha256"), (data[:-1], "truncated"),
                     (b"\0" * len(data), "no header"), (integrity.MAGIC + b"{not json\npayload", "unreadable header")]:
        with pytest.raises(CorruptFileError, match=why):
            unseal(bad, {"kind": "es", "step": 3})
    with pytest.raises(CorruptFileError, match="step=3, not 4"):
        unseal(data, {"kind": "es", "step": 4})


@pytest.mark.parametrize("corrupt, why", [
    (lambda p: p.write_bytes(bytes(b ^ 0xFF if i == len(p.read_bytes()) - 5 else b
                                   for i, b in enumerate(p.read_bytes()))), "does not match its sha256"),
    (lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]), "truncated"),
    (lambda p: p.write_bytes(b"\0" * len(p.read_bytes())), "no header"),
    (lambda p: torch.save({"theta": torch.zeros(3)}, p), "no header"),  # zeroed params in a plain torch file
], ids=["flipped-byte", "truncated", "zero-filled", "zeroed-params"])
def test_a_bad_checkpoint_is_skipped_for_the_older_good_one(tmp_path, corrupt, why):
    run = _run_with_checkpoints(tmp_path)
    corrupt(_newest(run))
    with pytest.warns(RunStoreWarning, match=f"step-000004.pt skipped: .*{why}"):
        step, state = run.latest_checkpoint()
    assert step == 2 and torch.equal(state["theta"], torch.full((3,), 2.0))


def test_another_runs_checkpoint_is_never_used(tmp_path):
    mine = _run_with_checkpoints(tmp_path / "a")
    other = _run_with_checkpoints(tmp_path / "b", config={"x": 2}, steps=(4,))
    _newest(mine).write_bytes(_newest(other).read_bytes())
    with pytest.warns(RunStoreWarning, match=f"belongs to config_hash='{other.path.name[3:]}'"):
        assert mine.latest_checkpoint()[0] == 2
    (mine.path / "checkpoints" / "step-000002.pt").rename(mine.path / "checkpoints" / "step-000003.pt")
    with pytest.warns(RunStoreWarning) as record:  # a renamed file claims another step: refused too
        assert mine.latest_checkpoint() is None
    assert any("step=2, not 3" in str(w.message) for w in record)


@pytest.mark.parametrize("line", ["garbage", "[1, 2]", '{"step": "x"}', '{"step": true}', "\xff\xfe"])
def test_a_bad_metrics_line_warns_with_file_and_line_and_resume_falls_back(tmp_path, line):
    run = R.Run.open("grpo", {"x": 1}, seed=0, home=tmp_path)
    for step in (1, 2):
        run.log(step, {"reward/mean": 0.1})
    run.save_checkpoint(2, {"theta": torch.zeros(1)})
    with open(run.path / "metrics.jsonl", "ab") as fh:  # step 3's line is corrupt
        fh.write(line.encode("latin-1") + b"\n")
    run.log(4, {"reward/mean": 0.4})
    run.save_checkpoint(4, {"theta": torch.ones(1)})
    with pytest.warns(RunStoreWarning, match=r"metrics\.jsonl:3: not a JSON object with an integer 'step'"):
        assert list(run.metrics()["step"]) == [1, 2, 4]
    with pytest.warns(RunStoreWarning, match=r"metrics\.jsonl:3: not a JSON object"), \
            pytest.warns(RunStoreWarning, match=r"step-000004\.pt skipped: metrics\.jsonl has a bad line after step 2"):
        step, _ = run.latest_checkpoint()
    assert step == 2  # the checkpoint after the bad line is not trusted: step 3 is recomputed, not lost
    with pytest.warns(RunStoreWarning, match=r"metrics\.jsonl:3: not a JSON object"):
        run.truncate_metrics(step)
    assert [json.loads(x)["step"] for x in (run.path / "metrics.jsonl").read_text().splitlines()] == [1, 2]


def test_a_truncated_model_makes_a_complete_run_incomplete(tmp_path):
    run = R.Run.open("es", {"x": 1}, seed=0, home=tmp_path)
    run.model_dir.mkdir()
    weights = run.model_dir / "model.safetensors"
    weights.write_bytes(b"w" * 100)
    run.finish()
    assert run.manifest()["model_files"] == {"model.safetensors": integrity.sha256_file(weights)}
    assert run.is_complete() and R.run_exists("es", {"x": 1}, home=tmp_path)
    weights.write_bytes(b"w" * 50)
    with pytest.warns(RunStoreWarning, match="model.safetensors does not match its recorded sha256"):
        assert not run.is_complete()
    weights.unlink()
    with pytest.warns(RunStoreWarning, match="model.safetensors is missing"):
        assert not R.run_exists("es", {"x": 1}, home=tmp_path)


def test_a_manifest_that_is_a_json_list_means_not_complete(tmp_path):
    run = R.Run.open("es", {"x": 1}, seed=0, home=tmp_path)
    (run.path / "manifest.json").write_text("[1, 2]")
    with pytest.warns(RunStoreWarning, match=r"manifest\.json: expected a JSON object, got a list"):
        assert run.manifest() is None and not run.is_complete()


@pytest.mark.parametrize("sub", ["checkpoints", "model", "results"])
def test_a_subfolder_replaced_by_a_file_is_a_clear_error(tmp_path, sub):
    run = R.Run.open("es", {"x": 1}, seed=0, home=tmp_path)
    (run.path / sub).write_text("not a folder")
    with pytest.raises(ValueError, match=f"{sub} must be a directory"):
        R.Run.open("es", {"x": 1}, seed=0, home=tmp_path)


def test_saved_files_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        run = _run_with_checkpoints(tmp_path, config={"x": 1, "keep_checkpoints": True})
        run.write_table("t", __import__("pandas").DataFrame({"a": [1]}))
        run.model_dir.mkdir()
        (run.model_dir / "model.safetensors").write_bytes(b"w")
        os.chmod(run.model_dir / "model.safetensors", 0o600)  # what safetensors' save_file leaves
        run.finish()
    finally:
        os.umask(old)
    for path in [_newest(run), run.path / "manifest.json", run.path / "config.json", run.path / "results" / "t.csv",
                 run.model_dir / "model.safetensors"]:
        assert path.stat().st_mode & 0o777 == 0o644, path


@pytest.mark.parametrize("home_kind", ["file", "under-a-file", "read-only"])
def test_an_unwritable_home_names_the_run_directory(tmp_path, monkeypatch, home_kind):
    (tmp_path / "f").write_text("x")
    home = {"file": tmp_path / "f", "under-a-file": tmp_path / "f" / "store", "read-only": tmp_path / "ro"}[home_kind]
    if home_kind == "read-only":  # the tests run as root, where chmod does not stop writes: simulate EROFS

        def read_only(*args, **kwargs):
            raise OSError(errno.EROFS, "Read-only file system", str(args[0]))

        monkeypatch.setattr(os, "mkdir", read_only)
    with pytest.raises(OSError, match=f"cannot create the run directory {home}/es-"):
        R.Run.open("es", {"x": 1}, seed=0, home=home)


def test_a_complete_run_opens_from_a_read_only_store(tmp_path, monkeypatch):
    run = _with_model(R.Run.open("es", {"x": 1}, seed=0, home=tmp_path))
    run.finish()
    started = (run.path / "started.json").read_bytes()

    def no_writes(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(R, "atomic_write_bytes", no_writes)
    monkeypatch.setattr(integrity.os, "open", no_writes)  # no lock file either
    again = R.Run.open("es", {"x": 1}, seed=0, home=tmp_path, lock=True)
    assert again.is_complete() and again.lock is None
    assert (run.path / "started.json").read_bytes() == started


def test_disk_full_leaves_the_older_checkpoint_and_no_temporary_file(tmp_path, monkeypatch):
    run = _run_with_checkpoints(tmp_path, steps=(2,))

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(integrity.os, "fsync", full)
    with pytest.raises(OSError, match="No space left on device"):
        run.save_checkpoint(4, {"theta": torch.ones(3)})
    monkeypatch.undo()
    assert sorted(p.name for p in (run.path / "checkpoints").iterdir()) == ["step-000002.pt"]
    assert run.latest_checkpoint()[0] == 2


_HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from esreason_lib.store.integrity import DirectoryLock
    lock = DirectoryLock(Path(sys.argv[1]))
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    if len(sys.argv) > 3:
        Path(sys.argv[3]).write_text(sys.argv[4])
""")


def _hold(folder, seconds, then_write=None):
    args = [sys.executable, "-c", _HOLDER, str(folder), str(seconds)] + (list(then_write) if then_write else [])
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_locked_run_names_the_holder_pid_or_waits_for_it(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    proc = _hold(folder, 30)
    try:
        with pytest.warns(RunStoreWarning, match=f"locked by PID {proc.pid}"):
            with pytest.raises(BlockingIOError, match=f"another process \\(PID {proc.pid}, lock file"):
                DirectoryLock(folder, timeout=0.3)
    finally:
        proc.kill()
        proc.wait()
    lock = DirectoryLock(folder, timeout=0)  # the kernel dropped the killed holder's lock
    assert lock.holder() == str(os.getpid())
    lock.release()


def test_a_trainer_waits_for_the_holder_then_finds_the_run_complete(tmp_path):
    first = _with_model(R.Run.open("es", {"x": 1}, seed=0, home=tmp_path))
    first.finish()
    manifest = (first.path / "manifest.json").read_text()
    (first.path / "manifest.json").unlink()
    t0 = time.monotonic()
    proc = _hold(first.path, 1.0, then_write=(first.path / "manifest.json", manifest))
    with pytest.warns(RunStoreWarning, match=f"locked by PID {proc.pid}; waiting"):
        run = R.Run.open("es", {"x": 1}, seed=0, home=tmp_path, lock=True)
    proc.wait()
    assert time.monotonic() - t0 >= 0.9 and run.is_complete() and run.lock is None


def _try_lock_elsewhere(folder) -> subprocess.CompletedProcess:
    code = ("import sys; from pathlib import Path; from esreason_lib.store.integrity import DirectoryLock; "
            "DirectoryLock(Path(sys.argv[1]), timeout=0).release()")
    return subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})


def test_the_trainer_holds_the_lock_until_finish(tmp_path):
    run = R.Run.open("es", {"x": 1}, seed=0, home=tmp_path, lock=True)
    held = _try_lock_elsewhere(run.path)
    assert held.returncode != 0 and f"another process (PID {os.getpid()}, lock file" in held.stderr
    run.fail("stopped")
    assert run.lock is None and run.manifest()["status"] == "failed" and run.manifest()["error"] == "stopped"
    assert _try_lock_elsewhere(run.path).returncode == 0


def test_a_run_left_locked_by_an_earlier_failure_in_this_process_is_taken_over(tmp_path):
    first = R.Run.open("es", {"x": 1}, seed=0, home=tmp_path, lock=True)  # e.g. a trainer that raised
    second = R.Run.open("es", {"x": 1}, seed=0, home=tmp_path, lock=True, lock_timeout=0)
    assert first.lock._fd is None and second.lock.holder() == str(os.getpid())
    second.release()
    with pytest.raises(ValueError, match="started with seed=0"):  # a failed open releases its lock
        R.Run.open("es", {"x": 1}, seed=1, home=tmp_path, lock=True)
    DirectoryLock(first.path, timeout=0).release()


class _Payload:
    """Unpickling this touches `marker`: the code a tampered checkpoint would run on resume."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.mknod, (str(self.marker),))


@pytest.mark.parametrize("fmt", ["torch", "pickle"])
def test_a_resealed_checkpoint_with_a_pickle_payload_is_refused_and_never_run(tmp_path, fmt):
    run = _run_with_checkpoints(tmp_path)
    marker = tmp_path / "ran"
    state = {"theta": torch.zeros(3), "hook": _Payload(marker)}
    if fmt == "torch":
        buffer = __import__("io").BytesIO()
        torch.save(state, buffer)
        payload = buffer.getvalue()
    else:
        payload = __import__("pickle").dumps(state)
    _newest(run).write_bytes(seal(payload, {"kind": "es", "config_hash": run.path.name[3:], "step": 4}))
    with pytest.raises(UnsafeCheckpointError, match=r"step-000004\.pt holds more than tensors and plain data "
                                                       r"and was not loaded \(nothing in it ran\)"):
        run.latest_checkpoint()
    assert not marker.exists()


def test_checkpoints_hold_tensors_and_plain_data_only():
    import tempfile
    from pathlib import Path

    from esreason_lib.store.checkpoints import read_checkpoint, write_checkpoint

    state = {"params": {"w": torch.arange(6.0).view(2, 3)}, "iteration": 3, "rng": torch.get_rng_state(),
             "opt": {"state": {0: {"step": torch.tensor(2.0)}}, "param_groups": [{"betas": (0.9, 0.99), "lr": 1e-3,
                                                                                    "fused": None}]}}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "step-000003.pt"
        write_checkpoint(path, state, {"step": 3})
        back = read_checkpoint(path, {"step": 3})
        assert sorted(p.name for p in Path(folder).iterdir()) == ["step-000003.pt"]  # no temporary file left
    assert torch.equal(back["params"]["w"], state["params"]["w"]) and back["iteration"] == 3
    assert torch.equal(back["rng"], state["rng"]) and back["opt"]["param_groups"][0]["betas"] == (0.9, 0.99)


def test_a_resumed_run_with_a_gap_in_its_metrics_rewinds_to_a_consistent_checkpoint(tmp_path):
    run = _run_with_checkpoints(tmp_path, steps=(2, 4))  # steps 1..4 logged, checkpoints 2 and 4
    lines = (run.path / "metrics.jsonl").read_text().splitlines()
    (run.path / "metrics.jsonl").write_text("\n".join(lines[:3]) + "\n")  # step 4 lost after its checkpoint
    with pytest.warns(RunStoreWarning, match=r"step-000004\.pt skipped: metrics\.jsonl lacks step 4"):
        assert run.latest_checkpoint()[0] == 2
    (run.path / "metrics.jsonl").write_text("\n".join(lines[:1] + lines[2:]) + "\n")  # step 2 lost: no checkpoint
    with pytest.warns(RunStoreWarning, match=r"lacks step 2"):
        assert run.latest_checkpoint() is None


def test_a_manifest_edited_to_record_no_model_files_is_not_trusted(tmp_path):
    run = _with_model(R.Run.open("es", {"x": 1}, seed=0, home=tmp_path))
    run.finish()
    assert run.is_complete()
    manifest = json.loads((run.path / "manifest.json").read_text())
    (run.path / "manifest.json").write_text(json.dumps({**manifest, "model_files": {}}))
    __import__("shutil").rmtree(run.model_dir)
    with pytest.warns(RunStoreWarning, match="its manifest records no model files"):
        assert not R.Run(run.path, "es", run.config, 0).is_complete()
    with pytest.warns(RunStoreWarning, match="its manifest records no model files"):
        assert not R.run_exists("es", {"x": 1}, home=tmp_path)
    empty = R.Run.open("eval", {"x": 1}, seed=0, home=tmp_path)  # a kind that saves no model
    empty.finish()
    assert empty.is_complete()
    with pytest.raises(ValueError, match="a complete grpo run must save its model under model/ first"):
        R.Run.open("grpo", {"x": 1}, seed=0, home=tmp_path).finish()


def test_a_complete_run_keeps_only_its_final_weights_unless_asked(tmp_path):
    for keep in (False, True):
        config = {"x": 1, "keep_checkpoints": True} if keep else {"x": 1}
        run = _with_model(_run_with_checkpoints(tmp_path, config=config))
        run.finish()
        assert (run.path / "checkpoints").exists() == keep and run.is_complete()


@pytest.mark.parametrize("where", ["checkpoints/step-000006.pt", "metrics.jsonl", "manifest.json"])
def test_a_fifo_at_a_store_path_is_refused_not_waited_on(tmp_path, where):
    run = _run_with_checkpoints(tmp_path)
    (run.path / where).unlink(missing_ok=True)
    os.mkfifo(run.path / where)
    with pytest.raises(integrity.NotARegularFile, match=f"{where} is a FIFO, not a regular file; move it away"):
        R.Run.open("es", {"x": 1}, seed=0, home=tmp_path, lock=True).latest_checkpoint()
