"""Ray as users run it (es/backends/ray_cluster.py): joining an existing cluster, shipping the package, one bundle
per actor, the driver's GPU share. The end-to-end tests start a two-raylet cluster on this machine (`ray start
--head` plus `ray start --address`, a multi-node stand-in, one CPU each), train through the CLI joined to it via
RAY_ADDRESS, and kill a worker's process mid-run; the cluster is stopped by its own process groups in teardown.
Those two are marked `cluster`: a raylet's start-up depends on the machine's load, so they run in `make
test-cluster`, not in `make test`."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

ray = pytest.importorskip("ray", reason="the Ray cluster tests need the `ray` extra (pip install 'esreason[ray]')")

from toy_tasks import Graded  # noqa: E402

from esreason_lib.es.backends import ray_cluster  # noqa: E402
from esreason_lib.es.backends.ray_cluster import actor_bundles, cluster_address, package_runtime_env  # noqa: E402
from esreason_lib.es.config import ESConfig  # noqa: E402
from esreason_lib.models.placement import plan_placement, start_one_by_one  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RAY = str(Path(sys.executable).with_name("ray"))
START_WAIT_S = 300  # the longest a `ray start` may take to come up on a loaded machine
STOP_WAIT_S = 90  # the longest its graceful stop may take before the group is killed


# ---------------------------------------------------------------------------------------------- no cluster needed
def test_the_address_comes_from_the_setting_then_the_environment(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert cluster_address() is None and cluster_address("10.0.0.1:6379") == "10.0.0.1:6379"
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.2:6379")
    assert cluster_address() == "10.0.0.2:6379" and cluster_address("10.0.0.1:6379") == "10.0.0.1:6379"
    monkeypatch.setenv("RAY_ADDRESS", "local")
    assert cluster_address() is None


def test_joining_passes_no_system_config_and_ships_the_package(monkeypatch):
    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(kw))
    monkeypatch.setattr(ray_cluster, "probe_cluster", lambda address: None)  # tests/test_ray_address.py
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.2:6379")
    ray_cluster.start_ray()
    (kw,) = calls
    assert kw["address"] == "10.0.0.2:6379" and "_system_config" not in kw
    (folder,) = kw["runtime_env"]["py_modules"]
    assert Path(folder) == REPO / "esreason_lib" and (Path(folder) / "es" / "core.py").is_file()
    assert package_runtime_env()["excludes"] == ["__pycache__", "*.pyc"]
    ray_cluster.start_ray(runtime_env={"pip": ["x"]})  # the caller's runtime_env wins
    assert calls[-1]["runtime_env"] == {"pip": ["x"]}
    monkeypatch.delenv("RAY_ADDRESS")
    ray_cluster.start_ray(num_cpus=2)  # a local start keeps its settings and ships nothing
    assert "_system_config" in calls[-1] and "runtime_env" not in calls[-1] and "address" not in calls[-1]


def test_one_bundle_per_actor_after_the_drivers_share():
    assert actor_bundles(workers=2, cpus_per_worker=1.0, gpus_per_worker=0.0) == [{"CPU": 1.0}, {"CPU": 1.0}]
    assert actor_bundles(workers=2, cpus_per_worker=2, gpus_per_worker=0.5, driver_share=0.1) == [
        {"GPU": 0.1}, {"CPU": 2.0, "GPU": 0.5}, {"CPU": 2.0, "GPU": 0.5}]
    with pytest.raises(ValueError, match="cpus_per_worker=0 and no GPU"):
        actor_bundles(workers=1, cpus_per_worker=0.0, gpus_per_worker=0.0)


def test_the_drivers_gpu_share_is_counted_in_the_placement():
    eight = {"CPU": 64.0, "GPU": 8.0}
    base = dict(workers=8, cpus_per_worker=1.0, gpus_per_worker=None, cuda=True, engine="vllm", memory_share=None,
                resources=eight)
    assert plan_placement(**base) == (1.0, 0.5)  # no driver on a GPU: one whole GPU per actor
    gpus, share = plan_placement(**base, driver_share=0.25)
    assert gpus == 0.75 and share == 0.5  # 8 actors of 0.75 and the driver's 0.25 fit on 8 GPUs
    assert plan_placement(**{**base, "workers": 16}, driver_share=0.2)[0] == 0.4  # (1 - 0.2) / 2 per GPU
    with pytest.raises(ValueError, match=r"workers=8 with gpus_per_worker=1 needs 8 GPUs.*\(7 such actors fit\)"):
        plan_placement(**{**base, "gpus_per_worker": 1.0}, driver_share=0.25)
    with pytest.raises(ValueError, match="beside the driver's 0.6"):
        plan_placement(**base, driver_share=0.6)  # its engine's 0.5 and the driver's 0.6 exceed the GPU
    with pytest.raises(ValueError, match=r"driver's GPU share must be in \[0, 1\), got 1.5"):
        plan_placement(**base, driver_share=1.5)
    assert ray_cluster.driver_gpu_share(torch.nn.Linear(2, 2)) == 0.0  # a CPU driver holds no GPU


def test_engines_sharing_a_gpu_start_one_by_one():
    assert start_one_by_one("vllm", 0.5) and not start_one_by_one("vllm", 1.0)
    assert not start_one_by_one("local", 0.5) and not start_one_by_one("vllm", 0.0)


def test_the_ray_address_setting(capsys):
    assert ESConfig(ray_address="10.0.0.1:6379", backend="ray").ray_address == "10.0.0.1:6379"
    with pytest.raises(ValueError, match="ESConfig.ray_address must be None or a Ray address"):
        ESConfig(ray_address=" ")
    from esreason_lib.cli import main

    assert main(["train", "grpo", "--preset", "smoke", "--ray-address", "10.0.0.1:6379"]) == 2
    assert "--ray-address sets the Ray cluster of an ES population; grpo has none" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------- a two-raylet cluster
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_node(args: list[str], log: Path, env: dict) -> subprocess.Popen:
    """`ray start --block <args>` in its own process group, in the log's folder; returns once the node is up
    (bounded wait)."""
    out = open(log, "w")
    node = subprocess.Popen([RAY, "start", "--block", "--disable-usage-stats", *args], stdout=out,
                            stderr=subprocess.STDOUT, env=env, cwd=log.parent, start_new_session=True)
    for _ in range(START_WAIT_S):
        text = log.read_text()
        if "will now block" in text:
            return node
        if node.poll() is not None:
            break
        try:
            node.wait(timeout=1)
        except subprocess.TimeoutExpired:
            pass
    _stop_node(node)
    raise RuntimeError(f"ray start {' '.join(args)} did not come up:\n{log.read_text()[-2000:]}")


def _stop_node(node: subprocess.Popen) -> None:
    """Stop one `ray start --block` and every process of its group (its raylet, agents and workers)."""
    for sig, wait in ((signal.SIGTERM, STOP_WAIT_S), (signal.SIGKILL, 30)):
        try:
            os.killpg(node.pid, sig)
        except ProcessLookupError:
            return
        try:
            node.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        try:  # the group may outlive its leader for a moment
            os.killpg(node.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A head node and a second raylet on this machine, one CPU each: (address, environment for its drivers)."""
    tmp = Path(tempfile.mkdtemp(prefix="rc", dir="/tmp"))  # Ray's socket paths must stay under 107 bytes
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "OMP_NUM_THREADS": "1"}  # a private test cluster: no token
    env.pop("RAY_ADDRESS", None)
    env.pop("PYTHONPATH", None)  # the nodes do not see this checkout: the package reaches them with the job
    address = f"127.0.0.1:{_free_port()}"
    nodes = []
    try:
        nodes.append(_start_node(["--head", f"--port={address.split(':')[1]}", "--num-cpus=1",
                                  "--include-dashboard=false", f"--temp-dir={tmp / 'ray'}"], tmp / "head.log", env))
        nodes.append(_start_node([f"--address={address}", "--num-cpus=1"], tmp / "node.log", env))
        yield address, env
    finally:
        if ray.is_initialized():
            ray.shutdown()
        for node in reversed(nodes):
            _stop_node(node)


