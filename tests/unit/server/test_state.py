"""The generation protocol (protos/README.md), replica side."""

from __future__ import annotations

import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.client import ClusterStateLog
from berth.framework.snapshot import Snapshot
from berth.framework.testing import make_node, make_pod
from berth.server.state import (
    CacheFull,
    Entry,
    InvalidState,
    SnapshotStore,
    StaleReplica,
    StateTooLarge,
    own_delta,
)


def caller(n: int = 3) -> ClusterStateLog:
    log = ClusterStateLog("c1")
    for i in range(n):
        log.upsert_node(make_node(f"n{i}").capacity(cpu="4").obj())
    log.commit()
    return log


def test_new_replica_asks_for_full_state_then_follows_deltas() -> None:
    log = caller()
    store = SnapshotStore()
    with pytest.raises(StaleReplica) as err:
        store.resolve(log.state_since(1))
    assert err.value.have == -1
    entry = store.resolve(log.full_state())
    assert entry.generation == 1 and len(entry.snapshot.nodes) == 3
    log.upsert_pod(make_pod().req(cpu="1").node("n0").obj())
    log.commit()
    msg = log.state_since(1)
    assert not msg.full and len(msg.delta.upsert_pods) == 1 and not msg.delta.upsert_nodes
    entry = store.resolve(msg)
    assert entry.generation == 2
    assert entry.snapshot.nodes["n0"].requested.milli_cpu == 1000


def test_a_small_deltas_records_are_the_snapshots_own_not_the_requests() -> None:
    """own_delta: the snapshot keeps copies of a small delta's records (with upb
    a record read from a request keeps the whole request alive); a full state
    and a large delta are kept as they came."""
    log = caller()
    store = SnapshotStore()
    store.resolve(log.full_state())
    log.upsert_pod(make_pod("a").req(cpu="1").node("n0").obj())
    log.commit()
    msg = log.state_since(1)
    entry = store.resolve(msg)
    held = entry.snapshot.pods[msg.delta.upsert_pods[0].uid].proto
    assert held == msg.delta.upsert_pods[0]
    msg.delta.upsert_pods[0].node_name = "elsewhere"
    assert held.node_name == "n0", "the snapshot's record is a copy"
    assert entry.snapshot.nodes["n0"].requested.milli_cpu == 1000

    large = pb.ClusterDelta()
    large.upsert_pods.extend(make_pod(f"p{i}").node("n0").obj() for i in range(17))
    assert own_delta(large) is large
    empty = pb.ClusterDelta()
    assert own_delta(empty) is empty
    small = pb.ClusterDelta()
    small.upsert_pods.extend(large.upsert_pods[:16])
    copied = own_delta(small)
    assert copied is not small and copied == small


def test_lagging_replica_reports_its_generation_and_catches_up_from_it() -> None:
    log = caller()
    store = SnapshotStore()
    store.resolve(log.full_state())
    for i in range(5):
        log.upsert_pod(make_pod(f"p{i}").req(cpu="100m").node("n1").obj())
        log.commit()
    # The caller believes the replica is at 5 (it talked to another replica).
    with pytest.raises(StaleReplica) as err:
        store.resolve(log.state_since(5))
    assert err.value.have == 1
    entry = store.resolve(log.state_since(err.value.have))
    assert entry.generation == 6
    assert entry.snapshot.nodes["n1"].requested.milli_cpu == 500


def test_delta_covering_more_than_needed_is_idempotent() -> None:
    log = caller()
    store = SnapshotStore()
    store.resolve(log.full_state())
    log.upsert_pod(make_pod("a").req(cpu="1").node("n0").obj())
    log.commit()
    store.resolve(log.state_since(1))  # replica at 2
    log.upsert_pod(make_pod("b").req(cpu="1").node("n0").obj())
    log.commit()
    entry = store.resolve(log.state_since(1))  # (1, 3] applied on top of 2
    assert entry.snapshot.nodes["n0"].requested.milli_cpu == 2000


