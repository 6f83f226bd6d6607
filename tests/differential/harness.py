"""Runs one scenario under upstream kube-scheduler and under Berth on the same API server and
compares the outcomes.

A scenario (``scenarios/*.yaml``) names nodes, pods already bound, and incoming pods. Each
incoming pod, in order, is created for kube-scheduler (profile ``diff-upstream``), its
outcome recorded (bound to a node, or pending with its PodScheduled condition), the pod
removed, then created again for Berth (profile ``diff-berth``, ``berth shim``) and its outcome
recorded. The upstream copy is then put back bound where kube-scheduler put it, so both
schedulers see the same cluster for the next incoming pod.

Outcomes agree when both are pending with the same condition reason and message (upstream's
FitError text), or both are bound to the same node. A scenario whose best node is not unique
says so (``tie: [nodes]`` on the incoming pod); then any of those nodes is as right as
another (upstream picks among them at random too), and Berth's explain must find exactly
that tie. Ties are declared, never inferred from Berth alone: a Berth that wrongly ignores a
rule would otherwise see a tie where upstream has one answer, and hide its own mistake.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from berth.kube import node_record, occupies_node, pod_record
from berth.localcluster import KubeClient, objects
from berth.localcluster.rest import JSON, ApiError
from berth_api.v1 import cluster_pb2 as cpb
from berth_api.v1 import scheduling_pb2 as pb

UPSTREAM = "diff-upstream"
BERTH = "diff-berth"

# Upstream's default plugins Berth's differential config leaves out on both sides: they
# look at other pods or volumes (the cross-pod issue), or need APIs the scenarios do not
# model. Disabling them is legal in both configs.
NOT_COMPARED = (
    "VolumeRestrictions",
    "NodeVolumeLimits",
    "VolumeBinding",
    "VolumeZone",
    "DynamicResources",
    "DefaultPreemption",
    "NodeDeclaredFeatures",
)

SCENARIOS = Path(__file__).parent / "scenarios"


def config(profile: str) -> dict[str, Any]:
    """The KubeSchedulerConfiguration both sides run, but for the profile name."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": profile,
                "plugins": {"multiPoint": {"disabled": [{"name": n} for n in NOT_COMPARED]}},
            }
        ],
    }


@dataclass
class Scenario:
    name: str
    about: str
    nodes: list[dict[str, Any]]
    existing: list[dict[str, Any]] = field(default_factory=list)
    incoming: list[dict[str, Any]] = field(default_factory=list)
    # Labels of the scenario's own namespace, and further namespaces (name, labels) that
    # existing pods may live in (``namespace`` on the pod).
    namespace_labels: dict[str, str] = field(default_factory=dict)
    namespaces: list[dict[str, Any]] = field(default_factory=list)
    # Services in the scenario's namespace ({name, selector}): PodTopologySpread's default
    # constraints spread the pods they select.
    services: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> Scenario:
        doc = yaml.safe_load(path.read_text())
        return cls(
            name=path.stem,
            about=str(doc.get("about", "")),
            nodes=list(doc.get("nodes") or []),
            existing=list(doc.get("existing") or []),
            incoming=list(doc.get("incoming") or []),
            namespace_labels=dict(doc.get("namespaceLabels") or {}),
            namespaces=list(doc.get("namespaces") or []),
            services=list(doc.get("services") or []),
        )


def all_scenarios() -> list[Path]:
    return sorted(SCENARIOS.glob("*.yaml"))


def node_object(spec: dict[str, Any]) -> JSON:
    obj = objects.node(
        spec["name"],
        cpu=str(spec.get("cpu", "4")),
        memory=str(spec.get("memory", "16Gi")),
        pods=int(spec.get("pods", 110)),
        extended=spec.get("extended"),
        labels=spec.get("labels"),
        taints=spec.get("taints", ()),
        unschedulable=bool(spec.get("unschedulable", False)),
    )
    if spec.get("images"):
        obj["status"]["images"] = [
            {"names": list(i["names"]), "sizeBytes": int(i["sizeBytes"])} for i in spec["images"]
        ]
    return obj


