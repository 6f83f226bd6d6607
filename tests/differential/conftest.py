"""A control plane of its own for the differential suite: every scheduler sees every node,
so no other test's nodes may exist while a scenario runs. kube-scheduler (profile
``diff-upstream``), ``berth shim`` hosting the plugin service in-process (``diff-berth``) and
``berth shim`` calling ``berth serve`` over gRPC (``diff-berth-grpc``) run for the whole
session with the same configuration but for the profile name.

``BERTH_DIFF_ONLY=upstream`` runs kube-scheduler alone with its real default profile
(harness.ALWAYS_OUT left out: nothing), so a scenario's ``expect`` is checked against upstream
before Berth has the plugins it needs. It is a tool for writing scenarios, not a pass."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import yaml

from berth.dev.localcluster import LocalCluster, start_kube_scheduler
from berth.dev.localcluster.binaries import default_bin_dir, require_binaries
from berth.dev.localcluster.cluster import ClusterConfig
from berth.kube.rest import KubeApi
from tests.differential.harness import (
    ALWAYS_OUT,
    BERTH,
    BERTH_GRPC,
    CONTROLLERS,
    UPSTREAM,
    config,
)
from tests.integration.shimtools import Server, Shim, running


@pytest.fixture(scope="session")
def diff_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    bin_dir = default_bin_dir()
    require_binaries(bin_dir)
    local = LocalCluster(
        ClusterConfig(
            state_dir=tmp_path_factory.mktemp("diff-cluster"),
            bin_dir=bin_dir,
            die_with_parent=True,
            controllers=CONTROLLERS,
        )
    )
    local.start()
    try:
        yield local
    finally:
        local.stop()


def upstream_only() -> bool:
    only = os.environ.get("BERTH_DIFF_ONLY", "")
    if only not in ("", "upstream"):
        raise pytest.UsageError(f"BERTH_DIFF_ONLY: must be empty or 'upstream', got {only!r}")
    return only == "upstream"


@pytest.fixture(scope="session")
def schedulers(
    diff_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[bool]:
    """Starts the schedulers; yields whether Berth runs too."""
    work = tmp_path_factory.mktemp("diff-schedulers")
    cluster = diff_cluster.cluster
    if upstream_only():
        with start_kube_scheduler(
            cluster,
            work / "kube-scheduler",
            config=config(UPSTREAM, ALWAYS_OUT),
            scheduler_name=UPSTREAM,
        ):
            yield False
        return
    kubeconfig = cluster.scheduler_kubeconfig or cluster.kubeconfig
    in_process = work / "berth.yaml"
    in_process.write_text(yaml.safe_dump(config(BERTH)))
    over_grpc = work / "berth-grpc.yaml"
    over_grpc.write_text(yaml.safe_dump(config(BERTH_GRPC)))
    server = Server(over_grpc, work / "serve.log")
    with (
        start_kube_scheduler(
            cluster, work / "kube-scheduler", config=config(UPSTREAM), scheduler_name=UPSTREAM
        ),
        running(server.start()),
    ):
        shims = [
            Shim(in_process, kubeconfig, work / "shim.log"),
            Shim(over_grpc, kubeconfig, work / "shim-grpc.log", server=server.address),
        ]
        with running(*shims):
            for shim in shims:
                shim.start()
            yield True


@pytest.fixture(scope="session")
def diff_kube(diff_cluster: LocalCluster) -> Iterator[KubeApi]:
    with diff_cluster.cluster.client() as client:
        yield client


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "differential" in str(item.path):
            item.add_marker(pytest.mark.integration)
