"""The scheduling queue with queueing hints (shim/queue.py ``move``,
shim/hints.py), after upstream's scheduling_queue.go
(movePodsToActiveOrBackoffQueue, isPodWorthRequeuing,
determineSchedulingHintForInFlightPod): the real queue, the hint map of the
real default profile (DescribeProfiles of an in-process plugin server) and
its hints answered by that server over QueueingHints. What moved is measured
by ``scheduler_queue_incoming_pods_total{event,queue}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from prometheus_client import REGISTRY

from berth.api.v1 import cluster_pb2 as cpb
from berth.client import ClusterStateLog, SchedulingClient
from berth.framework.config import default_config
from berth.framework.events import (
    EVENT_ASSIGNED_POD_DELETE,
    ActionType,
    ClusterEvent,
    EventResource,
    node_scheduling_properties_change,
)
from berth.framework.testing import make_node, make_pod
from berth.plugins.registry import REGISTRY as IN_TREE
from berth.server.app import build_frameworks
from berth.server.service import SchedulingService
from berth.shim.hints import HintMap, Registered, Strategy
from berth.shim.queue import ACTIVE, BACKOFF, GATED, UNSCHEDULABLE, SchedulingQueue
from berth.shim.service import InProcessStub, PluginService
from tests.unit.shim.fakes import FakeClock
from tests.unit.shim.test_queue import (
    INCOMING,
    PROFILE,
    T0,
    FakePlugins,
    Harness,
    admit,
    pop,
)

FIT = frozenset({"NodeResourcesFit"})
AFFINITY = frozenset({"NodeAffinity"})


def incoming(event: str, queue: str) -> float:
    value = REGISTRY.get_sample_value(
        "scheduler_queue_incoming_pods_total", {"event": event, "queue": queue}
    )
    return value or 0.0


class Counted:
    """The plugin service's QueueingHints, counting calls and pods."""

    def __init__(self, service: PluginService) -> None:
        self.service = service
        self.calls: list[int] = []

    async def __call__(
        self,
        event: ClusterEvent,
        old: Any,
        new: Any,
        pods: Sequence[tuple[str, Any, Sequence[str]]],
    ) -> list[tuple[str, ...]]:
        self.calls.append(len(pods))
        return await self.service.queueing_hints(event, old, new, pods)


async def default_profile_queue() -> tuple[Harness, Counted]:
    """A queue with the default profile's hint map and hints, from a real
    in-process plugin server (DescribeProfiles, QueueingHints)."""
    registry = IN_TREE
    config = default_config(registry)
    server = SchedulingService(config, build_frameworks(config, registry))
    service = PluginService(
        SchedulingClient(None, ClusterStateLog(), stub=InProcessStub(server)), remote=False
    )
    profiles = await service.describe()
    plugins = FakePlugins()
    clock = FakeClock(T0)
    asker = Counted(service)
    q = SchedulingQueue(plugins.sort_keys, plugins.pre_enqueue, clock=clock)
    q.set_hints(
        HintMap.from_profiles({name: info.events for name, info in profiles.items()}), asker
    )
    return Harness(q, clock, plugins), asker


async def park(h: Harness, pods: Sequence[cpb.Pod], plugins: frozenset[str]) -> None:
    """The pods, added, popped and failed as unschedulable by ``plugins``."""
    for p in pods:
        h.q.add(p, PROFILE)
    await admit(h)
    left = len(pods)
    while left:
        batch = await pop(h, 256)
        for qp in batch:
            h.q.done_unschedulable(qp, plugins)
        left -= len(batch)


