"""berth.client.ClusterStateLog: the caller's truth, numbered by generation
(protos/README.md, the delta protocol).

Each committed delta names an object at most once, in its last state, and a
merged delta over several generations does too: applying it to a replica must
give the same snapshot as applying the generations one by one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.client import ClusterStateLog
from berth.framework.testing import make_node, make_pod


def node(name: str, cpu: str = "4") -> cpb.Node:
    return make_node(name).capacity(cpu=cpu).obj()


def pod(uid: str, node_name: str = "n1", cpu: str = "1") -> cpb.Pod:
    return make_pod(uid).uid(uid).req(cpu=cpu).node(node_name).obj()


def last_delta(log: ClusterStateLog) -> cpb.ClusterDelta:
    """The delta the last commit produced, as a replica one generation behind gets it."""
    st = log.state_since(log.generation - 1)
    assert not st.full and st.base_generation == log.generation - 1
    return st.delta


def names(delta: cpb.ClusterDelta) -> tuple[list[str], list[str], list[str], list[str]]:
    return (
        [n.name for n in delta.upsert_nodes],
        list(delta.delete_nodes),
        [p.uid for p in delta.upsert_pods],
        list(delta.delete_pods),
    )


def apply(nodes: dict[str, cpb.Node], pods: dict[str, cpb.Pod], delta: cpb.ClusterDelta) -> None:
    """A replica applying a delta (server/state.py does the same: deletes, then upserts)."""
    for name in delta.delete_nodes:
        nodes.pop(name, None)
    for n in delta.upsert_nodes:
        nodes[n.name] = n
    for uid in delta.delete_pods:
        pods.pop(uid, None)
    for p in delta.upsert_pods:
        pods[p.uid] = p


def assert_each_object_once(delta: cpb.ClusterDelta) -> None:
    up_n, del_n, up_p, del_p = names(delta)
    all_nodes = up_n + del_n
    all_pods = up_p + del_p
    assert len(all_nodes) == len(set(all_nodes)), all_nodes
    assert len(all_pods) == len(set(all_pods)), all_pods


# -- one generation: an object lands once, in its last state -----------------------


@pytest.mark.parametrize("existed_before", [True, False], ids=["existing", "new"])
@pytest.mark.parametrize("kind", ["node", "pod"])
def test_upsert_then_delete_before_commit_is_one_delete(kind: str, existed_before: bool) -> None:
    """The pending change is kept per object, last state wins. An object that is
    new in this generation still goes out as a delete: a full state sent before
    the commit may have carried it, and a delete of an unknown object is a no-op
    for a replica."""
    log = ClusterStateLog("c1")
    log.upsert_node(node("other"))
    if existed_before:
        log.upsert_node(node("n1"))
        log.upsert_pod(pod("p1"))
    log.commit()

    if kind == "node":
        log.upsert_node(node("n1", cpu="8"))
        log.delete_node("n1")
    else:
        log.upsert_pod(pod("p1", cpu="2"))
        log.delete_pod("p1")
    log.commit()

    delta = last_delta(log)
    if kind == "node":
        assert names(delta) == ([], ["n1"], [], [])
        assert "n1" not in log.nodes
    else:
        assert names(delta) == ([], [], [], ["p1"])
        assert "p1" not in log.pods


@pytest.mark.parametrize("kind", ["node", "pod"])
def test_delete_then_upsert_before_commit_is_one_upsert_of_the_new_state(kind: str) -> None:
    log = ClusterStateLog("c1")
    log.upsert_node(node("n1"))
    log.upsert_pod(pod("p1"))
    log.commit()

    if kind == "node":
        log.delete_node("n1")
        log.upsert_node(node("n1", cpu="8"))
    else:
        log.delete_pod("p1")
        log.upsert_pod(pod("p1", cpu="3"))
    log.commit()

    delta = last_delta(log)
    if kind == "node":
        assert names(delta) == (["n1"], [], [], [])
        assert delta.upsert_nodes[0].capacity.milli_cpu == 8000
    else:
        assert names(delta) == ([], [], ["p1"], [])
        assert delta.upsert_pods[0].containers[0].requests.milli_cpu == 3000


def test_several_upserts_before_commit_send_only_the_last_state() -> None:
    log = ClusterStateLog("c1")
    log.commit()
    for cpu in ("1", "2", "3"):
        log.upsert_node(node("n1", cpu=cpu))
    log.commit()
    delta = last_delta(log)
    assert names(delta) == (["n1"], [], [], [])
    assert delta.upsert_nodes[0].capacity.milli_cpu == 3000


def test_deleting_an_unknown_object_is_no_change() -> None:
    log = ClusterStateLog("c1")
    log.upsert_node(node("n1"))
    gen = log.commit()
    log.delete_node("ghost")
    log.delete_pod("ghost")
    assert not log.has_pending
    assert log.commit() == gen


def test_commit_without_changes_keeps_the_generation_but_an_empty_cluster_gets_one() -> None:
    log = ClusterStateLog("c1")
    assert log.generation == 0
    assert log.commit() == 1  # an empty cluster is a state a replica can hold
    assert log.commit() == 1
    log.upsert_node(node("n1"))
    assert log.has_pending
    assert log.commit() == 2
    assert not log.has_pending


# -- several generations: state_since merges ------------------------------------------


def _gen1(log: ClusterStateLog) -> None:
    log.upsert_node(node("n1", cpu="1"))
    log.upsert_node(node("n2"))
    log.upsert_pod(pod("p1"))
    log.upsert_pod(pod("p2"))


def _gen2(log: ClusterStateLog) -> None:
    log.upsert_node(node("n1", cpu="2"))
    log.delete_pod("p1")


def _gen3(log: ClusterStateLog) -> None:
    log.upsert_node(node("n1", cpu="3"))
    log.delete_node("n2")
    log.upsert_pod(pod("p3"))


def _gen4(log: ClusterStateLog) -> None:
    log.upsert_pod(pod("p1", cpu="5"))  # p1 comes back
    log.delete_pod("p3")  # p3 goes again


def _gen5(log: ClusterStateLog) -> None:
    log.upsert_node(node("n2", cpu="6"))  # n2 comes back
    log.upsert_pod(pod("p2", cpu="7"))


# Generations 1..5, touching the same objects again and again.
HISTORY: list[Callable[[ClusterStateLog], None]] = [_gen1, _gen2, _gen3, _gen4, _gen5]


def history(until: int, keep: int = 512) -> ClusterStateLog:
    log = ClusterStateLog("c1", keep=keep)
    for step in HISTORY[:until]:
        step(log)
        log.commit()
    assert log.generation == until
    return log


@pytest.mark.parametrize("base", [1, 2, 3, 4])
def test_state_since_merges_generations_with_each_object_once(base: int) -> None:
    log = history(5)
    replica = history(base)  # what a replica at `base` holds
    nodes, pods = dict(replica.nodes), dict(replica.pods)

    st = log.state_since(base)

    assert not st.full
    assert (st.cluster_id, st.base_generation, st.generation) == ("c1", base, 5)
    assert_each_object_once(st.delta)
    apply(nodes, pods, st.delta)
    assert nodes == log.nodes
    assert pods == log.pods


def test_state_since_merge_names_objects_by_their_last_state() -> None:
    st = history(5).state_since(1)
    up_n, del_n, up_p, del_p = names(st.delta)
    assert (sorted(up_n), del_n) == (["n1", "n2"], [])
    # p1 deleted (2) then back (4): an upsert; p3 added (3) then gone (4): a delete.
    assert (sorted(up_p), del_p) == (["p1", "p2"], ["p3"])
    by_name = {n.name: n for n in st.delta.upsert_nodes}
    assert by_name["n1"].capacity.milli_cpu == 3000
    assert by_name["n2"].capacity.milli_cpu == 6000


def test_state_since_the_current_generation_is_an_empty_delta() -> None:
    log = history(3)
    st = log.state_since(3)
    assert not st.full
    assert (st.base_generation, st.generation) == (3, 3)
    assert names(st.delta) == ([], [], [], [])


@pytest.mark.parametrize(
    ("base", "why"),
    [(0, "unknown replica"), (-1, "unknown replica"), (1, "older than the log"), (9, "ahead")],
)
def test_state_since_falls_back_to_the_full_state(base: int, why: str) -> None:
    log = history(5, keep=3)  # the log holds generations 3, 4, 5
    st = log.state_since(base)
    assert st.full, why
    assert st.generation == 5


def test_state_since_the_oldest_base_the_log_reaches_is_still_a_delta() -> None:
    log = history(5, keep=3)  # deltas 3, 4, 5: a replica at 2 can be brought forward
    st = log.state_since(2)
    assert not st.full
    replica = history(2)
    nodes, pods = dict(replica.nodes), dict(replica.pods)
    apply(nodes, pods, st.delta)
    assert (nodes, pods) == (log.nodes, log.pods)


def test_state_since_does_not_reuse_a_merge_from_an_older_generation() -> None:
    log = history(4)
    first = log.state_since(2)
    _gen5(log)
    log.commit()
    second = log.state_since(2)
    assert first.generation == 4 and second.generation == 5
    assert "n2" in [n.name for n in second.delta.upsert_nodes]


def test_state_since_on_a_new_log_commits_the_empty_cluster() -> None:
    log = ClusterStateLog("c1")
    st = log.state_since(0)
    assert st.full and st.generation == 1
    assert names(st.delta) == ([], [], [], [])


# -- full_state --------------------------------------------------------------------------


def test_full_state_after_changes_is_the_current_truth() -> None:
    log = history(5)
    st = log.full_state()
    assert st.full
    assert (st.cluster_id, st.generation) == ("c1", 5)
    assert not st.delta.delete_nodes and not st.delta.delete_pods
    assert {n.name: n for n in st.delta.upsert_nodes} == log.nodes
    assert {p.uid: p for p in st.delta.upsert_pods} == log.pods
    assert sorted(log.nodes) == ["n1", "n2"]
    assert sorted(log.pods) == ["p1", "p2"]
    assert log.pods["p2"].containers[0].requests.milli_cpu == 7000


def test_a_hollow_full_state_filled_is_the_full_state_and_its_size_is_known_before() -> None:
    log = ClusterStateLog("c")
    log.upsert_node(node("n1"))
    for i in range(3):
        log.upsert_pod(pod(f"p{i}"))
    log.upsert_object(
        cpb.ClusterObject(ref=cpb.ObjectRef(resource="things", namespace="ns", name="a"))
    )
    log.commit()
    whole = log.full_state()
    hollow = log.state_since(0, hollow=True)
    assert hollow.full and not hollow.HasField("delta")
    assert hollow.ByteSize() + log.full_delta_size() == whole.ByteSize()
    log.fill_full(hollow.delta)
    assert hollow == whole


def test_an_empty_state_filled_carries_an_empty_delta_as_the_full_state_does() -> None:
    log = ClusterStateLog("c")
    hollow = log.full_state(hollow=True)
    assert hollow.ByteSize() + log.full_delta_size() == log.full_state().ByteSize()
    log.fill_full(hollow.delta)
    assert hollow == log.full_state()


async def test_the_client_copies_the_records_once_into_the_request_it_sends() -> None:
    # A full state built apart and then copied into the request held every record
    # twice (three times with the log's own) while the request was sent: the client
    # asks for a hollow state and fills the request's own.
    from berth.api.v1 import scheduling_pb2 as pb
    from berth.client import SchedulingClient

    log = ClusterStateLog("c")
    log.upsert_node(node("n1"))
    log.upsert_pod(pod("p1"))
    log.commit()
    built: list[bool] = []
    full_state = log.full_state

    def spy(*, hollow: bool = False) -> cpb.ClusterState:
        built.append(hollow)
        return full_state(hollow=hollow)

    log.full_state = spy  # type: ignore[method-assign]
    sent: list[pb.SyncRequest] = []

    class Stub:
        async def Sync(self, request: pb.SyncRequest, **_: object) -> pb.SyncResponse:
            sent.append(request)
            return pb.SyncResponse(generation=request.state.generation)

    client = SchedulingClient(None, log, stub=Stub())
    await client.sync()
    # Asked for before and after the endpoint's full-state lock: hollow each time.
    assert built and all(built)
    assert sent[0].state == full_state()


def test_parts_built_one_at_a_time_make_up_the_state_they_were_planned_at() -> None:
    # The upload builds each part when gRPC asks for it, while the caller's state
    # moves on: the parts still carry the state of their generation, whole.
    log = ClusterStateLog("c")
    for i in range(3):
        log.upsert_node(node(f"n{i}"))
    for i in range(20):
        log.upsert_pod(pod(f"p{i}"))
    log.commit()
    whole = log.full_state()
    one = whole.delta.upsert_pods[0].ByteSize()
    count, parts = log.lazy_full_parts(part_bytes=5 * one)
    first = next(parts)
    log.upsert_pod(pod("late"))
    log.delete_pod("p0")
    log.upsert_node(node("n0", cpu="8"))
    log.commit()
    built = [first, *parts]
    assert count == len(built) > 2
    assert {p.generation for p in built} == {whole.generation}
    merged = cpb.ClusterDelta()
    for p in built:
        assert p.full and p.cluster_id == "c"
        merged.MergeFrom(p.delta)
    assert merged == whole.delta


def test_an_empty_state_is_one_part() -> None:
    log = ClusterStateLog("c")
    count, parts = log.lazy_full_parts(part_bytes=100)
    assert count == 1 and list(parts) == [log.full_state()]


@pytest.mark.parametrize("records", [0, 1, 300], ids=["empty", "one", "many"])
@pytest.mark.parametrize("method", ["Schedule", "ScheduleBatch", "Filter", "Sync"])
def test_encode_full_is_the_request_fill_full_makes(records: int, method: str) -> None:
    """encode_full appends the records as a second state field: the receiver
    parses the very request that fill_full into it would have sent."""
    log = ClusterStateLog()
    for i in range(records):
        log.upsert_node(node(f"n{i}"))
        log.upsert_pod(pod(f"u{i}", node_name=f"n{i}"))
        ref = cpb.ObjectRef(group="g", resource="r", namespace="ns", name=f"o{i}")
        log.upsert_object(cpb.ClusterObject(ref=ref, json=b'{"a":1}'))
    log.commit()
    request_type: Any = {
        "Schedule": pb.ScheduleRequest,
        "ScheduleBatch": pb.ScheduleBatchRequest,
        "Filter": pb.NodesRequest,
        "Sync": pb.SyncRequest,
    }[method]
    request = request_type(state=log.full_state(hollow=True))
    if method != "Sync":
        request.profile = "p"
    filled = request_type()
    filled.CopyFrom(request)
    log.fill_full(filled.state.delta)

    got = request_type.FromString(log.encode_full(request))

    assert got == filled
    assert got.state.HasField("delta")
    assert [p.uid for p in got.state.delta.upsert_pods] == [f"u{i}" for i in range(records)]
    assert got.state.full and got.state.cluster_id == log.cluster_id
