"""Integration fixtures: a real kube-apiserver + etcd for the whole session, a namespace per test.

The cluster is started from the binaries hack/build-k8s.sh builds (run it first; a missing
binary makes every test here fail with the command to run, never skip). Set BERTH_KUBECONFIG
to a kubeconfig to use an existing cluster instead; it must grant cluster-admin, since tests
create nodes.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from berth.dev.localcluster import Cluster, LocalCluster, objects
from berth.dev.localcluster.binaries import default_bin_dir, require_binaries
from berth.dev.localcluster.cluster import ClusterConfig, default_state_dir
from berth.dev.localcluster.testing import TEST_LABEL, NodeFactory
from berth.kube.rest import JSON, KubeApi

EXISTING_CLUSTER_ENV = "BERTH_KUBECONFIG"


@pytest.fixture(scope="session")
def k8s_bin_dir() -> Path:
    """The upstream binaries; fails (does not skip) with the build command if missing."""
    directory = default_bin_dir()
    require_binaries(directory)
    return directory


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    existing = os.environ.get(EXISTING_CLUSTER_ENV)
    if existing:
        yield Cluster.from_kubeconfig(Path(existing))
        return
    directory = default_bin_dir()
    require_binaries(directory)
    state_dir = tmp_path_factory.mktemp("berth-cluster")
    assert state_dir != default_state_dir()  # never touch a developer's `berth cluster up`
    # die_with_parent: a pytest killed by a CI timeout takes its cluster with it.
    local = LocalCluster(
        ClusterConfig(state_dir=state_dir, bin_dir=directory, die_with_parent=True)
    )
    local.start()
    try:
        yield local.cluster
    finally:
        local.stop()


@pytest.fixture(scope="session")
def kube(cluster: Cluster) -> Iterator[KubeApi]:
    with cluster.client() as client:
        yield client


def _namespace_name(nodeid: str) -> str:
    test = re.sub(r"[^a-z0-9]+", "-", nodeid.rsplit("::", 1)[-1].lower()).strip("-")
    return f"t-{test[:40].strip('-')}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def namespace(kube: KubeApi, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace named after the test; its pods and itself are deleted afterwards."""
    name = _namespace_name(request.node.nodeid)
    objects.create_namespace(kube, name, labels={TEST_LABEL: "true"})
    try:
        yield name
    finally:
        objects.delete_namespace(kube, name)


@pytest.fixture
def fake_nodes(kube: KubeApi, namespace: str) -> Iterator[NodeFactory]:
    """``fake_nodes(count, prefix=..., **node_kwargs)`` creates nodes labelled for this test
    (``berth.dev/test=<namespace>``) and deletes them afterwards. Nodes are cluster-wide: a
    test's pods should select its own nodes with that label."""
    created: list[str] = []

    def make(count: int, prefix: str = "node", **kwargs: Any) -> list[JSON]:
        labels = {TEST_LABEL: namespace, **kwargs.pop("labels", {})}
        specs = [
            objects.node(f"{namespace}-{prefix}-{i}", labels=labels, **kwargs) for i in range(count)
        ]
        result = objects.create_nodes(kube, specs)
        created.extend(n["metadata"]["name"] for n in result)
        return result

    yield make
    objects.delete_nodes(kube, created)