async def test_node_updates_that_help_none_of_1000_unschedulable_pods_move_none() -> None:
    """1000 pods NodeResourcesFit rejected (each asks for more cpu than any
    node has): a node's label or annotation change is not an event Fit
    registered, so nothing is asked and none moves; an allocatable change
    still too small is asked about all 1000 in one QueueingHints call, and
    Fit's hint (isSchedulableAfterNodeChange) answers QueueSkip for every
    one."""
    h, asker = await default_profile_queue()
    pods = [make_pod(f"big-{i}").uid(f"big-{i}").req(cpu="8").obj() for i in range(1000)]
    await park(h, pods, FIT)
    assert h.q.counts()[UNSCHEDULABLE] == 1000

    old = make_node("n1").allocatable(cpu="4", memory="16Gi", pods=110).obj()
    relabelled = make_node("n1").allocatable(cpu="4", memory="16Gi", pods=110).obj()
    relabelled.labels["zone"] = "b"
    relabelled.annotations["note"] = "x"
    grown = make_node("n1").allocatable(cpu="6", memory="16Gi", pods=110).obj()
    events = [
        *((e, old, relabelled) for e in node_scheduling_properties_change(relabelled, old)),
        *((e, old, grown) for e in node_scheduling_properties_change(grown, old)),
    ]
    assert [e.label for e, _, _ in events] == [
        "NodeUpdateNodeLabel",
        "NodeUpdateNodeAnnotation",
        "NodeUpdateNodeAllocatable",
    ]
    before = {
        (e.label, queue): incoming(e.label, queue)
        for e, _, _ in events
        for queue in ("Active", "Backoff")
    }

    for event, o, n in events:
        assert h.q.move(event, o, n) == 0
    assert h.q.hints_waiting == 1  # only the allocatable change asks
    assert await h.q.process_hints() == 0

    assert asker.calls == [1000]  # one round trip, every pod in it
    assert h.q.counts()[UNSCHEDULABLE] == 1000
    after = {key: incoming(*key) for key in before}
    assert after == before
    h.check()


async def test_a_taint_change_moves_the_pods_of_plugins_that_registered_node_add() -> None:
    """buildQueueingHintMap registers UpdateNodeTaint, without a hint, for a
    plugin that registers Node/Add but not UpdateNodeTaint (NodeResourcesFit
    among them; kubernetes#109437): upstream moves their pods on any taint
    change, and so does the shim."""
    h, asker = await default_profile_queue()
    pods = [make_pod(f"big-{i}").uid(f"big-{i}").req(cpu="8").obj() for i in range(3)]
    await park(h, pods, FIT)
    old = make_node("n1").allocatable(cpu="4", pods=110).obj()
    new = make_node("n1").taint("k", "v", "PreferNoSchedule").allocatable(cpu="4", pods=110).obj()
    (event,) = node_scheduling_properties_change(new, old)
    assert h.q.move(event, old, new) == 3
    assert asker.calls == []
    h.check()


async def test_an_event_that_helps_one_plugins_pods_moves_only_those() -> None:
    """A node relabelled into zone a: NodeAffinity registered node label
    changes and its hint answers Queue for the pods that want zone a;
    NodeResourcesFit did not register them, so its pods stay."""
    h, asker = await default_profile_queue()
    wants_a = [make_pod(f"a-{i}").uid(f"a-{i}").node_selector(zone="a").obj() for i in range(10)]
    wants_c = [make_pod(f"c-{i}").uid(f"c-{i}").node_selector(zone="c").obj() for i in range(5)]
    big = [make_pod(f"big-{i}").uid(f"big-{i}").req(cpu="64").obj() for i in range(20)]
    await park(h, wants_a + wants_c, AFFINITY)
    await park(h, big, FIT)
    before = incoming("NodeUpdateNodeLabel", "Backoff") + incoming("NodeUpdateNodeLabel", "Active")

    old = make_node("n1").label("zone", "b").allocatable(cpu="4", pods=110).obj()
    new = make_node("n1").label("zone", "a").allocatable(cpu="4", pods=110).obj()
    (event,) = node_scheduling_properties_change(new, old)
    assert h.q.move(event, old, new) == 0  # NodeAffinity has a hint: asked first
    assert await h.q.process_hints() == 10
    assert asker.calls == [15]  # the NodeAffinity pods only

    moved = {uid for uid in h.q._pods if h.where(uid) in (BACKOFF, INCOMING, ACTIVE)}
    assert moved == {p.uid for p in wants_a}
    after = incoming("NodeUpdateNodeLabel", "Backoff") + incoming("NodeUpdateNodeLabel", "Active")
    assert after - before == 10
    h.check()


async def test_no_hint_call_when_no_pod_has_a_hinted_plugin() -> None:
    """NodePorts registers Node/Add without a hint: its pods move on a node
    added without any QueueingHints call."""
    h, asker = await default_profile_queue()
    pods = [make_pod(f"p-{i}").uid(f"p-{i}").host_port(80).obj() for i in range(3)]
    await park(h, pods, frozenset({"NodePorts"}))
    node = make_node("n2").allocatable(cpu="4", pods=110).obj()
    assert h.q.move(ClusterEvent(EventResource.NODE, ActionType.ADD), None, node) == 3
    assert h.q.hints_waiting == 0
    assert asker.calls == []
    h.check()


# -- the hint map alone (shim/hints.py) ------------------------------------------------