def pod_object(spec: dict[str, Any], namespace: str, scheduler: str) -> JSON:
    obj = objects.pod(
        spec["name"],
        namespace=namespace,
        cpu=spec.get("cpu", "100m"),
        memory=spec.get("memory", "128Mi"),
        extended=spec.get("extended"),
        scheduler_name=scheduler,
        labels=spec.get("labels"),
        node_selector=spec.get("nodeSelector"),
        tolerations=spec.get("tolerations", ()),
        node_name=spec.get("node") or spec.get("nodeName"),
    )
    podspec = obj["spec"]
    container = podspec["containers"][0]
    if spec.get("image"):
        container["image"] = spec["image"]
    if spec.get("ports"):
        container["ports"] = [
            {"containerPort": int(p.get("containerPort", p.get("hostPort", 80))), **p}
            for p in spec["ports"]
        ]
    for key in (
        "affinity",
        "schedulingGates",
        "priority",
        "initContainers",
        "overhead",
        "topologySpreadConstraints",
    ):
        if key in spec:
            podspec[key] = spec[key]
    if spec.get("noRequests"):
        container["resources"] = {}
    if spec.get("containers"):
        podspec["containers"] = spec["containers"]
    return obj


def service_object(spec: dict[str, Any], namespace: str) -> JSON:
    """A headless Service selecting ``spec["selector"]``."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": spec["name"], "namespace": namespace},
        "spec": {
            "clusterIP": "None",
            "selector": dict(spec.get("selector") or {}),
            "ports": [{"port": 80}],
        },
    }


@dataclass(frozen=True)
class Outcome:
    node: str  # "" when pending
    reason: str = ""
    message: str = ""

    def __str__(self) -> str:
        return f"bound to {self.node}" if self.node else f"pending: {self.reason}: {self.message}"


def _scheduled_condition(pod: JSON) -> JSON | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return dict(c)
    return None


def wait_outcome(kube: KubeClient, namespace: str, name: str, timeout: float = 30.0) -> Outcome:
    """Bound, or pending with a PodScheduled=False condition from a scheduler (a gated pod
    carries the API server's SchedulingGated condition from the start: watch it a while to
    be sure no scheduler binds it)."""
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"
    deadline = time.monotonic() + timeout
    gated_since: float | None = None
    while time.monotonic() < deadline:
        pod = kube.get(path)
        node = pod["spec"].get("nodeName")
        if node:
            return Outcome(str(node))
        cond = _scheduled_condition(pod)
        if cond is not None:
            if cond.get("reason") == "SchedulingGated":
                gated_since = gated_since or time.monotonic()
                if time.monotonic() - gated_since < 2.0:
                    time.sleep(0.1)
                    continue
            return Outcome("", str(cond.get("reason", "")), str(cond.get("message", "")))
        time.sleep(0.05)
    raise TimeoutError(f"pod {namespace}/{name}: no scheduling outcome within {timeout:g}s")


def delete_pod(kube: KubeClient, namespace: str, name: str) -> None:
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"
    try:
        kube.delete(path, gracePeriodSeconds=0)
    except ApiError as exc:
        if exc.status != 404:
            raise
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            kube.get(path)
        except ApiError as exc:
            if exc.status == 404:
                return
            raise
        time.sleep(0.05)
    raise TimeoutError(f"pod {namespace}/{name} not gone within 30s")


def best_nodes(kube: KubeClient, namespace: str, spec: dict[str, Any]) -> set[str]:
    """The nodes sharing the best score for this pod, by Berth's own explain over the
    cluster as it is now (a what-if, as ``berth place`` computes it)."""
    from berth.client import ClusterStateLog
    from plugins.framework.config import parse_config
    from plugins.registry import REGISTRY
    from server.app import build_frameworks
    from server.service import SchedulingService

    cfg = parse_config(config(BERTH), "<differential>", REGISTRY)
    service = SchedulingService(cfg, build_frameworks(cfg, REGISTRY))
    state = ClusterStateLog()
    for n in kube.get("/api/v1/nodes")["items"]:
        state.upsert_node(node_record(n))
    for p in kube.get("/api/v1/pods")["items"]:
        rec = pod_record(p)
        if occupies_node(rec):
            state.upsert_pod(rec)
    for ns in kube.get("/api/v1/namespaces")["items"]:
        # InterPodAffinity reads namespaces (their labels, for namespaceSelector).
        state.upsert_object(
            cpb.ClusterObject(
                ref=cpb.ObjectRef(resource="namespaces", name=ns["metadata"]["name"]),
                version="v1",
                kind="Namespace",
                json=json.dumps({"apiVersion": "v1", "kind": "Namespace", **ns}).encode(),
            )
        )
    state.commit()
    obj = pod_object(spec, namespace, BERTH)
    obj["metadata"]["uid"] = "what-if"
    answer = service.schedule_or_error(
        pb.ScheduleRequest(
            profile=BERTH, state=state.full_state(), pod=pod_record(obj), explain=True
        )
    )
    assert answer.WhichOneof("result") == "response", answer.error.message
    resp = answer.response
    if not resp.scores:
        return {resp.node} if resp.node else set()
    top = resp.scores[0].total
    return {s.node for s in resp.scores if s.total == top}


@dataclass
class Comparison:
    pod: str
    upstream: Outcome
    berth: Outcome
    tied: set[str]
    declared_tie: set[str] = field(default_factory=set)

    @property
    def agrees(self) -> bool:
        u, b = self.upstream, self.berth
        if u.node and b.node:
            if not self.declared_tie:
                return u.node == b.node
            return (
                self.tied == self.declared_tie
                and u.node in self.declared_tie
                and b.node in self.declared_tie
            )
        if not u.node and not b.node:
            return (u.reason, u.message) == (b.reason, b.message)
        return False

    def __str__(self) -> str:
        tie = f" (Berth's best: {sorted(self.tied)})" if len(self.tied) > 1 else ""
        if self.declared_tie:
            tie += f" (declared tie: {sorted(self.declared_tie)})"
        return f"{self.pod}: kube-scheduler {self.upstream}; berth {self.berth}{tie}"


def run(kube: KubeClient, scenario: Scenario, namespace: str) -> list[Comparison]:
    """Creates the scenario's objects, compares each incoming pod, removes the objects."""
    objects.create_namespace(kube, namespace, scenario.namespace_labels)
    for svc in scenario.services:
        kube.create(f"/api/v1/namespaces/{namespace}/services", service_object(svc, namespace))
    created_nodes = [n["name"] for n in scenario.nodes]
    extra_namespaces = [str(ns["name"]) for ns in scenario.namespaces]
    try:
        for ns in scenario.namespaces:
            objects.create_namespace(kube, str(ns["name"]), ns.get("labels"))
        objects.create_nodes(kube, [node_object(n) for n in scenario.nodes])
        if scenario.existing:
            objects.create_pods(
                kube,
                [
                    pod_object(p, str(p.get("namespace") or namespace), "nobody")
                    for p in scenario.existing
                ],
            )
        out: list[Comparison] = []
        for spec in scenario.incoming:
            name = spec["name"]
            tied = best_nodes(kube, namespace, spec)
            kube.create(
                f"/api/v1/namespaces/{namespace}/pods", pod_object(spec, namespace, UPSTREAM)
            )
            upstream = wait_outcome(kube, namespace, name)
            delete_pod(kube, namespace, name)
            kube.create(f"/api/v1/namespaces/{namespace}/pods", pod_object(spec, namespace, BERTH))
            berth = wait_outcome(kube, namespace, name)
            delete_pod(kube, namespace, name)
            out.append(Comparison(name, upstream, berth, tied, set(spec.get("tie") or ())))
            if upstream.node:
                # The next pod sees this one where kube-scheduler put it, on both sides.
                kube.create(
                    f"/api/v1/namespaces/{namespace}/pods",
                    pod_object({**spec, "node": upstream.node}, namespace, "nobody"),
                )
        return out
    finally:
        objects.delete_namespace(kube, namespace)
        for name in extra_namespaces:
            objects.delete_namespace(kube, name)
        objects.delete_nodes(kube, created_nodes)
        # Nodes must be gone before the next scenario: both schedulers see every node.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            names = {n["metadata"]["name"] for n in kube.get("/api/v1/nodes")["items"]}
            if not names & set(created_nodes):
                break
            time.sleep(0.1)
