"""Runs one scenario under upstream kube-scheduler and under each Berth (in-process and over
gRPC, ``BERTH_PROFILES``) on the same API server and compares the outcomes
(tests/differential/README.md has the scenario format).

A scenario (``scenarios/*.yaml``) names nodes, pods already bound, incoming pods and, for
preemption, volumes and devices, priorities, PodDisruptionBudgets, StorageClasses,
PersistentVolumes, PersistentVolumeClaims, CSINode limits, DeviceClasses, ResourceSlices,
ResourceClaims and ResourceClaimTemplates. It runs in one of two modes:

``interleaved`` (scenarios that change nothing but the incoming pod's own placement): each
incoming pod, in order, is created for kube-scheduler (profile ``diff-upstream``), its outcome
recorded (bound to a node, or pending with its PodScheduled condition), the pod removed, then
created again for each Berth (profiles ``diff-berth`` and ``diff-berth-grpc``) and its outcome
recorded. The
upstream copy is then put back bound where kube-scheduler put it, so both schedulers see the
same cluster for the next incoming pod.

``sequence`` (scenarios where a scheduler changes the cluster: preemption deletes victims and
nominates the preemptor, volume binding writes PersistentVolumes and claims, DynamicResources
allocates devices to ResourceClaims): kube-scheduler runs the whole incoming list on a fresh
copy of the scenario's pods, volumes and claims; the copy is removed and made again from the
scenario, and each Berth runs the same list on it in turn. So both
start from the identical cluster, and a pod left pending with a nomination stays for the later
pods of its own run, as it would in a real cluster. Each step records where the pod ended up,
the first and the last PodScheduled=False condition it carried, the nodes it was nominated to,
the pods it preempted (deleted, terminating or given a DisruptionTarget condition), the
nominations it cleared on other pods, what its claims were bound to and which devices its
ResourceClaims were allocated, all read from watch events (a nomination may last milliseconds before the binding clears it).

Outcomes agree when every recorded field is equal. A scenario whose best node is not unique
says so (``tie: [nodes]`` on the incoming pod); then any of those nodes is as right as another
(upstream picks among them at random too), and Berth's explain must find exactly that tie.
Ties are declared, never inferred from Berth alone: a Berth that wrongly ignores a rule would
otherwise see a tie where upstream has one answer, and hide its own mistake. A step may also
state what upstream must do (``expect``), so a scenario cannot silently stop testing what its
``about`` says.

The suite's control plane has no kubelet, and its kube-controller-manager runs only the
controllers in ``CONTROLLERS``, so the harness plays the parts of the others that the
scenarios need: PodDisruptionBudget status is written from the
scenario (``disruptionsAllowed``), bound claims are created bound, and while a run goes on a
small volume controller completes the bindings a scheduler starts (a PersistentVolume given a
claimRef binds its claim; a claim given ``volume.kubernetes.io/selected-node`` is provisioned
on that node). Pods are created with ``terminationGracePeriodSeconds: 0`` unless the scenario
gives ``gracePeriod``: a victim deleted by preemption then disappears at once (as after a
kubelet confirmed it), while one with a grace period stays terminating for good.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from berth.api.v1 import scheduling_pb2 as pb
from berth.dev.localcluster import objects
from berth.kube.errors import ApiError
from berth.kube.records import node_record, occupies_node, pod_record
from berth.kube.rest import JSON, KubeApi, segment

log = logging.getLogger(__name__)

UPSTREAM = "diff-upstream"
# Berth runs twice beside kube-scheduler: the shim hosting the plugin service in its own
# process (BERTH), and the shim calling ``berth serve`` over gRPC (BERTH_GRPC). Each scenario
# runs under every profile of BERTH_PROFILES and each is compared with upstream.
BERTH = "diff-berth"
BERTH_GRPC = "diff-berth-grpc"
BERTH_PROFILES = (BERTH, BERTH_GRPC)

# Upstream default plugins left out even when kube-scheduler runs alone
# (BERTH_DIFF_ONLY=upstream): none, upstream runs its real default profile.
ALWAYS_OUT: tuple[str, ...] = ()

# What the suite does not compare, disabled on both sides (legal in both configs), while
# Berth lacks it: nothing; DynamicResources is compared like every default plugin. A plugin
# named here has the scenarios that need it (for DynamicResources: DRA objects or pods with
# resourceClaims, `Scenario.needs_dynamic_resources`) skipped, never passed.
NOT_COMPARED: tuple[str, ...] = ()

SCENARIOS = Path(__file__).parent / "scenarios"

# Scenarios where Berth is known to decide otherwise than kube-scheduler, and why: run,
# and expected to disagree (a strict xfail, so one that starts to agree fails until it is
# taken off this list); never counted as passed.
KNOWN_DIFFERENT: dict[str, str] = {}

# kube-controller-manager's controllers on the suite's control plane: claim templates become
# generated claims (resourceclaim), which go with their pod (garbage collector). The PV,
# protection and ephemeral-volume controllers stay off: the harness's VolumeController binds
# only what a scheduler started, so an unbound Immediate claim stays unbound and a generic
# ephemeral volume's missing claim stays missing, as the scenarios state; no node lifecycle
# or disruption controller runs (the harness writes PDB status).
CONTROLLERS = ("resourceclaim-controller", "garbage-collector-controller")

INTERLEAVED = "interleaved"
SEQUENCE = "sequence"

# Annotations the PersistentVolume controller and the scheduler use (k8s.io/component-helpers
# storage/volume and pkg/controller/volume/persistentvolume).
ANN_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
ANN_PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
HOLD_FINALIZER = "berth.dev/differential-hold"

# How long a step's outcome must stay unchanged before it counts as final (sequence mode):
# a pending pod may still be nominated and preempt, a nominated one may still bind once its
# victims are gone (kube-scheduler retries it after its 1 s backoff).
PENDING_SETTLE = 1.5
NOMINATED_SETTLE = 4.0
GATED_SETTLE = 2.0
# Time for both schedulers' informers to see a freshly made copy of the scenario.
INFORMER_SETTLE = 0.5


def config(profile: str, not_compared: Iterable[str] = NOT_COMPARED) -> dict[str, Any]:
    """The KubeSchedulerConfiguration both sides run, but for the profile name: the default
    profile, minus ``not_compared`` (nothing at all when that is empty)."""
    out = list(not_compared)
    entry: dict[str, Any] = {"schedulerName": profile}
    if out:
        entry["plugins"] = {"multiPoint": {"disabled": [{"name": n} for n in out]}}
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [entry],
    }


# --- the scenario format ---------------------------------------------------------------------


class ScenarioError(ValueError):
    """A scenario file that cannot be run as written; the message names file and field."""


TOP_KEYS = frozenset(
    {
        "about",
        "mode",
        "nodes",
        "existing",
        "incoming",
        "namespaceLabels",
        "namespaces",
        "services",
        "pdbs",
        "storageClasses",
        "persistentVolumes",
        "persistentVolumeClaims",
        "deviceClasses",
        "resourceSlices",
        "resourceClaims",
        "resourceClaimTemplates",
    }
)
NODE_KEYS = frozenset(
    {
        "name",
        "cpu",
        "memory",
        "pods",
        "extended",
        "labels",
        "taints",
        "unschedulable",
        "images",
        "csiDrivers",
    }
)
POD_KEYS = frozenset(
    {
        "name",
        "namespace",
        "node",
        "cpu",
        "memory",
        "extended",
        "noRequests",
        "labels",
        "nodeSelector",
        "affinity",
        "tolerations",
        "ports",
        "image",
        "schedulingGates",
        "topologySpreadConstraints",
        "initContainers",
        "overhead",
        "containers",
        "priority",
        "preemptionPolicy",
        "volumes",
        "resourceClaims",
        "gracePeriod",
        "tie",
        "expect",
    }
)
EXPECT_KEYS = frozenset(
    {"node", "pending", "message", "nominated", "victims", "cleared", "claims", "devices"}
)
# resource.k8s.io/v1 objects: DeviceClass ``{name, selectors: [CEL], extendedResourceName}``,
# ResourceSlice ``{name, driver, pool (default: the node), node | allNodes | nodeSelector,
# devices (as the API spells them), sharedCounters}``, ResourceClaim ``{name, namespace,
# devices (spec.devices as the API spells it)}``, ResourceClaimTemplate ``{name, devices}``.
DEVICE_CLASS_KEYS = frozenset({"name", "selectors", "extendedResourceName"})
SLICE_KEYS = frozenset(
    {"name", "driver", "pool", "node", "allNodes", "nodeSelector", "devices", "sharedCounters"}
)
RESOURCE_CLAIM_KEYS = frozenset({"name", "namespace", "devices"})
CLAIM_TEMPLATE_KEYS = frozenset({"name", "devices"})
RESOURCE_API = "/apis/resource.k8s.io/v1"
# Annotations of claims made for a pod (k8s.io/api resource/v1 types.go and
# pkg/controller/resourceclaim): the pod claim a template's claim was made for, and the claim
# the scheduler makes for DRA-backed extended resources.
ANN_POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"
ANN_EXTENDED_RESOURCE_CLAIM = "resource.kubernetes.io/extended-resource-claim"
PDB_KEYS = frozenset({"name", "namespace", "selector", "disruptionsAllowed", "disruptedPods"})
CLASS_KEYS = frozenset(
    {"name", "provisioner", "volumeBindingMode", "allowedTopologies", "parameters"}
)
PV_KEYS = frozenset(
    {"name", "storageClassName", "capacity", "accessModes", "nodeAffinity", "labels", "source"}
)
PVC_KEYS = frozenset(
    {
        "name",
        "namespace",
        "storageClassName",
        "request",
        "accessModes",
        "volumeName",
        "phase",
        "deleting",
    }
)
PREEMPTION_POLICIES = ("PreemptLowerPriority", "Never")
NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _entries(path: Path, doc: Mapping[str, Any], key: str, allowed: frozenset[str]) -> list[JSON]:
    """``doc[key]`` as a list of mappings with a ``name`` and only ``allowed`` keys."""
    raw = doc.get(key) or []
    if not isinstance(raw, list):
        raise ScenarioError(f"{path}: {key}: must be a list, got {type(raw).__name__}")
    out: list[JSON] = []
    seen: set[tuple[str, str]] = set()
    for i, entry in enumerate(raw):
        where = f"{path}: {key}[{i}]"
        if not isinstance(entry, dict):
            raise ScenarioError(f"{where}: must be a mapping, got {type(entry).__name__}")
        unknown = sorted(set(entry) - allowed)
        if unknown:
            raise ScenarioError(f"{where}: unknown field(s) {unknown}; known: {sorted(allowed)}")
        name = entry.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            raise ScenarioError(f"{where}: name: must be a DNS label, got {name!r}")
        ident = (str(entry.get("namespace") or ""), name)
        if ident in seen:
            raise ScenarioError(f"{where}: name: {name!r} appears twice")
        seen.add(ident)
        out.append(dict(entry))
    return out


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
    pdbs: list[dict[str, Any]] = field(default_factory=list)
    storage_classes: list[dict[str, Any]] = field(default_factory=list)
    volumes: list[dict[str, Any]] = field(default_factory=list)
    claims: list[dict[str, Any]] = field(default_factory=list)
    device_classes: list[dict[str, Any]] = field(default_factory=list)
    slices: list[dict[str, Any]] = field(default_factory=list)
    resource_claims: list[dict[str, Any]] = field(default_factory=list)
    claim_templates: list[dict[str, Any]] = field(default_factory=list)
    mode: str = INTERLEAVED

    @classmethod
    def load(cls, path: Path) -> Scenario:
        try:
            doc = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise ScenarioError(f"{path}: cannot read: {exc}") from exc
        if not isinstance(doc, dict):
            raise ScenarioError(f"{path}: must be a YAML mapping")
        unknown = sorted(set(doc) - TOP_KEYS)
        if unknown:
            raise ScenarioError(f"{path}: unknown field(s) {unknown}; known: {sorted(TOP_KEYS)}")
        scenario = cls(
            name=path.stem,
            about=str(doc.get("about", "")),
            nodes=_entries(path, doc, "nodes", NODE_KEYS),
            existing=_entries(path, doc, "existing", POD_KEYS - {"tie", "expect"}),
            incoming=_entries(path, doc, "incoming", POD_KEYS - {"node", "namespace"}),
            namespace_labels=dict(doc.get("namespaceLabels") or {}),
            namespaces=_entries(path, doc, "namespaces", frozenset({"name", "labels"})),
            services=_entries(path, doc, "services", frozenset({"name", "selector"})),
            pdbs=_entries(path, doc, "pdbs", PDB_KEYS),
            storage_classes=_entries(path, doc, "storageClasses", CLASS_KEYS),
            volumes=_entries(path, doc, "persistentVolumes", PV_KEYS),
            claims=_entries(path, doc, "persistentVolumeClaims", PVC_KEYS),
            device_classes=_entries(path, doc, "deviceClasses", DEVICE_CLASS_KEYS),
            slices=_entries(path, doc, "resourceSlices", SLICE_KEYS),
            resource_claims=_entries(path, doc, "resourceClaims", RESOURCE_CLAIM_KEYS),
            claim_templates=_entries(path, doc, "resourceClaimTemplates", CLAIM_TEMPLATE_KEYS),
        )
        scenario.mode = scenario._resolve_mode(path, doc.get("mode"))
        scenario._check(path)
        return scenario

    def changes_cluster(self) -> bool:
        """Does a scheduler change more than the incoming pod's own placement here
        (preemption, volume binding)? Then only the sequence mode can compare."""
        pods = [*self.existing, *self.incoming]
        return bool(
            self.pdbs
            or self.storage_classes
            or self.volumes
            or self.claims
            or self.needs_dynamic_resources()
            or any("priority" in p or "preemptionPolicy" in p or "volumes" in p for p in pods)
            or any(n.get("csiDrivers") for n in self.nodes)
        )

    def needs_dynamic_resources(self) -> bool:
        """Does the scenario use DRA (device classes, slices, claims, pods with
        resourceClaims)? Then DynamicResources allocates devices and writes claims."""
        return bool(
            self.device_classes
            or self.slices
            or self.resource_claims
            or self.claim_templates
            or any(p.get("resourceClaims") for p in [*self.existing, *self.incoming])
        )

    def _resolve_mode(self, path: Path, mode: Any) -> str:
        if mode is None:
            return SEQUENCE if self.changes_cluster() else INTERLEAVED
        if mode not in (INTERLEAVED, SEQUENCE):
            raise ScenarioError(f"{path}: mode: must be {INTERLEAVED} or {SEQUENCE}, got {mode!r}")
        if mode == INTERLEAVED and self.changes_cluster():
            raise ScenarioError(
                f"{path}: mode: {INTERLEAVED} cannot compare priorities, PDBs or volumes "
                f"(a scheduler changes the cluster); leave mode out or use {SEQUENCE}"
            )
        return str(mode)

    def _check(self, path: Path) -> None:
        if not self.nodes:
            raise ScenarioError(f"{path}: nodes: at least one node is needed")
        for i, n in enumerate(self.nodes):
            if not str(n["name"]).startswith("d-"):
                raise ScenarioError(f"{path}: nodes[{i}].name: must start with 'd-'")
            drivers = n.get("csiDrivers")
            if drivers is not None and not isinstance(drivers, dict):
                raise ScenarioError(
                    f"{path}: nodes[{i}].csiDrivers: must map driver name to a count or null"
                )
        for key, entries in (
            ("storageClasses", self.storage_classes),
            ("persistentVolumes", self.volumes),
            ("deviceClasses", self.device_classes),
            ("resourceSlices", self.slices),
        ):
            for i, entry in enumerate(entries):
                if not str(entry["name"]).startswith("d-"):
                    raise ScenarioError(
                        f"{path}: {key}[{i}].name: cluster-scoped names must start with 'd-' "
                        "(and be unique across scenarios)"
                    )
        node_names = {str(n["name"]) for n in self.nodes}
        for i, sl in enumerate(self.slices):
            at = f"{path}: resourceSlices[{i}]"
            if not isinstance(sl.get("driver"), str):
                raise ScenarioError(f"{at}.driver: required, a driver name")
            places = [k for k in ("node", "allNodes", "nodeSelector") if sl.get(k)]
            if len(places) != 1:
                raise ScenarioError(
                    f"{at}: exactly one of node, allNodes, nodeSelector is needed, got {places}"
                )
            if sl.get("node") and sl["node"] not in node_names:
                raise ScenarioError(f"{at}.node: must name one of the nodes, got {sl['node']!r}")
            if not sl.get("pool") and not sl.get("node"):
                raise ScenarioError(f"{at}.pool: required when the slice names no node")
            if not isinstance(sl.get("devices") or [], list):
                raise ScenarioError(f"{at}.devices: must be a list of devices")
        for key, entries in (
            ("resourceClaims", self.resource_claims),
            ("resourceClaimTemplates", self.claim_templates),
        ):
            for i, entry in enumerate(entries):
                if not isinstance(entry.get("devices"), dict):
                    raise ScenarioError(
                        f"{path}: {key}[{i}].devices: required, a claim's spec.devices"
                    )
        for where, pods in (("existing", self.existing), ("incoming", self.incoming)):
            for i, p in enumerate(pods):
                at = f"{path}: {where}[{i}]"
                if where == "existing" and p.get("node") not in node_names:
                    raise ScenarioError(
                        f"{at}.node: must name one of the nodes, got {p.get('node')!r}"
                    )
                if "priority" in p and not isinstance(p["priority"], int):
                    raise ScenarioError(f"{at}.priority: must be an integer")
                policy = p.get("preemptionPolicy")
                if policy is not None and policy not in PREEMPTION_POLICIES:
                    raise ScenarioError(
                        f"{at}.preemptionPolicy: must be one of {PREEMPTION_POLICIES}"
                    )
                expect = p.get("expect")
                if expect is not None:
                    if not isinstance(expect, dict) or set(expect) - EXPECT_KEYS:
                        raise ScenarioError(
                            f"{at}.expect: must be a mapping with keys among {sorted(EXPECT_KEYS)}"
                        )
                    if self.mode == INTERLEAVED and set(expect) - {"node", "pending", "message"}:
                        raise ScenarioError(
                            f"{at}.expect: nominated, victims, cleared, claims and devices "
                            "need the sequence mode"
                        )
                if p.get("tie") and self.mode == SEQUENCE and i != len(pods) - 1:
                    raise ScenarioError(
                        f"{at}.tie: in the sequence mode only the last incoming pod may declare "
                        "a tie (the later pods would see different clusters)"
                    )
        for i, pdb in enumerate(self.pdbs):
            if not isinstance(pdb.get("disruptionsAllowed"), int) or pdb["disruptionsAllowed"] < 0:
                raise ScenarioError(
                    f"{path}: pdbs[{i}].disruptionsAllowed: required, an integer >= 0 (no "
                    "disruption controller runs: the harness writes the PDB's status)"
                )
            if not isinstance(pdb.get("selector"), dict):
                raise ScenarioError(f"{path}: pdbs[{i}].selector: required, a LabelSelector")
        volume_names = {str(v["name"]) for v in self.volumes}
        for i, c in enumerate(self.claims):
            if c.get("phase") not in (None, "Lost"):
                raise ScenarioError(
                    f"{path}: persistentVolumeClaims[{i}].phase: only Lost may be given (a "
                    "claim is Pending, or Bound with volumeName)"
                )
            bound = c.get("volumeName")
            if bound is not None and bound not in volume_names:
                raise ScenarioError(
                    f"{path}: persistentVolumeClaims[{i}].volumeName: {bound!r} is not one of "
                    "persistentVolumes"
                )


def all_scenarios() -> list[Path]:
    return sorted(SCENARIOS.glob("*.yaml"))


# --- objects ---------------------------------------------------------------------------------


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


def csinode_object(spec: dict[str, Any]) -> JSON | None:
    """The CSINode of a node with ``csiDrivers`` ({driver: count or null})."""
    drivers = spec.get("csiDrivers")
    if not drivers:
        return None
    entries: list[JSON] = []
    for driver, count in sorted(drivers.items()):
        entry: JSON = {"name": driver, "nodeID": spec["name"], "topologyKeys": None}
        if count is not None:
            entry["allocatable"] = {"count": int(count)}
        entries.append(entry)
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {"name": spec["name"]},
        "spec": {"drivers": entries},
    }


def priority_class_name(namespace: str, value: int, policy: str | None) -> str:
    """The PriorityClass the harness makes for pods with this priority (and policy)."""
    number = f"m{-value}" if value < 0 else str(value)
    return f"{namespace}-p{number}" + ("-never" if policy == "Never" else "")


def priority_class_object(namespace: str, value: int, policy: str | None) -> JSON:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": priority_class_name(namespace, value, policy)},
        "value": value,
        "preemptionPolicy": policy or "PreemptLowerPriority",
        "description": f"differential scenario {namespace}",
    }


def pod_object(spec: dict[str, Any], namespace: str, scheduler: str, scenario_ns: str = "") -> JSON:
    """The pod ``spec`` describes. A ``priority`` (and ``preemptionPolicy``) becomes the
    PriorityClass the harness made for it: the Priority admission plugin refuses a pod that
    sets either field itself."""
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
        "initContainers",
        "overhead",
        "topologySpreadConstraints",
        "volumes",
        "resourceClaims",
    ):
        if key in spec:
            podspec[key] = spec[key]
    if spec.get("resourceClaims"):
        # The container uses every claim of the pod, as a workload would.
        container.setdefault("resources", {})["claims"] = [
            {"name": c["name"]} for c in spec["resourceClaims"]
        ]
    if "priority" in spec or "preemptionPolicy" in spec:
        podspec["priorityClassName"] = priority_class_name(
            scenario_ns or namespace, int(spec.get("priority", 0)), spec.get("preemptionPolicy")
        )
    if "gracePeriod" in spec:
        podspec["terminationGracePeriodSeconds"] = int(spec["gracePeriod"])
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


def pdb_object(spec: dict[str, Any], namespace: str) -> JSON:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": spec["name"], "namespace": namespace},
        "spec": {"selector": spec["selector"], "maxUnavailable": int(spec["disruptionsAllowed"])},
    }


def pdb_status(spec: dict[str, Any], generation: int) -> JSON:
    """What the disruption controller would have written; only disruptionsAllowed and
    disruptedPods matter to preemption (filterPodsWithPDBViolation)."""
    status: JSON = {
        "observedGeneration": generation,
        "disruptionsAllowed": int(spec["disruptionsAllowed"]),
        "currentHealthy": 0,
        "desiredHealthy": 0,
        "expectedPods": 0,
    }
    if spec.get("disruptedPods"):
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status["disruptedPods"] = {str(n): stamp for n in spec["disruptedPods"]}
    return status


def storage_class_object(spec: dict[str, Any]) -> JSON:
    obj: JSON = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": spec["name"]},
        "provisioner": spec.get("provisioner", NO_PROVISIONER),
        "volumeBindingMode": spec.get("volumeBindingMode", "Immediate"),
        "reclaimPolicy": "Delete",
    }
    if spec.get("allowedTopologies"):
        obj["allowedTopologies"] = spec["allowedTopologies"]
    if spec.get("parameters"):
        obj["parameters"] = {str(k): str(v) for k, v in spec["parameters"].items()}
    return obj


def pv_object(spec: dict[str, Any], claim_ref: JSON | None = None) -> JSON:
    pv_spec: JSON = {
        "capacity": {"storage": str(spec.get("capacity", "1Gi"))},
        "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
        "persistentVolumeReclaimPolicy": "Retain",
        **(spec.get("source") or {"hostPath": {"path": f"/tmp/{spec['name']}"}}),
    }
    if "storageClassName" in spec:
        pv_spec["storageClassName"] = spec["storageClassName"]
    if spec.get("nodeAffinity"):
        pv_spec["nodeAffinity"] = spec["nodeAffinity"]
    if claim_ref is not None:
        pv_spec["claimRef"] = claim_ref
    obj: JSON = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": spec["name"], "labels": dict(spec.get("labels") or {})},
        "spec": pv_spec,
    }
    if claim_ref is not None:
        obj["metadata"]["annotations"] = {ANN_BOUND_BY_CONTROLLER: "yes"}
    return obj


def pvc_object(spec: dict[str, Any], namespace: str) -> JSON:
    pvc_spec: JSON = {
        "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
        "resources": {"requests": {"storage": str(spec.get("request", "1Gi"))}},
    }
    if "storageClassName" in spec:
        pvc_spec["storageClassName"] = spec["storageClassName"]
    meta: JSON = {"name": spec["name"], "namespace": namespace}
    if spec.get("deleting"):
        # Keeps the claim terminating once deleted (depopulate removes the finalizer).
        meta["finalizers"] = [HOLD_FINALIZER]
    if spec.get("volumeName"):
        pvc_spec["volumeName"] = spec["volumeName"]
        meta["annotations"] = {ANN_BIND_COMPLETED: "yes", ANN_BOUND_BY_CONTROLLER: "yes"}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta,
        "spec": pvc_spec,
    }


def device_class_object(spec: dict[str, Any]) -> JSON:
    class_spec: JSON = {
        "selectors": [{"cel": {"expression": str(e)}} for e in spec.get("selectors") or ()]
    }
    if spec.get("extendedResourceName"):
        class_spec["extendedResourceName"] = str(spec["extendedResourceName"])
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": spec["name"]},
        "spec": class_spec,
    }


def resource_slice_object(spec: dict[str, Any], slice_count: int) -> JSON:
    """One slice of a pool (default: named after its node) that ``slice_count`` slices of
    the scenario make up, all of generation 1."""
    pool = str(spec.get("pool") or spec["node"])
    slice_spec: JSON = {
        "driver": spec["driver"],
        "pool": {"name": pool, "generation": 1, "resourceSliceCount": slice_count},
        "devices": list(spec.get("devices") or []),
    }
    if spec.get("node"):
        slice_spec["nodeName"] = spec["node"]
    elif spec.get("allNodes"):
        slice_spec["allNodes"] = True
    else:
        slice_spec["nodeSelector"] = spec["nodeSelector"]
    if spec.get("sharedCounters"):
        slice_spec["sharedCounters"] = spec["sharedCounters"]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": spec["name"]},
        "spec": slice_spec,
    }


def resource_claim_object(spec: dict[str, Any], namespace: str) -> JSON:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": spec["name"], "namespace": namespace},
        "spec": {"devices": spec["devices"]},
    }


def claim_template_object(spec: dict[str, Any], namespace: str) -> JSON:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": spec["name"], "namespace": namespace},
        "spec": {"spec": {"devices": spec["devices"]}},
    }


def _claims_path(namespace: str) -> str:
    return f"{RESOURCE_API}/namespaces/{segment(namespace)}/resourceclaims"


def device_claim_key(claim: JSON) -> str:
    """How outcomes name a ResourceClaim: its name, or for one made for a pod (from a
    template by the resourceclaim controller, or for extended resources by the scheduler,
    both with generated names) ``<pod>:<pod claim>`` and ``<pod>:extended-resources``."""
    meta = claim["metadata"]
    annotations = meta.get("annotations") or {}
    owner = next(
        (o["name"] for o in meta.get("ownerReferences") or () if o.get("kind") == "Pod"), ""
    )
    if annotations.get(ANN_EXTENDED_RESOURCE_CLAIM) == "true":
        return f"{owner}:extended-resources"
    if ANN_POD_CLAIM_NAME in annotations:
        return f"{owner}:{annotations[ANN_POD_CLAIM_NAME]}"
    return str(meta["name"])


def device_allocation(claim: JSON) -> str:
    """A claim's allocation as ``driver/pool/device`` entries (sorted, comma-separated),
    then ``@`` and the pods it is reserved for; "" when not allocated."""
    status = claim.get("status") or {}
    allocation = status.get("allocation")
    if not allocation:
        return ""
    results = (allocation.get("devices") or {}).get("results") or []
    devices = sorted(f"{r['driver']}/{r['pool']}/{r['device']}" for r in results)
    reserved = sorted(str(r.get("name", "")) for r in status.get("reservedFor") or ())
    return ",".join(devices) + "@" + ",".join(reserved)


def claim_ref(pvc: JSON) -> JSON:
    meta = pvc["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "namespace": meta["namespace"],
        "name": meta["name"],
        "uid": meta["uid"],
    }


def _pods_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{segment(namespace)}/pods"


def _pvcs_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{segment(namespace)}/persistentvolumeclaims"


def _ignore_missing(call: Any) -> None:
    try:
        call()
    except ApiError as exc:
        if exc.status != 404:
            raise


def wait_gone(kube: KubeApi, paths: Iterable[str], what: str, timeout: float = 30.0) -> None:
    remaining = list(paths)
    deadline = time.monotonic() + timeout
    while remaining and time.monotonic() < deadline:
        still: list[str] = []
        for p in remaining:
            try:
                kube.get(p)
                still.append(p)
            except ApiError as exc:
                if exc.status != 404:
                    raise
        remaining = still
        if remaining:
            time.sleep(0.05)
    if remaining:
        raise TimeoutError(f"{what} not gone within {timeout:g}s: {remaining}")


def bind_claim(kube: KubeApi, pvc: JSON, pv_name: str, capacity: str) -> None:
    """Completes a binding as the PersistentVolume controller does (syncUnboundClaim,
    bindVolumeToClaim/bindClaimToVolume): the claim names the volume and carries
    bind-completed, both are Bound."""
    meta = pvc["metadata"]
    path = f"{_pvcs_path(meta['namespace'])}/{segment(meta['name'])}"
    if pvc["spec"].get("volumeName") != pv_name or ANN_BIND_COMPLETED not in (
        meta.get("annotations") or {}
    ):
        kube.merge_patch(
            path,
            {
                "metadata": {
                    "annotations": {ANN_BIND_COMPLETED: "yes", ANN_BOUND_BY_CONTROLLER: "yes"}
                },
                "spec": {"volumeName": pv_name},
            },
        )
    kube.merge_patch(
        f"{path}/status",
        {
            "status": {
                "phase": "Bound",
                "accessModes": pvc["spec"].get("accessModes") or ["ReadWriteOnce"],
                "capacity": {"storage": capacity},
            }
        },
    )
    kube.merge_patch(
        f"/api/v1/persistentvolumes/{segment(pv_name)}/status", {"status": {"phase": "Bound"}}
    )


# --- one scenario on the cluster ---------------------------------------------------------------


@dataclass
class World:
    """The scenario's objects on the cluster. ``setup`` makes what no scheduler changes
    (namespaces, classes, nodes, CSINodes, services, PDBs); ``populate`` makes what a run may
    change (volumes, claims, existing pods) and ``depopulate`` removes it, so a second run
    starts from the same cluster; ``teardown`` removes everything."""

    scenario: Scenario
    namespace: str

    @property
    def namespaces(self) -> list[str]:
        return [self.namespace, *(str(ns["name"]) for ns in self.scenario.namespaces)]

    def pod_namespace(self, spec: Mapping[str, Any]) -> str:
        return str(spec.get("namespace") or self.namespace)

    def provisioned_name(self, claim: str) -> str:
        """The PersistentVolume the harness's provisioner makes for ``claim`` (the same in
        both runs, so the outcomes compare)."""
        return f"d-prov-{self.namespace}-{claim}"[:253]

    def priority_classes(self) -> list[JSON]:
        wanted: set[tuple[int, str | None]] = set()
        for p in [*self.scenario.existing, *self.scenario.incoming]:
            if "priority" in p or "preemptionPolicy" in p:
                wanted.add((int(p.get("priority", 0)), p.get("preemptionPolicy")))
        return [priority_class_object(self.namespace, v, pol) for v, pol in sorted(wanted, key=str)]

    def pod(self, spec: dict[str, Any], scheduler: str) -> JSON:
        return pod_object(spec, self.pod_namespace(spec), scheduler, self.namespace)

    def setup(self, kube: KubeApi) -> None:
        s = self.scenario
        objects.create_namespace(kube, self.namespace, s.namespace_labels)
        for extra in s.namespaces:
            objects.create_namespace(kube, str(extra["name"]), extra.get("labels"))
        for svc in s.services:
            kube.create(
                f"/api/v1/namespaces/{self.namespace}/services", service_object(svc, self.namespace)
            )
        for pc in self.priority_classes():
            kube.create("/apis/scheduling.k8s.io/v1/priorityclasses", pc)
        for sc in s.storage_classes:
            kube.create("/apis/storage.k8s.io/v1/storageclasses", storage_class_object(sc))
        for dc in s.device_classes:
            kube.create(f"{RESOURCE_API}/deviceclasses", device_class_object(dc))
        pools: dict[tuple[str, str], int] = {}
        for sl in s.slices:
            key = (str(sl["driver"]), str(sl.get("pool") or sl["node"]))
            pools[key] = pools.get(key, 0) + 1
        objects.create_nodes(kube, [node_object(n) for n in s.nodes])
        for sl in s.slices:
            count = pools[(str(sl["driver"]), str(sl.get("pool") or sl["node"]))]
            kube.create(f"{RESOURCE_API}/resourceslices", resource_slice_object(sl, count))
        for tpl in s.claim_templates:
            kube.create(
                f"{RESOURCE_API}/namespaces/{segment(self.namespace)}/resourceclaimtemplates",
                claim_template_object(tpl, self.namespace),
            )
        for n in s.nodes:
            csinode = csinode_object(n)
            if csinode is not None:
                kube.create("/apis/storage.k8s.io/v1/csinodes", csinode)
        for spec in s.pdbs:
            ns = self.pod_namespace(spec)
            base = f"/apis/policy/v1/namespaces/{segment(ns)}/poddisruptionbudgets"
            made = kube.create(base, pdb_object(spec, ns))
            generation = int(made["metadata"].get("generation", 1))
            kube.merge_patch(
                f"{base}/{segment(spec['name'])}/status",
                {"status": pdb_status(spec, generation)},
            )

    def populate(self, kube: KubeApi) -> None:
        s = self.scenario
        claims: dict[str, JSON] = {}
        for spec in s.claims:
            ns = self.pod_namespace(spec)
            claims[str(spec["name"])] = kube.create(_pvcs_path(ns), pvc_object(spec, ns))
        bound_to = {str(c["volumeName"]): str(c["name"]) for c in s.claims if c.get("volumeName")}
        for spec in s.volumes:
            claim = claims.get(bound_to.get(str(spec["name"]), ""))
            ref = claim_ref(claim) if claim is not None else None
            kube.create("/api/v1/persistentvolumes", pv_object(spec, ref))
            if ref is None:
                # What the PersistentVolume controller would say of a free volume; the
                # scheduler matches only Available volumes to claims (FindMatchingVolume).
                kube.merge_patch(
                    f"/api/v1/persistentvolumes/{segment(str(spec['name']))}/status",
                    {"status": {"phase": "Available"}},
                )
        for spec in s.claims:
            if spec.get("volumeName"):
                capacity = next(
                    str(v.get("capacity", "1Gi"))
                    for v in s.volumes
                    if v["name"] == spec["volumeName"]
                )
                bind_claim(kube, claims[str(spec["name"])], str(spec["volumeName"]), capacity)
        for spec in s.claims:
            path = f"{_pvcs_path(self.pod_namespace(spec))}/{segment(str(spec['name']))}"
            if spec.get("phase") == "Lost":
                kube.merge_patch(f"{path}/status", {"status": {"phase": "Lost"}})
            if spec.get("deleting"):
                kube.delete(path)
        for spec in s.resource_claims:
            ns = self.pod_namespace(spec)
            kube.create(_claims_path(ns), resource_claim_object(spec, ns))
        if s.existing:
            objects.create_pods(kube, [self.pod(p, "nobody") for p in s.existing])

    def depopulate(self, kube: KubeApi) -> None:
        """Removes every pod, claim and volume of the scenario (the harness's own provisioned
        volumes too), finalizers and grace periods notwithstanding: nothing here runs the
        controllers that would finish those deletions."""
        pod_paths: list[str] = []
        for ns in self.namespaces:
            for p in kube.get(_pods_path(ns))["items"]:
                path = f"{_pods_path(ns)}/{segment(p['metadata']['name'])}"
                _ignore_missing(lambda path=path: kube.delete(path, gracePeriodSeconds=0))
                pod_paths.append(path)
        wait_gone(kube, pod_paths, "pods")
        claim_paths: list[str] = []
        for ns in self.namespaces:
            for c in kube.get(_pvcs_path(ns))["items"]:
                claim_paths.append(f"{_pvcs_path(ns)}/{segment(c['metadata']['name'])}")
        volume_paths = [
            f"/api/v1/persistentvolumes/{segment(v['metadata']['name'])}"
            for v in kube.get("/api/v1/persistentvolumes")["items"]
            if v["metadata"]["name"] in {str(x["name"]) for x in self.scenario.volumes}
            or str(v["metadata"]["name"]).startswith(self.provisioned_name(""))
        ]
        # ResourceClaims too, generated ones included: a scheduler's allocation (and its
        # delete-protection finalizer) must not reach the next run.
        for ns in self.namespaces:
            for c in kube.get(_claims_path(ns))["items"]:
                claim_paths.append(f"{_claims_path(ns)}/{segment(c['metadata']['name'])}")
        for path in [*claim_paths, *volume_paths]:
            _ignore_missing(lambda path=path: kube.delete(path))
            _ignore_missing(
                lambda path=path: kube.merge_patch(path, {"metadata": {"finalizers": None}})
            )
        wait_gone(kube, [*claim_paths, *volume_paths], "claims and volumes")

    def teardown(self, kube: KubeApi) -> None:
        s = self.scenario
        errors: list[str] = []

        def attempt(what: str, call: Any) -> None:
            try:
                call()
            except Exception as exc:  # every step is tried; the first failures are reported
                errors.append(f"{what}: {exc}")

        attempt("pods, claims and volumes", lambda: self.depopulate(kube))
        for spec in s.pdbs:
            ns = segment(self.pod_namespace(spec))
            path = f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/{spec['name']}"
            attempt(
                f"pdb {spec['name']}", lambda path=path: _ignore_missing(lambda: kube.delete(path))
            )
        for svc in s.services:
            path = f"/api/v1/namespaces/{self.namespace}/services/{svc['name']}"
            attempt(
                f"service {svc['name']}",
                lambda path=path: _ignore_missing(lambda: kube.delete(path)),
            )
        for ns in self.namespaces:
            attempt(f"namespace {ns}", lambda ns=ns: objects.delete_namespace(kube, ns))
        for pc in self.priority_classes():
            path = f"/apis/scheduling.k8s.io/v1/priorityclasses/{pc['metadata']['name']}"
            attempt(
                f"priorityclass {path}",
                lambda path=path: _ignore_missing(lambda: kube.delete(path)),
            )
        for sc in s.storage_classes:
            path = f"/apis/storage.k8s.io/v1/storageclasses/{sc['name']}"
            attempt(
                f"storageclass {sc['name']}",
                lambda path=path: _ignore_missing(lambda: kube.delete(path)),
            )
        for sl in s.slices:
            path = f"{RESOURCE_API}/resourceslices/{sl['name']}"
            attempt(
                f"resourceslice {sl['name']}",
                lambda path=path: _ignore_missing(lambda: kube.delete(path)),
            )
        for dc in s.device_classes:
            path = f"{RESOURCE_API}/deviceclasses/{dc['name']}"
            attempt(
                f"deviceclass {dc['name']}",
                lambda path=path: _ignore_missing(lambda: kube.delete(path)),
            )
        node_names = [str(n["name"]) for n in s.nodes]
        for name in node_names:
            path = f"/apis/storage.k8s.io/v1/csinodes/{name}"
            attempt(f"csinode {name}", lambda path=path: _ignore_missing(lambda: kube.delete(path)))
        attempt("nodes", lambda: objects.delete_nodes(kube, node_names))
        # Nodes must be gone before the next scenario: both schedulers see every node.
        attempt(
            "nodes gone",
            lambda: wait_gone(kube, [f"/api/v1/nodes/{n}" for n in node_names], "nodes"),
        )
        if errors:
            raise RuntimeError("scenario cleanup failed: " + "; ".join(errors[:5]))

    def key(self, namespace: str, name: str) -> str:
        """How outcomes name a pod or claim: bare in the scenario's namespace, else ns/name."""
        return name if namespace == self.namespace else f"{namespace}/{name}"

    def claims_state(self, kube: KubeApi) -> tuple[tuple[str, str, str], ...]:
        out: list[tuple[str, str, str]] = []
        for ns in self.namespaces:
            for c in kube.get(_pvcs_path(ns))["items"]:
                ann = c["metadata"].get("annotations") or {}
                out.append(
                    (
                        self.key(ns, c["metadata"]["name"]),
                        str(c["spec"].get("volumeName") or ""),
                        str(ann.get(ANN_SELECTED_NODE, "")),
                    )
                )
        return tuple(sorted(out))

    def devices_state(self, kube: KubeApi) -> tuple[tuple[str, str], ...]:
        """Every ResourceClaim of the scenario's namespaces with its allocation
        (`device_claim_key`, `device_allocation`)."""
        out: list[tuple[str, str]] = []
        for ns in self.namespaces:
            pods = {p["metadata"]["uid"] for p in kube.get(_pods_path(ns))["items"]}
            for c in kube.get(_claims_path(ns))["items"]:
                owners = [
                    o for o in c["metadata"].get("ownerReferences") or () if o.get("kind") == "Pod"
                ]
                if owners and owners[0].get("uid") not in pods:
                    continue  # its pod is gone; the garbage collector deletes it in its time
                out.append((self.key(ns, device_claim_key(c)), device_allocation(c)))
        return tuple(sorted(out))


