"""The seed plugins that need data beyond nodes and pods, through ``berth shim`` on a
real kube-apiserver, following the seeds' verification steps with the configurations
of deploy/examples/ (profile renamed per test, so tests do not collide):

* LowCpuScheduler (custom-plugins-lowcpu.md, section 7): a pod with the profile's
  schedulerName avoids a node whose NodeMetrics report 90% CPU and lands on the other
  one; when every node is hot it stays pending and ``kubectl describe pod`` shows
  ``FailedScheduling`` with ``cpu usage too high``; with ``missingMetrics: Reject`` a
  node without metrics is refused until metrics appear, polled by the shim.
  NodeMetrics come from a real API on the local API server: a CustomResourceDefinition
  of group metrics.k8s.io, version v1beta1, resource ``nodes``, kind NodeMetrics,
  cluster-scoped, standing in for metrics-server (which serves the same objects
  through an aggregated API). The plugin is not mocked: the shim polls the API, ships
  the objects, the plugin reads them from its snapshot.
* GPUCardFit (score-plugin-spread-and-gpu-card.txt): two pods needing 40G on a node
  with one free 40G card and one 30G card: one binds with the chosen card annotation
  written on it, the other stays pending with ``no free GPU card`` in its
  FailedScheduling event, and binds once the first one is deleted.

Upstream's default plugins are merged into each profile, as kube-scheduler does; the
clusters are laid out so that only the seed plugin explains where a pod goes. Pods
select this test's nodes (``berth.dev/test=<namespace>``): nodes are cluster-wide.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from berth.dev.localcluster import Cluster, objects
from berth.dev.localcluster.testing import TEST_LABEL, NodeFactory
from berth.dev.nodemetrics import METRICS_PATH, node_metrics_crd, node_metrics_object
from berth.kube.errors import ApiError
from berth.kube.rest import JSON, KubeApi
from tests.integration.shimtools import (
    EXAMPLES,
    Server,
    Shim,
    described_failed_scheduling,
    ensure_crd_objects,
    example_config_as,
    node_names,
    pod_path,
    pods_of,
    profile_for,
    running,
    wait_for,
    wait_node_of,
    wait_unschedulable,
)

pytestmark = pytest.mark.integration

CARDS = "berth.dev/gpu-cards"
GPU_MEMORY = "berth.dev/gpu-memory"
GPU_CARD = "berth.dev/gpu-card"


# -- helpers ---------------------------------------------------------------------------


def wait_failed_scheduling(
    cluster: Cluster, bin_dir: Path, namespace: str, pod: str, shim: Shim, want: str
) -> list[str]:
    """Waits for a FailedScheduling event of ``pod`` that contains ``want``."""
    lines: list[str] = []

    def seen() -> bool:
        nonlocal lines
        lines = described_failed_scheduling(cluster, bin_dir, namespace, pod)
        return any(want in line for line in lines)

    wait_for(seen, 60, f"FailedScheduling with {want!r} for {pod}", shim.log)
    return lines


def seed_pod(
    namespace: str,
    name: str,
    profile: str,
    *,
    group: str,
    annotations: dict[str, str] | None = None,
    cpu: str = "100m",
) -> JSON:
    """A pod of the test's profile on the test's nodes of ``group``."""
    pod = objects.pod(
        name,
        namespace=namespace,
        cpu=cpu,
        scheduler_name=profile,
        node_selector={TEST_LABEL: namespace, "group": group},
    )
    if annotations:
        pod["metadata"]["annotations"] = dict(annotations)
    return pod


# -- NodeMetrics served by a CRD-backed API ---------------------------------------------


@pytest.fixture(scope="module")
def node_metrics_api(kube: KubeApi) -> str:
    """metrics.k8s.io/v1beta1 ``nodes`` (kind NodeMetrics, cluster-scoped) served by the
    local API server from the CRD ``berth demo`` uses: the shape metrics-server serves,
    without a kubelet to measure. Left in place for later tests (creating it is
    idempotent)."""
    ensure_crd_objects(kube, [node_metrics_crd()])
    return METRICS_PATH


class NodeMetricsWriter:
    """Creates and updates the NodeMetrics of the test's nodes, as metrics-server would
    report them (fresh timestamp, a window, usage.cpu in nanocores); deletes them at
    the end."""

    def __init__(self, kube: KubeApi) -> None:
        self.kube = kube
        self.names: set[str] = set()

    def report(self, node: str, cpu: str, memory: str = "1Gi") -> None:
        body = node_metrics_object(
            node, cpu=cpu, memory=memory, at=datetime.now(UTC), window="20.035s"
        )
        if node in self.names:
            current = self.kube.get(f"{METRICS_PATH}/{node}")
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            self.kube.request("PUT", f"{METRICS_PATH}/{node}", body=body)
        else:
            self.kube.create(METRICS_PATH, body)
            self.names.add(node)

    def delete_all(self) -> None:
        for name in sorted(self.names):
            try:
                self.kube.delete(f"{METRICS_PATH}/{name}")
            except ApiError as exc:
                if exc.status != 404:
                    raise


@pytest.fixture
def node_metrics(kube: KubeApi, node_metrics_api: str) -> Iterator[NodeMetricsWriter]:
    writer = NodeMetricsWriter(kube)
    try:
        yield writer
    finally:
        writer.delete_all()


def nanocores(fraction: float, cores: int) -> str:
    """Usage as metrics-server reports it: ``<n>n``."""
    return f"{round(fraction * cores * 1e9)}n"


# -- LowCpuScheduler ----------------------------------------------------------------------


def test_lowcpu_seed_steps_avoid_the_90_percent_node_and_report_cpu_usage_too_high(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    node_metrics: NodeMetricsWriter,
    tmp_path: Path,
    k8s_bin_dir: Path,
) -> None:
    profile = profile_for(namespace)
    # Group "mixed": hot is roomy and empty (the default scores prefer it), its
    # NodeMetrics say 90% CPU; cool is small and has requests on it, but 20% busy.
    hot = node_names(
        fake_nodes(1, prefix="hot", cpu="16", memory="64Gi", labels={"group": "mixed"})
    )[0]
    cool = node_names(
        fake_nodes(1, prefix="cool", cpu="4", memory="8Gi", labels={"group": "mixed"})
    )[0]
    objects.create_pods(
        kube, [objects.pod("requests", namespace=namespace, cpu="2", memory="4Gi", node_name=cool)]
    )
    node_metrics.report(hot, nanocores(0.9, 16))
    node_metrics.report(cool, nanocores(0.2, 4))
    # Group "hot": every node above 80%.
    burning = node_names(
        fake_nodes(2, prefix="burning", cpu="4", memory="8Gi", labels={"group": "hot"})
    )
    node_metrics.report(burning[0], "3600m")
    node_metrics.report(burning[1], "3500m")

    config = example_config_as("lowcpu", "lowcpu-scheduler", profile, tmp_path / "config.yaml")
    shim = Shim(config, cluster.kubeconfig, tmp_path / "shim.log")
    with running(shim.start()):
        # The seed's 7.2: a pod with spec.schedulerName naming the scheduler.
        objects.create_pods(kube, [seed_pod(namespace, "my-workload", profile, group="mixed")])
        assert wait_node_of(kube, namespace, "my-workload", shim) == cool

        objects.create_pods(kube, [seed_pod(namespace, "too-hot", profile, group="hot")])
        cond = wait_unschedulable(kube, namespace, "too-hot", shim)
        assert "2 cpu usage too high" in cond["message"], cond
        lines = wait_failed_scheduling(
            cluster, k8s_bin_dir, namespace, "too-hot", shim, "cpu usage too high"
        )
        assert lines[0].split()[:2] == ["Warning", "FailedScheduling"], lines
        assert "2 cpu usage too high" in lines[0], lines
    assert "Traceback" not in shim.text()


def test_lowcpu_rejecting_unmeasured_nodes_until_metrics_appear_over_grpc(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    node_metrics: NodeMetricsWriter,
    tmp_path: Path,
    k8s_bin_dir: Path,
) -> None:
    profile = profile_for(namespace)
    doc = yaml.safe_load((EXAMPLES / "lowcpu" / "scheduler-config.yaml").read_text())
    doc["profiles"][0]["schedulerName"] = profile
    doc["profiles"][0]["pluginConfig"] = [
        {
            "name": "LowCpuScheduler",
            "args": {"metricsPollSeconds": 1, "missingMetrics": "Reject"},
        }
    ]
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(doc))
    busy, unmeasured = node_names(fake_nodes(2, cpu="4", memory="8Gi", labels={"group": "g"}))
    node_metrics.report(busy, nanocores(0.95, 4))

    server = Server(config, tmp_path / "server.log")
    with running(server.start()):
        shim = Shim(config, cluster.kubeconfig, tmp_path / "shim.log", server=server.address)
        with running(shim.start()):
            objects.create_pods(kube, [seed_pod(namespace, "waits", profile, group="g")])
            cond = wait_unschedulable(kube, namespace, "waits", shim)
            assert "1 cpu usage too high" in cond["message"], cond
            assert "1 node metrics missing" in cond["message"], cond
            wait_failed_scheduling(
                cluster, k8s_bin_dir, namespace, "waits", shim, "1 node metrics missing"
            )
            # metrics-server reports the new node: the next poll ships it and the
            # pending pod is tried again (the shim moves it on the NodeMetrics change).
            node_metrics.report(unmeasured, nanocores(0.1, 4))
            assert wait_node_of(kube, namespace, "waits", shim, timeout=60) == unmeasured
    assert "Traceback" not in server.text() + shim.text()


# -- GPUCardFit ------------------------------------------------------------------------------


def test_gpu_card_two_40g_pods_one_free_40g_card_one_binds_one_waits(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    tmp_path: Path,
    k8s_bin_dir: Path,
) -> None:
    profile = profile_for(namespace)
    # One node with a free 40G card and a 30G card: 70G in total, but no two 40G.
    gpu = node_names(
        fake_nodes(1, prefix="gpu", cpu="32", memory="128Gi", labels={"group": "gpu"})
    )[0]
    kube.merge_patch(
        f"/api/v1/nodes/{gpu}", {"metadata": {"annotations": {CARDS: json.dumps(["40G", "30G"])}}}
    )
    config = example_config_as("gpucard", "my-scheduler", profile, tmp_path / "config.yaml")
    server = Server(config, tmp_path / "server.log")
    with running(server.start()):
        shim = Shim(config, cluster.kubeconfig, tmp_path / "shim.log", server=server.address)
        with running(shim.start()):
            # Both at once: they are in flight together.
            objects.create_pods(
                kube,
                [
                    seed_pod(
                        namespace,
                        f"train-{i}",
                        profile,
                        group="gpu",
                        annotations={GPU_MEMORY: "40G"},
                    )
                    for i in range(2)
                ],
            )

            def one_bound() -> bool:
                bound = [p for p in pods_of(kube, namespace) if p["spec"].get("nodeName") == gpu]
                return len(bound) == 1

            wait_for(one_bound, 60, "one of the two pods bound", shim.log)
            pods = {p["metadata"]["name"]: p for p in pods_of(kube, namespace)}
            (winner,) = [n for n, p in pods.items() if p["spec"].get("nodeName")]
            (loser,) = [n for n in pods if n != winner]
            # The card PreBind wrote, for the device plugin: the 40G one, card 0.
            assert pods[winner]["metadata"]["annotations"][GPU_CARD] == "0"

            cond = wait_unschedulable(kube, namespace, loser, shim)
            assert "1 no free GPU card" in cond["message"], cond
            lines = wait_failed_scheduling(
                cluster, k8s_bin_dir, namespace, loser, shim, "no free GPU card"
            )
            assert lines[0].split()[:2] == ["Warning", "FailedScheduling"], lines
            assert GPU_CARD not in kube.get(pod_path(namespace, loser))["metadata"].get(
                "annotations", {}
            )

            # The card frees up (the pod holding it is deleted): the waiting pod is
            # tried again and gets it.
            kube.delete(pod_path(namespace, winner), gracePeriodSeconds=0)
            assert wait_node_of(kube, namespace, loser, shim) == gpu
            assert kube.get(pod_path(namespace, loser))["metadata"]["annotations"][GPU_CARD] == "0"
    assert "Traceback" not in server.text() + shim.text()
