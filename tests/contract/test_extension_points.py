"""Every extension point as its own RPC, driven through a whole cycle with
the shipped plugins, as a caller that does not use the composite RPC would."""

from __future__ import annotations

import grpc

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.api.v1 import scheduling_pb2_grpc as pb_grpc
from berth.client import ClusterStateLog
from berth.framework.testing import make_node, make_pod
from berth.server.app import RunningServer

PROFILE = "default-scheduler"


def cluster() -> ClusterStateLog:
    log = ClusterStateLog()
    log.upsert_node(make_node("small").capacity(cpu="1", memory="2Gi").obj())
    log.upsert_node(make_node("big").capacity(cpu="8", memory="32Gi").obj())
    log.upsert_node(make_node("cordoned").capacity(cpu="8", memory="32Gi").unschedulable().obj())
    log.commit()
    return log


async def test_a_cycle_rpc_by_rpc(default_server: RunningServer) -> None:
    log = cluster()
    pod = make_pod("web").req(cpu="2", memory="1Gi").obj()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{default_server.port}") as ch:
        stub = pb_grpc.SchedulingServiceStub(ch)
        state = log.full_state()
        await stub.Sync(pb.SyncRequest(state=state))
        at = cpb.ClusterState(
            cluster_id=log.cluster_id,
            incarnation=log.incarnation,
            generation=log.generation,
            base_generation=log.generation,
        )

        pre_enqueue = await stub.PreEnqueue(pb.PreEnqueueRequest(profile=PROFILE, pod=pod))
        assert pre_enqueue.status.code == pb.CODE_SUCCESS

        low = make_pod("low").priority(1).obj()
        high = make_pod("high").priority(100).obj()
        keys = await stub.QueueSort(
            pb.QueueSortRequest(
                profile=PROFILE,
                pods=[
                    pb.QueuedPod(pod=low, enqueued_unix_micros=1),
                    pb.QueuedPod(pod=high, enqueued_unix_micros=2),
                ],
            )
        )
        # PrioritySort: higher priority first, so its key is smaller.
        as_tuples = [tuple(p.int for p in k.parts) for k in keys.keys]
        assert as_tuples[1] < as_tuples[0]

        pre = await stub.PreFilter(pb.CycleRequest(profile=PROFILE, state=at, pod=pod))
        assert pre.status.code == pb.CODE_SUCCESS and not pre.restrict_nodes
        filt = await stub.Filter(
            pb.NodesRequest(profile=PROFILE, state=at, pod=pod, cycle=pre.cycle, all_nodes=True)
        )
        assert list(filt.feasible) == ["big"]
        rejected = {r.node: (r.status.plugin, list(r.status.reasons)) for r in filt.rejected}
        assert rejected == {
            "small": ("NodeResourcesFit", ["Insufficient cpu"]),
            "cordoned": ("NodeUnschedulable", ["node(s) were unschedulable"]),
        }

        post = await stub.PostFilter(
            pb.PostFilterRequest(
                profile=PROFILE, state=at, pod=pod, cycle=pre.cycle, rejected=filt.rejected
            )
        )
        # No PostFilter plugin in the default set yet: nothing can be done.
        assert post.status.code == pb.CODE_UNSCHEDULABLE

        prescore = await stub.PreScore(
            pb.NodesRequest(
                profile=PROFILE, state=at, pod=pod, cycle=pre.cycle, nodes=filt.feasible
            )
        )
        assert prescore.status.code == pb.CODE_SUCCESS
        score = await stub.Score(
            pb.NodesRequest(
                profile=PROFILE, state=at, pod=pod, cycle=prescore.cycle, nodes=filt.feasible
            )
        )
        # Every Score plugin of the profile, in its order, as DescribeProfiles lists them.
        profiles = await stub.DescribeProfiles(pb.DescribeProfilesRequest())
        prof = next(p for p in profiles.profiles if p.scheduler_name == PROFILE)
        score_point = next(ep for ep in prof.extension_points if ep.name == "score")
        skipped = set(prescore.cycle.skip_score_plugins)  # PreScore said Skip
        assert [p.plugin for p in score.plugins] == [
            p.name for p in score_point.plugins if p.name not in skipped
        ]
        assert "NodeResourcesFit" in [p.plugin for p in score.plugins]
        max_total = 100 * sum(p.weight for p in score_point.plugins)
        norm = await stub.NormalizeScore(
            pb.NormalizeScoreRequest(
                profile=PROFILE,
                state=at,
                pod=pod,
                cycle=prescore.cycle,
                nodes=filt.feasible,
                plugins=score.plugins,
            )
        )
        assert len(norm.totals) == 1 and 0 < norm.totals[0] <= max_total

        node = pb.NodeRequest(profile=PROFILE, state=at, pod=pod, cycle=prescore.cycle, node="big")
        assert (await stub.Reserve(node)).status.code == pb.CODE_SUCCESS
        permit = await stub.Permit(node)
        assert permit.status.code == pb.CODE_SUCCESS and not permit.wait_timeout_millis
        assert (await stub.PreBind(node)).status.code == pb.CODE_SUCCESS
        bind = await stub.Bind(node)
        assert bind.status.code == pb.CODE_SUCCESS
        # DefaultBinder: the caller writes the Binding (the server has no credentials).
        assert (bind.bound_by, bind.caller_binds, bind.node) == ("DefaultBinder", True, "big")
        assert (await stub.PostBind(node)).status.code == pb.CODE_SUCCESS
        assert (await stub.Unreserve(node)).status.code == pb.CODE_SUCCESS
