"""Failure paths of the local control plane: each gives a clear message and leaves nothing
running (no process mentions the test's state dir afterwards, no etcd data, no state file).

These start their own short-lived clusters in temporary state dirs, next to the session one.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from berth.dev.localcluster import (
    BinaryMissingError,
    ClusterConfig,
    ClusterStatus,
    NotReadyError,
    PortInUseError,
    ProcessExitedError,
    cluster_status,
    controllers,
    start_cluster,
    stop_cluster,
)
from berth.dev.localcluster.testing import processes_mentioning

pytestmark = pytest.mark.integration


@pytest.fixture
def held_port() -> Iterator[int]:
    """A loopback port another process (this test) is listening on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()[1]


@pytest.fixture
def config(tmp_path: Path, k8s_bin_dir: Path) -> ClusterConfig:
    """A cluster config confined to this test's temp dir (state, and etcd data)."""
    return ClusterConfig(
        state_dir=tmp_path / "state",
        bin_dir=k8s_bin_dir,
        data_root=tmp_path / "shm",
        die_with_parent=True,
    )


def assert_nothing_left(config: ClusterConfig) -> None:
    assert processes_mentioning(str(config.state_dir)) == []
    assert not (config.state_dir / "state.json").exists()
    leftovers = list(config.data_root.iterdir()) if config.data_root.exists() else []
    assert leftovers == []


def test_explicit_port_taken_is_refused_before_anything_starts(
    config: ClusterConfig, held_port: int
) -> None:
    with pytest.raises(PortInUseError) as info:
        start_cluster(dataclasses.replace(config, apiserver_port=held_port))
    assert f"port 127.0.0.1:{held_port} asked for as the kube-apiserver secure port" in str(
        info.value
    )
    assert "already in use" in str(info.value)
    assert_nothing_left(config)


