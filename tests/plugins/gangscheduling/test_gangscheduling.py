"""GangScheduling: PreEnqueue's quorum, Permit's Wait/allow with the 5-minute
timeout and the activation of unscheduled members, the queueing hints, and a
gang through whole cycles of the runtime. Cases follow upstream's
pkg/scheduler/framework/plugins/gangscheduling/gangscheduling_test.go
(Test_isSchedulableAfterPodAdded, Test_isSchedulableAfterPodGroupAdded,
TestGangSchedulingFlow)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.config import load_config
from berth.framework.cycle_state import CycleState
from berth.framework.events import ActionType, EventResource, QueueingHint
from berth.framework.model import PodInfo
from berth.framework.objects import ClusterObject
from berth.framework.runtime import Framework
from berth.framework.schedule_one import schedule_pod
from berth.framework.snapshot import Snapshot
from berth.framework.status import SUCCESS, Code, Status
from berth.framework.testing import handle_for, make_node, make_object, make_pod, snapshot_of
from berth.kube.records import pod_record
from berth.plugins.gangscheduling import (
    ALL_PODS,
    PERMIT_TIMEOUT_SECONDS,
    PODGROUP,
    QUORUM_NOT_MET,
    WAITING_AT_PERMIT,
    GangScheduling,
    WorkloadPodGroup,
    not_found_message,
)
from berth.plugins.registry import REGISTRY

EXAMPLE = Path(__file__).resolve().parents[3] / "deploy" / "examples" / "gangscheduling"
NS = "ns1"


def podgroup(name: str, min_count: int | None, *, namespace: str = NS) -> pb.ClusterObject:
    """st.MakePodGroup(): MinCount gives the gang policy, BasicPolicy the basic one."""
    policy: dict[str, Any] = (
        {"basic": {}} if min_count is None else {"gang": {"minCount": min_count}}
    )
    spec = {
        "podGroupTemplateRef": {"workload": {"workloadName": "w", "podGroupTemplateName": "t"}},
        "schedulingPolicy": policy,
    }
    return make_object(PODGROUP, name, namespace, spec=spec)


def member(name: str, group: str, *, namespace: str = NS, node: str = "") -> pb.ClusterObject:
    """The pod's object as the caller ships it (ALL_PODS)."""
    spec: dict[str, Any] = {"containers": [{"name": "c"}]}
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    if node:
        spec["nodeName"] = node
    obj = make_object(ALL_PODS, name, namespace, spec=spec, status={"phase": "Pending"})
    body = json.loads(obj.json)
    body["metadata"]["uid"] = name
    obj.json = json.dumps(body).encode()
    return obj


def gang_pod(
    name: str, group: str, *, namespace: str = NS, node: str = "", cpu: str = "1"
) -> pb.Pod:
    w = make_pod(name, namespace).uid(name).req(cpu=cpu, memory="1Gi")
    if node:
        w.node(node)
    pod = w.obj()
    pod.scheduling_group = group
    return pod


def nodes(n: int, cpu: str = "4") -> list[pb.Node]:
    return [make_node(f"n{i}").capacity(cpu=cpu, memory="16Gi").obj() for i in range(1, n + 1)]


def plugin(snap: Snapshot) -> GangScheduling:
    return GangScheduling(None, handle_for(snap))


GROUPS = [podgroup("pg1", 3), podgroup("pg2", 4), podgroup("pg3", None)]


# -- hints (Test_isSchedulableAfterPodAdded, Test_isSchedulableAfterPodGroupAdded) --


@pytest.mark.parametrize(
    ("added", "want"),
    [
        pytest.param(gang_pod("q", "pg"), QueueingHint.QUEUE, id="matches the scheduling group"),
        pytest.param(
            gang_pod("q", "pg", namespace="foo"), QueueingHint.QUEUE_SKIP, id="other namespace"
        ),
        pytest.param(gang_pod("q", "pg2"), QueueingHint.QUEUE_SKIP, id="other pod group name"),
        pytest.param(gang_pod("q", ""), QueueingHint.QUEUE_SKIP, id="added pod has no group"),
    ],
)
def test_is_schedulable_after_pod_added(added: pb.Pod, want: QueueingHint) -> None:
    pl = GangScheduling()
    pod = PodInfo(gang_pod("p", "pg"))
    assert pl.is_schedulable_after_pod_added(pod, None, PodInfo(added)) is want
    assert pl.is_schedulable_after_pod_added(pod, None, added) is want