SMOKE = ["train", "es", "--preset", "smoke", "--set", "sigma=0.1", "--set", "reward_formatted=0.1"]
"""The smoke preset with rewards that move theta (at its own sigma every member scores 0 and the update is 0)."""


def _train(args: list[str], env: dict, home: Path) -> Path:
    done = subprocess.run([sys.executable, "-m", "esreason_lib", *args], env={**env, "ESREASON_HOME": str(home),
                          "PYTHONPATH": str(REPO)}, cwd=home.parent, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return Path(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.cluster
def test_the_cli_joins_the_cluster_and_matches_the_local_run(cluster, tmp_path):
    address, env = cluster
    local = _train(SMOKE, env, tmp_path / "local")
    joined = _train([*SMOKE, "--backend", "ray", "--workers", "2"], {**env, "RAY_ADDRESS": address},
                    tmp_path / "ray")
    assert local.name == joined.name  # ray is an exact backend: the same run identity
    assert (local / "model" / "model.safetensors").read_bytes() == (joined / "model" / "model.safetensors").read_bytes()
    ours, theirs = _metrics(local), _metrics(joined)
    assert len(ours) == 3 and all(row["es/update_norm"] > 0 for row in ours)  # every step moved theta
    for key in ("reward/mean", "reward/std", "es/update_norm"):  # (the local batched decode fixes up nothing)
        assert [row[key] for row in ours] == [row[key] for row in theirs], key


def _metrics(run: Path) -> list[dict]:
    import json

    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


class KillOnce:
    """The Ray backend, but before iteration `at` it SIGKILLs the process of actor 1 (a worker dying mid-run)."""

    def __init__(self, backend, at: int):
        self.backend, self.at, self.killed = backend, at, None

    def __call__(self, model, population, examples, *, iteration):
        if iteration == self.at and self.killed is None:
            self.killed = ray.get(self.backend.actors[1].__ray_call__.remote(lambda replica: os.getpid()))
            os.kill(self.killed, signal.SIGKILL)
        return self.backend(model, population, examples, iteration=iteration)


@pytest.mark.slow
@pytest.mark.cluster
def test_a_worker_killed_mid_run_on_the_cluster_recovers(cluster, tmp_path, monkeypatch):
    from esreason_lib.es.backends.ray_actors import RayBackend
    from esreason_lib.es.loop import train_es
    from esreason_lib.models.zoo import build_char_tokenizer, tiny_random_qwen2

    address, env = cluster
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("RAY_ADDRESS", address)
    monkeypatch.chdir(tmp_path)  # Ray puts the driver's folder on its workers' path: not this checkout
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the nodes cannot import this test module
    try:
        cfg = ESConfig(model="tiny-random", task="graded", population_size=4, sigma=0.05, alpha=0.05, iterations=3,
                       prompts_per_step=3, antithetic=True, checkpoint_every=0, device="cpu", seed=0,
                       backend="sequential")
        tok = build_char_tokenizer()
        seq_model, ray_model = (tiny_random_qwen2(len(tok), seed=0) for _ in range(2))
        train_es(cfg, model=seq_model, tokenizer=tok, task=Graded(), home=tmp_path / "seq", progress=False)
        backend = RayBackend.from_config(cfg, Graded(), tok, workers=2)  # joins the cluster via RAY_ADDRESS
        killer = KillOnce(backend, at=1)
        train_es(cfg, model=ray_model, tokenizer=tok, task=Graded(), backend=killer, home=tmp_path / "ray",
                 progress=False)
        assert killer.killed is not None and backend.restarts == 1
        nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        assert len(nodes) == 2
        homes = ray.get([a.__ray_call__.remote(lambda r: (sys.modules["esreason_lib"].__file__,
                                                          ray.get_runtime_context().get_node_id()))
                         for a in backend.actors])
        assert {node for _, node in homes} == nodes  # one actor per raylet
        assert all("runtime_resources" in path and not path.startswith(str(REPO)) for path, _ in homes), homes
        for name, p in seq_model.state_dict().items():
            assert torch.equal(p, ray_model.state_dict()[name]), name
        assert not torch.equal(seq_model.model.norm.weight, tiny_random_qwen2(len(tok), seed=0).model.norm.weight)
        backend.close()
    finally:
        ray.shutdown()
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
