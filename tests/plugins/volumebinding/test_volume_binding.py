"""VolumeBinding: the cases of upstream's volume_binding_test.go (TestVolumeBinding,
Test_PreBindPreFlight), binder_test.go (TestFindPodVolumesWithoutProvisioning,
TestFindPodVolumesWithProvisioning, TestFindPodVolumesWithCSIMigration,
TestAssumePodVolumes, TestBindAPIUpdate, TestFindAssumeVolumes, TestCapacity) and
scorer_test.go (TestScore), over Berth's snapshot; the assumptions in flight that
replace upstream's assume caches; args and configuration."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.config import ConfigError, load_config, parse_config
from berth.framework.csi_translation import (
    MIGRATED_PLUGINS_ANNOTATION,
)
from berth.framework.cycle_state import CycleState
from berth.framework.model import PodInfo
from berth.framework.objects import ObjectWrite
from berth.framework.runtime import Framework
from berth.framework.snapshot import Snapshot
from berth.framework.status import SUCCESS, Code, Status
from berth.framework.storage import (
    CSI_NODES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    STORAGE_CLASSES,
)
from berth.framework.testing import fresh_state, handle_for, make_node, make_object, snapshot_of
from berth.plugins.registry import REGISTRY
from berth.plugins.volumebinding import (
    ASSUMED_ANNOTATION,
    CHOSEN,
    CLAIMS,
    CSI_DRIVERS,
    CSI_STORAGE_CAPACITIES,
    DEFAULT_SHAPE,
    ERR_REASON_BIND_CONFLICT,
    ERR_REASON_NODE_CONFLICT,
    ERR_REASON_NOT_ENOUGH_SPACE,
    ERR_REASON_PV_NOT_EXIST,
    REASON_UNBOUND_IMMEDIATE,
    PodClaims,
    UtilizationShapePoint,
    VolumeBinding,
    VolumeBindingArgs,
    build_scorer,
)
from berth.plugins.volumebinding.binder import (
    ChosenVolumes,
    assumed_in_flight,
    encode_assumed,
)
from berth.plugins.volumebinding.volumes import AssumedClaim, AssumedVolume, AssumedVolumes

EXAMPLE = Path(__file__).resolve().parents[3] / "deploy" / "examples" / "volumebinding"
HOSTNAME = "kubernetes.io/hostname"
GI = 2**30

# -- builders (upstream's test_utils.go and binder_test.go makeTest* helpers) ------------


def sc(
    name: str,
    mode: str | None = "WaitForFirstConsumer",
    provisioner: str = "",
    topologies: list[dict[str, Any]] | None = None,
) -> pb.ClusterObject:
    fields: dict[str, Any] = {}
    if mode is not None:
        fields["volumeBindingMode"] = mode
    if provisioner:
        fields["provisioner"] = provisioner
    if topologies is not None:
        fields["allowedTopologies"] = topologies
    return make_object(STORAGE_CLASSES, name, **fields)


def pvc(
    name: str,
    storage_class: str | None,
    *,
    namespace: str = "default",
    request: str | None = None,
    bound_pv: str = "",
    prebound_pv: str = "",
    phase: str = "",
    selected_node: str | None = None,
    rv: str = "1",
    uid: str = "pvc-uid",
    owner_uid: str = "",
    deleting: bool = False,
    access_modes: Sequence[str] = (),
    selector: dict[str, Any] | None = None,
    volume_mode: str = "Filesystem",
) -> pb.ClusterObject:
    annotations: dict[str, str] = {}
    spec: dict[str, Any] = {"volumeMode": volume_mode}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    if request is not None:
        spec["resources"] = {"requests": {"storage": request}}
    if bound_pv:
        spec["volumeName"] = bound_pv
        annotations["pv.kubernetes.io/bind-completed"] = "yes"
    if prebound_pv:
        spec["volumeName"] = prebound_pv
    if selected_node is not None:
        annotations["volume.kubernetes.io/selected-node"] = selected_node
    if access_modes:
        spec["accessModes"] = list(access_modes)
    if selector is not None:
        spec["selector"] = selector
    obj = make_object(
        PERSISTENT_VOLUME_CLAIMS,
        name,
        namespace,
        annotations=annotations,
        spec=spec,
        status={"phase": phase} if phase else {},
    )
    data = json.loads(obj.json)
    meta = data["metadata"]
    meta.update(uid=uid, resourceVersion=rv)
    if owner_uid:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": owner_uid, "controller": True}
        ]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    obj.json = json.dumps(data).encode()
    return obj


def pv(
    name: str,
    storage_class: str,
    *,
    capacity: str | None = None,
    phase: str = "Available",
    affinity: Mapping[str, Sequence[str]] | None = None,
    claim: tuple[str, str, str] | None = None,
    rv: str = "1",
    labels: Mapping[str, str] | None = None,
    access_modes: Sequence[str] = (),
    source: Mapping[str, Any] | None = None,
    volume_mode: str = "Filesystem",
    bound_by_controller: bool = False,
) -> pb.ClusterObject:
    spec: dict[str, Any] = {"storageClassName": storage_class, "volumeMode": volume_mode}
    if capacity is not None:
        spec["capacity"] = {"storage": capacity}
    if affinity is not None:
        spec["nodeAffinity"] = {
            "required": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": k, "operator": "In", "values": list(v)}
                            for k, v in affinity.items()
                        ]
                    }
                ]
            }
        }
    if claim is not None:
        ns, claim_name, uid = claim
        spec["claimRef"] = {"kind": "PersistentVolumeClaim", "namespace": ns, "name": claim_name}
        if uid:
            spec["claimRef"]["uid"] = uid
    if access_modes:
        spec["accessModes"] = list(access_modes)
    if source is not None:
        spec.update(source)
    annotations = {"pv.kubernetes.io/bound-by-controller": "yes"} if bound_by_controller else {}
    obj = make_object(
        PERSISTENT_VOLUMES,
        name,
        labels=labels,
        annotations=annotations,
        spec=spec,
        status={"phase": phase},
    )
    data = json.loads(obj.json)
    data["metadata"]["resourceVersion"] = rv
    obj.json = json.dumps(data).encode()
    return obj


def csi_driver(name: str, storage_capacity: bool) -> pb.ClusterObject:
    return make_object(CSI_DRIVERS, name, spec={"storageCapacity": storage_capacity})


def capacity(
    name: str,
    storage_class: str,
    match_labels: Mapping[str, str] | None,
    cap: str = "",
    max_size: str = "",
) -> pb.ClusterObject:
    """makeCapacity: None labels is network-attached storage (an empty
    nodeTopology selects every node)."""
    fields: dict[str, Any] = {
        "storageClassName": storage_class,
        "nodeTopology": {"matchLabels": dict(match_labels)} if match_labels else {},
    }
    if cap:
        fields["capacity"] = cap
    if max_size:
        fields["maximumVolumeSize"] = max_size
    return make_object(CSI_STORAGE_CAPACITIES, name, **fields)


def csi_node(name: str, migrated: str) -> pb.ClusterObject:
    return make_object(CSI_NODES, name, annotations={MIGRATED_PLUGINS_ANNOTATION: migrated})


def node(name: str, **labels: str) -> pb.Node:
    return make_node(name).labels(**{HOSTNAME: name}).labels(**labels).obj()


def pod_using(
    name: str = "pod-a",
    claims: Iterable[str] = (),
    *,
    namespace: str = "default",
    ephemeral: Iterable[str] = (),
    uid: str = "pod-uid",
    node_name: str = "",
    annotations: Mapping[str, str] | None = None,
) -> pb.Pod:
    p = pb.Pod(uid=uid, name=name, namespace=namespace, node_name=node_name)
    for i, c in enumerate(claims):
        p.volumes.add(name=f"vol{i}", claim_name=c)
        p.pvc_names.append(c)
    for v in ephemeral:
        p.volumes.add(name=v, claim_name=f"{name}-{v}", ephemeral=True)
    p.annotations.update(annotations or {})
    return p


# -- a cycle ---------------------------------------------------------------------------


@dataclass
class Cycle:
    snapshot: Snapshot
    plugin: VolumeBinding
    pod: PodInfo
    state: CycleState = field(default_factory=fresh_state)

    def pre_filter(self) -> Status:
        _, st = self.plugin.pre_filter(self.state, self.pod, self.snapshot.all_nodes())
        return st

    def filter(self, names: Sequence[str]) -> list[Status]:
        verdicts = self.plugin.filter_nodes(self.state, self.pod, self.snapshot.batch(names))
        return [verdicts.status_of(k) for k in range(len(names))]

    def scores(self, names: Sequence[str]) -> list[int]:
        return [
            int(s)
            for s in self.plugin.score_nodes(self.state, self.pod, self.snapshot.batch(names))
        ]


def cycle(
    pod: pb.Pod,
    nodes: Iterable[pb.Node],
    objects: Iterable[pb.ClusterObject],
    *,
    scoring: bool = False,
    args: VolumeBindingArgs | None = None,
    pods: Iterable[pb.Pod] = (),
) -> Cycle:
    snap = snapshot_of(nodes, pods, objects)
    plugin = VolumeBinding(args, handle_for(snap), storage_capacity_scoring=scoring)
    return Cycle(snap, plugin, PodInfo(pod))


def unresolvable(*reasons: str) -> Status:
    return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reasons)


# -- TestVolumeBinding ---------------------------------------------------------------

IMMEDIATE_SC = sc("immediate-sc", "Immediate")
WAIT_SC = sc("wait-sc")
WAIT_HDD_SC = sc("wait-hdd-sc")
WAIT_SC_CAP = sc("wait-sc-with-storage-capacity", provisioner="driver-with-storage-capacity")
DRIVER_WITH_CAPACITY = csi_driver("driver-with-storage-capacity", True)
COMMON = [IMMEDIATE_SC, WAIT_SC, WAIT_HDD_SC, WAIT_SC_CAP, DRIVER_WITH_CAPACITY]
# volume_binding_test.go, defaultShapePoint (the test's, not the scheduler's default).
TEST_SHAPE = [UtilizationShapePoint(0, 0), UtilizationShapePoint(100, 10)]
NODE_KEY = "nodeKey"


def _on(name: str, key: str = HOSTNAME) -> dict[str, list[str]]:
    return {key: [name]}


def _zone(region: str, zone: str) -> dict[str, list[str]]:
    return {"topology.kubernetes.io/region": [region], "topology.kubernetes.io/zone": [zone]}


def _zonal_nodes() -> list[pb.Node]:
    return [
        node(
            f"zone-{z}-node-{n}",
            **{
                "topology.kubernetes.io/region": f"region-{z}",
                "topology.kubernetes.io/zone": f"zone-{z}",
            },
        )
        for z in "abc"
        for n in "ab"
    ]


def _zonal_pvs() -> list[pb.ClusterObject]:
    return [
        pv(f"pv-{z}-{i}", "wait-sc", capacity=size, affinity=_zone(f"region-{z}", f"zone-{z}"))
        for z, size in (("a", "200Gi"), ("b", "100Gi"))
        for i in range(2)
    ]


def _cap_nodes() -> list[pb.Node]:
    return [node(n, **{NODE_KEY: n}) for n in ("node-a", "node-b", "node-c")]


@dataclass
class Case:
    pod: pb.Pod
    nodes: list[pb.Node]
    objects: list[pb.ClusterObject] = field(default_factory=list)
    scoring: bool = False
    args: VolumeBindingArgs | None = None
    pre_filter: Status = SUCCESS
    claims: PodClaims | None = None
    filter: list[Status] = field(default_factory=list)
    pre_score_skip: bool = True
    scores: list[int] = field(default_factory=list)


VOLUME_BINDING_CASES = {
    "pod has not pvcs": Case(
        pod_using(), [node("node-a")], pre_filter=Status.skip(), filter=[SUCCESS]
    ),
    "all bound": Case(
        pod_using(claims=["pvc-a"]),
        [node("node-a")],
        [pvc("pvc-a", "wait-sc", bound_pv="pv-a"), pv("pv-a", "wait-sc")],
        claims=PodClaims(bound=("pvc-a",)),
        filter=[SUCCESS],
    ),
    "PVC does not exist": Case(
        pod_using(claims=["pvc-a"]),
        [node("node-a")],
        pre_filter=unresolvable('persistentvolumeclaim "pvc-a" not found'),
    ),
    "Part of PVCs do not exist": Case(
        pod_using(claims=["pvc-a", "pvc-b"]),
        [node("node-a")],
        [pvc("pvc-a", "wait-sc", bound_pv="pv-a")],
        pre_filter=unresolvable('persistentvolumeclaim "pvc-b" not found'),
    ),
    "immediate claims not bound": Case(
        pod_using(claims=["pvc-a"]),
        [node("node-a")],
        [pvc("pvc-a", "immediate-sc")],
        pre_filter=unresolvable(REASON_UNBOUND_IMMEDIATE),
    ),
    "unbound claims no matches": Case(
        pod_using(claims=["pvc-a"]),
        [node("node-a")],
        [pvc("pvc-a", "wait-sc")],
        claims=PodClaims(delay=("pvc-a",)),
        filter=[unresolvable(ERR_REASON_BIND_CONFLICT)],
    ),
    "bound and unbound unsatisfied": Case(
        pod_using(claims=["pvc-a", "pvc-b"]),
        [node("node-a", foo="barbar")],
        [
            pvc("pvc-a", "wait-sc", bound_pv="pv-a"),
            pvc("pvc-b", "wait-sc"),
            pv("pv-a", "wait-sc", affinity={"foo": ["bar"]}),
        ],
        claims=PodClaims(bound=("pvc-a",), delay=("pvc-b",)),
        filter=[unresolvable(ERR_REASON_NODE_CONFLICT, ERR_REASON_BIND_CONFLICT)],
    ),
    "pv not found": Case(
        pod_using(claims=["pvc-a"]),
        [node("node-a")],
        [pvc("pvc-a", "wait-sc", bound_pv="pv-a")],
        claims=PodClaims(bound=("pvc-a",)),
        filter=[unresolvable(ERR_REASON_PV_NOT_EXIST)],
    ),
    "pv not found claim lost": Case(
        pod_using(claims=["pvc-a"]),
        [node("node-a")],
        [pvc("pvc-a", "wait-sc", bound_pv="pv-a", phase="Lost")],
        pre_filter=unresolvable(
            'persistentvolumeclaim "pvc-a" bound to non-existent persistentvolume "pv-a"'
        ),
    ),
    "local volumes with close capacity are preferred": Case(
        pod_using(claims=["pvc-a"]),
        [node("node-a"), node("node-b"), node("node-c")],
        [
            pvc("pvc-a", "wait-sc", request="50Gi"),
            pv("pv-a-0", "wait-sc", capacity="200Gi", affinity=_on("node-a")),
            pv("pv-a-1", "wait-sc", capacity="200Gi", affinity=_on("node-a")),
            pv("pv-b-0", "wait-sc", capacity="100Gi", affinity=_on("node-b")),
            pv("pv-b-1", "wait-sc", capacity="100Gi", affinity=_on("node-b")),
        ],
        scoring=True,
        args=VolumeBindingArgs(bind_timeout_seconds=300, shape=TEST_SHAPE),
        claims=PodClaims(delay=("pvc-a",)),
        filter=[SUCCESS, SUCCESS, unresolvable(ERR_REASON_BIND_CONFLICT)],
        pre_score_skip=False,
        scores=[25, 50, 0],
    ),
    "local volumes with close capacity are preferred (multiple pvcs)": Case(
        pod_using(claims=["pvc-0", "pvc-1"]),
        [node("node-a"), node("node-b"), node("node-c")],
        [
            pvc("pvc-0", "wait-sc", request="50Gi"),
            pvc("pvc-1", "wait-hdd-sc", request="100Gi"),
            *(
                pv(f"pv-{n}-{i}", cls, capacity=size, affinity=_on(f"node-{n}"))
                for n, size in (("a", "200Gi"), ("b", "100Gi"))
                for i, cls in enumerate(("wait-sc", "wait-sc", "wait-hdd-sc", "wait-hdd-sc"))
            ),
        ],
        scoring=True,
        args=VolumeBindingArgs(bind_timeout_seconds=300, shape=TEST_SHAPE),
        claims=PodClaims(delay=("pvc-0", "pvc-1")),
        filter=[SUCCESS, SUCCESS, unresolvable(ERR_REASON_BIND_CONFLICT)],
        pre_score_skip=False,
        scores=[38, 75, 0],
    ),
    "zonal volumes with close capacity are preferred": Case(
        pod_using(claims=["pvc-a"]),
        _zonal_nodes(),
        [pvc("pvc-a", "wait-sc", request="50Gi"), *_zonal_pvs()],
        scoring=True,
        args=VolumeBindingArgs(bind_timeout_seconds=300, shape=TEST_SHAPE),
        claims=PodClaims(delay=("pvc-a",)),
        filter=[SUCCESS] * 4 + [unresolvable(ERR_REASON_BIND_CONFLICT)] * 2,
        pre_score_skip=False,
        scores=[25, 25, 50, 50, 0, 0],
    ),
    "zonal volumes with close capacity are preferred (custom shape)": Case(
        pod_using(claims=["pvc-a"]),
        _zonal_nodes(),
        [pvc("pvc-a", "wait-sc", request="50Gi"), *_zonal_pvs()],
        scoring=True,
        args=VolumeBindingArgs(
            bind_timeout_seconds=300,
            shape=[
                UtilizationShapePoint(0, 0),
                UtilizationShapePoint(50, 3),
                UtilizationShapePoint(100, 5),
            ],
        ),
        claims=PodClaims(delay=("pvc-a",)),
        filter=[SUCCESS] * 4 + [unresolvable(ERR_REASON_BIND_CONFLICT)] * 2,
        pre_score_skip=False,
        scores=[15, 15, 30, 30, 0, 0],
    ),
    "storage capacity score": Case(
        pod_using(claims=["pvc-dynamic"]),
        _cap_nodes(),
        [
            pvc("pvc-dynamic", "wait-sc-with-storage-capacity", request="10Gi"),
            capacity("node-a", "wait-sc-with-storage-capacity", {NODE_KEY: "node-a"}, "100Gi"),
            capacity("node-b", "wait-sc-with-storage-capacity", {NODE_KEY: "node-b"}, "50Gi"),
            capacity("node-c", "wait-sc-with-storage-capacity", {NODE_KEY: "node-c"}, "10Gi"),
        ],
        scoring=True,
        args=VolumeBindingArgs(bind_timeout_seconds=300, shape=TEST_SHAPE),
        claims=PodClaims(delay=("pvc-dynamic",)),
        filter=[SUCCESS] * 3,
        pre_score_skip=False,
        scores=[10, 20, 100],
    ),
    "storage capacity score with static binds": Case(
        pod_using(claims=["pvc-dynamic", "pvc-static"]),
        _cap_nodes(),
        [
            pvc("pvc-dynamic", "wait-sc-with-storage-capacity", request="10Gi"),
            pvc("pvc-static", "wait-sc", request="50Gi"),
            *(
                pv(f"pv-static-{n}", "wait-sc", capacity="100Gi", affinity=_on(f"node-{n}"))
                for n in "abc"
            ),
            capacity("node-a", "wait-sc-with-storage-capacity", {NODE_KEY: "node-a"}, "100Gi"),
            capacity("node-b", "wait-sc-with-storage-capacity", {NODE_KEY: "node-b"}, "50Gi"),
            capacity("node-c", "wait-sc-with-storage-capacity", {NODE_KEY: "node-c"}, "10Gi"),
        ],
        scoring=True,
        args=VolumeBindingArgs(bind_timeout_seconds=300, shape=TEST_SHAPE),
        claims=PodClaims(delay=("pvc-dynamic", "pvc-static")),
        filter=[SUCCESS] * 3,
        pre_score_skip=False,
        scores=[50, 50, 50],
    ),
    "dynamic provisioning with multiple PVCs of the same StorageClass": Case(
        pod_using(claims=["pvc-dynamic-0", "pvc-dynamic-1"]),
        [node("node-a", **{NODE_KEY: "node-a"})],
        [
            pvc("pvc-dynamic-0", "wait-sc-with-storage-capacity", request="50Gi"),
            pvc("pvc-dynamic-1", "wait-sc-with-storage-capacity", request="50Gi"),
            capacity("node-a", "wait-sc-with-storage-capacity", {NODE_KEY: "node-a"}, "100Gi"),
        ],
        scoring=True,
        args=VolumeBindingArgs(bind_timeout_seconds=300, shape=TEST_SHAPE),
        claims=PodClaims(delay=("pvc-dynamic-0", "pvc-dynamic-1")),
        filter=[SUCCESS],
        pre_score_skip=False,
        scores=[100],
    ),
    "prefer node with least allocatable": Case(
        pod_using(claims=["pvc-dynamic"]),
        _cap_nodes(),
        [
            pvc("pvc-dynamic", "wait-sc-with-storage-capacity", request="10Gi"),
            capacity("node-a", "wait-sc-with-storage-capacity", {NODE_KEY: "node-a"}, "100Gi"),
            capacity("node-b", "wait-sc-with-storage-capacity", {NODE_KEY: "node-b"}, "20Gi"),
            capacity("node-c", "wait-sc-with-storage-capacity", {NODE_KEY: "node-c"}, "10Gi"),
        ],
        scoring=True,
        args=VolumeBindingArgs(bind_timeout_seconds=300, shape=TEST_SHAPE),
        claims=PodClaims(delay=("pvc-dynamic",)),
        filter=[SUCCESS] * 3,
        pre_score_skip=False,
        scores=[10, 50, 100],
    ),
    "prefer node with maximum allocatable": Case(
        pod_using(claims=["pvc-dynamic"]),
        _cap_nodes(),
        [
            pvc("pvc-dynamic", "wait-sc-with-storage-capacity", request="10Gi"),
            capacity("node-a", "wait-sc-with-storage-capacity", {NODE_KEY: "node-a"}, "100Gi"),
            capacity("node-b", "wait-sc-with-storage-capacity", {NODE_KEY: "node-b"}, "20Gi"),
            capacity("node-c", "wait-sc-with-storage-capacity", {NODE_KEY: "node-c"}, "10Gi"),
        ],
        scoring=True,
        # The scheduler's own default shape with the gate on: (0, 10), (100, 0).
        args=VolumeBindingArgs(bind_timeout_seconds=300),
        claims=PodClaims(delay=("pvc-dynamic",)),
        filter=[SUCCESS] * 3,
        pre_score_skip=False,
        scores=[90, 50, 0],
    ),
}


@pytest.mark.parametrize("case", VOLUME_BINDING_CASES.values(), ids=VOLUME_BINDING_CASES.keys())
def test_volume_binding(case: Case) -> None:
    """TestVolumeBinding: PreFilter, the state it leaves, Filter per node, PreScore,
    Score per node."""
    c = cycle(case.pod, case.nodes, [*COMMON, *case.objects], scoring=case.scoring, args=case.args)
    assert c.pre_filter() == case.pre_filter
    if not case.pre_filter.is_success:
        return
    assert c.state.get(CLAIMS) == case.claims
    names = [n.name for n in case.nodes]
    assert c.filter(names) == case.filter
    pre_score = c.plugin.pre_score(c.state, c.pod, c.snapshot.batch(names))
    assert pre_score.is_skip is case.pre_score_skip
    if not pre_score.is_skip:
        assert c.scores(names) == case.scores


def test_pre_score_skips_without_the_storage_capacity_scoring_gate() -> None:
    """StorageCapacityScoring is alpha and off in v1.36: a plugin built as the
    configuration builds it never scores."""
    c = cycle(
        pod_using(claims=["pvc-a"]),
        [node("node-a")],
        [*COMMON, pvc("pvc-a", "wait-sc", request="1Gi"), pv("pv", "wait-sc", capacity="2Gi")],
    )
    assert c.pre_filter().is_success
    assert c.plugin.pre_score(c.state, c.pod, c.snapshot.all_nodes()).is_skip
    assert c.scores(["node-a"]) == [0]


# -- TestScore (scorer.go) ---------------------------------------------------------------

HDD, SSD = "hdd", "ssd"


@pytest.mark.parametrize(
    ("shape", "classes", "score"),
    [
        (TEST_SHAPE, {HDD: (0, 100)}, 0),
        (TEST_SHAPE, {HDD: (30, 100)}, 30),
        (TEST_SHAPE, {HDD: (50, 100)}, 50),
        (TEST_SHAPE, {HDD: (100, 100)}, 100),
        (TEST_SHAPE, {HDD: (0, 100), SSD: (0, 100)}, 0),
        (TEST_SHAPE, {HDD: (0, 100), SSD: (30, 100)}, 15),
        (TEST_SHAPE, {HDD: (30, 100), SSD: (30, 100)}, 30),
        (TEST_SHAPE, {HDD: (30, 100), SSD: (60, 100)}, 45),
        (TEST_SHAPE, {HDD: (50, 100), SSD: (50, 100)}, 50),
        (TEST_SHAPE, {HDD: (50, 100), SSD: (100, 100)}, 75),
        (TEST_SHAPE, {HDD: (100, 100), SSD: (100, 100)}, 100),
        (
            [
                UtilizationShapePoint(0, 0),
                UtilizationShapePoint(50, 0),
                UtilizationShapePoint(100, 5),
            ],
            {HDD: (30, 100), SSD: (60, 100)},
            5,
        ),
        (
            [
                UtilizationShapePoint(0, 0),
                UtilizationShapePoint(50, 0),
                UtilizationShapePoint(100, 5),
            ],
            {HDD: (50, 100), SSD: (100, 100)},
            25,
        ),
        (
            [
                UtilizationShapePoint(0, 0),
                UtilizationShapePoint(50, 0),
                UtilizationShapePoint(100, 5),
            ],
            {HDD: (90, 100), SSD: (90, 100)},
            40,
        ),
        # Over capacity or no capacity: utilization 100.
        (TEST_SHAPE, {HDD: (200, 100)}, 100),
        (TEST_SHAPE, {HDD: (1, 0)}, 100),
        (TEST_SHAPE, {}, 0),
    ],
)
def test_score(
    shape: list[UtilizationShapePoint], classes: dict[str, tuple[int, int]], score: int
) -> None:
    """TestScore: buildScorerFunction over classResourceMap."""
    assert build_scorer(shape)(classes) == score


# -- binder_test.go ------------------------------------------------------------------

NS = "testns"
PROVISIONER = "test-provisioner"
BINDER_CLASSES = [
    sc(
        "waitClassWithProvisioner",
        provisioner=PROVISIONER,
        topologies=[
            {"matchLabelExpressions": [{"key": NODE_KEY, "values": ["node1", "reference-value"]}]}
        ],
    ),
    sc("immediateClass", "Immediate"),
    sc("waitClass", provisioner="kubernetes.io/no-provisioner"),
    sc(
        "topoMismatchClass",
        provisioner=PROVISIONER,
        topologies=[{"matchLabelExpressions": [{"key": NODE_KEY, "values": ["reference-value"]}]}],
    ),
]


def tpvc(name: str, size: str, cls: str, **kw: Any) -> pb.ClusterObject:
    return pvc(name, cls, namespace=NS, request=size, **kw)


UNBOUND = tpvc("unbound-pvc", "1G", "waitClass")
UNBOUND2 = tpvc("unbound-pvc2", "5G", "waitClass")
PREBOUND = tpvc("prebound-pvc", "1G", "waitClass", prebound_pv="pv-node1a")
BOUND = tpvc("bound-pvc", "1G", "waitClass", bound_pv="pv-bound")
IMMEDIATE_UNBOUND = tpvc("immediate-unbound-pvc", "1G", "immediateClass")
IMMEDIATE_BOUND = tpvc("immediate-bound-pvc", "1G", "immediateClass", bound_pv="pv-bound-immediate")
PROVISIONED = tpvc("provisioned-pvc", "1Gi", "waitClassWithProvisioner")
NO_PROVISIONER = tpvc("no-provisioner-pvc", "1Gi", "waitClass")
TOPO_MISMATCH = tpvc("topo-mismatch-pvc", "1Gi", "topoMismatchClass")
SELECTED_NODE = tpvc("provisioned-pvc", "1Gi", "waitClassWithProvisioner", selected_node="node1")
GENERIC_OWNED = tpvc(
    "test-pod-test-volume", "1G", "immediateClass", bound_pv="pv-bound", owner_uid="pod-uid"
)
GENERIC_NOT_OWNED = tpvc("test-pod-test-volume", "1G", "immediateClass", bound_pv="pv-bound")


def tpv(
    name: str, on: str, size: str, claim: str | None = None, cls: str = "waitClass"
) -> pb.ClusterObject:
    return pv(
        name,
        cls,
        capacity=size,
        affinity=_on(on, NODE_KEY) if on else None,
        claim=(NS, claim, "pvc-uid") if claim else None,
        bound_by_controller=claim is not None,
    )


PV_NODE1A = tpv("pv-node1a", "node1", "5G")
PV_NODE1B = tpv("pv-node1b", "node1", "10G")
PV_NODE2 = tpv("pv-node2", "node2", "1G")
PV_BOUND = tpv("pv-bound", "node1", "1G", "bound-pvc")
PV_NODE1A_BOUND = tpv("pv-node1a", "node1", "5G", "unbound-pvc")
PV_BOUND_IMMEDIATE = tpv(
    "pv-bound-immediate", "node1", "1G", "immediate-bound-pvc", "immediateClass"
)
PV_BOUND_IMMEDIATE_NODE2 = tpv(
    "pv-bound-immediate", "node2", "1G", "immediate-bound-pvc", "immediateClass"
)
PV_BOUND_GENERIC = tpv("pv-bound", "node1", "1G", "test-pod-test-volume")


def _claim_names(objs: Iterable[pb.ClusterObject]) -> list[str]:
    return [o.ref.name for o in objs]


@dataclass
class FindCase:
    pvcs: list[pb.ClusterObject] = field(default_factory=list)
    pvs: list[pb.ClusterObject] = field(default_factory=list)
    # None: the pod uses ``pvcs``; else these (claims, ephemeral volumes).
    pod: tuple[list[str], list[str]] | None = None
    bindings: list[tuple[str, str]] = field(default_factory=list)
    provisions: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    should_fail: bool = False
    needs_capacity: bool = False


WITHOUT_PROVISIONING = {
    "no-volumes": FindCase(pod=([], [])),
    "pvc-not-found": FindCase(pod=(["bound-pvc"], []), should_fail=True),
    "bound-pvc": FindCase([BOUND], [PV_BOUND]),
    "bound-pvc,pv-not-exists": FindCase([BOUND], reasons=[ERR_REASON_PV_NOT_EXIST]),
    "prebound-pvc": FindCase([PREBOUND], [PV_NODE1A_BOUND], should_fail=True),
    "unbound-pvc,pv-same-node": FindCase(
        [UNBOUND], [PV_NODE2, PV_NODE1A, PV_NODE1B], bindings=[("unbound-pvc", "pv-node1a")]
    ),
    "unbound-pvc,pv-different-node": FindCase(
        [UNBOUND], [PV_NODE2], reasons=[ERR_REASON_BIND_CONFLICT]
    ),
    "two-unbound-pvcs": FindCase(
        [UNBOUND, UNBOUND2],
        [PV_NODE1A, PV_NODE1B],
        bindings=[("unbound-pvc", "pv-node1a"), ("unbound-pvc2", "pv-node1b")],
    ),
    "two-unbound-pvcs,order-by-size": FindCase(
        [UNBOUND2, UNBOUND],
        [PV_NODE1A, PV_NODE1B],
        bindings=[("unbound-pvc", "pv-node1a"), ("unbound-pvc2", "pv-node1b")],
    ),
    "two-unbound-pvcs,partial-match": FindCase(
        [UNBOUND, UNBOUND2],
        [PV_NODE1A],
        bindings=[("unbound-pvc", "pv-node1a")],
        reasons=[ERR_REASON_BIND_CONFLICT],
    ),
    "one-bound,one-unbound": FindCase(
        [UNBOUND, BOUND], [PV_BOUND, PV_NODE1A], bindings=[("unbound-pvc", "pv-node1a")]
    ),
    "one-bound,one-unbound,no-match": FindCase(
        [UNBOUND, BOUND], [PV_BOUND, PV_NODE2], reasons=[ERR_REASON_BIND_CONFLICT]
    ),
    "one-prebound,one-unbound": FindCase(
        [UNBOUND, PREBOUND], [PV_NODE1A, PV_NODE1B], should_fail=True
    ),
    "immediate-bound-pvc": FindCase([IMMEDIATE_BOUND], [PV_BOUND_IMMEDIATE]),
    "immediate-bound-pvc-wrong-node": FindCase(
        [IMMEDIATE_BOUND], [PV_BOUND_IMMEDIATE_NODE2], reasons=[ERR_REASON_NODE_CONFLICT]
    ),
    "immediate-unbound-pvc": FindCase([IMMEDIATE_UNBOUND], should_fail=True),
    "immediate-unbound-pvc,delayed-mode-bound": FindCase(
        [IMMEDIATE_UNBOUND, BOUND], [PV_BOUND], should_fail=True
    ),
    "immediate-unbound-pvc,delayed-mode-unbound": FindCase(
        [IMMEDIATE_UNBOUND, UNBOUND], should_fail=True
    ),
    "generic-ephemeral,no-pvc": FindCase(pod=([], ["no-such-pvc"]), should_fail=True),
    "generic-ephemeral,with-pvc": FindCase(
        [GENERIC_OWNED], [PV_BOUND_GENERIC], pod=([], ["test-volume"])
    ),
    "generic-ephemeral,wrong-pvc": FindCase(
        [GENERIC_NOT_OWNED], [PV_BOUND_GENERIC], pod=([], ["test-volume"]), should_fail=True
    ),
}

WITH_PROVISIONING = {
    "one-provisioned": FindCase([PROVISIONED], provisions=["provisioned-pvc"], needs_capacity=True),
    "two-unbound-pvcs,one-matched,one-provisioned": FindCase(
        [UNBOUND, PROVISIONED],
        [PV_NODE1A],
        bindings=[("unbound-pvc", "pv-node1a")],
        provisions=["provisioned-pvc"],
        needs_capacity=True,
    ),
    "one-bound,one-provisioned": FindCase(
        [BOUND, PROVISIONED], [PV_BOUND], provisions=["provisioned-pvc"], needs_capacity=True
    ),
    "one-binding,one-selected-node": FindCase(
        [BOUND, SELECTED_NODE], [PV_BOUND], provisions=["provisioned-pvc"], needs_capacity=True
    ),
    "immediate-unbound-pvc": FindCase([IMMEDIATE_UNBOUND], should_fail=True),
    "one-immediate-bound,one-provisioned": FindCase(
        [IMMEDIATE_BOUND, PROVISIONED],
        [PV_BOUND_IMMEDIATE],
        provisions=["provisioned-pvc"],
        needs_capacity=True,
    ),
    "invalid-provisioner": FindCase([NO_PROVISIONER], reasons=[ERR_REASON_BIND_CONFLICT]),
    "volume-topology-unsatisfied": FindCase([TOPO_MISMATCH], reasons=[ERR_REASON_BIND_CONFLICT]),
}

CSI_DRIVER_VARIANTS = {
    "no CSIDriver": None,
    "CSIDriver with capacity tracking": csi_driver(PROVISIONER, True),
    "CSIDriver without capacity tracking": csi_driver(PROVISIONER, False),
}

NODE1 = node("node1", **{NODE_KEY: "node1"})


@dataclass
class Found:
    failed: bool
    bindings: list[tuple[str, str]]
    provisions: list[str]
    reasons: list[str]


def find_pod_volumes(
    case: FindCase,
    extra: Iterable[pb.ClusterObject] = (),
    the_node: pb.Node = NODE1,
    pods: Iterable[pb.Pod] = (),
    other_nodes: Iterable[pb.Node] = (),
) -> tuple[Found, Cycle]:
    """binder_test.go findPodVolumes: PreFilter (GetPodVolumeClaims; unbound
    immediate claims fail), then FindPodVolumes on the node (``other_nodes``
    are in the snapshot too)."""
    claims, ephemeral = case.pod if case.pod is not None else (_claim_names(case.pvcs), [])
    pod = pod_using("test-pod", claims, namespace=NS, ephemeral=ephemeral, node_name="")
    c = cycle(
        pod,
        [the_node, *other_nodes],
        [*BINDER_CLASSES, *case.pvcs, *case.pvs, *extra],
        pods=pods,
    )
    st = c.pre_filter()
    if st.is_skip:
        return Found(False, [], [], []), c
    if not st.is_success:
        return Found(True, [], [], []), c
    binder = c.plugin._binder(c.pod)
    saved = c.state.read(CLAIMS)
    found = binder.find_pod_volumes(c.plugin._claims(binder, saved), the_node.name, the_node.labels)
    return (
        Found(
            False,
            [(b.claim.name, b.volume.name) for b in found.static_bindings],
            [p.claim.name for p in found.dynamic_provisions],
            found.reasons,
        ),
        c,
    )


def _find_cases(
    cases: Mapping[str, FindCase],
) -> list[Any]:
    return [
        pytest.param(case, driver, id=f"{driver_name}/{name}")
        for driver_name, driver in CSI_DRIVER_VARIANTS.items()
        for name, case in cases.items()
    ]


@pytest.mark.parametrize(("case", "driver"), _find_cases(WITHOUT_PROVISIONING))
def test_find_pod_volumes_without_provisioning(
    case: FindCase, driver: pb.ClusterObject | None
) -> None:
    """TestFindPodVolumesWithoutProvisioning."""
    got, _ = find_pod_volumes(case, [driver] if driver is not None else [])
    assert got == Found(case.should_fail, case.bindings, case.provisions, case.reasons)


@pytest.mark.parametrize(("case", "driver"), _find_cases(WITH_PROVISIONING))
def test_find_pod_volumes_with_provisioning(
    case: FindCase, driver: pb.ClusterObject | None
) -> None:
    """TestFindPodVolumesWithProvisioning: with a CSIDriver that tracks capacity
    and no CSIStorageCapacity objects, provisioning is blocked."""
    got, _ = find_pod_volumes(case, [driver] if driver is not None else [])
    reasons, provisions = list(case.reasons), list(case.provisions)
    tracked = driver is not None and json.loads(driver.json)["spec"]["storageCapacity"]
    if case.needs_capacity and tracked:
        reasons.append(ERR_REASON_NOT_ENOUGH_SPACE)
        provisions = []
    assert got == Found(case.should_fail, case.bindings, provisions, reasons)


# TestFindPodVolumesWithCSIMigration: an in-tree GCE PD PV bound to the claim, with
# only its (beta) zone label; a migrated node carries the CSI driver's zone label.
ZONE1_LABELS = {
    "failure-domain.beta.kubernetes.io/zone": "us-east-1",
    "failure-domain.beta.kubernetes.io/region": "us-east-1a",
}
BOUND_MIGRATION = tpvc("pvc-migration-bound", "1G", "waitClass", bound_pv="pv-migration-bound")
MIGRATION_PV = pv(
    "pv-migration-bound",
    "waitClass",
    capacity="1G",
    labels=ZONE1_LABELS,
    claim=(NS, "pvc-migration-bound", "pvc-uid"),
    source={"gcePersistentDisk": {"pdName": "test-disk", "fsType": "ext4"}},
)


@pytest.mark.parametrize(
    ("zone", "csi", "reasons"),
    [
        pytest.param("us-east-1", csi_node("node1", "kubernetes.io/gce-pd"), [], id="pvc-bound"),
        pytest.param("us-east-1", csi_node("node1", ""), [], id="pvc-bound,csinode-not-migrated"),
        pytest.param("us-east-1", None, [], id="pvc-bound,missing-csinode"),
        pytest.param(
            "us-east-2",
            csi_node("node1", "kubernetes.io/gce-pd"),
            [ERR_REASON_NODE_CONFLICT],
            id="pvc-bound,node-different-zone",
        ),
    ],
)
def test_find_pod_volumes_with_csi_migration(
    zone: str, csi: pb.ClusterObject | None, reasons: list[str]
) -> None:
    """TestFindPodVolumesWithCSIMigration."""
    the_node = make_node("node1").labels(**{"topology.gke.io/zone": zone}).obj()
    case = FindCase([BOUND_MIGRATION], [MIGRATION_PV])
    got, _ = find_pod_volumes(case, [csi] if csi is not None else [], the_node)
    assert got == Found(False, [], [], reasons)


# TestCapacity.
NET = capacity("net", "waitClassWithProvisioner", None, "1Gi")
NODE1_CAP = capacity("net", "waitClassWithProvisioner", {NODE_KEY: "node1"}, "1Gi")


@pytest.mark.parametrize(
    "opt_in", [True, False], ids=["StorageCapacity=true", "StorageCapacity=false"]
)
@pytest.mark.parametrize(
    ("capacities", "sufficient"),
    [
        pytest.param([NET], True, id="network-attached"),
        pytest.param([NODE1_CAP], True, id="local-storage"),
        pytest.param(
            [
                capacity("net-1", "waitClassWithProvisioner", None, "1Gi"),
                capacity("net-2", "waitClassWithProvisioner", {NODE_KEY: "node2"}, "1Gi"),
                capacity("net-3", "waitClassWithProvisioner", {NODE_KEY: "node1"}, "1Gi"),
            ],
            True,
            id="multiple",
        ),
        pytest.param([], False, id="no-storage"),
        pytest.param(
            [capacity("net", "waitClassWithProvisioner", {NODE_KEY: "node2"}, "1Gi")],
            False,
            id="wrong-node",
        ),
        pytest.param(
            [capacity("net", "waitClass", {NODE_KEY: "node1"}, "1Gi")],
            False,
            id="wrong-storage-class",
        ),
        pytest.param(
            [capacity("net", "waitClassWithProvisioner", {NODE_KEY: "node1"}, "1Mi")],
            False,
            id="insufficient-storage",
        ),
        pytest.param(
            [capacity("net", "waitClassWithProvisioner", {NODE_KEY: "node1"}, "1Gi", "1Mi")],
            False,
            id="insufficient-volume-size",
        ),
        pytest.param(
            [capacity("net", "waitClassWithProvisioner", {NODE_KEY: "node1"}, "0Mi")],
            False,
            id="zero-storage",
        ),
        pytest.param(
            [capacity("net", "waitClassWithProvisioner", {NODE_KEY: "node1"}, "", "0Mi")],
            False,
            id="zero-volume-size",
        ),
        pytest.param(
            [capacity("net", "waitClassWithProvisioner", {NODE_KEY: "node1"})],
            False,
            id="nil-storage",
        ),
    ],
)
def test_capacity(opt_in: bool, capacities: list[pb.ClusterObject], sufficient: bool) -> None:
    """TestCapacity: the driver opts in or not; only then do CSIStorageCapacities count."""
    case = FindCase([PROVISIONED])
    got, _ = find_pod_volumes(case, [csi_driver(PROVISIONER, opt_in), *capacities])
    if sufficient or not opt_in:
        assert got == Found(False, [], ["provisioned-pvc"], [])
    else:
        assert got == Found(False, [], [], [ERR_REASON_NOT_ENOUGH_SPACE])


def test_capacity_chosen_for_the_node_is_kept_for_scoring() -> None:
    """TestCapacity "multiple": the capacity found for the node is the one the
    node reaches (network-attached first in name order, as listed)."""
    case = FindCase([PROVISIONED])
    objs = [
        csi_driver(PROVISIONER, True),
        capacity("a-node2", "waitClassWithProvisioner", {NODE_KEY: "node2"}, "1Gi"),
        capacity("b-node1", "waitClassWithProvisioner", {NODE_KEY: "node1"}, "1Gi"),
    ]
    _, c = find_pod_volumes(case, objs)
    binder = c.plugin._binder(c.pod)
    found = binder.find_pod_volumes(
        c.plugin._claims(binder, c.state.read(CLAIMS)), "node1", NODE1.labels
    )
    assert [p.capacity.name if p.capacity else None for p in found.dynamic_provisions] == [
        "b-node1"
    ]


# -- PV matching details (FindMatchingVolume) -----------------------------------------


@pytest.mark.parametrize(
    ("claim_kw", "volume_kw", "match"),
    [
        pytest.param({}, {}, True, id="plain"),
        pytest.param({"request": "2G"}, {"capacity": "1G"}, False, id="too small"),
        pytest.param(
            {"access_modes": ["ReadWriteMany"]},
            {"access_modes": ["ReadWriteOnce"]},
            False,
            id="access modes",
        ),
        pytest.param(
            {"access_modes": ["ReadWriteOnce"]},
            {"access_modes": ["ReadWriteOnce", "ReadOnlyMany"]},
            True,
            id="access modes subset",
        ),
        pytest.param({"volume_mode": "Block"}, {}, False, id="volume mode"),
        pytest.param({}, {"phase": "Released"}, False, id="not Available"),
        pytest.param(
            {"selector": {"matchLabels": {"tier": "gold"}}},
            {"labels": {"tier": "gold"}},
            True,
            id="selector",
        ),
        pytest.param(
            {"selector": {"matchLabels": {"tier": "gold"}}},
            {"labels": {"tier": "tin"}},
            False,
            id="selector miss",
        ),
        pytest.param({}, {"claim": ("testns", "other", "")}, False, id="bound to another claim"),
        pytest.param({}, {"affinity": {NODE_KEY: ["node2"]}}, False, id="node affinity"),
    ],
)
def test_find_matching_volume_filters(
    claim_kw: dict[str, Any], volume_kw: dict[str, Any], match: bool
) -> None:
    """FindMatchingVolume (component-helpers pv_helpers.go): size, access modes,
    volume mode, phase, selector, claimRef, node affinity."""
    claim = tpvc("unbound-pvc", claim_kw.pop("request", "1G"), "waitClass", **claim_kw)
    volume = pv("pv-x", "waitClass", capacity=volume_kw.pop("capacity", "5G"), **volume_kw)
    got, _ = find_pod_volumes(FindCase([claim], [volume]))
    if match:
        assert got == Found(False, [("unbound-pvc", "pv-x")], [], [])
    else:
        assert got == Found(False, [], [], [ERR_REASON_BIND_CONFLICT])


def test_prebound_pv_wins_over_a_smaller_one_and_must_fit_the_node() -> None:
    """FindMatchingVolume: a PV whose claimRef names the claim (a user's pre-binding)
    is taken even if not Available; one that does not fit the node means no match."""
    claim = tpvc("unbound-pvc", "1G", "waitClass")
    smaller = tpv("pv-a-small", "node1", "1G")
    prebound = pv(
        "pv-z-pre", "waitClass", capacity="10G", phase="Pending", claim=(NS, "unbound-pvc", "")
    )
    got, _ = find_pod_volumes(FindCase([claim], [smaller, prebound]))
    assert got.bindings == [("unbound-pvc", "pv-z-pre")]
    elsewhere = pv(
        "pv-z-pre",
        "waitClass",
        capacity="10G",
        claim=(NS, "unbound-pvc", ""),
        affinity={NODE_KEY: ["node2"]},
    )
    got, _ = find_pod_volumes(FindCase([claim], [smaller, elsewhere]))
    assert got == Found(False, [], [], [ERR_REASON_BIND_CONFLICT])


def test_a_claim_selector_that_does_not_parse_is_an_error() -> None:
    claim = tpvc(
        "unbound-pvc",
        "1G",
        "waitClass",
        selector={"matchExpressions": [{"key": "k", "operator": "Bogus"}]},
    )
    c = cycle(
        pod_using("test-pod", ["unbound-pvc"], namespace=NS),
        [NODE1],
        [*BINDER_CLASSES, claim, PV_NODE1A],
    )
    assert c.pre_filter().is_success
    (st,) = c.filter(["node1"])
    assert st.code is Code.ERROR
    assert "error creating internal label selector for claim: testns/unbound-pvc" in st.message


def test_claim_selected_for_another_node_fits_only_there() -> None:
    """FindPodVolumes' fast path: a claim with volume.kubernetes.io/selected-node
    (being provisioned) fits no other node."""
    c = cycle(
        pod_using("test-pod", ["provisioned-pvc"], namespace=NS),
        [NODE1, node("node2", **{NODE_KEY: "node2"})],
        [*BINDER_CLASSES, SELECTED_NODE],
    )
    assert c.pre_filter().is_success
    assert c.filter(["node1", "node2"]) == [SUCCESS, unresolvable(ERR_REASON_BIND_CONFLICT)]


# -- PreFilter details -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("objs", "ephemeral", "want"),
    [
        pytest.param(
            [tpvc("test-pod-v", "1G", "waitClass", deleting=True, owner_uid="pod-uid")],
            True,
            unresolvable('persistentvolumeclaim "test-pod-v" is being deleted'),
            id="being deleted",
        ),
        pytest.param(
            [],
            True,
            unresolvable(
                "waiting for ephemeral volume controller to create the persistentvolumeclaim "
                '"test-pod-v"'
            ),
            id="ephemeral claim not created yet",
        ),
        pytest.param(
            [tpvc("test-pod-v", "1G", "waitClass", owner_uid="someone-else")],
            True,
            unresolvable(
                "PVC testns/test-pod-v was not created for pod testns/test-pod (pod is not owner)"
            ),
            id="ephemeral claim of another pod",
        ),
    ],
)
def test_pre_filter_rejects_unusable_claims(
    objs: list[pb.ClusterObject], ephemeral: bool, want: Status
) -> None:
    """podHasPVCs."""
    pod = pod_using("test-pod", namespace=NS, ephemeral=["v"] if ephemeral else [])
    c = cycle(pod, [NODE1], [*BINDER_CLASSES, *objs])
    assert c.pre_filter() == want


def test_pre_filter_class_without_binding_mode_is_an_error() -> None:
    """IsDelayBindingMode: a class without volumeBindingMode is an error; a class
    that does not exist means Immediate."""
    objs = [sc("odd", mode=None), tpvc("c", "1G", "odd")]
    c = cycle(pod_using("test-pod", ["c"], namespace=NS), [NODE1], objs)
    st = c.pre_filter()
    assert (
        st.code is Code.ERROR and st.message == 'VolumeBindingMode not set for StorageClass "odd"'
    )
    c = cycle(pod_using("test-pod", ["c"], namespace=NS), [NODE1], [tpvc("c", "1G", "gone")])
    assert c.pre_filter() == unresolvable(REASON_UNBOUND_IMMEDIATE)


def test_pvc_names_alone_still_count_as_claims() -> None:
    """A caller that sends only Pod.pvc_names (no volumes) still gets its claims checked."""
    pod = pb.Pod(uid="u", name="test-pod", namespace=NS)
    pod.pvc_names.append("missing")
    c = cycle(pod, [NODE1], BINDER_CLASSES)
    assert c.pre_filter() == unresolvable('persistentvolumeclaim "missing" not found')


# -- Reserve, PreBind, Unreserve (AssumePodVolumes, bindAPIUpdate) -----------------


def reserve(c: Cycle, node_name: str = "node1") -> Status:
    assert c.pre_filter().is_success
    assert c.filter([node_name]) == [SUCCESS]
    return c.plugin.reserve(c.state, c.pod, node_name)


def pre_bind(c: Cycle, node_name: str = "node1") -> tuple[Status, list[ObjectWrite]]:
    state = CycleState.decode(c.state.encode())  # the binding cycle gets the state back
    st = c.plugin.pre_bind(state, c.pod, node_name)
    return st, state.writes


def test_all_bound_reserves_nothing_and_pre_bind_writes_nothing() -> None:
    """TestAssumePodVolumes "all-bound"; Test_PreBindPreFlight "all bound"."""
    c = cycle(
        pod_using("test-pod", ["bound-pvc"], namespace=NS),
        [NODE1],
        [*BINDER_CLASSES, BOUND, PV_BOUND],
    )
    assert reserve(c) == SUCCESS
    assert c.state.get(CHOSEN) == ChosenVolumes("node1", True)
    assert c.state.assume_annotations == {}
    assert pre_bind(c) == (SUCCESS, [])


def test_one_binding_is_assumed_and_written_as_a_claim_ref() -> None:
    """TestAssumePodVolumes "one-binding", TestBindAPIUpdate: the PV gets the
    claim's reference and bound-by-controller, guarded by its resourceVersion."""
    claim = tpvc("unbound-pvc", "1G", "waitClass", uid="claim-uid", rv="7")
    volume = pv("pv-node1a", "waitClass", capacity="5G", affinity={NODE_KEY: ["node1"]}, rv="42")
    c = cycle(
        pod_using("test-pod", ["unbound-pvc"], namespace=NS),
        [NODE1],
        [*BINDER_CLASSES, claim, volume],
    )
    assert reserve(c) == SUCCESS
    annotation = json.loads(c.state.assume_annotations[ASSUMED_ANNOTATION])
    assert annotation == {
        "volumes": [
            {
                "name": "pv-node1a",
                "resourceVersion": "42",
                "claimNamespace": NS,
                "claimName": "unbound-pvc",
                "claimUid": "claim-uid",
            }
        ],
        "claims": [],
    }
    st, writes = pre_bind(c)
    assert st == SUCCESS
    assert writes == [
        ObjectWrite(
            "",
            "v1",
            "persistentvolumes",
            "",
            "pv-node1a",
            {
                "metadata": {
                    "resourceVersion": "42",
                    "annotations": {"pv.kubernetes.io/bound-by-controller": "yes"},
                },
                "spec": {
                    "claimRef": {
                        "kind": "PersistentVolumeClaim",
                        "apiVersion": "v1",
                        "namespace": NS,
                        "name": "unbound-pvc",
                        "uid": "claim-uid",
                        "resourceVersion": "7",
                        "fieldPath": None,
                    }
                },
            },
        )
    ]


def test_pv_already_bound_to_the_claim_is_not_assumed_again() -> None:
    """TestAssumePodVolumes "pv-already-bound": GetBindVolumeToClaim is not dirty;
    PreBind still sends the PV's update (only its resourceVersion: a no-op unless
    the PV changed meanwhile, as upstream's Update)."""
    claim = tpvc("unbound-pvc", "1G", "waitClass")
    c = cycle(
        pod_using("test-pod", ["unbound-pvc"], namespace=NS),
        [NODE1],
        [*BINDER_CLASSES, claim, PV_NODE1A_BOUND],
    )
    assert reserve(c) == SUCCESS
    assert c.state.assume_annotations == {}
    st, writes = pre_bind(c)
    assert st == SUCCESS
    assert [(w.resource, w.name, dict(w.merge_patch)) for w in writes] == [
        ("persistentvolumes", "pv-node1a", {"metadata": {"resourceVersion": "1"}})
    ]


def test_one_binding_one_provisioned() -> None:
    """TestAssumePodVolumes "one-binding, one-pvc-provisioned": the claim to
    provision gets volume.kubernetes.io/selected-node for the chosen node."""
    c = cycle(
        pod_using("test-pod", ["unbound-pvc", "provisioned-pvc"], namespace=NS),
        [NODE1],
        [*BINDER_CLASSES, UNBOUND, PROVISIONED, PV_NODE1A],
    )
    assert reserve(c) == SUCCESS
    annotation = json.loads(c.state.assume_annotations[ASSUMED_ANNOTATION])
    assert annotation["claims"] == [
        {"namespace": NS, "name": "provisioned-pvc", "resourceVersion": "1", "node": "node1"}
    ]
    st, writes = pre_bind(c)
    assert st == SUCCESS
    assert [(w.resource, w.namespace, w.name) for w in writes] == [
        ("persistentvolumes", "", "pv-node1a"),
        ("persistentvolumeclaims", NS, "provisioned-pvc"),
    ]
    assert writes[1].merge_patch == {
        "metadata": {
            "annotations": {"volume.kubernetes.io/selected-node": "node1"},
            "resourceVersion": "1",
        }
    }


def test_pre_bind_for_another_node_or_without_reserve_is_an_error() -> None:
    """Test_PreBindPreFlight: "node is not found in podVolumesByNode", "state is nil"."""
    c = cycle(
        pod_using("test-pod", ["unbound-pvc"], namespace=NS),
        [NODE1],
        [*BINDER_CLASSES, UNBOUND, PV_NODE1A],
    )
    assert reserve(c) == SUCCESS
    st, writes = pre_bind(c, "node2")
    assert st.code is Code.ERROR and st.message == "no pod volume found for node 'node2'"
    assert writes == []
    fresh = cycle(
        pod_using("test-pod", ["unbound-pvc"], namespace=NS), [NODE1], [*BINDER_CLASSES, UNBOUND]
    )
    st, _ = pre_bind(fresh)
    assert st.code is Code.ERROR
    # A pod without claims has nothing to bind, with or without state.
    none = cycle(pod_using("test-pod"), [NODE1], BINDER_CLASSES)
    assert pre_bind(none) == (SUCCESS, [])
    assert none.plugin.reserve(none.state, none.pod, "node1") == SUCCESS


@pytest.mark.parametrize(
    ("saved", "claims", "node_name", "want"),
    [
        pytest.param(ChosenVolumes("node-a", True), ["c"], "node-a", Code.SKIP, id="all bound"),
        pytest.param(ChosenVolumes("node-a", False), ["c"], "node-a", Code.SUCCESS, id="to bind"),
        pytest.param(None, ["c"], "node-a", Code.ERROR, id="state is nil"),
        pytest.param(
            ChosenVolumes("node-b", False), ["c"], "node-a", Code.ERROR, id="node not found"
        ),
        pytest.param(None, [], "node-a", Code.SKIP, id="pod without claims"),
    ],
)
def test_pre_bind_pre_flight(
    saved: ChosenVolumes | None, claims: list[str], node_name: str, want: Code
) -> None:
    """Test_PreBindPreFlight."""
    plugin = VolumeBinding()
    state = fresh_state()
    if saved is not None:
        state.write(CHOSEN, saved)
    pod = PodInfo(pod_using("p", claims))
    assert plugin.pre_bind_pre_flight(state, pod, node_name).code is want


def test_unreserve_forgets_the_choice() -> None:
    """RevertAssumedPodVolumes: after Unreserve, PreBind has nothing to write."""
    c = cycle(
        pod_using("test-pod", ["unbound-pvc"], namespace=NS),
        [NODE1],
        [*BINDER_CLASSES, UNBOUND, PV_NODE1A],
    )
    assert reserve(c) == SUCCESS
    c.plugin.unreserve(c.state, c.pod, "node1")
    c.plugin.unreserve(c.state, c.pod, "node1")  # idempotent
    assert c.state.get(CHOSEN) is None
    st, writes = pre_bind(c)
    assert st.code is Code.ERROR and writes == []


# -- assumptions in flight (upstream's assume caches) -----------------------------------


def _assumed_pod(c: Cycle, name: str, uid: str, node_name: str = "node1") -> pb.Pod:
    """The caller's assumed copy of the reserved pod: on its node, with Reserve's
    annotations."""
    p = pb.Pod()
    p.CopyFrom(c.pod.proto)
    p.name, p.uid, p.node_name = name, uid, node_name
    p.annotations.update(c.state.assume_annotations)
    return p


def test_find_assume_volumes() -> None:
    """TestFindAssumeVolumes: once pod A's Reserve assumed a PV for its claim,
    finding volumes for the same claim again keeps choosing that PV (it is
    pre-bound to the claim now), and another claim cannot take it."""
    objs = [*BINDER_CLASSES, UNBOUND, tpvc("other-pvc", "1G", "waitClass", uid="other-uid")]
    pvs = [PV_NODE2, PV_NODE1A, tpv("pv-node1c", "node1", "5G")]
    a = cycle(pod_using("test-pod", ["unbound-pvc"], namespace=NS, uid="a"), [NODE1], [*objs, *pvs])
    assert reserve(a) == SUCCESS
    assumed = _assumed_pod(a, "test-pod", "a-assumed")
    chosen = a.state.read(CHOSEN).static_bindings[0].volume
    for _ in range(5):
        again, _ = find_pod_volumes(
            FindCase([UNBOUND], pvs, pod=(["unbound-pvc"], [])), objs, pods=[assumed]
        )
        assert again.bindings == [("unbound-pvc", chosen)]
    other, _ = find_pod_volumes(FindCase([], pvs, pod=(["other-pvc"], [])), objs, pods=[assumed])
    assert other.bindings and other.bindings[0][1] != chosen
    # Without the assumed pod (Unreserve: the caller dropped it) the PV is free again.
    free, _ = find_pod_volumes(FindCase([], pvs, pod=(["other-pvc"], [])), objs)
    assert free.bindings == [("other-pvc", chosen)]


def test_assumption_ends_when_the_pv_changes() -> None:
    """passiveAssumeCache: an assumed PV counts only while the PV is still at the
    resourceVersion it was assumed at; a newer PV (the binding landed, or the PV
    was changed) is taken as it is."""
    objs = [*BINDER_CLASSES, UNBOUND, tpvc("other-pvc", "1G", "waitClass", uid="other-uid")]
    only = tpv("pv-node1a", "node1", "5G")
    a = cycle(pod_using("test-pod", ["unbound-pvc"], namespace=NS, uid="a"), [NODE1], [*objs, only])
    assert reserve(a) == SUCCESS
    assumed = _assumed_pod(a, "test-pod", "a-assumed")
    taken, _ = find_pod_volumes(FindCase([], [only], pod=(["other-pvc"], [])), objs, pods=[assumed])
    assert taken == Found(False, [], [], [ERR_REASON_BIND_CONFLICT])
    changed = pv("pv-node1a", "waitClass", capacity="5G", affinity={NODE_KEY: ["node1"]}, rv="2")
    free, _ = find_pod_volumes(
        FindCase([], [changed], pod=(["other-pvc"], [])), objs, pods=[assumed]
    )
    assert free.bindings == [("other-pvc", "pv-node1a")]


def test_assumed_provisioning_pins_a_shared_claim_to_its_node() -> None:
    """An assumed claim counts as selected for the node it was reserved on: a
    second pod of the same claim fits only there (FindPodVolumes' fast path)."""
    node2 = node("node2", **{NODE_KEY: "node1"})  # the class's topology allows both
    objs = [*BINDER_CLASSES, PROVISIONED]
    a = cycle(
        pod_using("test-pod", ["provisioned-pvc"], namespace=NS, uid="a"), [NODE1, node2], objs
    )
    assert reserve(a, "node1") == SUCCESS
    assumed = _assumed_pod(a, "test-pod", "a-assumed")
    b = cycle(
        pod_using("pod-b", ["provisioned-pvc"], namespace=NS, uid="b"),
        [NODE1, node2],
        objs,
        pods=[assumed],
    )
    assert b.pre_filter().is_success
    assert b.filter(["node1", "node2"]) == [SUCCESS, unresolvable(ERR_REASON_BIND_CONFLICT)]


def test_a_bad_assume_annotation_is_ignored() -> None:
    odd = pod_using(
        "odd", uid="odd", node_name="node1", annotations={ASSUMED_ANNOTATION: "{not json"}
    )
    got, _ = find_pod_volumes(FindCase([UNBOUND], [PV_NODE1A]), pods=[odd])
    assert got.bindings == [("unbound-pvc", "pv-node1a")]


def test_an_assume_annotation_longer_than_any_reserve_writes_is_not_read() -> None:
    """A pod annotated by hand with a huge value would cost every cycle of a
    pod with claims its decoding; past binder.MAX_ASSUMED_TEXT it is ignored."""
    objects = [
        tpvc("claim", "1G", "waitClass", uid="claim-uid"),
        pv("pv-x", "waitClass", capacity="5G", rv="7"),
    ]

    def annotated(uid: str, claims: int) -> pb.Pod:
        value = AssumedVolumes(
            volumes=(AssumedVolume("pv-x", "7", NS, "claim", "claim-uid"),),
            claims=tuple(AssumedClaim(NS, f"c{i:06d}", "1", "node1") for i in range(claims)),
        )
        return pod_using(
            uid,
            ["claim"],
            namespace=NS,
            uid=uid,
            node_name="node1",
            annotations={ASSUMED_ANNOTATION: encode_assumed(value)},
        )

    small, huge = annotated("small", 1), annotated("huge", 2000)
    assert len(huge.annotations[ASSUMED_ANNOTATION]) > 16 * 1024  # binder.MAX_ASSUMED_TEXT
    assert "pv-x" in assumed_in_flight(snapshot_of([NODE1], [small], objects)).volumes
    assert not assumed_in_flight(snapshot_of([NODE1], [huge], objects)).volumes


# -- assume annotations written by hand -------------------------------------------------
#
# The annotation is read from pods in the snapshot, and a user who may edit their own
# pods may write it on a bound one. Only what that pod's own Reserve could have assumed
# counts (binder._reservable): upstream keeps assumptions in the scheduler's memory
# (pkg/scheduler/framework/plugins/volumebinding/assume_cache.go, binder.go
# AssumePodVolumes), out of users' reach.

MALLORY = "mallory"


def mine(storage_class: str = "waitClass", request: str = "1G", **kw: Any) -> pb.ClusterObject:
    """The forger's own claim, in their namespace."""
    return pvc("mine", storage_class, namespace=MALLORY, request=request, uid="mine-uid", **kw)


def forger(
    volumes: Iterable[AssumedVolume] = (),
    claims: Iterable[AssumedClaim] = (),
    *,
    uses: Iterable[str] = ("mine",),
    uid: str = "evil",
    node_name: str = "node1",
) -> pb.Pod:
    """A bound pod of the forger's, annotated by hand."""
    value = AssumedVolumes(volumes=tuple(volumes), claims=tuple(claims))
    return pod_using(
        f"pod-{uid}",
        uses,
        namespace=MALLORY,
        uid=uid,
        node_name=node_name,
        annotations={ASSUMED_ANNOTATION: encode_assumed(value)},
    )


def takes(pv_name: str, namespace: str, claim: str, uid: str, rv: str = "1") -> AssumedVolume:
    return AssumedVolume(pv_name, rv, namespace, claim, uid)


FREE = Found(False, [("unbound-pvc", "pv-node1a")], [], [])
TAKEN = Found(False, [], [], [ERR_REASON_BIND_CONFLICT])


@dataclass
class ForgedCase:
    forger: pb.Pod
    objects: list[pb.ClusterObject]
    # What the victim, a pod in NS whose claim unbound-pvc fits only pv-node1a
    # (or, with ``victim`` set, those claims), finds on node1.
    want: Found
    victim: FindCase = field(default_factory=lambda: FindCase([UNBOUND], [PV_NODE1A]))
    nodes: list[pb.Node] = field(default_factory=list)


FORGED = {
    "pv-for-a-claim-of-another-namespace": ForgedCase(
        forger([takes("pv-node1a", NS, "other-pvc", "other-uid")]),
        [tpvc("other-pvc", "1G", "waitClass", uid="other-uid")],
        FREE,
    ),
    "pv-for-an-own-claim-the-pod-does-not-use": ForgedCase(
        forger([takes("pv-node1a", MALLORY, "mine", "mine-uid")], uses=()), [mine()], FREE
    ),
    "pv-of-another-class-than-the-own-claim": ForgedCase(
        forger([takes("pv-node1a", MALLORY, "mine", "mine-uid")]), [mine("otherClass")], FREE
    ),
    "pv-too-small-for-the-own-claim": ForgedCase(
        forger([takes("pv-node1a", MALLORY, "mine", "mine-uid")]), [mine(request="50G")], FREE
    ),
    "own-claim-already-bound": ForgedCase(
        forger([takes("pv-node1a", MALLORY, "mine", "mine-uid")]),
        [mine(bound_pv="pv-elsewhere")],
        FREE,
    ),
    "own-claim-of-another-uid": ForgedCase(
        forger([takes("pv-node1a", MALLORY, "mine", "old-uid")]), [mine()], FREE
    ),
    "own-claim-missing": ForgedCase(
        forger([takes("pv-node1a", MALLORY, "mine", "mine-uid")]), [], FREE
    ),
    "pod-on-a-node-the-pv-does-not-fit": ForgedCase(
        forger([takes("pv-node1a", MALLORY, "mine", "mine-uid")], node_name="node2"),
        [mine()],
        FREE,
        nodes=[node("node2", **{NODE_KEY: "node2"})],
    ),
    "pod-on-a-node-not-in-the-snapshot": ForgedCase(
        forger([takes("pv-node1a", MALLORY, "mine", "mine-uid")], node_name="gone"),
        [mine()],
        FREE,
    ),
    # The boundary: a PV the forger's own unbound claim could take by pre-binding
    # (spec.volumeName) counts as theirs while the PV is unchanged.
    "pv-that-the-own-claim-could-bind": ForgedCase(
        forger([takes("pv-node1a", MALLORY, "mine", "mine-uid")]), [mine()], TAKEN
    ),
    "claim-of-another-namespace-selected-for-another-node": ForgedCase(
        forger(claims=[AssumedClaim(NS, "provisioned-pvc", "1", "node2")]),
        [],
        Found(False, [], ["provisioned-pvc"], []),
        FindCase([PROVISIONED]),
    ),
}


@pytest.mark.parametrize("case", [pytest.param(c, id=k) for k, c in FORGED.items()])
def test_a_forged_assume_annotation_takes_nothing_from_other_pods(case: ForgedCase) -> None:
    """A bound pod in another namespace, annotated by hand, makes no PV or claim
    of the victim's look taken; only a PV its own claim could bind counts."""
    got, _ = find_pod_volumes(case.victim, case.objects, pods=[case.forger], other_nodes=case.nodes)
    assert got == case.want


@pytest.mark.parametrize(
    ("pods", "objects", "want"),
    [
        pytest.param(
            [forger([takes("pv-bound", MALLORY, "mine", "mine-uid")])],
            [mine(), PV_BOUND],
            {},
            id="pv-bound-to-another-claim-in-the-api",
        ),
        pytest.param(
            [
                forger(
                    [
                        takes("pv-node1a", MALLORY, "mine", "mine-uid"),
                        takes("pv-node1b", MALLORY, "mine", "mine-uid"),
                    ]
                )
            ],
            [mine(), PV_NODE1A, PV_NODE1B],
            {"pv-node1a": "mine"},
            id="one-pv-per-claim",
        ),
        pytest.param(
            [
                forger(
                    [takes("pv-node1a", MALLORY, "mine2", "mine2-uid")], uses=["mine2"], uid="a"
                ),
                forger([takes("pv-node1a", MALLORY, "mine", "mine-uid")], uid="b"),
            ],
            [
                mine(),
                pvc("mine2", "waitClass", namespace=MALLORY, request="1G", uid="mine2-uid"),
                PV_NODE1A,
            ],
            {"pv-node1a": "mine2"},
            id="one-claim-per-pv-the-first-pod-by-uid-wins",
        ),
    ],
)
def test_an_assumed_pv_is_counted_once(
    pods: list[pb.Pod], objects: list[pb.ClusterObject], want: dict[str, str]
) -> None:
    got = assumed_in_flight(snapshot_of([NODE1], pods, [*BINDER_CLASSES, *objects]))
    assert {name: v.claim_name for name, v in got.volumes.items()} == want


@pytest.mark.parametrize(
    ("entry", "uses", "want"),
    [
        pytest.param(AssumedClaim(MALLORY, "mine", "1", "node1"), ["mine"], True, id="own"),
        pytest.param(AssumedClaim(MALLORY, "mine", "1", "node2"), ["mine"], False, id="other-node"),
        pytest.param(AssumedClaim(MALLORY, "mine", "1", "node1"), [], False, id="not-its-volume"),
        pytest.param(AssumedClaim(NS, "mine", "1", "node1"), ["mine"], False, id="other-namespace"),
    ],
)
def test_an_assumed_claim_is_one_of_the_pods_own_on_its_node(
    entry: AssumedClaim, uses: list[str], want: bool
) -> None:
    got = assumed_in_flight(snapshot_of([NODE1], [forger(claims=[entry], uses=uses)], [mine()]))
    assert (bool(got.claims)) is want


# -- CSI migration translation (framework/csi_translation.py) ------------------------


def test_translation_failure_is_a_filter_error() -> None:
    """checkBoundClaims: a PV that cannot be translated fails Filter with an Error."""
    bad = pv(
        "pv-migration-bound",
        "waitClass",
        capacity="1G",
        claim=(NS, "pvc-migration-bound", "pvc-uid"),
        source={"awsElasticBlockStore": {"volumeID": "aws://zone/nope"}},
    )
    c = cycle(
        pod_using("test-pod", ["pvc-migration-bound"], namespace=NS),
        [NODE1],
        [*BINDER_CLASSES, BOUND_MIGRATION, bad, csi_node("node1", "kubernetes.io/aws-ebs")],
    )
    assert c.pre_filter().is_success
    (st,) = c.filter(["node1"])
    assert st.code is Code.ERROR and "could not translate pv" in st.message


# -- args, reads, configuration ------------------------------------------------------------


def test_reads_the_storage_objects() -> None:
    assert [(k.group, k.resource, k.namespaced) for k in VolumeBinding.reads(None)] == [
        ("", "persistentvolumeclaims", True),
        ("", "persistentvolumes", False),
        ("storage.k8s.io", "storageclasses", False),
        ("storage.k8s.io", "csinodes", False),
        ("storage.k8s.io", "csidrivers", False),
        ("storage.k8s.io", "csistoragecapacities", True),
    ]


def test_default_args() -> None:
    """SetDefaults_VolumeBindingArgs: 600 seconds, no shape (the gate is off)."""
    args = msgspec.convert({}, VolumeBindingArgs)
    assert args == VolumeBindingArgs(bind_timeout_seconds=600, shape=None)
    args.validate()


ARGS = "profiles[0].pluginConfig[0].args"


@pytest.mark.parametrize(
    ("raw", "errors"),
    [
        pytest.param(
            {"bindTimeoutSeconds": -10},
            [
                (
                    "bindTimeoutSeconds",
                    "Invalid value: -10: invalid BindTimeoutSeconds, should not be a negative value",
                )
            ],
            id="negative timeout",
        ),
        pytest.param(
            {"shape": [{"utilization": 0, "score": 10}]},
            [
                (
                    "shape",
                    "Invalid value: [{utilization: 0, score: 10}]: unexpected field `shape`, remove it "
                    "or turn on the feature gate StorageCapacityScoring",
                )
            ],
            id="shape without the gate",
        ),
    ],
)
def test_bad_args_are_config_errors(raw: dict[str, Any], errors: list[tuple[str, str]]) -> None:
    """ValidateVolumeBindingArgs with v1.36's default gates."""
    doc = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {"schedulerName": "s", "pluginConfig": [{"name": "VolumeBinding", "args": raw}]}
        ],
    }
    with pytest.raises(ConfigError) as info:
        parse_config(doc, "<test>", REGISTRY)
    got = [(e.field, e.reason) for e in info.value.errors]
    assert got == [(f"{ARGS}.{field}", reason) for field, reason in errors]


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ([], "shape: Required value: at least one point must be specified"),
        (
            [UtilizationShapePoint(50, 1), UtilizationShapePoint(10, 2)],
            "shape[1].utilization: Invalid value: 10: values must be sorted in increasing order",
        ),
        (
            [UtilizationShapePoint(101, 1)],
            "shape[0].utilization: Invalid value: 101: not in valid range [0, 100]",
        ),
        (
            [UtilizationShapePoint(0, 11)],
            "shape[0].score: Invalid value: 11: not in valid range [0, 10]",
        ),
    ],
)
def test_shape_is_checked_with_the_gate(shape: list[UtilizationShapePoint], message: str) -> None:
    """validateFunctionShape, when StorageCapacityScoring is on."""
    pattern = message.replace("[", r"\[").replace("]", r"\]")
    with pytest.raises(ValueError, match=pattern):
        VolumeBindingArgs(shape=shape).validate(allow_storage_capacity_scoring=True)
    if shape:
        with pytest.raises(ValueError, match=pattern):
            VolumeBinding(VolumeBindingArgs(shape=shape), storage_capacity_scoring=True)


