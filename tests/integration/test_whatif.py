"""``berth what-if --kubeconfig`` against the live scheduler, on a real kube-apiserver.

One cluster state holds every kind the profile's plugins read: NodeMetrics
(LowCpuScheduler, through the metrics.k8s.io CRD the demo uses), a PodGroup
(Coscheduling), a StorageClass, PV, PVC and CSINode (VolumeBinding and the volume
plugins), a DeviceClass, ResourceSlice and ResourceClaim (DynamicResources), the
namespace's labels (InterPodAffinity's namespaceSelector), a PodDisruptionBudget
(DefaultPreemption), and a pod already bound. ``berth what-if`` takes its snapshot from
the API server and predicts where a list of pods goes; then ``berth shim`` (plugins
in-process, the same configuration) schedules the same pods, created in the same order,
and the test compares: the same node for every placed pod, the same pods pending, with
the same FailedScheduling text in their PodScheduled condition.

Then two configurations side by side: the second raises one Score plugin's weight
(ImageLocality), and the report shows the pod that moves to the node holding its image.

Pods select this test's nodes (``berth.dev/test=<namespace>``); nodes are cluster-wide,
and "0/N nodes" counts every node of the cluster alike in both answers.
"""

from __future__ import annotations

import contextlib
import functools
import json
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from berth.dev.localcluster import Cluster, objects
from berth.dev.localcluster.testing import TEST_LABEL, NodeFactory
from berth.dev.nodemetrics import METRICS_PATH, node_metrics_crd, node_metrics_object
from berth.kube.errors import ApiError
from berth.kube.rest import JSON, KubeApi
from tests.integration.shimtools import (
    BERTH,
    EXAMPLES,
    Shim,
    ensure_crd_objects,
    ensure_crds,
    pod_scheduled_condition,
    pods_of,
    profile_for,
    running,
    wait_for,
)

pytestmark = pytest.mark.integration

GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
NS_LABEL = "berth.dev/what-if"
RESOURCE = "/apis/resource.k8s.io/v1"
STORAGE = "/apis/storage.k8s.io/v1"
DRIVER = "gpu.what-if.berth.dev"
IMAGE = "registry.example/what-if/app:1"


def config_text(profile: str, image_weight: int = 1) -> str:
    """Defaults plus LowCpuScheduler and Coscheduling (whose QueueSort replaces
    PrioritySort), ImageLocality at ``image_weight``."""
    return f"""\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
  - schedulerName: {profile}
    plugins:
      multiPoint:
        enabled:
          - name: LowCpuScheduler
          - name: Coscheduling
      queueSort:
        enabled:
          - name: Coscheduling
        disabled:
          - name: "*"
      score:
        enabled:
          - name: ImageLocality
            weight: {image_weight}
    pluginConfig:
      - name: Coscheduling
        args:
          permitWaitingTimeSeconds: 30
"""


class Cleanup:
    """Cluster-scoped objects the test made, deleted at the end."""

    def __init__(self, kube: KubeApi) -> None:
        self.kube = kube
        self.paths: list[str] = []

    def create(self, path: str, body: JSON) -> JSON:
        made = self.kube.create(path, body)
        self.paths.append(f"{path}/{made['metadata']['name']}")
        return made

    def delete_all(self) -> None:
        for path in reversed(self.paths):
            with contextlib.suppress(ApiError):
                self.kube.delete(path)


@pytest.fixture
def cleanup(kube: KubeApi) -> Iterator[Cleanup]:
    c = Cleanup(kube)
    try:
        yield c
    finally:
        c.delete_all()


def node_selector_term(node: str) -> JSON:
    return {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
                ]
            }
        ]
    }