class VolumeController(threading.Thread):
    """The parts of the PersistentVolume controller and of a CSI provisioner the scenarios
    need, for the scenario's own claims only: a volume a scheduler gave a claimRef binds its
    claim; a claim a scheduler gave ``volume.kubernetes.io/selected-node`` gets a volume made
    for it (node affinity: that node) and is bound to it. Claims nobody touched stay as they
    are: an unbound Immediate claim stays unbound, as the scenarios want."""

    def __init__(self, kube: KubeApi, world: World) -> None:
        super().__init__(name=f"volume-controller-{world.namespace}", daemon=True)
        self.kube = kube
        self.world = world
        self.halt = threading.Event()
        self.error: Exception | None = None
        self.idle = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                busy = self.sync()
            except ApiError as exc:
                if exc.status != 409:  # a conflict is retried at the next pass
                    self.error = self.error or exc
                busy = True
            except Exception as exc:  # reported by stop(); the run must not hang on it
                self.error = self.error or exc
                busy = False
            if busy:
                self.idle.clear()
            else:
                self.idle.set()
            self.halt.wait(0.1)

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=10)
        if self.error is not None:
            raise RuntimeError(f"the harness's volume controller failed: {self.error}")

    def settled(self, timeout: float = 5.0) -> None:
        """Waits until no binding the controller should complete is left."""
        self.idle.clear()
        self.idle.wait(timeout)

    def sync(self) -> bool:
        """One pass; True if something was done (or is still to do)."""
        kube, world = self.kube, self.world
        claims: dict[tuple[str, str], JSON] = {}
        for ns in world.namespaces:
            for c in kube.get(_pvcs_path(ns))["items"]:
                claims[(ns, c["metadata"]["name"])] = c
        volumes = {v["metadata"]["name"]: v for v in kube.get("/api/v1/persistentvolumes")["items"]}
        classes = {str(c["name"]): c for c in world.scenario.storage_classes}
        busy = False
        for pv_name, pv in volumes.items():
            ref = pv["spec"].get("claimRef") or {}
            claim = claims.get((str(ref.get("namespace", "")), str(ref.get("name", ""))))
            if claim is None or claim["metadata"]["uid"] != ref.get("uid"):
                continue
            if claim["spec"].get("volumeName") and (
                (claim.get("status") or {}).get("phase") == "Bound"
            ):
                continue
            if claim["spec"].get("volumeName") not in (None, "", pv_name):
                continue
            log.info("volume controller: binding claim %s to %s", ref.get("name"), pv_name)
            bind_claim(kube, claim, pv_name, str(pv["spec"]["capacity"]["storage"]))
            busy = True
        for (_, name), claim in claims.items():
            ann = claim["metadata"].get("annotations") or {}
            node = ann.get(ANN_SELECTED_NODE)
            if not node or claim["spec"].get("volumeName"):
                continue
            sc = classes.get(str(claim["spec"].get("storageClassName") or ""))
            if sc is None or sc.get("provisioner", NO_PROVISIONER) == NO_PROVISIONER:
                continue
            pv_name = world.provisioned_name(name)
            if pv_name not in volumes:
                log.info(
                    "volume controller: provisioning %s for claim %s on %s", pv_name, name, node
                )
                size = str(claim["spec"]["resources"]["requests"]["storage"])
                pv = pv_object(
                    {
                        "name": pv_name,
                        "storageClassName": sc["name"],
                        "capacity": size,
                        "accessModes": claim["spec"].get("accessModes"),
                        "source": {
                            "csi": {"driver": str(sc["provisioner"]), "volumeHandle": pv_name}
                        },
                        "nodeAffinity": {
                            "required": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchExpressions": [
                                            {
                                                "key": "kubernetes.io/hostname",
                                                "operator": "In",
                                                "values": [node],
                                            }
                                        ]
                                    }
                                ]
                            }
                        },
                    },
                    claim_ref(claim),
                )
                pv["metadata"]["annotations"][ANN_PROVISIONED_BY] = str(sc["provisioner"])
                kube.create("/api/v1/persistentvolumes", pv)
            busy = True
        return busy


