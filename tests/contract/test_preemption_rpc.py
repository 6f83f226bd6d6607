"""Preemption over the wire: PostFilterResponse carries DefaultPreemption's
victims, the nominations to clear and the plugin (from the PostFilter RPC
and from Schedule/ScheduleBatch's post_filter), nominated pods in the cluster
state count in Filter, and within a ScheduleBatch a pod nominated by
preemption counts for the pods after it (upstream's nominator takes the
nomination at once, handleSchedulingFailure)."""

from __future__ import annotations

import grpc

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.api.v1 import scheduling_pb2_grpc as pb_grpc
from berth.client import ClusterStateLog, SchedulingClient
from berth.framework.testing import make_node, make_pod
from berth.server.app import RunningServer

PROFILE = "default-scheduler"


def pod(name: str, prio: int, cpu: str, node: str = "", nominated: str = "") -> cpb.Pod:
    p = make_pod(name).uid(name).priority(prio).req(cpu=cpu, memory="100Mi").obj()
    p.node_name = node
    p.nominated_node_name = nominated
    return p


def cluster(*pods: cpb.Pod) -> ClusterStateLog:
    """Two 1-CPU nodes: a holds a low-priority pod, b a high-priority one."""
    log = ClusterStateLog()
    for name in ("a", "b"):
        log.upsert_node(make_node(name).capacity(cpu="1", memory="4Gi").obj())
    log.upsert_pod(pod("low", 0, "800m", node="a"))
    log.upsert_pod(pod("high", 1000, "800m", node="b"))
    for p in pods:
        log.upsert_pod(p)
    log.commit()
    return log


async def post_filter_rpc(
    ch: grpc.aio.Channel, log: ClusterStateLog, p: cpb.Pod, preemption_candidates: bool = False
) -> pb.PostFilterResponse:
    """The failed cycle's calls one RPC each: PreFilter, Filter over every
    node (none passes), then PostFilter on the rejected nodes, all at the
    generation PreFilter answered with."""
    stub = pb_grpc.SchedulingServiceStub(ch)
    pre = await stub.PreFilter(pb.CycleRequest(profile=PROFILE, state=log.full_state(), pod=p))
    pinned = cpb.ClusterState(
        cluster_id=log.cluster_id,
        generation=pre.generation,
        base_generation=pre.generation,
        incarnation=log.incarnation,
        pinned=True,
    )
    filt = await stub.Filter(
        pb.NodesRequest(profile=PROFILE, state=pinned, pod=p, cycle=pre.cycle, all_nodes=True)
    )
    assert not filt.feasible
    post: pb.PostFilterResponse = await stub.PostFilter(
        pb.PostFilterRequest(
            profile=PROFILE,
            state=pinned,
            pod=p,
            cycle=pre.cycle,
            rejected=filt.rejected,
            preemption_candidates=preemption_candidates,
        )
    )
    return post


async def test_schedule_returns_the_victims_of_the_preemption(
    default_server: RunningServer,
) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{default_server.port}") as ch:
        client = SchedulingClient(ch, cluster(pod("queued-low", 10, "100m", nominated="a")))
        resp = await client.schedule(PROFILE, pod("p", 100, "500m"))
    assert resp.node == ""
    assert resp.status.code == pb.CODE_UNSCHEDULABLE
    assert resp.diagnosis.message == "0/2 nodes are available: 2 Insufficient cpu."
    pf = resp.post_filter
    assert pf.status.code == pb.CODE_SUCCESS
    assert pf.nominated_node_name == "a"
    assert pf.plugin == "DefaultPreemption"
    assert pf.nominating_mode == pb.NOMINATING_MODE_OVERRIDE
    assert [(v.uid, v.namespace, v.name) for v in pf.victims] == [("low", "default", "low")]
    # The lower-priority pod nominated to a loses its nomination.
    assert list(pf.clear_nomination_pod_uids) == ["queued-low"]


async def test_an_unhelpful_preemption_says_so_in_the_fit_error(
    default_server: RunningServer,
) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{default_server.port}") as ch:
        resp = await SchedulingClient(ch, cluster()).schedule(PROFILE, pod("p", 0, "500m"))
    assert resp.diagnosis.message == (
        "0/2 nodes are available: 2 Insufficient cpu. no new claims to deallocate, "
        "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
    )
    assert resp.status.reasons == [resp.diagnosis.message]
    pf = resp.post_filter
    assert pf.status.code == pb.CODE_UNSCHEDULABLE
    assert (pf.nominated_node_name, pf.plugin, list(pf.victims)) == ("", "", [])
    # No candidate clears a nomination (preemption.go Preempt:
    # NewPostFilterResultWithNominatedNode("")).
    assert pf.nominating_mode == pb.NOMINATING_MODE_OVERRIDE


async def test_a_pod_that_may_not_preempt_keeps_its_nomination(
    default_server: RunningServer,
) -> None:
    """preemption.go Preempt: a pod not eligible to preempt others
    (PodEligibleToPreemptOthers, here preemptionPolicy Never) gets no result,
    so its nomination is left as it is (ModeNoop)."""
    never = pod("p", 100, "500m", nominated="a")
    never.preemption_policy = "Never"
    async with grpc.aio.insecure_channel(f"127.0.0.1:{default_server.port}") as ch:
        resp = await SchedulingClient(ch, cluster()).schedule(PROFILE, never)
    assert resp.node == ""
    pf = resp.post_filter
    assert pf.status.code == pb.CODE_UNSCHEDULABLE
    assert pf.nominating_mode == pb.NOMINATING_MODE_NOOP
    assert (pf.nominated_node_name, list(pf.victims)) == ("", [])


