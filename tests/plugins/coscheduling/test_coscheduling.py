"""Coscheduling: QueueSort keys, PreFilter's quorum/gate/resource checks,
Permit's Wait/allow, Unreserve's and PostFilter's rejections, args, the
example config, and a gang through whole cycles of the runtime. Cases follow
scheduler-plugins' pkg/coscheduling/coscheduling_test.go and
core/core_test.go where they exist there."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.config import ConfigError, load_config, parse_config
from berth.framework.cycle_state import CycleState
from berth.framework.interfaces import QueuedPodInfo
from berth.framework.model import PodInfo
from berth.framework.runtime import Framework
from berth.framework.schedule_one import schedule_pod
from berth.framework.snapshot import Snapshot
from berth.framework.status import SUCCESS, Code, Status
from berth.framework.testing import (
    apply_objects,
    handle_for,
    make_node,
    make_object,
    make_pod,
    snapshot_of,
)
from berth.plugins.coscheduling import (
    GROUPED_PODS,
    POD_GROUP_LABEL,
    PODGROUP,
    Coscheduling,
    CoschedulingArgs,
    gated_message,
    not_enough_message,
    post_filter_message,
)
from berth.plugins.coscheduling.core import PodGroup, format_gap, group_members, resource_gap
from berth.plugins.registry import REGISTRY

EXAMPLE = Path(__file__).resolve().parents[3] / "deploy" / "examples" / "coscheduling"
T0 = "2024-01-01T00:00:00Z"
T0_MICROS = 1_704_067_200_000_000


def podgroup(
    name: str,
    min_member: int | None,
    *,
    namespace: str = "default",
    timeout: int | None = None,
    min_resources: dict[str, str] | None = None,
    created: str = T0,
) -> pb.ClusterObject:
    spec: dict[str, Any] = {}
    if min_member is not None:
        spec["minMember"] = min_member
    if timeout is not None:
        spec["scheduleTimeoutSeconds"] = timeout
    if min_resources is not None:
        spec["minResources"] = min_resources
    obj = make_object(PODGROUP, name, namespace, spec=spec)
    body = json.loads(obj.json)
    body["metadata"]["creationTimestamp"] = created
    obj.json = json.dumps(body).encode()
    return obj


def member(
    name: str,
    group: str,
    *,
    namespace: str = "default",
    node: str = "",
    gated: bool = False,
    phase: str = "Pending",
) -> pb.ClusterObject:
    """The object of a pod of ``group`` as the label-selected watch ships it."""
    spec: dict[str, Any] = {"containers": [{"name": "c"}]}
    if node:
        spec["nodeName"] = node
    if gated:
        spec["schedulingGates"] = [{"name": "example.com/hold"}]
    obj = make_object(
        GROUPED_PODS,
        name,
        namespace,
        labels={POD_GROUP_LABEL: group},
        spec=spec,
        status={"phase": phase},
    )
    body = json.loads(obj.json)
    body["metadata"]["uid"] = uid_of(name, namespace)
    obj.json = json.dumps(body).encode()
    return obj


def uid_of(name: str, namespace: str = "default") -> str:
    return f"uid-{namespace}-{name}"


def gang_pod(
    name: str, group: str = "pg", *, node: str = "", namespace: str = "default", cpu: str = "1"
) -> pb.Pod:
    """The pod record (the cluster state's, or the one being scheduled)."""
    w = make_pod(name, namespace).uid(uid_of(name, namespace)).req(cpu=cpu, memory="1Gi")
    if group:
        w.label(POD_GROUP_LABEL, group)
    if node:
        w.node(node)
    return w.obj()


def nodes(n: int, cpu: str = "4") -> list[pb.Node]:
    return [make_node(f"n{i}").capacity(cpu=cpu, memory="16Gi").obj() for i in range(1, n + 1)]


def plugin(snap: Snapshot | None, args: CoschedulingArgs | None = None) -> Coscheduling:
    return Coscheduling(args, None if snap is None else handle_for(snap))


def info(pod: pb.Pod) -> PodInfo:
    return PodInfo(pod)


# -- QueueSort ---------------------------------------------------------------------


def queued(pod: pb.Pod, enqueued: int, priority: int = 0) -> QueuedPodInfo:
    pod.priority = priority
    return QueuedPodInfo(PodInfo(pod), enqueued)


@pytest.mark.parametrize(
    ("a", "b", "a_first"),
    [
        # coscheduling_test.go TestLess, in Berth's words.
        pytest.param(
            queued(gang_pod("p1", ""), 2, priority=100),
            queued(gang_pod("p2", ""), 1, priority=10),
            True,
            id="higher priority first",
        ),
        pytest.param(
            queued(gang_pod("p1", ""), 2),
            queued(gang_pod("p2", ""), 1),
            False,
            id="no group: earlier in the queue first",
        ),
        pytest.param(
            queued(gang_pod("p1", "old"), T0_MICROS + 10**9),
            queued(gang_pod("p2", "new"), T0_MICROS),
            True,
            id="older PodGroup first, whatever the pods' queue times",
        ),
        pytest.param(
            queued(gang_pod("z", "a"), T0_MICROS + 5),
            queued(gang_pod("a", "b"), T0_MICROS + 1),
            True,
            id="PodGroups of the same time: by group name, not pod name",
        ),
        pytest.param(
            queued(gang_pod("p1", "missing"), 5),
            queued(gang_pod("p2", ""), 4),
            False,
            id="a group without its PodGroup: the pod's queue time",
        ),
    ],
)
def test_queue_sort_order(a: QueuedPodInfo, b: QueuedPodInfo, a_first: bool) -> None:
    t1 = "2024-01-01T00:00:01Z"
    snap = snapshot_of(
        nodes(1),
        objects=[
            podgroup("old", 2),
            podgroup("new", 2, created=t1),
            podgroup("a", 2, created=t1),
            podgroup("b", 2, created=t1),
        ],
    )
    pl = plugin(snap)
    assert (pl.sort_key(a) < pl.sort_key(b)) is a_first


def test_queue_sort_keeps_each_group_together() -> None:
    snap = snapshot_of(nodes(1), objects=[podgroup("g1", 3), podgroup("g2", 3)])
    pl = plugin(snap)
    # Members arrive interleaved, with a lone pod between them.
    arrivals = [("g2", "b-1"), ("g1", "a-1"), ("", "lone"), ("g2", "b-0"), ("g1", "a-0")]
    pods = [
        queued(gang_pod(name, group), T0_MICROS + 10 + k)
        for k, (group, name) in enumerate(arrivals)
    ]
    order = [q.pod.name for q in sorted(pods, key=pl.sort_key)]
    assert order == ["a-0", "a-1", "b-0", "b-1", "lone"]


def test_queue_sort_without_a_snapshot_uses_the_queue_time() -> None:
    pl = plugin(None)
    q = queued(gang_pod("p", "pg"), 42)
    assert pl.sort_key(q) == (0, 42, "default/pg", "default/p")


def test_queue_sort_key_parts() -> None:
    pl = plugin(snapshot_of(nodes(1), objects=[podgroup("pg", 2)]))
    q = queued(gang_pod("p", "pg"), 42, priority=7)
    assert pl.sort_key(q) == (-7, T0_MICROS, "default/pg", "default/p")


# -- PreFilter ----------------------------------------------------------------------

# (id, PodGroup objects, member objects, want status)
PRE_FILTER_CASES: list[tuple[str, list[pb.ClusterObject], list[pb.ClusterObject], Status]] = [
    ("no PodGroup object: let through (Permit refuses)", [], [member("p", "pg")], SUCCESS),
    (
        "fewer pods than minMember",
        [podgroup("pg", 3)],
        [member("p", "pg"), member("q", "pg")],
        Status.unresolvable(not_enough_message("p", 2, 3)),
    ),
    (
        "enough pods",
        [podgroup("pg", 3)],
        [member("p", "pg"), member("q", "pg"), member("r", "pg", node="n1")],
        SUCCESS,
    ),
    (
        "the pod counts itself before its object arrives",
        [podgroup("pg", 3)],
        [member("q", "pg"), member("r", "pg")],
        SUCCESS,
    ),
    (
        "finished pods do not count",
        [podgroup("pg", 3)],
        [member("p", "pg"), member("q", "pg"), member("r", "pg", node="n1", phase="Succeeded")],
        Status.unresolvable(not_enough_message("p", 2, 3)),
    ),
    (
        "pods of a same-named group in another namespace do not count",
        [podgroup("pg", 2)],
        [member("p", "pg"), member("q", "pg", namespace="other")],
        Status.unresolvable(not_enough_message("p", 1, 2)),
    ),
    (
        "pods of another group do not count",
        [podgroup("pg", 2)],
        [member("p", "pg"), member("q", "pg2")],
        Status.unresolvable(not_enough_message("p", 1, 2)),
    ),
    (
        "gated pods leave the group short",
        [podgroup("pg", 3)],
        [member("p", "pg"), member("q", "pg"), member("r", "pg", gated=True)],
        Status.unresolvable(gated_message("p")),
    ),
    (
        "gated pods above minMember are tolerated",
        [podgroup("pg", 2)],
        [member("p", "pg"), member("q", "pg"), member("r", "pg", gated=True)],
        SUCCESS,
    ),
    (
        "no minMember: no quorum",
        [podgroup("pg", None)],
        [member("p", "pg")],
        SUCCESS,
    ),
    (
        "minResources within the cluster",
        [podgroup("pg", 2, min_resources={"cpu": "6", "memory": "2Gi"})],
        [member("p", "pg"), member("q", "pg")],
        SUCCESS,
    ),
    (
        "minResources above the cluster",
        [podgroup("pg", 2, min_resources={"cpu": "9500m", "nvidia.com/gpu": "1"})],
        [member("p", "pg"), member("q", "pg")],
        Status.unresolvable("resource gap: map[cpu:1500m nvidia.com/gpu:1]"),
    ),
    (
        "minResources: more pods than the nodes take",
        [podgroup("pg", 300, min_resources={"cpu": "1"})],
        [member(f"p{i}" if i else "p", "pg") for i in range(300)],
        Status.unresolvable("resource gap: map[pods:80]"),
    ),
]


@pytest.mark.parametrize(
    ("groups", "members", "want"),
    [pytest.param(g, m, w, id=i) for i, g, m, w in PRE_FILTER_CASES],
)
def test_pre_filter(
    groups: list[pb.ClusterObject], members: list[pb.ClusterObject], want: Status
) -> None:
    snap = snapshot_of(nodes(2), objects=[*groups, *members])
    result, st = plugin(snap).pre_filter(CycleState(), info(gang_pod("p")), snap.all_nodes())
    assert result is None
    assert st == want


def test_pre_filter_pod_without_group_passes() -> None:
    snap = snapshot_of(nodes(1), objects=[podgroup("pg", 5)])
    _, st = plugin(snap).pre_filter(CycleState(), info(gang_pod("p", "")), snap.all_nodes())
    assert st == SUCCESS


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param(
            {"minMember": "three"},
            "PodGroup default/pg: spec.minMember: must be an integer, got 'three'",
            id="minMember not a number",
        ),
        pytest.param(
            {"minMember": 1, "minResources": {"cpu": "lots"}},
            "PodGroup default/pg: spec.minResources.cpu: quantity 'lots' is not a Kubernetes "
            "quantity (e.g. 500m, 2, 1Gi, 1e3)",
            id="bad quantity",
        ),
        pytest.param(
            {"minMember": 2**31},
            "PodGroup default/pg: spec.minMember: 2147483648 is out of range (an int32)",
            id="minMember past int32",
        ),
        pytest.param(
            {"minMember": 1, "scheduleTimeoutSeconds": -(2**40)},
            "PodGroup default/pg: spec.scheduleTimeoutSeconds: -1099511627776 is out of range "
            "(an int32)",
            id="timeout past int32",
        ),
        pytest.param(
            {"minMember": 1, "minResources": {f"example.com/r{i}": "1" for i in range(65)}},
            "PodGroup default/pg: spec.minResources: 65 resources, at most 64 are read",
            id="too many minResources",
        ),
        pytest.param(
            {"minMember": 1, "minResources": {"cpu": "1" * 2000}},
            f"PodGroup default/pg: spec.minResources.cpu: quantity {'1' * 64!r}... (2000 "
            "characters) is longer than 1024 characters (a Kubernetes quantity such as 1500m "
            "or 1.5Gi is a few characters)",
            id="long quantity cut short in the reason",
        ),
    ],
)
def test_pre_filter_unreadable_pod_group_is_unschedulable_naming_it(
    spec: dict[str, Any], message: str
) -> None:
    pg = make_object(PODGROUP, "pg", spec=spec)
    snap = snapshot_of(nodes(1), objects=[pg, member("p", "pg")])
    _, st = plugin(snap).pre_filter(CycleState(), info(gang_pod("p")), snap.all_nodes())
    assert st == Status.unresolvable(message)