# --- outcomes --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    node: str  # "" when pending
    reason: str = ""
    message: str = ""

    def __str__(self) -> str:
        return f"bound to {self.node}" if self.node else f"pending: {self.reason}: {self.message}"


@dataclass(frozen=True)
class StepOutcome:
    """What one scheduler did with one incoming pod (sequence mode)."""

    node: str  # "" when pending at the end
    # The first and the last PodScheduled=False condition ("reason: message") while pending.
    first: str = ""
    last: str = ""
    # Nodes the pod was nominated to by a failed attempt (preemption), in order.
    nominated: tuple[str, ...] = ()
    victims: tuple[str, ...] = ()  # pods deleted, terminating or marked DisruptionTarget
    cleared: tuple[str, ...] = ()  # other pods whose nomination went away while pending
    claims: tuple[tuple[str, str, str], ...] = ()  # (claim, volumeName, selected-node), all
    devices: tuple[tuple[str, str], ...] = ()  # (ResourceClaim, allocation), all

    def __str__(self) -> str:
        parts = [f"bound to {self.node}" if self.node else "pending"]
        if self.first:
            parts.append(f"first condition {self.first!r}")
        if self.last and self.last != self.first:
            parts.append(f"last condition {self.last!r}")
        if self.nominated:
            parts.append(f"nominated {list(self.nominated)}")
        if self.victims:
            parts.append(f"victims {list(self.victims)}")
        if self.cleared:
            parts.append(f"cleared nominations of {list(self.cleared)}")
        if self.claims:
            parts.append(
                "claims " + ", ".join(f"{c}->{v or '-'}@{n or '-'}" for c, v, n in self.claims)
            )
        if self.devices:
            parts.append(
                "device claims " + ", ".join(f"{c}->{a or 'unallocated'}" for c, a in self.devices)
            )
        return "; ".join(parts)