def test_is_schedulable_after_pod_added_skips_for_a_pod_without_group() -> None:
    pl = GangScheduling()
    pod = PodInfo(gang_pod("p", ""))
    assert pl.is_schedulable_after_pod_added(pod, None, PodInfo(gang_pod("q", ""))) is (
        QueueingHint.QUEUE_SKIP
    )


@pytest.mark.parametrize(
    ("added", "want"),
    [
        pytest.param(podgroup("pg", 1), QueueingHint.QUEUE, id="the pod's pod group"),
        pytest.param(podgroup("pg2", 1), QueueingHint.QUEUE_SKIP, id="other name"),
        pytest.param(podgroup("pg", 1, namespace="ns2"), QueueingHint.QUEUE_SKIP, id="other ns"),
    ],
)
def test_is_schedulable_after_pod_group_added(added: pb.ClusterObject, want: QueueingHint) -> None:
    pl = GangScheduling()
    pod = PodInfo(gang_pod("p", "pg"))
    assert (
        pl.is_schedulable_after_pod_group_added(pod, None, ClusterObject.from_proto(added)) is want
    )


def test_events_to_register_are_upstreams() -> None:
    events = [
        (e.event.resource, e.event.action_type, e.hint is not None)
        for e in GangScheduling().events_to_register()
    ]
    assert events == [
        (EventResource.POD, ActionType.ADD, True),
        ("scheduling.k8s.io/PodGroup", ActionType.ADD, True),
    ]


# -- TestGangSchedulingFlow ----------------------------------------------------------


def _flow(
    pod: pb.Pod, others: list[str], groups: list[pb.ClusterObject], waiting: list[str]
) -> tuple[Status, Status | None, list[str], list[str]]:
    """PreEnqueue of ``pod``; then, when it passes, each of ``waiting`` assumed
    on a node (each Permit must Wait), then ``pod``'s Permit. Returns both
    statuses, the pods ``pod``'s Permit activated and those it allowed."""
    cluster: list[pb.Pod] = []
    objects = [*groups, member(pod.name, pod.scheduling_group)]
    groups_of = {"p1": "pg1", "p2": "pg1", "p3": "pg1", "p4": "pg2", "p5": "pg2"}
    objects += [member(n, groups_of[n]) for n in others]
    snap = snapshot_of(nodes(1), cluster, objects)
    pre = plugin(snap).pre_enqueue(PodInfo(pod))
    if not pre.is_success:
        return pre, None, [], []
    for name in waiting:
        w = gang_pod(name, groups_of[name])
        st, _ = plugin(snap).permit(CycleState(), PodInfo(w), "n1")
        assert st.code is Code.WAIT, (name, st)
        w.node_name = "n1"
        snap.apply(pb.ClusterDelta(upsert_pods=[w]))
    state = CycleState()
    state.current_plugin = "GangScheduling"
    st, _ = plugin(snap).permit(state, PodInfo(pod), "n1")
    allowed = [uid for uid, _, allow, _ in state.permit_signals if allow]
    return pre, st, sorted(state.pods_to_activate), sorted(allowed)