async def test_post_filter_rpc_carries_victims_nominations_and_plugin(
    default_server: RunningServer,
) -> None:
    log = cluster(pod("queued-low", 10, "100m", nominated="a"))
    p = pod("p", 100, "500m")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{default_server.port}") as ch:
        post = await post_filter_rpc(ch, log, p)
    assert post.status.code == pb.CODE_SUCCESS
    assert post.nominated_node_name == "a"
    assert post.plugin == "DefaultPreemption"
    assert post.nominating_mode == pb.NOMINATING_MODE_OVERRIDE
    assert [v.name for v in post.victims] == ["low"]
    assert list(post.clear_nomination_pod_uids) == ["queued-low"]


async def test_nominated_pods_in_the_state_hold_their_room_in_filter(
    default_server: RunningServer,
) -> None:
    """RunFilterPluginsWithNominatedPods: a higher-priority pod nominated to
    a node counts there; the Filter RPC sees it too."""
    log = ClusterStateLog()
    for name in ("a", "b"):
        log.upsert_node(make_node(name).capacity(cpu="1", memory="4Gi").obj())
    log.upsert_pod(pod("nominee", 100, "800m", nominated="a"))
    log.commit()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{default_server.port}") as ch:
        client = SchedulingClient(ch, log)
        resp = await client.schedule(PROFILE, pod("p", 50, "500m"), seed=1)
        assert resp.node == "b"
        # The nominee itself goes to its nominated node first.
        mine = await client.schedule(PROFILE, pod("nominee", 100, "800m", nominated="a"))
        assert (mine.node, mine.evaluated_nodes) == ("a", 1)


async def test_batch_counts_a_nomination_for_the_pods_after_it(
    default_server: RunningServer,
) -> None:
    """p1 preempts "low" on a and is nominated there; p2 (lower priority
    than p1) then finds a taken by p1's nomination: evicting "low" would no
    longer make room for it. Alone, p2 would have preempted on a."""
    p1 = pod("p1", 100, "500m")
    p2 = pod("p2", 50, "600m")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{default_server.port}") as ch:
        out = await SchedulingClient(ch, cluster()).schedule_batch(PROFILE, [p1, p2], seed=3)
        r1, r2 = out.results
        assert r1.post_filter.nominated_node_name == "a"
        assert [v.name for v in r1.post_filter.victims] == ["low"]
        assert r2.post_filter.nominated_node_name == ""
        assert r2.post_filter.status.code == pb.CODE_UNSCHEDULABLE
        assert r2.diagnosis.message == (
            "0/2 nodes are available: 2 Insufficient cpu. no new claims to deallocate, "
            "preemption: 0/2 nodes are available: 1 Insufficient cpu, 1 No preemption victims "
            "found for incoming pod."
        )
        alone = await SchedulingClient(ch, cluster()).schedule(PROFILE, p2)
        assert alone.post_filter.nominated_node_name == "a"
        # The batch left the replica's snapshot as it found it: p1 is not
        # nominated there for later requests.
        again = await SchedulingClient(ch, cluster()).schedule_batch(PROFILE, [p2])
        assert again.results[0].post_filter.nominated_node_name == "a"


def two_candidates() -> ClusterStateLog:
    """Two 1-CPU nodes, each with one pod the preemptor may evict: a's of
    priority 0, b's of priority 50; a pod of priority 10 nominated to b."""
    log = ClusterStateLog()
    for name in ("a", "b"):
        log.upsert_node(make_node(name).capacity(cpu="1", memory="4Gi").obj())
    log.upsert_pod(pod("low", 0, "800m", node="a"))
    log.upsert_pod(pod("mid", 50, "800m", node="b"))
    log.upsert_pod(pod("queued-low", 10, "100m", nominated="b"))
    log.commit()
    return log


def candidates_of(pf: pb.PostFilterResponse) -> list[tuple[str, list[str], list[str]]]:
    return sorted(
        (c.node_name, [v.name for v in c.victims], list(c.clear_nomination_pod_uids))
        for c in pf.candidates
    )


async def test_asked_for_candidates_the_preemption_answers_them_all_unselected(
    default_server: RunningServer,
) -> None:
    """ScheduleRequest.preemption_candidates, for a caller whose extenders
    process preemption (preemption.go Preempt: callExtenders sees every
    candidate, SelectCandidate runs after it): Schedule, ScheduleBatch and
    the PostFilter RPC answer every candidate with its victims and the
    nominations it would clear; none is selected, nobody is nominated."""
    want = [("a", ["low"], []), ("b", ["mid"], ["queued-low"])]
    p = pod("p", 100, "500m")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{default_server.port}") as ch:
        resp = await SchedulingClient(ch, two_candidates()).schedule(
            PROFILE, p, preemption_candidates=True
        )
        batch = await SchedulingClient(ch, two_candidates()).schedule_batch(
            PROFILE, [p], preemption_candidates=True
        )
        plain = await SchedulingClient(ch, two_candidates()).schedule(PROFILE, p)
        post = await post_filter_rpc(ch, two_candidates(), p, preemption_candidates=True)
    for pf in (resp.post_filter, batch.results[0].post_filter, post):
        assert pf.status.code == pb.CODE_SUCCESS
        assert pf.plugin == "DefaultPreemption"
        assert candidates_of(pf) == want
        assert (pf.nominated_node_name, list(pf.victims), list(pf.clear_nomination_pod_uids)) == (
            "",
            [],
            [],
        )
    # Not asked: the plugin selects a (the lower-priority victim) as ever.
    assert plain.post_filter.nominated_node_name == "a"
    assert not plain.post_filter.candidates