def build_cluster(
    kube: KubeApi, namespace: str, fake_nodes: NodeFactory, cleanup: Cleanup
) -> dict[str, str]:
    """Every kind, on three nodes of different sizes (no ties between their scores):
    ``cool`` (16 cpu, 10% busy, a GPU), ``hot`` (8 cpu, 90% busy: LowCpuScheduler turns
    it away), ``disk`` (6 cpu, 30% busy, the PV, the app's image)."""
    ensure_crds(kube, EXAMPLES / "coscheduling" / "podgroup-crd.yaml")
    ensure_crd_objects(kube, [node_metrics_crd()])
    names = {}
    for role, cpu in (("cool", "16"), ("hot", "8"), ("disk", "6")):
        (made,) = fake_nodes(1, prefix=role, cpu=cpu, memory="16Gi")
        names[role] = made["metadata"]["name"]
    # The app's image on "disk" (ImageLocality): node status is the kubelet's to write.
    disk = kube.get(f"/api/v1/nodes/{names['disk']}")
    disk["status"]["images"] = [{"names": [IMAGE], "sizeBytes": 300 * 2**20}]
    kube.request("PUT", f"/api/v1/nodes/{names['disk']}/status", body=disk)
    now = datetime.now(UTC)
    for role, busy in (("cool", "1600m"), ("hot", "7200m"), ("disk", "1800m")):
        body = node_metrics_object(names[role], cpu=busy, memory="2Gi", at=now, window="20s")
        cleanup.create(METRICS_PATH, body)
    kube.merge_patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {NS_LABEL: "db"}}})
    # Storage: a local PV on "disk", a WaitForFirstConsumer class, a claim; a CSINode.
    sc = f"local-{namespace}"
    cleanup.create(
        f"{STORAGE}/storageclasses",
        {
            "metadata": {"name": sc},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "WaitForFirstConsumer",
        },
    )
    cleanup.create(
        "/api/v1/persistentvolumes",
        {
            "metadata": {"name": f"pv-{namespace}"},
            "spec": {
                "capacity": {"storage": "10Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": sc,
                "local": {"path": "/mnt/data"},
                "nodeAffinity": {"required": node_selector_term(names["disk"])},
            },
        },
    )
    kube.create(
        f"/api/v1/namespaces/{namespace}/persistentvolumeclaims",
        {
            "metadata": {"name": "data"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": sc,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    cleanup.create(
        f"{STORAGE}/csinodes", {"metadata": {"name": names["disk"]}, "spec": {"drivers": []}}
    )
    # DRA: one device on "cool".
    device_class = f"gpu-{namespace}"
    cleanup.create(
        f"{RESOURCE}/deviceclasses",
        {
            "metadata": {"name": device_class},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        },
    )
    cleanup.create(
        f"{RESOURCE}/resourceslices",
        {
            "metadata": {"name": f"{names['cool']}-gpu"},
            "spec": {
                "driver": DRIVER,
                "nodeName": names["cool"],
                "pool": {"name": names["cool"], "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "gpu-0"}],
            },
        },
    )
    kube.create(
        f"{RESOURCE}/namespaces/{namespace}/resourceclaims",
        {
            "metadata": {"name": "gpu"},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "gpu", "exactly": {"deviceClassName": device_class, "count": 1}}
                    ]
                }
            },
        },
    )
    # A gang of two, and a group that can never be complete.
    for group, size in (("gang", 2), ("short", 3)):
        kube.create(
            f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{namespace}/podgroups",
            {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": group},
                "spec": {"minMember": size},
            },
        )
    kube.create(
        f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets",
        {
            "metadata": {"name": "web"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        },
    )
    objects.create_pods(
        kube,
        [objects.pod("existing", namespace=namespace, cpu="1", node_name=names["cool"])],
    )
    return names


def pods_to_place(namespace: str, profile: str) -> list[JSON]:
    def mk(name: str, cpu: str = "200m", labels: dict[str, str] | None = None) -> JSON:
        return objects.pod(
            name,
            namespace=namespace,
            cpu=cpu,
            scheduler_name=profile,
            labels=labels,
            node_selector={TEST_LABEL: namespace},
        )

    db = mk("db", labels={"app": "db"})
    db["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    web = mk("web", labels={"app": "web"})
    web["spec"]["affinity"] = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"app": "db"}},
                    "namespaceSelector": {"matchLabels": {NS_LABEL: "db"}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }
    gpu = mk("gpu")
    gpu["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "gpu"}]
    app = mk("app", cpu="500m")
    app["spec"]["containers"][0]["image"] = IMAGE
    return [
        db,
        web,
        gpu,
        mk("gang-0", labels={GROUP_LABEL: "gang"}),
        mk("gang-1", labels={GROUP_LABEL: "gang"}),
        app,
        mk("huge", cpu="64"),
        mk("short-0", labels={GROUP_LABEL: "short"}),
    ]


def what_if(cluster: Cluster, pods: Path, *configs: Path) -> dict[str, Any]:
    argv = [*BERTH, "what-if", "--kubeconfig", str(cluster.kubeconfig), "--pods", str(pods)]
    for c in configs:
        argv += ["--config", str(c)]
    out = subprocess.run([*argv, "-o", "json"], capture_output=True, text=True, timeout=120)
    assert out.returncode in (0, 1), out.stderr
    doc: dict[str, Any] = json.loads(out.stdout)
    doc["stderr"] = out.stderr
    return doc


def decided(kube: KubeApi, namespace: str, name: str) -> bool:
    return name in live_outcome(kube, namespace, [name])


def live_outcome(kube: KubeApi, namespace: str, names: list[str]) -> dict[str, tuple[str, str]]:
    """Each pod's node, or "" and its PodScheduled=False message; None while undecided."""
    out = {}
    by_name = {p["metadata"]["name"]: p for p in pods_of(kube, namespace)}
    for name in names:
        p = by_name.get(name)
        if p is None:
            continue
        node = p["spec"].get("nodeName") or ""
        cond = pod_scheduled_condition(p) or {}
        if node:
            out[name] = (node, "")
        elif cond.get("status") == "False" and cond.get("reason") == "Unschedulable":
            out[name] = ("", str(cond.get("message", "")))
    return out


@pytest.mark.timeout(300)
def test_what_if_from_the_api_server_gives_the_live_schedulers_answers(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    cleanup: Cleanup,
    tmp_path: Path,
) -> None:
    profile = profile_for(namespace)
    names = build_cluster(kube, namespace, fake_nodes, cleanup)
    config = tmp_path / "config.yaml"
    config.write_text(config_text(profile))
    pods = pods_to_place(namespace, profile)
    pods_file = tmp_path / "pods.yaml"
    pods_file.write_text(yaml.safe_dump_all(pods))
    order = [p["metadata"]["name"] for p in pods]

    predicted = what_if(cluster, pods_file, config)
    (run,) = predicted["configs"]
    want = {
        p["pod"].split("/", 1)[1]: (p["node"] or "", "" if p["node"] else p["reason"])
        for p in run["pods"]
    }
    # The kinds reached their plugins: the PV's node, the GPU's node, the db's node for
    # web, the hot node avoided, the short group refused, the huge pod pending.
    assert want["db"][0] == names["disk"], want
    assert want["web"][0] == names["disk"], want
    assert want["gpu"][0] == names["cool"], want
    assert want["gang-0"][0] and want["gang-1"][0], want
    assert names["hot"] not in {node for node, _ in want.values()}, want
    assert "cannot find enough sibling pods" in want["short-0"][1], want
    assert want["huge"][0] == "" and "Insufficient cpu" in want["huge"][1], want
    assert "dropped" not in predicted["stderr"], predicted["stderr"]

    # berth place takes the same snapshot for one pod: db needs the PV's node.
    (tmp_path / "db.yaml").write_text(yaml.safe_dump(pods[0]))
    place = subprocess.run(
        [
            *BERTH,
            "place",
            "--kubeconfig",
            str(cluster.kubeconfig),
            "--pod",
            str(tmp_path / "db.yaml"),
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert place.returncode == 0, place.stderr
    assert f"Placement: {names['disk']}\n" in place.stdout, place.stdout
    # LowCpuScheduler read disk's NodeMetrics (30% busy scores 70; none would be 50).
    head, row = (
        line.split()
        for line in place.stdout.split("Scores (normalised x weight):")[1].splitlines()
        if line.lstrip().startswith(("NODE ", f"{names['disk']} "))
    )
    assert dict(zip(head, row, strict=False))["LowCpuScheduler"] == "70", place.stdout

    shim = Shim(config, cluster.kubeconfig, tmp_path / "shim.log")
    with running(shim.start()):
        for pod in pods:
            objects.create_pods(kube, [pod])
            name = pod["metadata"]["name"]
            # One at a time, as what-if tries them: each decided before the next.
            wait_for(
                functools.partial(decided, kube, namespace, name),
                60,
                f"{name} bound or unschedulable",
                shim.log,
            )
        # Then until nothing changes (the gang's first member binds once its sibling
        # exists; pending pods are retried on events).
        got: dict[str, tuple[str, str]] = {}
        stable_since = time.monotonic()
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            now = live_outcome(kube, namespace, order)
            if now != got:
                got, stable_since = now, time.monotonic()
            elif len(got) == len(order) and time.monotonic() - stable_since > 5:
                break
            time.sleep(0.5)
    assert got == want, (got, want, shim.text()[-4000:])


@pytest.mark.timeout(300)
def test_two_configurations_side_by_side_show_the_pod_a_weight_moves(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    cleanup: Cleanup,
    tmp_path: Path,
) -> None:
    profile = profile_for(namespace)
    names = build_cluster(kube, namespace, fake_nodes, cleanup)
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(config_text(profile))
    b.write_text(config_text(profile, image_weight=100))
    pods_file = tmp_path / "pods.yaml"
    pods_file.write_text(yaml.safe_dump_all(pods_to_place(namespace, profile)))
    doc = what_if(cluster, pods_file, a, b)
    first, second = doc["configs"]
    assert (first["name"], second["name"]) == ("A", "B")
    app_a = next(p for p in first["pods"] if p["pod"].endswith("/app"))
    app_b = next(p for p in second["pods"] if p["pod"].endswith("/app"))
    # Under A the idle, roomy node wins; under B the image's node.
    assert app_a["node"] == names["cool"], first["pods"]
    assert app_b["node"] == names["disk"], second["pods"]
    assert {"pod": f"{namespace}/app", "A": names["cool"], "B": names["disk"]} in doc["differences"]
    assert first["pending"] == second["pending"] == 2
    used = {
        cfg["name"]: {n["node"]: n["cpu"]["requested"] for n in cfg["nodes"]}
        for cfg in (first, second)
    }
    assert used["A"][names["cool"]] - used["B"][names["cool"]] == 500
    assert used["B"][names["disk"]] - used["A"][names["disk"]] == 500
