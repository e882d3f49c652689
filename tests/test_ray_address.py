"""Ray addresses (issue 47, item 5): a cluster that does not answer fails within `JOIN_TIMEOUT_S` in one line
naming the address (the clock, the sleep and the connection are injected: the test does not depend on load);
--ray-address is used only with the Ray backends and is kept as a string."""

from __future__ import annotations

import pytest

pytest.importorskip("ray", reason="the Ray address tests need the `ray` extra (pip install 'esreason[ray]')")

from esreason_lib.es.backends import ray_cluster  # noqa: E402
from esreason_lib.es.backends.ray_cluster import JOIN_TIMEOUT_S, PROBE_INTERVAL_S, probe_cluster  # noqa: E402
from esreason_lib.es.config import ESConfig  # noqa: E402


class FakeClock:
    """A clock that moves only when the code under test sleeps."""

    def __init__(self):
        self.now, self.tries = 0.0, []

    def sleep(self, seconds):
        self.now += seconds

    def refuse(self, where, timeout):
        self.tries.append((where, timeout))
        raise ConnectionRefusedError(111, "Connection refused")


def test_a_cluster_that_does_not_answer_fails_within_the_bound_naming_the_address():
    clock = FakeClock()
    with pytest.raises(ConnectionError) as err:
        probe_cluster("garbage:1", connect=clock.refuse, clock=lambda: clock.now, sleep=clock.sleep)
    message = str(err.value)
    assert "\n" not in message and "no Ray cluster answers at 'garbage:1' within 60 s" in message
    assert clock.tries[0] == (("garbage", 1), PROBE_INTERVAL_S)
    assert len(clock.tries) == JOIN_TIMEOUT_S / PROBE_INTERVAL_S + 1 and clock.now == JOIN_TIMEOUT_S


def test_a_head_that_comes_up_is_joined():
    clock, answers = FakeClock(), iter([ConnectionRefusedError(111, "refused"), None])

    class Socket:
        def close(self):
            clock.tries.append("closed")

    def connect(where, timeout):
        if (failure := next(answers)) is not None:
            raise failure
        return Socket()

    probe_cluster("ray://10.0.0.1:10001", connect=connect, clock=lambda: clock.now, sleep=clock.sleep)
    assert clock.tries == ["closed"] and clock.now == PROBE_INTERVAL_S


@pytest.mark.parametrize("address", ["garbage", "host:port", "host:0", ":6379", "None"])
def test_an_address_that_is_no_address_is_one_line(address):
    with pytest.raises(ValueError, match=f"ray_address {address!r} is not a Ray address"):
        probe_cluster(address, connect=None)


def test_start_ray_probes_before_it_joins(monkeypatch):
    calls = []
    monkeypatch.setattr(ray_cluster.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray_cluster.ray, "init", lambda **kw: calls.append(("init", kw["address"])))
    monkeypatch.setattr(ray_cluster, "probe_cluster", lambda address: calls.append(("probe", address)))
    ray_cluster.start_ray("10.0.0.3:6379")
    assert calls == [("probe", "10.0.0.3:6379"), ("init", "10.0.0.3:6379")]
    probe_cluster("auto", connect=None)  # Ray finds the cluster of this machine itself


def test_ray_address_only_with_the_ray_backends(capsys):
    for backend in ("ray", "ray-vllm"):
        assert ESConfig(backend=backend, ray_address="10.0.0.1:6379").ray_address == "10.0.0.1:6379"
    with pytest.raises(ValueError, match="ESConfig.ray_address is only used by backend 'ray' or 'ray-vllm' "
                                         "\\(backend is 'batched'\\), got '10.0.0.1:6379'"):
        ESConfig(backend="batched", ray_address="10.0.0.1:6379")
    from esreason_lib.cli import main

    assert main(["train", "es", "--preset", "smoke", "--backend", "batched", "--ray-address", "x:1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ray_address is only used by backend 'ray' or 'ray-vllm'" in err


def test_the_cli_keeps_the_address_a_string():
    """`--ray-address None` is the string "None" (no address, refused in one line when Ray starts), never Python's
    None (a new local cluster): the train command's check builds the ES config's fields from the flags as given."""
    from esreason_lib import cli
    from esreason_lib.paper.cli import _check_train

    args = cli.build_parser().parse_args(["train", "es", "--preset", "smoke", "--backend", "ray", "--ray-address",
                                          "None"])
    _check_train(args)
    assert args.overrides["es"]["ray_address"] == "None" and args.overrides["es"]["backend"] == "ray"