def _scheduled_condition(pod: JSON) -> JSON | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return dict(c)
    return None


def _disrupted(pod: JSON) -> bool:
    if pod["metadata"].get("deletionTimestamp"):
        return True
    return any(
        c.get("type") == "DisruptionTarget" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def wait_outcome(kube: KubeApi, namespace: str, name: str, timeout: float = 30.0) -> Outcome:
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
                if time.monotonic() - gated_since < GATED_SETTLE:
                    time.sleep(0.1)
                    continue
            return Outcome("", str(cond.get("reason", "")), str(cond.get("message", "")))
        time.sleep(0.05)
    raise TimeoutError(f"pod {namespace}/{name}: no scheduling outcome within {timeout:g}s")


class PodWatch:
    """Every change to the pods of the scenario's namespaces during one run, in order. A
    preemptor's nomination and its PodScheduled=False condition may last only milliseconds
    (the binding clears both), so they are read from watch events, never polled."""

    def __init__(self, kube: KubeApi, world: World) -> None:
        self.kube = kube
        self.world = world
        self.lock = threading.Lock()
        self.pods: dict[str, JSON] = {}
        self.log: list[tuple[float, str, JSON | None]] = []
        self.halt = threading.Event()
        self.error: Exception | None = None
        self.threads: list[threading.Thread] = []
        for ns in world.namespaces:
            listed = kube.get(_pods_path(ns))
            for p in listed["items"]:
                self.pods[world.key(ns, p["metadata"]["name"])] = p
            thread = threading.Thread(
                target=self._watch,
                args=(ns, str(listed["metadata"]["resourceVersion"])),
                name=f"pod-watch-{ns}",
                daemon=True,
            )
            self.threads.append(thread)
        for thread in self.threads:
            thread.start()

    def _watch(self, namespace: str, rv: str) -> None:
        while not self.halt.is_set():
            try:
                for event in self.kube.watch(
                    _pods_path(namespace),
                    timeout_seconds=5,
                    resourceVersion=rv,
                    bookmarks=True,
                ):
                    obj = event["object"]
                    if event["type"] == "ERROR":
                        raise RuntimeError(f"pod watch in {namespace} failed: {obj}")
                    rv = str(obj["metadata"].get("resourceVersion") or rv)
                    if event["type"] == "BOOKMARK":
                        continue
                    key = self.world.key(namespace, obj["metadata"]["name"])
                    with self.lock:
                        if event["type"] == "DELETED":
                            self.pods.pop(key, None)
                            self.log.append((time.monotonic(), key, None))
                        else:
                            self.pods[key] = obj
                            self.log.append((time.monotonic(), key, obj))
                    if self.halt.is_set():
                        return
            except Exception as exc:  # reported by check(); the run stops on it
                self.error = self.error or exc
                return

    def check(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"watching the scenario's pods failed: {self.error}")

    def position(self) -> tuple[int, dict[str, JSON]]:
        with self.lock:
            return len(self.log), dict(self.pods)

    def since(self, index: int) -> list[tuple[float, str, JSON | None]]:
        with self.lock:
            return self.log[index:]

    def list_now(self) -> dict[str, JSON]:
        """The scenario's pods as a (consistent) list shows them now."""
        out: dict[str, JSON] = {}
        for ns in self.world.namespaces:
            for p in self.kube.get(_pods_path(ns))["items"]:
                out[self.world.key(ns, p["metadata"]["name"])] = p
        return out

    def current(self, key: str) -> JSON | None:
        with self.lock:
            return self.pods.get(key)

    def wait_absent(self, key: str, timeout: float = 30.0) -> None:
        """Until the watch has delivered ``key``'s deletion. The API server answers a
        deleted pod's GET with 404 before its watch stream carries the DELETED event (late
        under load): a step that took its ``before`` meanwhile would see the harness's own
        deletion arrive during it and count the pod among its victims."""
        deadline = time.monotonic() + timeout
        while True:
            self.check()
            with self.lock:
                if key not in self.pods:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"pod {key}: its deletion did not reach the watch in {timeout:g}s"
                )
            time.sleep(0.01)

    def stop(self) -> None:
        self.halt.set()
        for thread in self.threads:
            thread.join(timeout=10)