def test_resource_gap_takes_the_groups_own_pods_off_their_nodes() -> None:
    # n1 is full of the group's own pods: upstream's getNodeResource takes them off.
    own = [gang_pod(f"m{i}", node="n1") for i in range(4)]
    other = make_pod("other").node("n2").req(cpu="4").obj()
    snap = snapshot_of(nodes(2), [*own, other])
    pg = PodGroup("default", "pg", 4, None, {"cpu": "4"}, None)
    assert resource_gap(snap, pg, [p.uid for p in own]) == {}
    assert resource_gap(snap, pg, []) == {"cpu": 4000}


@pytest.mark.timeout(10)
def test_resource_gap_of_a_huge_min_resources_is_the_capped_request_at_once() -> None:
    # resource.ParseQuantity caps at 2^63-1; parsing 1e100000000 exactly took minutes.
    snap = snapshot_of(nodes(2))
    pg = PodGroup("default", "pg", 1, None, {"cpu": "1e100000000"}, None)
    gap = resource_gap(snap, pg, [])
    assert set(gap) == {"cpu"} and gap["cpu"] > 2**62


def test_resource_gap_without_nodes_is_the_whole_request() -> None:
    pg = PodGroup("default", "pg", 2, None, {"memory": "1Gi"}, None)
    assert resource_gap(snapshot_of([]), pg, []) == {"memory": 2**30, "pods": 2}