HINTED = HintMap(
    {
        PROFILE: [
            Registered("Gate", ClusterEvent(EventResource.NODE, ActionType.ADD), True),
            Registered("Fit", ClusterEvent(EventResource.POD, ActionType.DELETE), True),
            Registered("Plain", ClusterEvent(EventResource.POD, ActionType.DELETE), False),
        ]
    }
)


@pytest.mark.parametrize(
    ("unschedulable", "pending", "event", "strategy", "ask"),
    [
        pytest.param(
            (), (), EVENT_ASSIGNED_POD_DELETE, Strategy.AFTER_BACKOFF, (), id="no-plugins"
        ),
        pytest.param(
            ("Plain",), (), EVENT_ASSIGNED_POD_DELETE, Strategy.AFTER_BACKOFF, (), id="no-hint"
        ),
        pytest.param(
            ("Plain",),
            ("Plain",),
            EVENT_ASSIGNED_POD_DELETE,
            Strategy.IMMEDIATELY,
            (),
            id="pending-no-hint",
        ),
        pytest.param(("Fit",), (), EVENT_ASSIGNED_POD_DELETE, Strategy.SKIP, ("Fit",), id="hinted"),
        pytest.param(
            ("Fit", "Plain"),
            (),
            EVENT_ASSIGNED_POD_DELETE,
            Strategy.AFTER_BACKOFF,
            (),
            id="decided",
        ),
        pytest.param(
            ("Gate", "Plain"),
            ("Gate",),
            ClusterEvent(EventResource.NODE, ActionType.ADD),
            Strategy.SKIP,
            ("Gate",),
            id="pending-hinted",
        ),
        pytest.param(
            ("Gate",),
            (),
            ClusterEvent(EventResource.NODE, ActionType.DELETE),
            Strategy.SKIP,
            (),
            id="unregistered",
        ),
    ],
)
def test_judge_is_isPodWorthRequeuing_up_to_the_hints(
    unschedulable: tuple[str, ...],
    pending: tuple[str, ...],
    event: ClusterEvent,
    strategy: Strategy,
    ask: tuple[str, ...],
) -> None:
    verdict = HINTED.judge(PROFILE, frozenset(unschedulable), frozenset(pending), event)
    assert (verdict.strategy, verdict.ask) == (strategy, ask)


class Scripted:
    """QueueingHints answered by a script: per pod uid, the plugins that
    answer Queue; ``fail`` makes the call fail."""

    def __init__(self, answers: dict[str, tuple[str, ...]], fail: bool = False) -> None:
        self.answers = answers
        self.fail = fail
        self.calls = 0

    async def __call__(
        self,
        event: ClusterEvent,
        old: Any,
        new: Any,
        pods: Sequence[tuple[str, Any, Sequence[str]]],
    ) -> list[tuple[str, ...]]:
        self.calls += 1
        if self.fail:
            raise RuntimeError("plugin service unreachable")
        return [self.answers.get(pod.uid, ()) for _, pod, _ in pods]


def scripted_queue(asker: Scripted) -> Harness:
    plugins = FakePlugins()
    clock = FakeClock(T0)
    q = SchedulingQueue(plugins.sort_keys, plugins.pre_enqueue, clock=clock)
    q.set_hints(HINTED, asker)
    return Harness(q, clock, plugins)


async def test_a_pending_plugin_answering_queue_skips_the_backoff() -> None:
    """isPodWorthRequeuing: Queue from a plugin whose Pending status held the
    pod is queueImmediately (the activeQ, backoff or not); from another
    plugin, queueAfterBackoff."""
    h = scripted_queue(Scripted({"held": ("Gate",), "rejected": ("Gate",)}))
    for name in ("held", "rejected"):
        h.q.add(make_pod(name).uid(name).obj(), PROFILE)
    await admit(h)
    (held,) = await pop(h, 1)
    h.q.done_unschedulable(held, frozenset({"Gate"}), frozenset({"Gate"}))
    (rejected,) = await pop(h, 1)
    h.q.done_unschedulable(rejected, frozenset({"Gate"}))
    assert h.q.move(ClusterEvent(EventResource.NODE, ActionType.ADD)) == 0
    assert await h.q.process_hints() == 2
    assert (h.where("held"), h.where("rejected")) == (INCOMING, BACKOFF)
    h.check()


