"""A shim whose profile runs GangScheduling on an API server that does not serve the
Workload API (the session's cluster: scheduling.k8s.io/v1alpha2 is off by default in
v1.36): it starts, says once that the PodGroups are not served, and schedules as
before, with no error and no retried watch of the absent kind.
(tests/integration/test_explain_workload.py runs the plugin where the API is served.)"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from berth.dev.localcluster import Cluster, objects
from berth.dev.localcluster.testing import NodeFactory
from berth.kube.errors import ApiError
from berth.kube.rest import KubeApi
from tests.integration.shimtools import (
    Shim,
    example_config_as,
    node_names,
    profile_for,
    running,
    wait_node_of,
)
from tests.integration.test_explain import pod

pytestmark = pytest.mark.integration


def test_without_the_workload_api_the_shim_starts_and_schedules_as_before(
    cluster: Cluster, kube: KubeApi, namespace: str, fake_nodes: NodeFactory, tmp_path: Path
) -> None:
    with pytest.raises(ApiError) as absent:
        kube.get("/apis/scheduling.k8s.io/v1alpha2")
    assert absent.value.status == 404
    nodes = node_names(fake_nodes(2))
    profile = profile_for(namespace)
    config = example_config_as(
        "gangscheduling", "gang-scheduler", profile, tmp_path / "scheduler-config.yaml"
    )
    shim = Shim(config, cluster.kubeconfig, tmp_path / "s.log")
    with running(shim.start()):
        objects.create_pods(kube, [pod(namespace, "plain", profile)])
        assert wait_node_of(kube, namespace, "plain", shim) in nodes
        time.sleep(2)
        log = shim.text()
    lines = [line for line in log.splitlines() if "podgroups" in line]
    served = [line for line in lines if "is not served by the API server" in line]
    assert len(served) == 1, lines
    assert served[0].startswith("I"), served  # klog's info level
    assert "--runtime-config=scheduling.k8s.io/v1alpha2=true" in served[0]
    # No warning or error about the kind, and no list or watch of it retried.
    assert [line for line in lines if line[:1] in ("W", "E")] == [], lines
    assert "not listed within" not in log