@pytest.mark.parametrize(
    ("pod", "others", "groups", "waiting", "want"),
    [
        pytest.param(
            gang_pod("non-gang", ""),
            [],
            GROUPS,
            [],
            (SUCCESS, SUCCESS, [], []),
            id="non-gang pod succeeds immediately",
        ),
        pytest.param(
            gang_pod("basic-pod", "pg3"),
            [],
            GROUPS,
            [],
            (SUCCESS, SUCCESS, [], []),
            id="basic policy pod succeeds immediately",
        ),
        pytest.param(
            gang_pod("p1", "pg1"),
            ["p2", "p3", "p4", "p5"],
            [],
            [],
            (
                Status.unresolvable(
                    'waiting for pods\'s pod group "pg1" to appear in scheduling queue'
                ),
                None,
                [],
                [],
            ),
            id="gang pod fails PreEnqueue when pod group is not yet created",
        ),
        pytest.param(
            gang_pod("p1", "pg1"),
            ["p2", "p4", "p5"],
            GROUPS[:2],
            [],
            (Status.unresolvable(QUORUM_NOT_MET), None, [], []),
            id="gang pod fails PreEnqueue when quorum is not met",
        ),
        pytest.param(
            gang_pod("p1", "pg1"),
            ["p2", "p3", "p4", "p5"],
            GROUPS[:2],
            ["p2", "p4", "p5"],
            (SUCCESS, Status.wait(WAITING_AT_PERMIT), ["p3"], []),
            id="gang pod passes PreEnqueue, but waits at Permit",
        ),
        pytest.param(
            gang_pod("p1", "pg1"),
            ["p2", "p3", "p4", "p5"],
            GROUPS[:2],
            ["p2", "p3", "p4", "p5"],
            (SUCCESS, SUCCESS, [], ["p2", "p3"]),
            id="final gang pod arrives at Permit and allows all waiting pods from a gang",
        ),
    ],
)
def test_gang_scheduling_flow(
    pod: pb.Pod,
    others: list[str],
    groups: list[pb.ClusterObject],
    waiting: list[str],
    want: tuple[Status, Status | None, list[str], list[str]],
) -> None:
    pre, permit, activated, allowed = _flow(pod, others, groups, waiting)
    want_pre, want_permit, want_activated, want_allowed = want
    assert pre == want_pre
    assert permit == want_permit
    assert (activated, allowed) == (want_activated, want_allowed)


def test_not_found_message_quotes_as_go() -> None:
    assert (
        not_found_message("pg1")
        == 'waiting for pods\'s pod group "pg1" to appear in scheduling queue'
    )


def test_permit_waits_five_minutes() -> None:
    snap = snapshot_of(nodes(1), [], [podgroup("pg1", 2), member("p1", "pg1"), member("p2", "pg1")])
    st, timeout = plugin(snap).permit(CycleState(), PodInfo(gang_pod("p1", "pg1")), "n1")
    assert st == Status.wait(WAITING_AT_PERMIT)
    assert timeout == PERMIT_TIMEOUT_SECONDS == 300.0


def test_permit_counts_a_bound_member() -> None:
    """ScheduledPodsCount: assumed and assigned (bound) pods."""
    objects = [podgroup("pg1", 2), member("p1", "pg1"), member("p2", "pg1", node="n1")]
    snap = snapshot_of(nodes(1), [gang_pod("p2", "pg1", node="n1")], objects)
    state = CycleState()
    st, _ = plugin(snap).permit(state, PodInfo(gang_pod("p1", "pg1")), "n1")
    assert st == SUCCESS
    # A bound member is not waiting: nobody to allow.
    assert state.permit_signals == []


def test_permit_without_its_pod_group_is_an_error() -> None:
    """gangscheduling.go Permit: the lister's NotFound wrapped as an error status."""
    snap = snapshot_of(nodes(1), [], [member("p1", "pg1")])
    st, _ = plugin(snap).permit(CycleState(), PodInfo(gang_pod("p1", "pg1")), "n1")
    assert st.code is Code.ERROR
    assert (
        st.message == 'failed to get podGroup ns1/pg1: podgroup.scheduling.k8s.io "pg1" not found'
    )


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ({"schedulingPolicy": {"gang": {"minCount": "3"}}}, "must be an integer"),
        ({"schedulingPolicy": {"gang": {"minCount": 2**31}}}, "out of range"),
        ({"schedulingPolicy": {"gang": {"minCount": -1}}}, "out of range"),
    ],
)
def test_unreadable_pod_group_keeps_its_pods_out_naming_the_field(
    spec: dict[str, Any], reason: str
) -> None:
    bad = make_object(PODGROUP, "pg1", NS, spec=spec)
    snap = snapshot_of(nodes(1), [], [bad, member("p1", "pg1")])
    st = plugin(snap).pre_enqueue(PodInfo(gang_pod("p1", "pg1")))
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert "spec.schedulingPolicy.gang.minCount" in st.message and reason in st.message