def test_taken_default_ports_are_replaced_by_free_ones(
    config: ClusterConfig, held_port: int
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other:
        other.bind(("127.0.0.1", 0))
        other.listen(8)
        held_etcd = other.getsockname()[1]
        state = start_cluster(
            dataclasses.replace(
                config, default_apiserver_port=held_port, default_etcd_client_port=held_etcd
            )
        )
        try:
            assert state.apiserver_port != held_port
            assert state.etcd_client_port != held_etcd
            with state.cluster.client() as client:
                assert client.get("/version")["gitVersion"] == state.kubernetes_version
        finally:
            stop_cluster(config.state_dir)
    assert_nothing_left(config)


@pytest.mark.parametrize("present", [(), ("etcd", "kubectl")], ids=["none", "some"])
def test_missing_binary_names_it_and_the_build_command(
    tmp_path: Path, k8s_bin_dir: Path, present: tuple[str, ...]
) -> None:
    partial = tmp_path / "bin"
    partial.mkdir()
    for name in present:
        os.symlink(k8s_bin_dir / name, partial / name)
    config = ClusterConfig(
        state_dir=tmp_path / "state", bin_dir=partial, data_root=tmp_path / "shm"
    )

    with pytest.raises(BinaryMissingError) as info:
        start_cluster(config)

    message = str(info.value)
    assert f"missing upstream binaries in {partial}: " in message
    assert "kube-apiserver" in message
    assert all(f"{name}," not in message for name in present)
    assert "hack/build-k8s.sh" in message
    assert_nothing_left(config)


def test_apiserver_not_ready_in_time_is_stopped_with_its_log(config: ClusterConfig) -> None:
    # etcd gets the normal timeout; kube-apiserver cannot pass /readyz within 0.5s.
    slow = dataclasses.replace(config, apiserver_ready_timeout=0.5)

    with pytest.raises(NotReadyError) as info:
        start_cluster(slow)

    message = str(info.value)
    assert "kube-apiserver was not ready at https://127.0.0.1:" in message
    assert "/readyz within 0.5s" in message
    assert str(config.state_dir / "logs" / "kube-apiserver.log") in message
    assert "raise the timeout" in message
    assert_nothing_left(config)


def test_component_that_exits_at_start_is_reported_with_its_error(config: ClusterConfig) -> None:
    broken = dataclasses.replace(config, apiserver_args=("--no-such-flag",))

    with pytest.raises(ProcessExitedError) as info:
        start_cluster(broken)

    message = str(info.value)
    assert message.startswith("kube-apiserver exited with code 1 while starting")
    assert "unknown flag: --no-such-flag" in message
    assert_nothing_left(config)


def test_a_controller_kube_controller_manager_does_not_start_is_named_with_its_log(
    config: ClusterConfig,
) -> None:
    # Known, but off with v1.36's default feature gates (GenericWorkload is alpha): the
    # process runs, the controller does not.
    gated = dataclasses.replace(
        config, controllers=("replicaset-controller", "podgroup-protection-controller")
    )

    with pytest.raises(NotReadyError) as info:
        start_cluster(gated)

    message = str(info.value)
    assert message.startswith(
        "kube-controller-manager did not start podgroup-protection-controller (stopped now)"
    )
    assert str(config.state_dir / "logs" / "kube-controller-manager.log") in message
    assert_nothing_left(config)


def test_an_unknown_controller_is_refused_by_kube_controller_manager_with_its_log(
    config: ClusterConfig,
) -> None:
    with pytest.raises(ProcessExitedError) as info:
        start_cluster(dataclasses.replace(config, controllers=("no-such-controller",)))

    message = str(info.value)
    assert message.startswith("kube-controller-manager exited with code 1 while starting")
    assert '\\"no-such-controller\\" is not in the list of known controllers' in message
    assert str(config.state_dir / "logs" / "kube-controller-manager.log") in message
    assert_nothing_left(config)


def test_kube_controller_manager_that_exits_at_start_is_reported_with_its_error(
    config: ClusterConfig,
) -> None:
    broken = dataclasses.replace(config, controller_manager_args=("--no-such-flag",))

    with pytest.raises(ProcessExitedError) as info:
        start_cluster(broken)

    message = str(info.value)
    assert message.startswith("kube-controller-manager exited with code 1 while starting")
    assert str(config.state_dir / "logs" / "kube-controller-manager.log") in message
    assert "unknown flag: --no-such-flag" in message
    assert_nothing_left(config)


def test_the_cluster_runs_kube_controller_manager_and_stops_it(config: ClusterConfig) -> None:
    state = start_cluster(config)
    try:
        assert [p.name for p in state.processes] == [
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
        ]
        assert state.controllers == config.controllers
        assert state.controller_manager_port is not None
        report = controllers.healthz(controllers.healthz_url(state.controller_manager_port))
        assert report is not None
        assert set(config.controllers) <= controllers.started(report)
    finally:
        lines = stop_cluster(config.state_dir)
    assert any(line.startswith("stopped kube-controller-manager") for line in lines), lines
    assert_nothing_left(config)


def test_no_controllers_runs_no_kube_controller_manager(config: ClusterConfig) -> None:
    state = start_cluster(dataclasses.replace(config, controllers=()))
    try:
        assert [p.name for p in state.processes] == ["etcd", "kube-apiserver"]
        assert state.controller_manager_port is None
    finally:
        stop_cluster(config.state_dir)
    assert_nothing_left(config)


def test_a_dead_kube_controller_manager_makes_the_cluster_unhealthy(config: ClusterConfig) -> None:
    state = start_cluster(config)
    try:
        first = cluster_status(config.state_dir)
        assert first is not None and first.healthy and first.controllers_healthy
        kcm = next(p for p in state.processes if p.name == "kube-controller-manager")
        os.kill(kcm.pid, signal.SIGKILL)
        status: ClusterStatus | None = first
        for _ in range(100):
            status = cluster_status(config.state_dir)
            assert status is not None
            # The port closes while the kernel is still tearing the process down (files are
            # released before it becomes a zombie), so wait for both to be seen.
            if status.controllers_healthy is False and not status.components[2].running:
                break
            time.sleep(0.1)
        assert status is not None and status.controllers_healthy is False
        assert not status.healthy
        assert [c.running for c in status.components] == [True, True, False]
    finally:
        stop_cluster(config.state_dir)
    assert_nothing_left(config)