def test_replica_ahead_of_request_serves_without_going_back() -> None:
    log = caller()
    store = SnapshotStore()
    store.resolve(log.full_state())
    log.upsert_pod(make_pod().req(cpu="1").node("n0").obj())
    log.commit()
    store.resolve(log.state_since(1))
    old = pb.ClusterState(
        cluster_id="c1", incarnation=log.incarnation, generation=1, base_generation=1
    )
    assert store.resolve(old).generation == 2


@pytest.mark.parametrize(
    ("state", "field"),
    [
        (pb.ClusterState(generation=1, full=True), "state.cluster_id"),
        (pb.ClusterState(cluster_id="x", generation=0, full=True), "state.generation"),
        (pb.ClusterState(cluster_id="x", generation=2, base_generation=3), "state.base_generation"),
        (
            pb.ClusterState(
                cluster_id="x",
                generation=1,
                full=True,
                delta=pb.ClusterDelta(upsert_pods=[pb.Pod()]),
            ),
            "state.delta.upsert_pods[0].uid",
        ),
    ],
    ids=["no-cluster-id", "zero-generation", "base-after-generation", "pod-without-uid"],
)
def test_malformed_state_names_the_field(state: pb.ClusterState, field: str) -> None:
    with pytest.raises(InvalidState) as err:
        SnapshotStore().resolve(state)
    assert err.value.field == field
    assert str(err.value).startswith(field + ": ")


def test_caller_sends_full_state_when_its_log_no_longer_reaches_the_base() -> None:
    log = ClusterStateLog("c", keep=2)
    log.upsert_node(make_node("a").capacity(cpu="1").obj())
    log.commit()
    for i in range(4):
        log.upsert_pod(make_pod(f"p{i}").node("a").obj())
        log.commit()
    assert log.state_since(1).full
    assert not log.state_since(4).full


def test_least_recently_used_cluster_is_evicted() -> None:
    store = SnapshotStore(max_clusters=2)
    for cid in ("a", "b", "c"):
        store.resolve(pb.ClusterState(cluster_id=cid, generation=1, full=True))
    assert store.generation("a") == -1
    assert store.generation("c") == 1


POD_A = make_pod("a").obj()


@pytest.mark.parametrize(
    ("delta", "message"),
    [
        (
            pb.ClusterDelta(upsert_pods=[POD_A], delete_pods=[POD_A.uid]),
            "(upsert_pods[0], delete_pods[0])",
        ),
        (
            pb.ClusterDelta(upsert_nodes=[make_node("n").obj(), make_node("n").obj()]),
            "node 'n' appears 2 times (upsert_nodes[0], upsert_nodes[1])",
        ),
        (pb.ClusterDelta(delete_nodes=["x", "x"]), "node 'x' appears 2 times"),
    ],
    ids=["pod-upserted-and-deleted", "node-upserted-twice", "node-deleted-twice"],
)
def test_a_delta_naming_an_object_twice_is_refused_whole(
    delta: pb.ClusterDelta, message: str
) -> None:
    store = SnapshotStore()
    base = store.resolve(caller().full_state())
    state = pb.ClusterState(cluster_id="c1", generation=2, base_generation=1, delta=delta)
    with pytest.raises(InvalidState) as err:
        store.resolve(state)
    assert err.value.field == "state.delta"
    assert message in str(err.value)
    assert "at most once" in str(err.value)
    assert base.generation == 1 and len(base.snapshot.nodes) == 3  # unchanged


def test_a_full_state_replaces_even_at_a_generation_the_replica_has() -> None:
    """A caller restarted under the same cluster_id sends its new world at generation 1:
    it must not be answered from the old one."""
    store = SnapshotStore()
    old = caller(3)
    store.resolve(old.full_state())
    restarted = ClusterStateLog("c1")
    restarted.upsert_node(make_node("only").capacity(cpu="1").obj())
    restarted.commit()
    entry = store.resolve(restarted.full_state())
    assert set(entry.snapshot.nodes) == {"only"}


# -- callers and caps ------------------------------------------------------------