def test_pod_group_reads_min_count_and_basic_policy() -> None:
    assert WorkloadPodGroup.from_object(ClusterObject.from_proto(podgroup("a", 3))).min_count == 3
    assert (
        WorkloadPodGroup.from_object(ClusterObject.from_proto(podgroup("a", None))).min_count
        is None
    )


def test_reads_podgroups_where_served_and_every_pod() -> None:
    kinds = GangScheduling.reads(None)
    assert kinds == (PODGROUP, ALL_PODS)
    assert PODGROUP.if_served and (PODGROUP.group, PODGROUP.version) == (
        "scheduling.k8s.io",
        "v1alpha2",
    )
    assert not ALL_PODS.if_served and ALL_PODS.label_selector == ""


def test_pod_record_carries_the_scheduling_group() -> None:
    obj = {
        "metadata": {"name": "p", "uid": "u"},
        "spec": {"schedulingGroup": {"podGroupName": "pg"}},
    }
    assert pod_record(obj).scheduling_group == "pg"
    assert pod_record({"metadata": {"name": "p", "uid": "u"}, "spec": {}}).scheduling_group == ""


def test_not_in_the_default_profile_but_enabled_by_name() -> None:
    from berth.framework.config import parse_config

    default = parse_config(
        {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"},
        "default",
        REGISTRY,
    )
    assert all(
        "GangScheduling" not in [r.name for r in default.profiles[0].enabled(p)]
        for p in ("preEnqueue", "permit")
    )
    prof = load_config(EXAMPLE / "scheduler-config.yaml", REGISTRY).profiles[0]
    assert "GangScheduling" in [r.name for r in prof.enabled("preEnqueue")]
    assert "GangScheduling" in [r.name for r in prof.enabled("permit")]


# -- a gang through whole cycles -----------------------------------------------------


def test_cycles_a_gang_of_three_waits_at_permit_then_all_are_allowed() -> None:
    fw = Framework(load_config(EXAMPLE / "scheduler-config.yaml", REGISTRY).profiles[0], REGISTRY)
    names = ["g-0", "g-1", "g-2"]
    objects = [podgroup("pg", 3), *(member(n, "pg") for n in names)]
    snap = snapshot_of(nodes(3), objects=objects)
    rng = random.Random(0)
    waiting: list[str] = []
    for k, name in enumerate(names[:2]):
        pod = gang_pod(name, "pg", cpu="3")
        state = CycleState()
        result = schedule_pod(fw, snap, state, PodInfo(pod), reserve_and_permit=True, rng=rng)
        assert result.status.is_success, result.message
        assert result.permit_status is not None and result.permit_status.is_wait
        assert result.permit_timeouts == {"GangScheduling": 300.0}
        # Every waiter activates the members neither assumed nor bound.
        assert sorted(result.activate_pod_uids) == sorted(n for n in names[k + 1 :] if n != name)
        pod.node_name = result.node
        snap.apply(pb.ClusterDelta(upsert_pods=[pod]))
        waiting.append(pod.uid)
    state = CycleState()
    result = schedule_pod(
        fw, snap, state, PodInfo(gang_pod("g-2", "pg", cpu="3")), reserve_and_permit=True, rng=rng
    )
    assert result.status.is_success and result.permit_status == SUCCESS
    assert sorted((uid, p, allow) for uid, p, allow, _ in state.permit_signals) == sorted(
        (uid, "GangScheduling", True) for uid in waiting
    )
