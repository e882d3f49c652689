"""Which Ray cluster the Ray backends run on, how the package reaches its nodes, and where the actors go.

Joining or starting. `start_ray(address)` joins the cluster at `address` (`ESConfig.ray_address`, the CLI's
`--ray-address`), else at `$RAY_ADDRESS` (what `ray job submit` and `ray start` users set), else starts a local
one. A cluster to join must answer at its address within `JOIN_TIMEOUT_S` (`probe_cluster`), else the run fails
in one line naming the address. A joined cluster keeps its own settings: Ray refuses `_system_config` from a
driver that connects to an existing cluster ("When connecting to an existing cluster, _system_config must not be
provided"), so only a local start passes `_LOCAL_SYSTEM_CONFIG`. A joined cluster's nodes may not have this
package installed, so the driver ships it with the job: `package_runtime_env()` names the `esreason_lib` folder as
a Ray `py_modules` entry (Ray zips it once, uploads it to the cluster and puts it on every worker's path); a
caller's own `runtime_env` replaces it. The package's dependencies (torch, transformers, ...) must already be on
the nodes.

Placement. `reserve_bundles` asks Ray for one placement-group bundle per actor (its CPUs and GPUs), plus, when the
driver's model is on a GPU, one bundle of the GPU share the driver's tensors take (`driver_gpu_share`), so that Ray
counts the driver when it packs actors on GPUs. Strategy PACK: the bundles go on as few nodes as fit. The
reservation is awaited at most `PLACEMENT_TIMEOUT_S` seconds and fails in one line naming the bundles and the
cluster's resources, instead of leaving actors pending and `ray.get` blocked forever. Ray gives the driver's bundle
a GPU share but cannot tie it to the GPU the driver process uses (the driver is no Ray task); Ray assigns the
first bundle's share first, in practice on the first GPU of the node, which is the driver's default device.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import ray
from ray.util.placement_group import placement_group, remove_placement_group

RAY_START_ATTEMPTS = 3
"""How many times `start_ray` tries `ray.init` (Ray waits a fixed 30 s per try for its raylet to register)."""

JOIN_TIMEOUT_S = 60.0
"""Seconds `start_ray` waits for a cluster to join to answer at its address before it fails naming it."""

PROBE_INTERVAL_S = 2.0
"""Seconds between two connection attempts of `probe_cluster` (and the bound on each)."""

_LOCAL_SYSTEM_CONFIG = {"worker_register_timeout_seconds": 300}
"""Ray settings for a local cluster on a loaded machine: actor workers get 5 minutes (not 60 s) to register."""

PLACEMENT_TIMEOUT_S = 600.0
"""Seconds `reserve_bundles` waits for the cluster to grant the bundles (a node that is still joining, or an
autoscaler adding one) before it fails."""

DRIVER_MEMORY_MARGIN = 1.1
"""The driver's GPU share is its reserved CUDA memory times this (the CUDA context and allocator slack)."""


def cluster_address(address: str | None = None) -> str | None:
    """The Ray cluster to join: `address` when given, else `$RAY_ADDRESS`, else None (start a local one).
    "local" also means a new local cluster (Ray's own spelling)."""
    chosen = address or os.environ.get("RAY_ADDRESS") or None
    return None if chosen == "local" else chosen


def _host_port(address: str) -> tuple[str, int]:
    """(host, port) of a Ray address "host:port", "ray://host:port" or "[v6 host]:port"; ValueError naming it
    otherwise."""
    rest = address.strip().removeprefix("ray://")
    host, _, port = rest.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"ray_address {address!r} is not a Ray address: give host:port (10.0.0.1:6379), "
                         "ray://host:port, 'auto' or 'local'")
    return host, int(port)


def probe_cluster(address: str, *, timeout_s: float = JOIN_TIMEOUT_S, connect=socket.create_connection,
                  clock=time.monotonic, sleep=time.sleep) -> None:
    """Return once something listens at the Ray `address` (a TCP connection to its host and port); until then
    retry every `PROBE_INTERVAL_S` seconds (a head that is still starting), and after `timeout_s` seconds raise
    ConnectionError in one line naming the address (`ray.init` itself would retry for about 15 minutes without a
    word). "auto" is left to Ray (it reads the address of the cluster started on this machine)."""
    if address.strip() == "auto":
        return
    host, port = _host_port(address)
    deadline = clock() + timeout_s
    while True:
        try:
            connect((host, port), timeout=min(PROBE_INTERVAL_S, timeout_s)).close()
            return
        except OSError as err:
            if clock() >= deadline:
                raise ConnectionError(f"no Ray cluster answers at {address!r} within {timeout_s:g} s "
                                      f"({type(err).__name__}: {err}); start one with `ray start --head` there, or "
                                      "check --ray-address / $RAY_ADDRESS") from None
            sleep(PROBE_INTERVAL_S)