def observe_step(
    watch: PodWatch, name: str, start: int, before: Mapping[str, JSON], timeout: float = 60.0
) -> StepOutcome:
    """Follows the incoming pod ``name`` (in the scenario's namespace) and the scenario's
    other pods, event by event from log position ``start``, until the pod is bound, or
    pending with nothing changing for a while."""
    first = last = ""
    nominated: list[str] = []
    victims: set[str] = set()
    cleared: set[str] = set()
    node = nnn = ""
    cond: JSON | None = None
    created = False
    changed_at = time.monotonic()
    deadline = changed_at + timeout
    index = start
    while True:
        watch.check()
        for at, key, obj in watch.since(index):
            index += 1
            changed_at = max(changed_at, at)
            if key == name:
                if obj is None:
                    raise AssertionError(f"incoming pod {name} was deleted while being scheduled")
                created = True
                node = str(obj["spec"].get("nodeName") or "")
                nnn = str((obj.get("status") or {}).get("nominatedNodeName") or "")
                cond = _scheduled_condition(obj)
                failed = cond is not None and cond.get("reason") != "SchedulingGated"
                # A nomination that comes with a failed attempt is preemption's (the
                # binding cycle's expectation, NominatedNodeNameForExpectation, comes with
                # none and is not compared).
                if not node and nnn and failed and (not nominated or nominated[-1] != nnn):
                    nominated.append(nnn)
                if cond is not None:
                    last = f"{cond.get('reason', '')}: {cond.get('message', '')}"
                    if cond.get("reason") != "SchedulingGated":
                        first = first or last
                continue
            old = before.get(key)
            if old is None:
                continue
            if not _disrupted(old) and (obj is None or _disrupted(obj)):
                victims.add(key)
            if (
                obj is not None
                and (old.get("status") or {}).get("nominatedNodeName")
                and not (obj.get("status") or {}).get("nominatedNodeName")
                and not obj["spec"].get("nodeName")
            ):
                cleared.add(key)
        now = time.monotonic()
        if node:
            break
        if created and cond is not None:
            if cond.get("reason") == "SchedulingGated":
                need = GATED_SETTLE
            elif nnn:
                need = NOMINATED_SETTLE
            else:
                need = PENDING_SETTLE
            if now - changed_at >= need:
                break
        if now > deadline:
            raise TimeoutError(f"pod {name}: no settled scheduling outcome within {timeout:g}s")
        time.sleep(0.02)
    # Each namespace has its own watch stream, so a victim's deletion in another namespace
    # may not have arrived when the pod's binding did: a consistent list settles the rest.
    present = watch.list_now()
    for key, old in before.items():
        current = present.get(key)
        if not _disrupted(old) and (current is None or _disrupted(current)):
            victims.add(key)
    return StepOutcome(
        node=node,
        first=first,
        last="" if node else last,
        nominated=tuple(nominated),
        victims=tuple(sorted(victims)),
        cleared=tuple(sorted(cleared)),
    )


