"""framework/events.py: ClusterEvent matching and labels, the update
extractors, and a profile's registrations, against upstream's
pkg/scheduler/framework/types_test.go (TestCloudEvent_Match),
events_test.go (TestNodeSchedulingPropertiesChange,
Test_podSchedulingPropertiesChange) and scheduler.go buildQueueingHintMap."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

import berth.framework
from berth.api.v1 import cluster_pb2 as cpb
from berth.framework import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    FilterPlugin,
    PodInfo,
    QueueingHint,
)
from berth.framework.events import (
    EVENT_ASSIGNED_POD_DELETE,
    EVENT_FORCE_ACTIVATE,
    Registration,
    build_registrations,
    event_resource,
    node_scheduling_properties_change,
    pod_scheduling_properties_change,
    unroll_wildcard_resource,
)
from berth.framework.objects import ObjectKind
from berth.framework.testing import make_node, make_pod

A = ActionType
R = EventResource
UNSCHED = R.UNSCHEDULABLE_POD
ASSIGNED = R.ASSIGNED_POD


def test_action_type_values_are_upstreams() -> None:
    # kube-scheduler framework/types.go: Add = 1 << iota ... All = 1<<13 - 1.
    assert (A.ADD.value, A.DELETE.value, A.UPDATE_NODE_ALLOCATABLE.value) == (1, 2, 4)
    assert A.UPDATE_POD_GENERATED_RESOURCE_CLAIM == 1 << 12
    assert A.ALL == (1 << 13) - 1
    assert A.UPDATE == A.ALL & ~(A.ADD | A.DELETE)
    assert (QueueingHint.QUEUE_SKIP.value, QueueingHint.QUEUE.value) == (0, 1)


@pytest.mark.parametrize(
    ("event", "label"),
    [
        (ClusterEvent(R.NODE, A.ADD), "NodeAdd"),
        (ClusterEvent(R.NODE, A.UPDATE_NODE_LABEL), "NodeUpdateNodeLabel"),
        (EVENT_ASSIGNED_POD_DELETE, "AssignedPodDelete"),
        (ClusterEvent(UNSCHED, A.UPDATE), "UnschedulablePodUpdate"),
        (EVENT_FORCE_ACTIVATE, "ForceActivate"),
        (ClusterEvent(R.STORAGE_CLASS, A.ALL), "storage.k8s.io/StorageClassAll"),
    ],
)
def test_cluster_event_label(event: ClusterEvent, label: str) -> None:
    assert event.label == label


def test_action_type_label_round_trips() -> None:
    for flag in (A.ADD, A.UPDATE_NODE_TAINT, A.UPDATE_POD_SCALE_DOWN, A.UPDATE, A.ALL):
        assert A.from_label(flag.label) == flag
    assert (A.ADD | A.DELETE).label == ""
    with pytest.raises(ValueError):
        A.from_label("Bogus")


# TestCloudEvent_Match, case for case.
@pytest.mark.parametrize(
    ("registered", "incoming", "want"),
    [
        pytest.param(
            ClusterEvent(R.WILDCARD, A.ALL),
            ClusterEvent(R.POD, A.UPDATE_NODE_LABEL),
            True,
            id="wildcard event matches with all kinds of coming events",
        ),
        pytest.param(
            ClusterEvent(R.POD, A.UPDATE_NODE_LABEL | A.UPDATE_NODE_TAINT),
            ClusterEvent(R.POD, A.UPDATE_NODE_LABEL),
            True,
            id="event with resource = 'Pod' matching with coming events carries same actionType",
        ),
        pytest.param(
            ClusterEvent(R.POD, A.UPDATE_NODE_LABEL | A.UPDATE_NODE_TAINT),
            ClusterEvent(UNSCHED, A.UPDATE_NODE_LABEL),
            True,
            id="event with resource = 'Pod' matching with coming events carries unschedulablePod",
        ),
        pytest.param(
            ClusterEvent(R.WILDCARD, A.UPDATE_NODE_LABEL),
            ClusterEvent(R.POD, A.UPDATE_NODE_LABEL),
            True,
            id="event with resource = '*' matching with coming events carries same actionType",
        ),
        pytest.param(
            ClusterEvent(R.WILDCARD, A.UPDATE_NODE_LABEL),
            ClusterEvent(R.POD, A.UPDATE_NODE_ALLOCATABLE),
            False,
            id="event with resource = '*' matching with coming events carries different actionType",
        ),
        pytest.param(
            ClusterEvent(R.POD, A.UPDATE_NODE_LABEL),
            ClusterEvent(R.WILDCARD, A.UPDATE_NODE_LABEL),
            False,
            id="event matching with coming events carries '*' resources",
        ),
        pytest.param(
            ClusterEvent(R.WILDCARD, A.UPDATE_NODE_LABEL),
            ClusterEvent(R.POD, A.UPDATE),
            False,
            id="event with resource = '*' matching with coming events carrying a too broad actionType",
        ),
        pytest.param(
            ClusterEvent(R.WILDCARD, A.UPDATE),
            ClusterEvent(R.POD, A.UPDATE_NODE_LABEL),
            True,
            id="event with resource = '*' matching with coming events carrying a more specific actionType",
        ),
        pytest.param(
            ClusterEvent(R.NODE, A.ADD),
            ClusterEvent(R.POD, A.ADD),
            False,
            id="another resource does not match",
        ),
        pytest.param(
            ClusterEvent(R.POD, A.DELETE),
            ClusterEvent(ASSIGNED, A.DELETE),
            True,
            id="Pod matches AssignedPod",
        ),
    ],
)
def test_cluster_event_match(registered: ClusterEvent, incoming: ClusterEvent, want: bool) -> None:
    assert registered.matches(incoming) is want


def _tainted(value: str) -> cpb.Node:
    return make_node("n").taint("node.kubernetes.io/unschedulable", value).obj()


# TestNodeSchedulingPropertiesChange (the node record has no conditions, so
# "only node condition changed" has no counterpart).
@pytest.mark.parametrize(
    ("new", "old", "want"),
    [
        pytest.param(
            make_node("n").obj(), make_node("n").obj(), [], id="no specific changed applied"
        ),
        pytest.param(
            make_node("n").unschedulable(False).obj(),
            make_node("n").unschedulable(True).obj(),
            [A.UPDATE_NODE_TAINT],
            id="only node spec unavailable changed",
        ),
        pytest.param(
            make_node("n").allocatable(cpu="1000m", **{"example.com/foo": 1}).obj(),
            make_node("n").allocatable(cpu="1000m", **{"example.com/foo": 2}).obj(),
            [A.UPDATE_NODE_ALLOCATABLE],
            id="only node allocatable changed",
        ),
        pytest.param(
            make_node("n").label("foo", "bar").obj(),
            make_node("n").label("foo", "fuz").obj(),
            [A.UPDATE_NODE_LABEL],
            id="only node label changed",
        ),
        pytest.param(
            _tainted(""), _tainted("foo"), [A.UPDATE_NODE_TAINT], id="only node taint changed"
        ),
        pytest.param(
            make_node("n").label("foo", "bar").taint("node.kubernetes.io/unschedulable").obj(),
            _tainted("foo"),
            [A.UPDATE_NODE_LABEL, A.UPDATE_NODE_TAINT],
            id="both node label and node taint changed",
        ),
        pytest.param(
            make_node("n").unschedulable(True).obj(),
            make_node("n").unschedulable(False).obj(),
            [],
            id="node made unschedulable helps no pod",
        ),
    ],
)
def test_node_scheduling_properties_change(
    new: cpb.Node, old: cpb.Node, want: list[ActionType]
) -> None:
    assert node_scheduling_properties_change(new, old) == [ClusterEvent(R.NODE, a) for a in want]


def test_node_annotation_and_declared_features_change() -> None:
    old = make_node("n").obj()
    new = make_node("n").obj()
    new.annotations["foo"] = "bar"
    assert node_scheduling_properties_change(new, old) == [
        ClusterEvent(R.NODE, A.UPDATE_NODE_ANNOTATION)
    ]
    new = make_node("n").obj()
    new.declared_features.append("Feature1")
    assert node_scheduling_properties_change(new, old) == [
        ClusterEvent(R.NODE, A.UPDATE_NODE_DECLARED_FEATURE)
    ]


# Test_podSchedulingPropertiesChange.
@pytest.mark.parametrize(
    ("new", "old", "want"),
    [
        pytest.param(
            make_pod("p").node("n").label("foo", "bar").obj(),
            make_pod("p").node("n").label("foo", "baz").obj(),
            [(ASSIGNED, A.UPDATE_POD_LABEL)],
            id="assigned pod is updated",
        ),
        pytest.param(
            make_pod("p").label("foo", "bar").obj(),
            make_pod("p").label("foo", "baz").obj(),
            [(UNSCHED, A.UPDATE_POD_LABEL)],
            id="only label is updated",
        ),
        pytest.param(
            make_pod("p").req(cpu="100m").obj(),
            make_pod("p").req(cpu="200m").obj(),
            [(UNSCHED, A.UPDATE_POD_SCALE_DOWN)],
            id="pod's resource request is scaled down",
        ),
        pytest.param(
            make_pod("p").req(cpu="200m").obj(),
            make_pod("p").req(cpu="100m").obj(),
            [(UNSCHED, A.UPDATE)],
            id="pod's resource request is scaled up",
        ),
        pytest.param(
            make_pod("p").label("foo", "bar").req(cpu="100m").obj(),
            make_pod("p").label("foo", "baz").req(cpu="200m").obj(),
            [(UNSCHED, A.UPDATE_POD_LABEL), (UNSCHED, A.UPDATE_POD_SCALE_DOWN)],
            id="both pod's resource request and label are updated",
        ),
        pytest.param(
            make_pod("p").toleration("k", "v").obj(),
            make_pod("p").obj(),
            [(UNSCHED, A.UPDATE_POD_TOLERATION)],
            id="the pod's toleration is added",
        ),
    ],
)
def test_pod_scheduling_properties_change(
    new: cpb.Pod, old: cpb.Pod, want: list[tuple[str, ActionType]]
) -> None:
    assert pod_scheduling_properties_change(new, old) == [ClusterEvent(r, a) for r, a in want]


def test_pod_scheduling_gates_eliminated() -> None:
    old = make_pod("p").obj()
    old.scheduling_gates.append("example.com/gate")
    new = make_pod("p").obj()
    assert pod_scheduling_properties_change(new, old) == [
        ClusterEvent(UNSCHED, A.UPDATE_POD_SCHEDULING_GATES_ELIMINATED)
    ]


def test_event_resource_names() -> None:
    assert event_resource("", "v1", "nodes") == "Node"
    assert event_resource("storage.k8s.io", "v1", "csinodes") == "storage.k8s.io/CSINode"
    # upstream's dynamic-informer naming (scheduler-plugins' Coscheduling).
    assert (
        event_resource("scheduling.x-k8s.io", "v1alpha1", "podgroups")
        == "podgroups.v1alpha1.scheduling.x-k8s.io"
    )
    assert event_resource("", "v1", "namespaces") == "namespaces.v1"


def test_unrolled_wildcard_adds_the_kinds_a_plugin_reads() -> None:
    metrics = ObjectKind("metrics.k8s.io", "v1beta1", "nodes", "NodeMetrics", namespaced=False)
    events = [e.event for e in unroll_wildcard_resource([metrics])]
    assert ClusterEvent(R.NODE, A.ALL) in events
    assert ClusterEvent(R.POD, A.ALL) in events
    assert ClusterEvent("nodes.v1beta1.metrics.k8s.io", A.ALL) in events
    assert all(e.hint is None for e in unroll_wildcard_resource())


def _hint(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    return QueueingHint.QUEUE


def test_build_registrations_adds_node_taint_for_node_add() -> None:
    # buildQueueingHintMap: NodeAdd without UpdateNodeTaint gets an
    # UpdateNodeTaint with the default hint.
    regs = build_registrations(
        [
            ("A", [ClusterEventWithHint(ClusterEvent(R.NODE, A.ADD), _hint)]),
            ("B", [ClusterEventWithHint(ClusterEvent(R.NODE, A.ADD | A.UPDATE_NODE_TAINT))]),
            ("C", []),
        ]
    )
    assert regs == [
        Registration("A", ClusterEvent(R.NODE, A.ADD), _hint),
        Registration("A", ClusterEvent(R.NODE, A.UPDATE_NODE_TAINT)),
        Registration("B", ClusterEvent(R.NODE, A.ADD | A.UPDATE_NODE_TAINT)),
    ]


class _Silent(FilterPlugin):
    name: ClassVar[str] = "Silent"


class _Declares(FilterPlugin):
    name: ClassVar[str] = "Declares"

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(ClusterEvent(R.NODE, A.ADD))]


def test_plugin_default_events_are_every_event() -> None:
    assert not _Silent.implements_events()
    assert _Declares.implements_events()
    events = [e.event for e in _Silent().events_to_register()]
    assert ClusterEvent(R.NODE, A.ALL) in events
    assert any(e.matches(ClusterEvent(R.NODE, A.UPDATE_NODE_LABEL)) for e in events)
    assert any(e.matches(ClusterEvent(ASSIGNED, A.DELETE)) for e in events)


def test_framework_exports_the_events_api() -> None:
    for name in (
        "ActionType",
        "ClusterEvent",
        "ClusterEventWithHint",
        "EventResource",
        "QueueingHint",
        "QueueingHintFn",
    ):
        assert name in berth.framework.__all__
        assert hasattr(berth.framework, name)


class _NodeLabelHint(FilterPlugin):
    """Registers node label updates with a hint: Queue only when the new
    node carries the label the pod selects."""

    name: ClassVar[str] = "NodeLabelHint"

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(R.NODE, A.ADD | A.UPDATE_NODE_LABEL), self._after_node_change
            )
        ]

    def _after_node_change(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        wanted = dict(pod.proto.node_selector)
        if all(new.node.labels.get(k) == v for k, v in wanted.items()):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP


class _BrokenHint(FilterPlugin):
    name: ClassVar[str] = "BrokenHint"

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(ClusterEvent(R.NODE, A.UPDATE), self._boom)]

    def _boom(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        raise RuntimeError("boom")


def _framework() -> Any:
    from berth.framework.interfaces import Plugin
    from berth.framework.runtime import Framework
    from tests.unit.framework.fakes import REGISTRY, profile

    reg: dict[str, type[Plugin]] = dict(REGISTRY)
    for cls in (_NodeLabelHint, _BrokenHint, _Silent, _Declares):
        reg[cls.name] = cls
    return Framework(profile(filter=("NodeLabelHint", "BrokenHint", "Silent", "Declares")), reg)


def test_framework_registrations_in_profile_order() -> None:
    fw = _framework()
    plugins = [r.plugin for r in fw.registrations]
    # Silent declares nothing: it registers every event (10 resources).
    assert plugins.count("Silent") == 10
    assert plugins[0] == "NodeLabelHint"
    # Declares registers NodeAdd, and gets UpdateNodeTaint as well.
    assert [r.event for r in fw.registrations if r.plugin == "Declares"] == [
        ClusterEvent(R.NODE, A.ADD),
        ClusterEvent(R.NODE, A.UPDATE_NODE_TAINT),
    ]


def test_framework_queueing_hints_ask_only_the_rejecting_plugins() -> None:
    # isPodWorthRequeuing: only the pod's rejectors, only matching events.
    from berth.framework.model import NodeInfo

    fw = _framework()
    pod = PodInfo(make_pod("p").node_selector(zone="a").obj())
    old = NodeInfo(make_node("n").label("zone", "b").obj())
    helps = NodeInfo(make_node("n").label("zone", "a").obj())
    label = ClusterEvent(R.NODE, A.UPDATE_NODE_LABEL)
    assert fw.queueing_hints(pod, ["NodeLabelHint"], label, old, helps) == ["NodeLabelHint"]
    assert fw.queueing_hints(pod, ["NodeLabelHint"], label, helps, old) == []
    # An allocatable update is not registered by NodeLabelHint.
    alloc = ClusterEvent(R.NODE, A.UPDATE_NODE_ALLOCATABLE)
    assert fw.queueing_hints(pod, ["NodeLabelHint"], alloc, old, helps) == []
    # A plugin without a hint answers Queue to every matching event.
    assert fw.queueing_hints(pod, ["Silent", "Declares"], alloc, old, helps) == ["Silent"]
    # A hint that raises answers Queue.
    assert fw.queueing_hints(pod, ["BrokenHint"], alloc, old, helps) == ["BrokenHint"]