def test_format_gap() -> None:
    assert format_gap({"pods": 2, "cpu": 2000, "memory": 5}) == (
        "resource gap: map[cpu:2 memory:5 pods:2]"
    )


# -- Permit -------------------------------------------------------------------------


def _permit(
    snap: Snapshot, pod: pb.Pod, args: CoschedulingArgs | None = None
) -> tuple[Status, float, list[tuple[str, str, bool, str]]]:
    state = CycleState()
    state.current_plugin = "Coscheduling"
    st, timeout = plugin(snap, args).permit(state, info(pod), "n1")
    return st, timeout, state.permit_signals


def test_permit_pod_without_group_succeeds() -> None:
    snap = snapshot_of(nodes(1))
    assert _permit(snap, gang_pod("p", "")) == (SUCCESS, 0.0, [])


def test_permit_pod_group_not_found_is_rejected() -> None:
    snap = snapshot_of(nodes(1), objects=[member("p", "pg")])
    st, _, signals = _permit(snap, gang_pod("p"))
    assert st == Status.unschedulable("PodGroup not found")
    assert signals == []


@pytest.mark.parametrize(
    ("pg_timeout", "args", "want"),
    [
        pytest.param(None, None, 60.0, id="default 60s"),
        pytest.param(None, CoschedulingArgs(permit_waiting_time_seconds=30), 30.0, id="args"),
        pytest.param(
            10, CoschedulingArgs(permit_waiting_time_seconds=30), 10.0, id="PodGroup wins"
        ),
        pytest.param(
            0, CoschedulingArgs(permit_waiting_time_seconds=30), 30.0, id="PodGroup 0: args"
        ),
        pytest.param(5000, None, 900.0, id="capped at 15 minutes"),
        pytest.param(
            None, CoschedulingArgs(permit_waiting_time_seconds=0), 60.0, id="args 0 means 60"
        ),
    ],
)
def test_permit_waits_until_min_member_with_the_timeout(
    pg_timeout: int | None, args: CoschedulingArgs | None, want: float
) -> None:
    snap = snapshot_of(
        nodes(1),
        objects=[podgroup("pg", 3, timeout=pg_timeout), member("p", "pg"), member("q", "pg")],
    )
    st, timeout, signals = _permit(snap, gang_pod("p"), args)
    assert st == Status(Code.WAIT, ("PodGroup default/pg has 1/3 members assigned",))
    assert timeout == want
    assert signals == []