def test_the_same_cluster_id_under_two_callers_is_two_snapshots() -> None:
    store = SnapshotStore()
    shim = caller(3)
    store.resolve(shim.full_state(), caller="token:shim")
    other = pb.ClusterState(cluster_id="c1", generation=10**9, full=True)
    store.resolve(other, caller="token:other")
    assert store.generation("c1", "token:shim") == 1
    assert len(store.snapshot_of("c1", "token:shim").nodes) == 3
    assert store.generation("c1", "token:other") == 10**9


def test_beyond_the_whole_cache_the_caller_holding_the_most_gives_one_up() -> None:
    store = SnapshotStore(4, max_per_caller=3)
    for who in ("a", "b"):
        store.resolve(pb.ClusterState(cluster_id="x", generation=1, full=True), caller=who)
    for i in range(3):
        store.resolve(pb.ClusterState(cluster_id=f"r{i}", generation=1, full=True), caller="c")
    # Five snapshots for four places: c (three) gives up its least recently used.
    assert store.entry("x", "a") and store.entry("x", "b")
    assert store.entry("r0", "c") is None
    assert store.held("c")[0] == 2


def test_a_delta_that_grows_a_callers_state_past_its_byte_cap_evicts_its_other_snapshots() -> None:
    store = SnapshotStore(max_caller_bytes=20_000)
    old = pb.ClusterState(cluster_id="old", generation=1, full=True)
    held = old.delta.upsert_pods.add(uid="u", name="held", node_name="n0")
    held.annotations["k"] = "x" * 12_000
    store.resolve(old, caller="a")
    log = caller(1)
    store.resolve(log.full_state(), caller="a")
    pod = make_pod("big").node("n0").obj()
    pod.annotations["k"] = "x" * 10_000
    log.upsert_pod(pod)
    log.commit()
    assert store.entry("old", "a") is not None
    entry = store.resolve(log.state_since(1), caller="a")
    assert entry.size > 10_000
    assert store.entry("old", "a") is None and store.entry("c1", "a") is entry
    log.delete_pod(pod.uid)
    log.commit()
    assert store.resolve(log.state_since(2), caller="a").size < 1000


def full(cluster_id: str, annotation_bytes: int = 0) -> pb.ClusterState:
    st = pb.ClusterState(cluster_id=cluster_id, generation=1, full=True)
    pod = st.delta.upsert_pods.add(uid=f"{cluster_id}-u", name="p", node_name="n0")
    if annotation_bytes:
        pod.annotations["k"] = "x" * annotation_bytes
    return st


def test_a_new_caller_is_refused_rather_than_evict_another_callers_only_snapshot() -> None:
    store = SnapshotStore(2)
    store.resolve(full("shim", 5000), caller="shim")
    store.resolve(full("m"), caller="minted-1")
    with pytest.raises(CacheFull, match="holds 2 snapshots of other callers, all in use"):
        store.resolve(full("m"), caller="minted-2")
    assert store.entry("shim", "shim") is not None
    assert store.entry("m", "minted-1") is not None
    assert store.entry("m", "minted-2") is None


def test_a_snapshot_idle_past_idle_seconds_makes_room_for_another_caller() -> None:
    store = SnapshotStore(2, idle_seconds=300)
    store.resolve(full("shim"), caller="shim")
    store.resolve(full("gone"), caller="departed")
    departed = store.entry("gone", "departed")
    assert departed is not None
    departed.used -= 301
    store.resolve(full("new"), caller="newcomer")
    assert store.entry("gone", "departed") is None
    assert store.entry("shim", "shim") is not None and store.entry("new", "newcomer")


def test_using_a_snapshot_keeps_it_from_counting_as_idle() -> None:
    store = SnapshotStore(2, idle_seconds=300)
    log = caller(1)
    store.resolve(log.full_state(), caller="shim")
    store.resolve(full("other"), caller="other")
    for e in (store.entry("c1", "shim"), store.entry("other", "other")):
        assert e is not None
        e.used -= 301
    log.upsert_node(make_node("n9").obj())
    log.commit()
    store.resolve(log.state_since(1), caller="shim")
    store.resolve(full("new"), caller="newcomer")
    assert store.entry("c1", "shim") is not None
    assert store.entry("other", "other") is None