async def test_a_hint_answer_for_a_pod_that_left_the_pool_is_dropped() -> None:
    """A pod activated while its hints were being asked is not moved again."""
    h = scripted_queue(Scripted({"p": ("Fit",)}))
    h.q.add(make_pod("p").uid("p").obj(), PROFILE)
    await admit(h)
    (qp,) = await pop(h, 1)
    h.q.done_unschedulable(qp, frozenset({"Fit"}))
    h.q.move(EVENT_ASSIGNED_POD_DELETE, make_pod("gone").node("n1").obj(), None)
    assert h.q.activate(["p"]) == 1
    assert await h.q.process_hints() == 0
    assert h.where("p") == INCOMING
    h.check()


async def test_hints_that_cannot_be_asked_count_as_queue() -> None:
    """A QueueingHints call that fails moves every pod it was for, as
    upstream takes a hint's error as Queue: no pod is stranded."""
    asker = Scripted({}, fail=True)
    h = scripted_queue(asker)
    h.q.add(make_pod("p").uid("p").obj(), PROFILE)
    await admit(h)
    (qp,) = await pop(h, 1)
    h.q.done_unschedulable(qp, frozenset({"Fit"}))
    h.q.move(EVENT_ASSIGNED_POD_DELETE, make_pod("gone").node("n1").obj(), None)
    assert await h.q.process_hints() == 1
    assert asker.calls == 1
    assert h.where("p") == BACKOFF
    h.check()


async def test_an_unschedulable_pods_own_update_is_judged_by_its_plugins() -> None:
    """PriorityQueue.Update on a pod in unschedulablePods: each UpdatePod*
    event of the change goes through isPodWorthRequeuing; a label change
    NodeResourcesFit did not register leaves it, a scale-down its hint
    answers Queue for (the pod itself) moves it."""
    h, asker = await default_profile_queue()
    pod = make_pod("p").uid("p").req(cpu="8").obj()
    await park(h, [pod], FIT)
    relabelled = cpb.Pod()
    relabelled.CopyFrom(pod)
    relabelled.labels["tier"] = "web"
    h.q.update(relabelled)
    await h.q.process_hints()
    assert h.where("p") == UNSCHEDULABLE
    smaller = make_pod("p").uid("p").req(cpu="1").obj()
    smaller.labels["tier"] = "web"
    h.q.update(smaller)
    assert await h.q.process_hints() == 1
    assert h.where("p") == BACKOFF
    assert asker.calls == [1]
    h.check()


async def test_a_gated_pod_is_retried_only_by_its_gating_plugins_events() -> None:
    """movePodsToActiveOrBackoffQueue: a pod a PreEnqueue plugin turned away
    moves only on an event that plugin registered (GatingPluginEvents), back
    through PreEnqueue; other events leave it gated."""
    h = scripted_queue(Scripted({}))
    h.q.set_hints(
        HintMap(
            {
                PROFILE: [
                    Registered(
                        "SchedulingGates", ClusterEvent(EventResource.NODE, ActionType.ADD), False
                    )
                ]
            }
        )
    )
    pod = make_pod("g").uid("g").obj()
    pod.scheduling_gates.append("example.com/wait")
    h.q.add(pod, PROFILE)
    await admit(h)
    assert h.where("g") == GATED
    calls = len(h.plugins.pre_enqueue_calls)
    assert h.q.move(ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_LABEL)) == 0
    assert h.where("g") == GATED
    assert h.q.move(ClusterEvent(EventResource.NODE, ActionType.ADD)) == 1
    assert h.where("g") == INCOMING
    await admit(h)
    assert h.where("g") == GATED  # still gated: PreEnqueue ran again
    assert len(h.plugins.pre_enqueue_calls) == calls + 1
    h.check()


@pytest.mark.parametrize(("answer", "place"), [(("Fit",), BACKOFF), ((), UNSCHEDULABLE)])
async def test_an_event_while_the_pod_was_in_flight_is_judged_by_its_hints(
    answer: tuple[str, ...], place: str
) -> None:
    """determineSchedulingHintForInFlightPod: an event that arrived during the
    pod's cycle, registered with a hint by the plugin that rejected it, is
    asked about once the pod is back; Queue sends it to the backoffQ,
    QueueSkip leaves it in the pool."""
    asker = Scripted({"p": answer})
    h = scripted_queue(asker)
    h.q.add(make_pod("p").uid("p").obj(), PROFILE)
    await admit(h)
    (qp,) = await pop(h, 1)
    h.q.move(EVENT_ASSIGNED_POD_DELETE, make_pod("gone").node("n1").obj(), None)
    assert asker.calls == 0
    h.q.done_unschedulable(qp, frozenset({"Fit"}))
    assert h.where("p") == UNSCHEDULABLE
    await h.q.process_hints()
    assert asker.calls == 1
    assert h.where("p") == place
    h.check()