def test_permit_counts_assumed_and_bound_members_and_allows_the_waiting_ones() -> None:
    # q is assumed (waiting at Permit), r is bound, s is pending: p makes 3/3.
    cluster_pods = [gang_pod("q", node="n1"), gang_pod("r", node="n2")]
    objects = [
        podgroup("pg", 3),
        member("p", "pg"),
        member("q", "pg"),
        member("r", "pg", node="n2"),
        member("s", "pg"),
    ]
    snap = snapshot_of(nodes(2), cluster_pods, objects)
    st, timeout, signals = _permit(snap, gang_pod("p"))
    assert (st, timeout) == (SUCCESS, 0.0)
    assert signals == [(uid_of("q"), "Coscheduling", True, "")]


def test_permit_counts_a_member_its_object_shows_bound_before_the_snapshot_has_it() -> None:
    objects = [podgroup("pg", 2), member("p", "pg"), member("r", "pg", node="n2")]
    snap = snapshot_of(nodes(2), [], objects)
    st, _, signals = _permit(snap, gang_pod("p"))
    assert st == SUCCESS
    assert signals == []


def test_permit_ignores_members_of_other_namespaces() -> None:
    objects = [
        podgroup("pg", 2),
        member("p", "pg"),
        member("q", "pg", namespace="other"),
    ]
    snap = snapshot_of(nodes(1), [gang_pod("q", namespace="other", node="n1")], objects)
    st, _, _ = _permit(snap, gang_pod("p"))
    assert st.code is Code.WAIT