# --- Berth's what-if, for declared ties --------------------------------------------------------


def best_nodes(
    kube: KubeApi, namespace: str, spec: dict[str, Any], scenario_ns: str = ""
) -> set[str]:
    """The nodes sharing the best score for this pod, by Berth's own explain over the
    cluster as it is now (a what-if, as ``berth place`` computes it). Ships every kind the
    profile's plugins read, as the shim does."""
    from berth.client import ClusterStateLog
    from berth.framework.config import parse_config
    from berth.plugins.registry import REGISTRY
    from berth.server.app import build_frameworks
    from berth.server.service import SchedulingService
    from berth.shim.objects import Source, collection_path, object_record

    cfg = parse_config(config(BERTH), "<differential>", REGISTRY)
    frameworks = build_frameworks(cfg, REGISTRY)
    service = SchedulingService(cfg, frameworks)
    state = ClusterStateLog()
    for n in kube.get("/api/v1/nodes")["items"]:
        state.upsert_node(node_record(n))
    for p in kube.get("/api/v1/pods")["items"]:
        rec = pod_record(p)
        if occupies_node(rec) or (rec.nominated_node_name and not rec.node_name):
            state.upsert_pod(rec)
    for read in frameworks[BERTH].reads:
        kind = read.kind
        source = Source(
            kind.group,
            kind.version,
            kind.resource,
            kind.kind,
            kind.poll_seconds,
            kind.label_selector,
        )
        params = {"labelSelector": kind.label_selector} if kind.label_selector else {}
        for item in kube.get(collection_path(kind.group, kind.version, kind.resource), **params)[
            "items"
        ]:
            state.upsert_object(object_record(source, item))
    state.commit()
    obj = pod_object(spec, namespace, BERTH, scenario_ns)
    obj["metadata"]["uid"] = "what-if"
    obj["spec"]["priority"] = _class_value(kube, obj["spec"].get("priorityClassName"))
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


