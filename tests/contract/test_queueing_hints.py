"""QueueingHints and DescribeProfiles' events over a real gRPC channel: a
caller in any language learns from DescribeProfiles which plugin registered
which events and which have hints, and asks QueueingHints about all the pods
of one event in one call (upstream's isPodWorthRequeuing,
pkg/scheduler/backend/queue/scheduling_queue.go)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import grpc
import pytest

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.api.v1 import scheduling_pb2_grpc as pb_grpc
from berth.framework import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    ClusterObject,
    CycleState,
    EventResource,
    FilterPlugin,
    NodeInfo,
    PodInfo,
    QueueingHint,
    Status,
)
from berth.framework.profile import PluginRef, ProfileConfig, SchedulerConfig
from berth.framework.testing import make_node, make_pod
from berth.server.app import RunningServer, start_server
from berth.server.handlers import MAX_HINT_PODS
from tests.unit.framework.fakes import REGISTRY as BASE


class WantsLabel(FilterPlugin):
    """Rejects nodes without the pod's ``want`` label; a node added or
    relabelled helps only a pod whose wanted label it now carries."""

    name: ClassVar[str] = "WantsLabel"

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        want = pod.labels.get("want", "")
        return Status.success() if want in node.node.labels else Status.unschedulable("no")

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL),
                self.after_node_change,
            )
        ]

    def after_node_change(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        if pod.labels.get("want", "") in new.node.labels:
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP


class WantsConfig(FilterPlugin):
    """Registers changes of a CRD it reads; its hint reads the object."""

    name: ClassVar[str] = "WantsConfig"

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        return Status.unschedulable("no config")

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent("configs.v1.example.com", ActionType.ADD), self.after_config
            ),
            ClusterEventWithHint(ClusterEvent(EventResource.POD, ActionType.DELETE)),
        ]

    def after_config(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        assert isinstance(new, ClusterObject)
        ready = new.data.get("spec", {}).get("ready") is True
        return QueueingHint.QUEUE if ready else QueueingHint.QUEUE_SKIP


class Silent(FilterPlugin):
    """Declares nothing: every event moves its pods."""

    name: ClassVar[str] = "Silent"

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        return Status.success()


class Broken(FilterPlugin):
    name: ClassVar[str] = "Broken"

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        return Status.success()

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.UPDATE), self.boom)
        ]

    def boom(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        raise RuntimeError("hint failed")


REGISTRY = {**BASE, **{c.name: c for c in (WantsLabel, WantsConfig, Silent, Broken)}}
CONFIG = SchedulerConfig(
    profiles=(
        ProfileConfig(
            scheduler_name="hints",
            plugins={
                "queueSort": (PluginRef("Sort"),),
                "filter": (
                    PluginRef("WantsLabel"),
                    PluginRef("WantsConfig"),
                    PluginRef("Silent"),
                    PluginRef("Broken"),
                ),
                "bind": (PluginRef("Binder"),),
            },
        ),
    ),
    source="<hints>",
)


@pytest.fixture
async def stub() -> AsyncIterator[Any]:
    running: RunningServer = await start_server(CONFIG, REGISTRY, "127.0.0.1:0", trace=False)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as ch:
            yield pb_grpc.SchedulingServiceStub(ch)
    finally:
        await running.stop(0)


async def test_describe_profiles_lists_each_plugins_events_and_hints(stub: Any) -> None:
    (prof,) = (await stub.DescribeProfiles(pb.DescribeProfilesRequest())).profiles
    by_plugin: dict[str, list[tuple[str, int, bool]]] = {}
    for e in prof.events:
        by_plugin.setdefault(e.plugin, []).append((e.resource, e.action_type, e.has_hint))
    add, label, taint = 1, 8, 16
    # Node Add without UpdateNodeTaint gets one, without a hint
    # (buildQueueingHintMap).
    assert by_plugin["WantsLabel"] == [("Node", add | label, True), ("Node", taint, False)]
    assert by_plugin["WantsConfig"] == [
        ("configs.v1.example.com", add, True),
        ("Pod", 2, False),
    ]
    assert by_plugin["Broken"] == [("Node", 8188, True)]
    # A plugin that declares nothing registers everything, without hints.
    silent = by_plugin["Silent"]
    assert ("Node", 8191, False) in silent and ("Pod", 8191, False) in silent
    assert all(not hinted for _, _, hinted in silent)
    # Plugins that reject nothing (QueueSort, Bind) register nothing.
    assert "Sort" not in by_plugin and "Binder" not in by_plugin


def _node_event(old: cpb.Node | None, new: cpb.Node | None, action: int) -> dict[str, Any]:
    out: dict[str, Any] = {"resource": "Node", "action_type": action}
    if old is not None:
        out["old_object"] = pb.EventObject(node=old)
    if new is not None:
        out["new_object"] = pb.EventObject(node=new)
    return out


async def test_one_call_judges_every_pod_of_an_event(stub: Any) -> None:
    wants_a = make_pod("a").uid("a").label("want", "gpu").obj()
    wants_b = make_pod("b").uid("b").label("want", "ssd").obj()
    old = make_node("n").obj()
    new = make_node("n").label("gpu", "true").obj()
    resp = await stub.QueueingHints(
        pb.QueueingHintsRequest(
            **_node_event(old, new, 8),
            pods=[
                pb.HintPod(profile="hints", pod=wants_a, plugins=["WantsLabel"]),
                pb.HintPod(profile="hints", pod=wants_b, plugins=["WantsLabel"]),
                pb.HintPod(profile="hints", pod=wants_b, plugins=["WantsLabel", "Broken"]),
                # A plugin that did not register the event does not answer.
                pb.HintPod(profile="hints", pod=wants_a, plugins=["WantsConfig"]),
            ],
        )
    )
    assert [(p.queue, list(p.queueing_plugins)) for p in resp.pods] == [
        (True, ["WantsLabel"]),
        (False, []),
        # A hint that raises counts as Queue.
        (True, ["Broken"]),
        (False, []),
    ]


async def test_the_hint_of_a_declared_kind_reads_the_object(stub: Any) -> None:
    def config(ready: bool) -> pb.EventObject:
        return pb.EventObject(
            cluster_object=cpb.ClusterObject(
                ref=cpb.ObjectRef(group="example.com", resource="configs", name="c"),
                version="v1",
                kind="Config",
                json=json.dumps({"spec": {"ready": ready}}).encode(),
            )
        )

    pod = make_pod("p").uid("p").obj()
    answers = []
    for ready in (True, False):
        resp = await stub.QueueingHints(
            pb.QueueingHintsRequest(
                resource="configs.v1.example.com",
                action_type=1,
                new_object=config(ready),
                pods=[pb.HintPod(profile="hints", pod=pod, plugins=["WantsConfig"])],
            )
        )
        answers.append(resp.pods[0].queue)
    assert answers == [True, False]
    # An assigned pod's deletion matches the plugin's Pod/Delete, no hint.
    resp = await stub.QueueingHints(
        pb.QueueingHintsRequest(
            resource="AssignedPod",
            action_type=2,
            old_object=pb.EventObject(pod=make_pod("gone").uid("g").node("n").obj()),
            pods=[pb.HintPod(profile="hints", pod=pod, plugins=["WantsConfig"])],
        )
    )
    assert list(resp.pods[0].queueing_plugins) == ["WantsConfig"]


@pytest.mark.parametrize(
    ("request_", "code", "message"),
    [
        (
            pb.QueueingHintsRequest(action_type=1),
            grpc.StatusCode.INVALID_ARGUMENT,
            "resource: must name the event's resource",
        ),
        (
            pb.QueueingHintsRequest(resource="Node", action_type=3),
            grpc.StatusCode.INVALID_ARGUMENT,
            "action_type: must be exactly one ActionType bit (1, 2, 4, ... 4096), got 3",
        ),
        (
            pb.QueueingHintsRequest(resource="Node", action_type=1 << 13),
            grpc.StatusCode.INVALID_ARGUMENT,
            "action_type: must be exactly one ActionType bit",
        ),
        (
            pb.QueueingHintsRequest(
                resource="Node",
                action_type=1,
                pods=[pb.HintPod(profile="nope", pod=make_pod("p").uid("p").obj())],
            ),
            grpc.StatusCode.NOT_FOUND,
            "profile 'nope' is not configured",
        ),
        (
            pb.QueueingHintsRequest(
                resource="Node",
                action_type=1,
                pods=[pb.HintPod(profile="hints", pod=cpb.Pod(name="p"))],
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "pods[0].pod.uid: must not be empty",
        ),
        (
            pb.QueueingHintsRequest(
                resource="Node",
                action_type=1,
                pods=[
                    pb.HintPod(profile="hints", pod=make_pod("p").uid("p").obj(), plugins=["Other"])
                ],
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "pods[0].plugins[0]: plugin 'Other' is not in profile 'hints'",
        ),
        (
            pb.QueueingHintsRequest(
                resource="Node",
                action_type=1,
                pods=[pb.HintPod(profile="hints")] * (MAX_HINT_PODS + 1),
            ),
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "",
        ),
    ],
)
async def test_bad_requests_are_refused_with_the_field(
    stub: Any, request_: pb.QueueingHintsRequest, code: grpc.StatusCode, message: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.QueueingHints(request_)
    assert err.value.code() == code
    assert message in (err.value.details() or "")


async def test_a_passed_deadline_ends_the_call(stub: Any) -> None:
    pod = make_pod("p").uid("p").label("want", "gpu").obj()
    pods = [pb.HintPod(profile="hints", pod=pod, plugins=["WantsLabel"])] * 2000
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.QueueingHints(
            pb.QueueingHintsRequest(
                **_node_event(make_node("n").obj(), make_node("n").obj(), 8), pods=pods
            ),
            timeout=0.0001,
        )
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