def _permit_state(snap: Snapshot, pod: pb.Pod) -> tuple[Status, CycleState]:
    state = CycleState()
    state.current_plugin = "Coscheduling"
    st, _ = plugin(snap).permit(state, info(pod), "n1")
    return st, state


def test_permit_first_member_to_wait_activates_its_pending_siblings() -> None:
    """coscheduling.go Permit → core.go ActivateSiblings: the group's only assigned
    pod (PermitState.Activate) puts the other pods in PodsToActivate; bound or
    assumed members are not queued, finished ones do not count."""
    objects = [
        podgroup("pg", 4),
        member("p", "pg"),
        member("q", "pg"),
        member("r", "pg", gated=True),
        member("done", "pg", phase="Succeeded"),
        member("x", "other"),
    ]
    st, state = _permit_state(snapshot_of(nodes(1), objects=objects), gang_pod("p"))
    assert st.code is Code.WAIT
    assert sorted(state.pods_to_activate) == sorted([uid_of("q"), uid_of("r")])


def test_permit_later_waiters_and_the_last_member_activate_nobody() -> None:
    """core.go Permit sets PermitState.Activate only when len(assigned) == 1."""
    objects = [podgroup("pg", 3), member("p", "pg"), member("q", "pg"), member("s", "pg")]
    # q already waits on n1: p is the second member assigned.
    snap = snapshot_of(nodes(1), [gang_pod("q", node="n1")], objects)
    st, state = _permit_state(snap, gang_pod("p"))
    assert st.code is Code.WAIT
    assert state.pods_to_activate == []
    # s arrives while p and q wait: Success, nobody to activate.
    snap = snapshot_of(nodes(1), [gang_pod("q", node="n1"), gang_pod("p", node="n1")], objects)
    st, state = _permit_state(snap, gang_pod("s"))
    assert st == SUCCESS
    assert state.pods_to_activate == []


# -- Unreserve ------------------------------------------------------------------------


def test_unreserve_rejects_every_waiting_member_but_itself() -> None:
    cluster_pods = [gang_pod("p", node="n1"), gang_pod("q", node="n1"), gang_pod("r", node="n2")]
    objects = [
        podgroup("pg", 4),
        member("p", "pg"),
        member("q", "pg"),
        member("r", "pg"),
        member("s", "pg"),
        member("b", "pg", node="n2"),
    ]
    snap = snapshot_of(nodes(2), cluster_pods, objects)
    state = CycleState()
    state.current_plugin = "Coscheduling"
    plugin(snap).unreserve(state, info(gang_pod("p", node="n1")), "n1")
    assert sorted(state.permit_signals) == [
        (uid_of("q"), "Coscheduling", False, "rejection in Unreserve"),
        (uid_of("r"), "Coscheduling", False, "rejection in Unreserve"),
    ]