def _class_value(kube: KubeApi, name: str | None) -> int:
    """The priority admission would give a pod of PriorityClass ``name``."""
    if not name:
        return 0
    return int(kube.get(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")["value"])


# --- comparing -------------------------------------------------------------------------------


@dataclass
class Comparison:
    pod: str
    upstream: Outcome | StepOutcome
    berth: Outcome | StepOutcome
    tied: set[str]
    declared_tie: set[str] = field(default_factory=set)
    # What upstream did that the scenario's ``expect`` says it should not have.
    unexpected: list[str] = field(default_factory=list)
    profile: str = BERTH  # which Berth (BERTH_PROFILES)

    @property
    def agrees(self) -> bool:
        u, b = self.upstream, self.berth
        if isinstance(u, StepOutcome) and isinstance(b, StepOutcome) and u.node and b.node:
            if (u.first, u.nominated, u.victims, u.cleared) != (
                b.first,
                b.nominated,
                b.victims,
                b.cleared,
            ):
                return False
            if not self.declared_tie and (u.claims, u.devices) != (b.claims, b.devices):
                return False
        if u.node and b.node:
            if not self.declared_tie:
                return u.node == b.node
            return (
                self.tied == self.declared_tie
                and u.node in self.declared_tie
                and b.node in self.declared_tie
            )
        if not u.node and not b.node:
            if isinstance(u, StepOutcome):
                return u == b
            return isinstance(b, Outcome) and (u.reason, u.message) == (b.reason, b.message)
        return False

    def __str__(self) -> str:
        tie = f" (Berth's best: {sorted(self.tied)})" if len(self.tied) > 1 else ""
        if self.declared_tie:
            tie += f" (declared tie: {sorted(self.declared_tie)})"
        return f"{self.pod}: kube-scheduler {self.upstream}; {self.profile} {self.berth}{tie}"


def unexpected(spec: Mapping[str, Any], outcome: Outcome | StepOutcome) -> list[str]:
    """How upstream's outcome differs from the pod's ``expect`` (keys it leaves out are not
    checked)."""
    expect = spec.get("expect")
    if not expect:
        return []
    out: list[str] = []
    name = spec["name"]
    if "node" in expect and outcome.node != expect["node"]:
        out.append(f"{name}: expected bound to {expect['node']}, kube-scheduler: {outcome}")
    if expect.get("pending") and outcome.node:
        out.append(f"{name}: expected pending, kube-scheduler: {outcome}")
    if "message" in expect:
        got = outcome.message if isinstance(outcome, Outcome) else outcome.first.partition(": ")[2]
        if got != expect["message"]:
            out.append(f"{name}: expected message {expect['message']!r}, kube-scheduler: {got!r}")
    if isinstance(outcome, StepOutcome):
        if "nominated" in expect:
            want = tuple([expect["nominated"]] if expect["nominated"] else [])
            if outcome.nominated != want:
                out.append(f"{name}: expected nominated {list(want)}, kube-scheduler: {outcome}")
        if "victims" in expect and outcome.victims != tuple(sorted(expect["victims"])):
            out.append(
                f"{name}: expected victims {sorted(expect['victims'])}, kube-scheduler: {outcome}"
            )
        if "cleared" in expect and outcome.cleared != tuple(sorted(expect["cleared"])):
            out.append(
                f"{name}: expected cleared nominations {sorted(expect['cleared'])}, "
                f"kube-scheduler: {outcome}"
            )
        if "devices" in expect:
            got_devices = dict(outcome.devices)
            for claim, allocation in expect["devices"].items():
                got = got_devices.get(claim, "").partition("@")[0]
                if got != allocation:
                    out.append(
                        f"{name}: expected claim {claim} allocated {allocation!r}, "
                        f"kube-scheduler: {got!r}"
                    )
        if "claims" in expect:
            got_claims = {c: v for c, v, _ in outcome.claims}
            for claim, volume in expect["claims"].items():
                if got_claims.get(claim) != volume:
                    out.append(
                        f"{name}: expected claim {claim} bound to {volume!r}, kube-scheduler: "
                        f"{got_claims.get(claim)!r}"
                    )
    return out


# --- running ---------------------------------------------------------------------------------


def run(
    kube: KubeApi,
    scenario: Scenario,
    namespace: str,
    *,
    berth: Sequence[str] = BERTH_PROFILES,
) -> list[Comparison]:
    """Creates the scenario's objects, compares each incoming pod under kube-scheduler with
    each Berth profile of ``berth``, removes the objects. With ``berth`` empty only
    kube-scheduler runs (the scenario's ``expect`` is still checked; one Comparison per pod
    repeats upstream's outcome as Berth's)."""
    world = World(scenario, namespace)
    try:
        world.setup(kube)
        if scenario.mode == SEQUENCE:
            return _run_sequence(kube, world, berth)
        return _run_interleaved(kube, world, berth)
    finally:
        world.teardown(kube)


def _run_interleaved(kube: KubeApi, world: World, berth: Sequence[str]) -> list[Comparison]:
    namespace = world.namespace
    world.populate(kube)
    out: list[Comparison] = []
    for spec in world.scenario.incoming:
        name = spec["name"]
        tied = best_nodes(kube, namespace, spec, namespace) if berth else set()
        kube.create(_pods_path(namespace), world.pod(spec, UPSTREAM))
        upstream = wait_outcome(kube, namespace, name)
        delete_pod(kube, namespace, name)
        theirs: dict[str, Outcome] = {}
        for profile in berth:
            kube.create(_pods_path(namespace), world.pod(spec, profile))
            theirs[profile] = wait_outcome(kube, namespace, name)
            delete_pod(kube, namespace, name)
        for profile in berth or (BERTH,):
            out.append(
                Comparison(
                    name,
                    upstream,
                    theirs.get(profile, upstream),
                    tied if berth else ({upstream.node} if upstream.node else set()),
                    set(spec.get("tie") or ()) if berth else set(),
                    unexpected(spec, upstream),
                    profile,
                )
            )
        if upstream.node:
            # The next pod sees this one where kube-scheduler put it, on every side.
            kube.create(_pods_path(namespace), world.pod({**spec, "node": upstream.node}, "nobody"))
    return out


def _run_once(
    kube: KubeApi, world: World, scheduler: str, ties: dict[str, set[str]] | None
) -> list[StepOutcome]:
    """One scheduler runs the whole incoming list on a fresh copy of the scenario. With
    ``ties`` (upstream's run), Berth's what-if is taken for pods that declare a tie."""
    world.populate(kube)
    time.sleep(INFORMER_SETTLE)
    controller = VolumeController(kube, world)
    controller.start()
    watch = PodWatch(kube, world)
    outcomes: list[StepOutcome] = []
    try:
        for spec in world.scenario.incoming:
            name = spec["name"]
            if ties is not None and spec.get("tie"):
                ties[name] = best_nodes(kube, world.namespace, spec, world.namespace)
            start, before = watch.position()
            kube.create(_pods_path(world.namespace), world.pod(spec, scheduler))
            step = observe_step(watch, name, start, before)
            controller.settled()
            step = StepOutcome(
                **{
                    **step.__dict__,
                    "claims": world.claims_state(kube),
                    "devices": world.devices_state(kube),
                }
            )
            outcomes.append(step)
            log.info("%s %s %s: %s", world.namespace, scheduler, name, step)
            pod = watch.current(name) or {}
            if not step.node and not (pod.get("status") or {}).get("nominatedNodeName"):
                # A pending pod with no nomination counts for nothing later: remove it, as the
                # interleaved mode does, so it cannot take room freed for a later pod.
                delete_pod(kube, world.namespace, name)
                watch.wait_absent(world.key(world.namespace, name))
    finally:
        watch.stop()
        controller.stop()
        world.depopulate(kube)
    return outcomes


def _run_sequence(kube: KubeApi, world: World, berth: Sequence[str]) -> list[Comparison]:
    ties: dict[str, set[str]] = {}
    upstream = _run_once(kube, world, UPSTREAM, ties if berth else None)
    runs = {profile: _run_once(kube, world, profile, None) for profile in berth}
    out: list[Comparison] = []
    for profile in berth or (BERTH,):
        theirs = runs.get(profile, upstream)
        for spec, u, b in zip(world.scenario.incoming, upstream, theirs, strict=True):
            tied = ties.get(spec["name"], set()) if berth else ({u.node} if u.node else set())
            out.append(
                Comparison(
                    spec["name"],
                    u,
                    b,
                    tied,
                    set(spec.get("tie") or ()) if berth else set(),
                    unexpected(spec, u),
                    profile,
                )
            )
    return out


def delete_pod(kube: KubeApi, namespace: str, name: str) -> None:
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"
    try:
        kube.delete(path, gracePeriodSeconds=0)
    except ApiError as exc:
        if exc.status != 404:
            raise
    wait_gone(kube, [path], f"pod {namespace}/{name}")