def test_shape_defaults_with_the_gate() -> None:
    """SetDefaults_VolumeBindingArgs: with the gate on, no (or an empty) shape is
    (0, 10), (100, 0): the node with the most free storage first."""
    for args in (None, VolumeBindingArgs(shape=[])):
        plugin = VolumeBinding(args, storage_capacity_scoring=True)
        assert plugin.cfg.shape == list(DEFAULT_SHAPE)
        assert plugin.scorer is not None and plugin.scorer({"c": (0, 100)}) == 100
    assert VolumeBinding(storage_capacity_scoring=False).scorer is None


def test_default_profile_has_volume_binding_at_upstream_points_and_reads() -> None:
    """default_plugins.go: VolumeBinding under multiPoint, score weight 1; the
    profile lists its reads for the caller."""
    doc = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [{"schedulerName": "s"}],
    }
    profile = parse_config(doc, "<test>", REGISTRY).profiles[0]
    for point in ("preFilter", "filter", "preScore", "reserve", "preBind"):
        assert "VolumeBinding" in [r.name for r in profile.enabled(point)], point
    assert {r.name: r.weight for r in profile.enabled("score")}["VolumeBinding"] == 1
    fw = Framework(profile, REGISTRY)
    read_by = {(r.kind.group, r.kind.resource) for r in fw.reads if "VolumeBinding" in r.plugins}
    assert ("", "persistentvolumes") in read_by and (
        "storage.k8s.io",
        "csistoragecapacities",
    ) in read_by


def test_example_config_loads() -> None:
    example = EXAMPLE / "scheduler-config.yaml"
    profile = load_config(example, REGISTRY).profiles[0]
    assert profile.scheduler_name == "volume-scheduler"
    assert profile.plugin_args["VolumeBinding"] == VolumeBindingArgs(bind_timeout_seconds=600)
    assert (
        yaml.safe_load(example.read_text())["profiles"][0]["pluginConfig"][0]["name"]
        == "VolumeBinding"
    )