def package_runtime_env() -> dict:
    """The Ray `runtime_env` that ships this package to every node of a joined cluster: `esreason_lib` as a
    `py_modules` folder (this file's grandparent: the package, found without importing it), without byte-code
    caches."""
    return {"py_modules": [str(Path(__file__).parents[2])], "excludes": ["__pycache__", "*.pyc"]}


def start_ray(address: str | None = None, **kwargs) -> None:
    """`ray.init` unless Ray is already initialised: join the cluster `cluster_address(address)` names (with
    `package_runtime_env()` unless `kwargs` has a `runtime_env`, and no `_system_config`), or start a local
    cluster with `_LOCAL_SYSTEM_CONFIG`. Tried up to `RAY_START_ATTEMPTS` times when the node times out during
    start-up (a loaded machine); TimeoutError (one line, naming the attempts and Ray's reason) when every attempt
    times out; ConnectionError (one line, naming the address) when nothing answers at a cluster to join within
    `JOIN_TIMEOUT_S` (`probe_cluster`); other errors of `ray.init` propagate."""
    if ray.is_initialized():
        return
    joined = cluster_address(address)
    if joined is None:
        kwargs = {"_system_config": _LOCAL_SYSTEM_CONFIG, **kwargs}
    else:
        probe_cluster(joined)
        kwargs = {"address": joined, "runtime_env": package_runtime_env(), **kwargs}
    for _ in range(RAY_START_ATTEMPTS):
        try:
            ray.init(**kwargs)
            return
        except Exception as err:  # noqa: BLE001 - Ray raises a bare Exception when its node times out at start-up
            if "timed out" not in str(err).lower() and not isinstance(err, TimeoutError):
                raise
            ray.shutdown()
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
    raise TimeoutError(f"Ray did not start after {RAY_START_ATTEMPTS} attempts ({reason}); the machine may be "
                       f"overloaded: retry, or use --backend batched / sequential")


def driver_gpu_share(model) -> float:
    """The share of its GPU's memory the driver process holds (CUDA memory reserved by torch on the model's
    device, times `DRIVER_MEMORY_MARGIN`); 0.0 for a model off CUDA."""
    import torch

    device = next(model.parameters()).device
    if device.type != "cuda":
        return 0.0
    total = torch.cuda.get_device_properties(device).total_memory
    return min(1.0, torch.cuda.memory_reserved(device) * DRIVER_MEMORY_MARGIN / total)


def actor_bundles(*, workers: int, cpus_per_worker: float, gpus_per_worker: float,
                  driver_share: float = 0.0) -> list[dict[str, float]]:
    """The placement-group bundles of `workers` actors: one {"CPU", "GPU"} bundle per actor (resources at 0 left
    out), after a {"GPU": driver_share} bundle for the driver when it holds GPU memory. ValueError for an actor
    that would ask for nothing (Ray rejects an empty bundle)."""
    one = {k: float(v) for k, v in (("CPU", cpus_per_worker), ("GPU", gpus_per_worker)) if v > 0}
    if not one:
        raise ValueError("RayBackend: an actor with cpus_per_worker=0 and no GPU asks Ray for nothing; set "
                         "cpus_per_worker > 0")
    return ([{"GPU": float(driver_share)}] if driver_share > 0 else []) + [dict(one) for _ in range(workers)]


def reserve_bundles(bundles: list[dict[str, float]], *, timeout_s: float = PLACEMENT_TIMEOUT_S):
    """A ready PACK placement group holding `bundles`; RuntimeError (one line, naming the bundles and the
    cluster's resources) when Ray has not granted it within `timeout_s` seconds (the group is removed)."""
    group = placement_group(bundles, strategy="PACK")
    try:
        ray.get(group.ready(), timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        remove_placement_group(group)
        raise RuntimeError(f"RayBackend: the Ray cluster did not grant {len(bundles)} bundles {bundles} within "
                           f"{timeout_s:g} s (cluster resources {ray.cluster_resources()}): add nodes or lower "
                           f"workers / cpus_per_worker / gpus_per_worker") from None
    return group