@pytest.mark.parametrize(
    ("pod", "objects"),
    [
        pytest.param(gang_pod("p", ""), [podgroup("pg", 2), member("q", "pg")], id="no group"),
        pytest.param(gang_pod("p"), [member("q", "pg")], id="no PodGroup"),
    ],
)
def test_unreserve_signals_nothing(pod: pb.Pod, objects: list[pb.ClusterObject]) -> None:
    snap = snapshot_of(nodes(1), [gang_pod("q", node="n1")], objects)
    state = CycleState()
    plugin(snap).unreserve(state, info(pod), "n1")
    assert state.permit_signals == []


# -- PostFilter -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("min_member", "assigned", "want", "rejects"),
    [
        # coscheduling_test.go TestPostFilter.
        pytest.param(2, 2, Status(Code.UNSCHEDULABLE), False, id="enough assigned: group kept"),
        pytest.param(10, 9, Status(Code.UNSCHEDULABLE), False, id="gap within 10%: group kept"),
        pytest.param(
            4,
            3,
            Status.unschedulable(post_filter_message("default/pg", "p")),
            True,
            id="gap of 25%: waiting members rejected",
        ),
        pytest.param(
            3,
            0,
            Status.unschedulable(post_filter_message("default/pg", "p")),
            False,
            id="nobody waits: nothing to reject",
        ),
    ],
)
def test_post_filter(min_member: int, assigned: int, want: Status, rejects: bool) -> None:
    waiting = [gang_pod(f"w{i}", node="n1") for i in range(assigned)]
    objects = [podgroup("pg", min_member), member("p", "pg")]
    objects += [member(p.name, "pg") for p in waiting]
    snap = snapshot_of(nodes(1, cpu="64"), waiting, objects)
    state = CycleState()
    result, st = plugin(snap).post_filter(state, info(gang_pod("p")), {})
    assert result is None
    assert st == want
    want_signals = (
        [(p.uid, "", False, "optimistic rejection in PostFilter") for p in waiting]
        if rejects
        else []
    )
    assert sorted(state.permit_signals) == sorted(want_signals)


@pytest.mark.parametrize(
    ("pod", "objects", "want"),
    [
        pytest.param(gang_pod("p", ""), [], Status(Code.UNSCHEDULABLE), id="no group: no reason"),
        pytest.param(
            gang_pod("p"),
            [member("p", "pg")],
            Status.unschedulable("can not find pod group"),
            id="no PodGroup",
        ),
    ],
)
def test_post_filter_without_a_group(
    pod: pb.Pod, objects: list[pb.ClusterObject], want: Status
) -> None:
    snap = snapshot_of(nodes(1), objects=objects)
    assert plugin(snap).post_filter(CycleState(), info(pod), {}) == (None, want)


# -- args -----------------------------------------------------------------------------


def _config(args: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": "gang",
                "plugins": {
                    "multiPoint": {"enabled": [{"name": "Coscheduling"}]},
                    "queueSort": {
                        "enabled": [{"name": "Coscheduling"}],
                        "disabled": [{"name": "*"}],
                    },
                },
                "pluginConfig": [{"name": "Coscheduling", "args": args}],
            }
        ],
    }


ARGS = "profiles[0].pluginConfig[0].args"


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        pytest.param({}, CoschedulingArgs(), id="upstream's defaults"),
        pytest.param(
            {
                "permitWaitingTimeSeconds": 900,
                "podGroupRejectPercentage": 0,
                "podGroupBackoffSeconds": 0,
            },
            CoschedulingArgs(permit_waiting_time_seconds=900, pod_group_reject_percentage=0),
            id="the longest wait, always reject",
        ),
        pytest.param(
            {"kind": "CoschedulingArgs", "apiVersion": "kubescheduler.config.k8s.io/v1"},
            CoschedulingArgs(),
            id="typed args",
        ),
    ],
)
def test_valid_args(raw: dict[str, Any], want: CoschedulingArgs) -> None:
    assert (
        parse_config(_config(raw), "<test>", REGISTRY).profiles[0].plugin_args["Coscheduling"]
        == want
    )


