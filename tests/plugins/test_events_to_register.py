"""Every in-tree plugin that rejects pods declares its cluster events
(EnqueueExtensions), and the default plugins' are upstream's at v1.36 with
queueing hints on (each plugin's EventsToRegister in
pkg/scheduler/framework/plugins/*); their hints against cases of upstream's
Test_isSchedulableAfter* tables (named as there; the "backoff-wrong-*-object"
cases have no counterpart, a hint here being given its event's objects)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from berth.api.v1 import cluster_pb2 as cpb
from berth.framework import (
    ActionType,
    ClusterObject,
    EventResource,
    NodeInfo,
    PodInfo,
    QueueingHint,
)
from berth.framework.interfaces import ENQUEUE_EXTENSION_POINTS
from berth.framework.testing import make_node, make_pod
from berth.plugins.interpodaffinity import InterPodAffinity
from berth.plugins.nodeaffinity import NodeAffinity
from berth.plugins.nodeaffinity.args import NodeAffinityArgs
from berth.plugins.nodeports import NodePorts
from berth.plugins.nodeunschedulable import NodeUnschedulable
from berth.plugins.nodevolumelimits import CSILimits
from berth.plugins.podtopologyspread import PodTopologySpread
from berth.plugins.registry import REGISTRY
from berth.plugins.schedulinggates import SchedulingGates
from berth.plugins.tainttoleration import TaintToleration
from berth.plugins.volumebinding import VolumeBinding
from berth.plugins.volumerestrictions import VolumeRestrictions
from berth.plugins.volumezone import VolumeZone

A = ActionType
R = EventResource
Q, SKIP = QueueingHint.QUEUE, QueueingHint.QUEUE_SKIP


def test_every_in_tree_plugin_that_rejects_pods_declares_its_events() -> None:
    """A plugin without EnqueueExtensions is moved by every event; none of
    the in-tree ones relies on that."""
    rejecting = [
        name for name, cls in REGISTRY.items() if issubclass(cls, ENQUEUE_EXTENSION_POINTS)
    ]
    assert "NodeResourcesFit" in rejecting and "Coscheduling" in rejecting
    assert [n for n in rejecting if not REGISTRY[n].implements_events()] == []


# Upstream's EventsToRegister with enableSchedulingQueueHint (v1.36), hints
# marked by True.
UPSTREAM: dict[str, list[tuple[str, ActionType, bool]]] = {
    "SchedulingGates": [(R.POD, A.UPDATE_POD_SCHEDULING_GATES_ELIMINATED, True)],
    "NodeResourcesFit": [
        (R.POD, A.DELETE | A.UPDATE_POD_SCALE_DOWN, True),
        (R.NODE, A.ADD | A.UPDATE_NODE_ALLOCATABLE, True),
        # DRAExtendedResource (beta, on).
        (R.DEVICE_CLASS, A.ADD | A.UPDATE, True),
    ],
    "NodeName": [(R.NODE, A.ADD, False)],
    "NodeUnschedulable": [
        (R.NODE, A.ADD | A.UPDATE_NODE_TAINT, True),
        (R.POD, A.UPDATE_POD_TOLERATION, True),
    ],
    "TaintToleration": [
        (R.NODE, A.ADD | A.UPDATE_NODE_TAINT, True),
        (R.POD, A.UPDATE_POD_TOLERATION, True),
    ],
    "NodeAffinity": [(R.NODE, A.ADD | A.UPDATE_NODE_LABEL, True)],
    "NodePorts": [(R.POD, A.DELETE, True), (R.NODE, A.ADD, False)],
    "InterPodAffinity": [
        (R.POD, A.ADD | A.UPDATE_POD_LABEL | A.DELETE, True),
        (R.NODE, A.ADD | A.UPDATE_NODE_LABEL, True),
    ],
    "PodTopologySpread": [
        (R.POD, A.ADD | A.UPDATE_POD_LABEL | A.UPDATE_POD_TOLERATION | A.DELETE, True),
        (R.NODE, A.ADD | A.DELETE | A.UPDATE_NODE_LABEL | A.UPDATE_NODE_TAINT, True),
    ],
    "NodeDeclaredFeatures": [
        (R.NODE, A.ADD | A.UPDATE_NODE_DECLARED_FEATURE, True),
        (R.POD, A.UPDATE, True),
    ],
}
# Registered as upstream does, but without some of upstream's hints, which
# read listers a hint here has not (their events move the pods at once).
UPSTREAM_EVENTS_ONLY: dict[str, list[tuple[str, ActionType]]] = {
    "VolumeRestrictions": [
        (R.POD, A.DELETE),
        (R.NODE, A.ADD),
        (R.PERSISTENT_VOLUME_CLAIM, A.ADD),
    ],
    "VolumeZone": [
        (R.STORAGE_CLASS, A.ADD),
        (R.NODE, A.ADD | A.UPDATE_NODE_LABEL),
        (R.PERSISTENT_VOLUME_CLAIM, A.ADD | A.UPDATE),
        (R.PERSISTENT_VOLUME, A.ADD | A.UPDATE),
    ],
    "VolumeBinding": [
        (R.STORAGE_CLASS, A.ADD | A.UPDATE),
        (R.PERSISTENT_VOLUME_CLAIM, A.ADD | A.UPDATE),
        (R.PERSISTENT_VOLUME, A.ADD | A.UPDATE),
        (R.NODE, A.ADD | A.UPDATE_NODE_LABEL),
        (R.CSI_NODE, A.ADD | A.UPDATE),
        (R.CSI_DRIVER, A.UPDATE),
        (R.CSI_STORAGE_CAPACITY, A.ADD | A.UPDATE),
    ],
    "NodeVolumeLimits": [
        (R.CSI_NODE, A.ADD),
        (R.CSI_NODE, A.UPDATE),
        (R.POD, A.DELETE),
        (R.PERSISTENT_VOLUME_CLAIM, A.ADD),
        (R.VOLUME_ATTACHMENT, A.DELETE),
    ],
}


@pytest.mark.parametrize("name", sorted(UPSTREAM))
def test_default_plugins_register_upstreams_events_and_hints(name: str) -> None:
    got = [
        (e.event.resource, e.event.action_type, e.hint is not None)
        for e in REGISTRY[name]().events_to_register()
    ]
    assert got == UPSTREAM[name]


@pytest.mark.parametrize("name", sorted(UPSTREAM_EVENTS_ONLY))
def test_volume_plugins_register_upstreams_events(name: str) -> None:
    got = [(e.event.resource, e.event.action_type) for e in REGISTRY[name]().events_to_register()]
    assert got == UPSTREAM_EVENTS_ONLY[name]


def node(labels: dict[str, str] | None = None, **kw: Any) -> NodeInfo:
    n = make_node("n").capacity(cpu="4")
    for k, v in (labels or {}).items():
        n = n.label(k, v)
    if kw.get("unschedulable"):
        n = n.unschedulable()
    for key, effect in kw.get("taints", ()):
        n = n.taint(key, "", effect)
    return NodeInfo(n.obj())


# -- NodeAffinity: Test_isSchedulableAfterNodeChange ----------------------------------


def affinity_pod() -> PodInfo:
    pod = make_pod("p").obj()
    term = pod.affinity.node_affinity.required.terms.add()
    term.match_expressions.add(key="foo", operator="In", values=["bar"])
    return PodInfo(pod)


@pytest.mark.parametrize(
    ("old", "new", "want"),
    [
        pytest.param(None, {}, SKIP, id="skip-queue-on-add"),
        pytest.param(None, {"foo": "bar"}, Q, id="queue-on-add"),
        pytest.param({}, {"k": "v"}, SKIP, id="skip-unrelated-changes-on-labels"),
        pytest.param(
            {"foo": "bar"},
            {"k": "v"},
            SKIP,
            id="skip-labels-changes-on-node-from-suitable-to-unsuitable",
        ),
        pytest.param(
            {"k": "v"}, {"foo": "bar"}, Q, id="queue-on-labels-change-makes-pod-schedulable"
        ),
        pytest.param(
            {"foo": "bar"},
            {"foo": "bar"},
            SKIP,
            id="skip-unrelated-change-that-keeps-pod-schedulable",
        ),
    ],
)
def test_node_affinity_after_node_change(
    old: dict[str, str] | None, new: dict[str, str], want: QueueingHint
) -> None:
    hint = NodeAffinity().is_schedulable_after_node_change(
        affinity_pod(), None if old is None else node(old), node(new)
    )
    assert hint == want


def test_node_affinity_scheduler_enforced_affinity() -> None:
    """skip-queue-on-add-scheduler-enforced-node-affinity,
    queue-on-add-scheduler-enforced-node-affinity."""
    args = msgspec_args(
        {
            "addedAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "foo", "operator": "In", "values": ["bar"]}]}
                    ]
                }
            }
        }
    )
    pl = NodeAffinity(args)
    pod = PodInfo(make_pod("p").obj())
    assert pl.is_schedulable_after_node_change(pod, None, node({"k": "v"})) == SKIP
    assert pl.is_schedulable_after_node_change(pod, None, node({"foo": "bar"})) == Q


def msgspec_args(doc: dict[str, Any]) -> NodeAffinityArgs:
    import msgspec

    return msgspec.convert(doc, NodeAffinityArgs)


# -- TaintToleration: TestIsSchedulableAfterNodeChange, ...PodTolerationChange --------


@pytest.mark.parametrize(
    ("old", "new", "want"),
    [
        pytest.param(None, [], Q, id="node is added without taints"),
        pytest.param(None, [("k", "NoSchedule")], SKIP, id="node is added with untolerated taint"),
        pytest.param([("k", "NoSchedule")], [], Q, id="node taint removed"),
        pytest.param([], [("k", "NoSchedule")], SKIP, id="node taint added"),
        pytest.param([("k", "NoSchedule")], [("j", "NoSchedule")], SKIP, id="still untolerated"),
    ],
)
def test_taint_toleration_after_node_change(
    old: list[tuple[str, str]] | None, new: list[tuple[str, str]], want: QueueingHint
) -> None:
    pod = make_pod("p").toleration("t", "", "NoSchedule").info()
    hint = TaintToleration().is_schedulable_after_node_change(
        pod, None if old is None else node(taints=old), node(taints=new)
    )
    assert hint == want


def test_toleration_change_of_the_pod_itself_only() -> None:
    target = make_pod("p").uid("p").info()
    other = make_pod("o").uid("o").toleration("k").info()
    mine = make_pod("p").uid("p").toleration("k").info()
    for pl in (TaintToleration(), NodeUnschedulable()):
        assert pl.is_schedulable_after_pod_toleration_change(target, target, other) == SKIP
    assert TaintToleration().is_schedulable_after_pod_toleration_change(target, target, mine) == Q
    # NodeUnschedulable: only a toleration of node.kubernetes.io/unschedulable.
    assert (
        NodeUnschedulable().is_schedulable_after_pod_toleration_change(target, target, mine) == SKIP
    )
    tolerant = make_pod("p").uid("p").toleration("node.kubernetes.io/unschedulable").info()
    assert (
        NodeUnschedulable().is_schedulable_after_pod_toleration_change(target, target, tolerant)
        == Q
    )


@pytest.mark.parametrize(
    ("old", "new", "want"),
    [
        pytest.param(None, False, Q, id="backoff-wrong-new-object-less: schedulable node added"),
        pytest.param(None, True, SKIP, id="skip-queue-on-unschedulable-node-added"),
        pytest.param(True, False, Q, id="queue-on-node-changed-to-schedulable"),
        pytest.param(False, False, SKIP, id="skip-unrelated-change"),
    ],
)
def test_node_unschedulable_after_node_change(
    old: bool | None, new: bool, want: QueueingHint
) -> None:
    pod = make_pod("p").info()
    hint = NodeUnschedulable().is_schedulable_after_node_change(
        pod, None if old is None else node(unschedulable=old), node(unschedulable=new)
    )
    assert hint == want


# -- NodePorts: Test_isSchedulableAfterPodDeleted --------------------------------------


@pytest.mark.parametrize(
    ("deleted", "want"),
    [
        pytest.param(make_pod("d").host_port(8080).obj(), SKIP, id="skip-queue-on-unscheduled"),
        pytest.param(make_pod("d").node("n").obj(), SKIP, id="skip-queue-on-non-hostport"),
        pytest.param(
            make_pod("d").node("n").host_port(8081).obj(),
            SKIP,
            id="skip-queue-on-unrelated-hostport",
        ),
        pytest.param(
            make_pod("d").node("n").host_port(8080).obj(), Q, id="queue-on-released-hostport"
        ),
    ],
)
def test_node_ports_after_pod_deleted(deleted: cpb.Pod, want: QueueingHint) -> None:
    pod = make_pod("p").host_port(8080).info()
    assert NodePorts().is_schedulable_after_pod_deleted(pod, PodInfo(deleted), None) == want


# -- InterPodAffinity: Test_isSchedulableAfterNodeChange ----------------------------


def pod_with_affinity(anti: bool) -> PodInfo:
    pod = make_pod("p").obj()
    group = pod.affinity.pod_anti_affinity if anti else pod.affinity.pod_affinity
    term = group.required.add(topology_key="zone")
    term.label_selector.match_labels["app"] = "web"
    return PodInfo(pod)


@pytest.mark.parametrize(
    ("anti", "old", "new", "want"),
    [
        pytest.param(
            False, None, {"zone": "a"}, Q, id="add a new node with matched pod affinity topologyKey"
        ),
        pytest.param(
            False, None, {"other": "a"}, SKIP, id="add a new node without matched topologyKey"
        ),
        pytest.param(True, None, {"other": "a"}, Q, id="add a new node with anti-affinity"),
        pytest.param(
            False, {"other": "a"}, {"zone": "a", "other": "a"}, Q, id="update node topologyKey"
        ),
        pytest.param(
            False,
            {"zone": "a"},
            {"zone": "a", "k": "v"},
            SKIP,
            id="update node label but not topologyKey",
        ),
        pytest.param(
            True, {"zone": "a"}, {}, Q, id="update node topologyKey removed for anti-affinity"
        ),
        pytest.param(
            True,
            {"zone": "a"},
            {"zone": "b"},
            Q,
            id="update node topologyKey value for anti-affinity",
        ),
    ],
)
def test_inter_pod_affinity_after_node_change(
    anti: bool, old: dict[str, str] | None, new: dict[str, str], want: QueueingHint
) -> None:
    hint = InterPodAffinity().is_schedulable_after_node_change(
        pod_with_affinity(anti), None if old is None else node(old), node(new)
    )
    assert hint == want


@pytest.mark.parametrize(
    ("old", "new", "want"),
    [
        pytest.param(
            None,
            make_pod("a").labels(app="web").node("n").obj(),
            Q,
            id="add a pod which matches the pod affinity",
        ),
        pytest.param(
            None,
            make_pod("a").labels(app="db").node("n").obj(),
            SKIP,
            id="add a pod which doesn't match",
        ),
        pytest.param(
            None, make_pod("a").labels(app="web").obj(), SKIP, id="add an unscheduled pod"
        ),
        pytest.param(
            make_pod("a").labels(app="db").node("n").obj(),
            make_pod("a").labels(app="web").node("n").obj(),
            Q,
            id="update a pod from non-match to match pod affinity",
        ),
    ],
)
def test_inter_pod_affinity_after_pod_change(
    old: cpb.Pod | None, new: cpb.Pod, want: QueueingHint
) -> None:
    hint = InterPodAffinity().is_schedulable_after_pod_change(
        pod_with_affinity(False), None if old is None else PodInfo(old), PodInfo(new)
    )
    assert hint == want


# -- PodTopologySpread: Test_isSchedulableAfterNodeChange -----------------------------


def spread_pod() -> PodInfo:
    pod = make_pod("p").labels(app="web").obj()
    c = pod.topology_spread_constraints.add(
        max_skew=1, topology_key="zone", when_unsatisfiable="DoNotSchedule"
    )
    c.label_selector.match_labels["app"] = "web"
    return PodInfo(pod)


@pytest.mark.parametrize(
    ("old", "new", "want"),
    [
        pytest.param(None, {"zone": "a"}, Q, id="node with the topology key added"),
        pytest.param(None, {"other": "a"}, SKIP, id="node without the topology key added"),
        pytest.param({"zone": "a"}, {"zone": "b"}, Q, id="the topology value changed"),
        pytest.param({"zone": "a"}, {"zone": "a", "k": "v"}, SKIP, id="an unrelated label changed"),
        pytest.param({"other": "a"}, {"zone": "a"}, Q, id="the node gained the topology key"),
    ],
)
def test_pod_topology_spread_after_node_change(
    old: dict[str, str] | None, new: dict[str, str], want: QueueingHint
) -> None:
    hint = PodTopologySpread().is_schedulable_after_node_change(
        spread_pod(), None if old is None else node(old), node(new)
    )
    assert hint == want


def test_pod_topology_spread_without_own_constraints_answers_queue() -> None:
    """Default constraints need the cluster's Services and owners, which a hint
    has not: Queue."""
    pod = make_pod("p").labels(app="web").info()
    assert PodTopologySpread().is_schedulable_after_node_change(pod, None, node({})) == Q


# -- SchedulingGates, volume plugins --------------------------------------------------


def test_scheduling_gates_after_gates_eliminated() -> None:
    pl = SchedulingGates()
    target = make_pod("p").uid("p").info()
    assert pl.is_schedulable_after_gates_eliminated(target, target, target) == Q
    other = make_pod("o").uid("o").info()
    assert pl.is_schedulable_after_gates_eliminated(target, other, other) == SKIP


def obj(
    group: str, resource: str, name: str, data: dict[str, Any], namespace: str = ""
) -> ClusterObject:
    return ClusterObject(group, resource, namespace, name, "v1", "", json.dumps(data).encode())


def claim_pod() -> PodInfo:
    pod = make_pod("p", "ns").obj()
    pod.volumes.add(name="data", claim_name="pvc-a")
    return PodInfo(pod)


@pytest.mark.parametrize(
    ("claim", "want"),
    [
        pytest.param(obj("", "persistentvolumeclaims", "pvc-a", {}, "ns"), Q, id="the pod's claim"),
        pytest.param(
            obj("", "persistentvolumeclaims", "pvc-b", {}, "ns"), SKIP, id="another claim"
        ),
        pytest.param(
            obj("", "persistentvolumeclaims", "pvc-a", {}, "other"), SKIP, id="another namespace"
        ),
    ],
)
def test_claim_hints(claim: ClusterObject, want: QueueingHint) -> None:
    """TestIsSchedulableAfterPersistentVolumeClaimChange (VolumeBinding),
    TestIsSchedulableAfterPersistentVolumeClaimAdded (VolumeZone),
    Test_isSchedulableAfterPersistentVolumeClaimChange (VolumeRestrictions),
    isSchedulableAfterPVCAdded (NodeVolumeLimits)."""
    pod = claim_pod()
    assert VolumeBinding().is_schedulable_after_claim_change(pod, None, claim) == want
    assert VolumeZone().is_schedulable_after_claim_change(pod, None, claim) == want
    assert VolumeRestrictions().is_schedulable_after_claim_added(pod, None, claim) == want
    assert CSILimits().is_schedulable_after_claim_added(pod, None, claim) == want


def test_storage_class_hints() -> None:
    """TestIsSchedulableAfterStorageClassAdded (VolumeZone: only
    WaitForFirstConsumer), TestIsSchedulableAfterStorageClassChange
    (VolumeBinding: any add, an update of allowedTopologies)."""
    pod = claim_pod()
    wffc = obj(
        "storage.k8s.io", "storageclasses", "sc", {"volumeBindingMode": "WaitForFirstConsumer"}
    )
    immediate = obj("storage.k8s.io", "storageclasses", "sc", {"volumeBindingMode": "Immediate"})
    assert VolumeZone().is_schedulable_after_storage_class_added(pod, None, wffc) == Q
    assert VolumeZone().is_schedulable_after_storage_class_added(pod, None, immediate) == SKIP
    vb = VolumeBinding()
    assert vb.is_schedulable_after_storage_class_change(pod, None, immediate) == Q
    topo = obj("storage.k8s.io", "storageclasses", "sc", {"allowedTopologies": [{"x": 1}]})
    assert vb.is_schedulable_after_storage_class_change(pod, immediate, topo) == Q
    assert vb.is_schedulable_after_storage_class_change(pod, immediate, immediate) == SKIP


def test_csi_node_update_hint() -> None:
    """isSchedulableAfterCSINodeUpdated: Queue only when a driver's limit grew."""

    def csinode(count: int | None) -> ClusterObject:
        driver: dict[str, Any] = {"name": "ebs.csi.aws.com"}
        if count is not None:
            driver["allocatable"] = {"count": count}
        return obj("storage.k8s.io", "csinodes", "n", {"spec": {"drivers": [driver]}})

    pod = claim_pod()
    pl = CSILimits()
    assert pl.is_schedulable_after_csi_node_updated(pod, csinode(1), csinode(2)) == Q
    assert pl.is_schedulable_after_csi_node_updated(pod, csinode(2), csinode(2)) == SKIP
    assert pl.is_schedulable_after_csi_node_updated(pod, csinode(2), csinode(None)) == SKIP
    assert pl.is_schedulable_after_csi_node_updated(pod, csinode(None), csinode(1)) == Q