def test_a_refused_full_state_leaves_the_callers_previous_snapshot_in_place() -> None:
    store = SnapshotStore(max_bytes=12_000)
    store.resolve(full("a", 5000), caller="a")
    store.resolve(full("b", 5000), caller="b")
    before = store.entry("b", "b")
    with pytest.raises(CacheFull):
        store.resolve(full("b", 9000), caller="b")
    assert store.entry("b", "b") is before
    assert store.entry("a", "a") is not None


def test_a_full_state_refused_at_the_byte_cap_names_max_state_bytes_not_max_clusters() -> None:
    store = SnapshotStore(16, max_bytes=12_000)
    store.resolve(full("a", 5000), caller="a")
    store.resolve(full("b", 5000), caller="b")
    with pytest.raises(CacheFull, match="keeps at most 12000 bytes") as refused:
        store.resolve(full("c", 5000), caller="c")
    assert refused.value.flag == "--max-state-bytes" and refused.value.limit == 12_000


def test_deltas_never_grow_one_snapshot_past_the_callers_byte_cap() -> None:
    """Each delta fits a message, but one after another they grew a single
    snapshot without bound; the one that would pass the cap is refused and
    the snapshot stays as it was."""
    store = SnapshotStore(max_caller_bytes=20_000)
    log = caller(1)
    store.resolve(log.full_state(), caller="a")
    for i in range(2):
        pod = make_pod(f"big-{i}").node("n0").obj()
        pod.annotations["k"] = "x" * 8_000
        log.upsert_pod(pod)
        log.commit()
        store.resolve(log.state_since(log.generation - 1), caller="a")
    pod = make_pod("big-2").node("n0").obj()
    pod.annotations["k"] = "x" * 8_000
    log.upsert_pod(pod)
    log.commit()
    with pytest.raises(StateTooLarge, match="this delta would make the state") as refused:
        store.resolve(log.state_since(log.generation - 1), caller="a")
    assert refused.value.limit == 20_000 and refused.value.size > 20_000
    entry = store.entry("c1", "a")
    assert entry is not None and entry.generation == log.generation - 1
    assert len(entry.snapshot.pods) == 2 and entry.size <= 20_000


def _build_stepwise(store: SnapshotStore, state: pb.ClusterState, step: int) -> Snapshot:
    steps = store.replace_stepwise(state, step=step)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            entry: Entry = done.value
            return entry.snapshot


def _full_with_pods(pods: int, empty_uid_at: int = -1) -> pb.ClusterState:
    log = caller(2)
    for i in range(pods):
        log.upsert_pod(make_pod(f"p{i}").req(cpu="100m").node(f"n{i % 2}").obj())
    state = log.full_state()
    if empty_uid_at >= 0:
        state.delta.upsert_pods[empty_uid_at].uid = ""
    return state


def test_a_stepwise_build_keeps_the_full_states_records_not_copies() -> None:
    # A copy per step would hold every record twice while the full state is alive,
    # and leave the full state's memory fragmented after it: the snapshot reads the
    # message's own records, so a change to the message shows in the snapshot.
    state = _full_with_pods(7)
    snap = _build_stepwise(SnapshotStore(), state, step=3)
    assert len(snap.pods) == 7
    last = state.delta.upsert_pods[6]
    last.priority = 42
    assert snap.pods[last.uid].proto.priority == 42


def test_an_upload_keeps_its_parts_records_not_copies() -> None:
    state = _full_with_pods(5)
    store = SnapshotStore()
    upload = store.begin_upload(state, "state", "anonymous")
    for _ in upload.add(state, "state"):
        pass
    snap = upload.finish().snapshot
    upload.close()
    first = state.delta.upsert_pods[0]
    first.priority = 7
    assert snap.pods[first.uid].proto.priority == 7


def test_a_bad_entry_in_a_later_step_is_named_by_its_index_in_the_whole_state() -> None:
    store = SnapshotStore()
    with pytest.raises(InvalidState) as err:
        _build_stepwise(store, _full_with_pods(7, empty_uid_at=5), step=2)
    assert err.value.field == "state.delta.upsert_pods[5].uid"
    assert store.entry("c1") is None