@pytest.mark.parametrize(
    ("raw", "field", "reason"),
    [
        pytest.param(
            {"permitWaitingTimeSeconds": -1},
            f"{ARGS}.permitWaitingTimeSeconds",
            "invalid value -1: must be greater than or equal to 0",
            id="negative wait",
        ),
        pytest.param(
            {"permitWaitingTimeSeconds": 901},
            f"{ARGS}.permitWaitingTimeSeconds",
            "invalid value 901: must be at most 900 (15 minutes, the longest a pod may wait at Permit)",
            id="wait above 15 minutes",
        ),
        pytest.param(
            {"podGroupBackoffSeconds": 10},
            f"{ARGS}.podGroupBackoffSeconds",
            "not supported: Berth's plugin server keeps nothing between requests, so it cannot "
            "hold a failed group back for 10s; leave it out (0)",
            id="backoff",
        ),
        pytest.param(
            {"podGroupBackoffSeconds": -1},
            f"{ARGS}.podGroupBackoffSeconds",
            "invalid value -1: must be greater than or equal to 0",
            id="negative backoff",
        ),
        pytest.param(
            {"podGroupRejectPercentage": 101},
            f"{ARGS}.podGroupRejectPercentage",
            "invalid value 101: must be between 0 and 100",
            id="percentage above 100",
        ),
        pytest.param(
            {"permitWaitingTimeSeconds": "60s"},
            f"{ARGS}.permitWaitingTimeSeconds",
            "expected int, got str",
            id="not a number",
        ),
        pytest.param(
            {"scheduleTimeoutSeconds": 5},
            f"{ARGS}.scheduleTimeoutSeconds",
            'unknown field "scheduleTimeoutSeconds"',
            id="a PodGroup field is not an arg",
        ),
    ],
)
def test_bad_args_are_config_errors(raw: dict[str, Any], field: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info_:
        parse_config(_config(raw), "<test>", REGISTRY)
    assert (info_.value.field, info_.value.reason) == (field, reason)


def test_building_in_code_validates_too() -> None:
    with pytest.raises(ValueError, match="podGroupRejectPercentage: invalid value -5"):
        Coscheduling(CoschedulingArgs(pod_group_reject_percentage=-5))


def test_reads_podgroups_and_the_labelled_pods() -> None:
    assert Coscheduling.reads(CoschedulingArgs()) == (PODGROUP, GROUPED_PODS)
    assert GROUPED_PODS.label_selector == "scheduling.x-k8s.io/pod-group"
    assert (PODGROUP.group, PODGROUP.version, PODGROUP.resource, PODGROUP.kind) == (
        "scheduling.x-k8s.io",
        "v1alpha1",
        "podgroups",
        "PodGroup",
    )


def test_example_config_loads_with_coscheduling_everywhere_it_serves() -> None:
    path = EXAMPLE / "scheduler-config.yaml"
    profile = load_config(path, REGISTRY).profiles[0]
    for point in ("queueSort", "preFilter", "postFilter", "reserve", "permit"):
        assert "Coscheduling" in [r.name for r in profile.enabled(point)], point
    assert [r.name for r in profile.enabled("queueSort")] == ["Coscheduling"]
    assert profile.plugin_args["Coscheduling"] == CoschedulingArgs()
    fw = Framework(profile, REGISTRY)
    assert fw.queue_sort_reads
    # The default plugins around it read other kinds (Services, Namespaces, ...).
    assert [r.kind for r in fw.reads if "Coscheduling" in r.plugins] == [PODGROUP, GROUPED_PODS]


def test_podgroup_crd_matches_what_the_plugin_reads() -> None:
    crd = yaml.safe_load((EXAMPLE / "podgroup-crd.yaml").read_text())
    assert crd["spec"]["group"] == PODGROUP.group
    assert crd["spec"]["names"]["plural"] == PODGROUP.resource
    assert crd["spec"]["names"]["kind"] == PODGROUP.kind
    assert crd["spec"]["scope"] == "Namespaced"
    (version,) = crd["spec"]["versions"]
    assert version["name"] == PODGROUP.version
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert spec["minMember"]["type"] == spec["scheduleTimeoutSeconds"]["type"] == "integer"


# -- a gang through whole cycles --------------------------------------------------------


def test_cycles_a_gang_of_four_on_room_for_three_waits_then_binds_when_room_appears() -> None:
    fw = Framework(load_config(EXAMPLE / "scheduler-config.yaml", REGISTRY).profiles[0], REGISTRY)
    names = ["g-0", "g-1", "g-2", "g-3"]
    objects = [podgroup("pg", 4, timeout=30), *(member(n, "pg") for n in names)]
    # Three nodes with room for one 3-CPU member each.
    snap = snapshot_of(nodes(3), objects=objects)
    rng = random.Random(0)
    waiting: list[str] = []
    for k, name in enumerate(names[:3]):
        pod = gang_pod(name, cpu="3")
        state = CycleState()
        result = schedule_pod(fw, snap, state, info(pod), reserve_and_permit=True, rng=rng)
        assert result.status.is_success, result.message
        assert result.permit_status is not None and result.permit_status.is_wait
        assert result.permit_timeouts == {"Coscheduling": 30.0}
        # The first to wait activates the rest (ActivateSiblings); the others do not.
        want = [uid_of(n) for n in names[1:]] if k == 0 else []
        assert sorted(result.activate_pod_uids) == want
        # The caller assumes the waiting pod on its node.
        pod.node_name = result.node
        snap.apply(pb.ClusterDelta(upsert_pods=[pod]))
        waiting.append(pod.uid)
    last = gang_pod("g-3", cpu="3")
    state = CycleState()
    result = schedule_pod(fw, snap, state, info(last), reserve_and_permit=True, rng=rng)
    assert result.status.code is Code.UNSCHEDULABLE
    assert result.message == (
        "0/3 nodes are available: 3 Insufficient cpu. "
        # DefaultPreemption (first at postFilter) and Coscheduling: their
        # reasons combined (RunPostFilterPlugins).
        "no new claims to deallocate, preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod., "
        "PodGroup default/pg gets rejected due to Pod g-3 is unschedulable even after PostFilter"
    )
    # PostFilter rejects the waiting members, attributed to the plugin.
    assert sorted(result.post_filter_signals) == sorted(
        (uid, "Coscheduling", False, "optimistic rejection in PostFilter") for uid in waiting
    )

    # Room appears: a fourth node.
    snap.apply(pb.ClusterDelta(upsert_nodes=nodes(4)[3:]))
    state = CycleState()
    result = schedule_pod(fw, snap, state, info(last), reserve_and_permit=True, rng=rng)
    assert result.status.is_success, result.message
    assert result.node == "n4"
    assert result.permit_status == SUCCESS
    assert sorted(
        (uid, plugin_, allow) for uid, plugin_, allow, _ in state.permit_signals
    ) == sorted((uid, "Coscheduling", True) for uid in waiting)


def test_cycles_permit_rejection_unreserves_and_names_no_one() -> None:
    fw = Framework(load_config(EXAMPLE / "scheduler-config.yaml", REGISTRY).profiles[0], REGISTRY)
    # The group's PodGroup was deleted: Permit refuses, Unreserve has nobody to reject.
    snap = snapshot_of(nodes(1), objects=[member("p", "pg")])
    state = CycleState()
    result = schedule_pod(fw, snap, state, info(gang_pod("p")), reserve_and_permit=True)
    assert result.permit_status is not None
    assert result.permit_status.code is Code.UNSCHEDULABLE
    assert result.permit_status.message == "PodGroup not found"
    assert state.permit_signals == []


def test_cycles_timeout_unreserve_rejects_the_other_waiting_members() -> None:
    fw = Framework(load_config(EXAMPLE / "scheduler-config.yaml", REGISTRY).profiles[0], REGISTRY)
    names = ["a", "b", "c"]
    waiting = [gang_pod(n, node=f"n{k + 1}") for k, n in enumerate(names[:2])]
    snap = snapshot_of(nodes(3), waiting, [podgroup("pg", 3), *(member(n, "pg") for n in names)])
    # a's wait timed out: the caller runs Unreserve for it.
    fw.handle.bind_snapshot(snap)
    state = CycleState()
    fw.run_unreserve(state, info(waiting[0]), "n1")
    assert state.permit_signals == [
        (waiting[1].uid, "Coscheduling", False, "rejection in Unreserve")
    ]


def test_group_members_leave_out_finished_pods() -> None:
    snap = snapshot_of(nodes(1), objects=[member("a", "pg"), member("b", "pg")])
    apply_objects(snap, [member("c", "pg", phase="Failed")])
    assert sorted(m.name for m in group_members(snap, "default", "pg")) == ["a", "b"]
