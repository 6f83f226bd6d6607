"""Node label columns (framework/label_index.py, ``NodeBatch.labels``): the
values a batch sees are the node records' labels after every kind of change,
and the snapshot updates a column per change instead of rebuilding it."""

from __future__ import annotations

import random

import numpy as np
import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.framework import NodeInfo, NodeLabels
from berth.framework.label_index import ABSENT, LabelColumn
from berth.framework.snapshot import Snapshot, detached_batch
from berth.testing import make_node, snapshot_of

KEY = "example.com/pool"


def node(name: str, value: str | None = None) -> pb.Node:
    w = make_node(name)
    if value is not None:
        w.label(KEY, value)
    return w.obj()


def upsert(snap: Snapshot, *nodes: pb.Node) -> None:
    snap.apply(pb.ClusterDelta(upsert_nodes=list(nodes)))


def delete(snap: Snapshot, *names: str) -> None:
    snap.apply(pb.ClusterDelta(delete_nodes=list(names)))


def seen(snap: Snapshot, key: str = KEY) -> dict[str, str | None]:
    """What a batch of every node reads for ``key``, by node name."""
    batch = snap.all_nodes()
    labels = batch.labels(key)
    return {name: labels.value(k) for k, name in enumerate(batch.names)}


def truth(snap: Snapshot, key: str = KEY) -> dict[str, str | None]:
    return {name: ni.node.labels.get(key) for name, ni in snap.nodes.items()}


def test_a_batch_reads_each_candidates_value_in_batch_order() -> None:
    snap = snapshot_of([node("a", "general"), node("b", "gpu"), node("c"), node("d", "")])
    batch = snap.batch(["d", "c", "b", "a"])
    labels = batch.labels(KEY)
    assert isinstance(labels, NodeLabels)
    assert [labels.value(k) for k in range(4)] == ["", None, "gpu", "general"]
    # "" is a value like any other: present, and equal only to "".
    assert labels.present.tolist() == [True, False, True, True]
    assert labels.equals("general").tolist() == [False, False, False, True]
    assert labels.equals("").tolist() == [True, False, False, False]
    assert labels.isin(["gpu", "general", "nowhere"]).tolist() == [False, False, True, True]
    # A value no node holds matches nothing, absent labels included.
    assert not labels.equals("nowhere").any()
    assert not labels.isin([]).any()
    # A subset taken from the batch stays aligned.
    assert batch.take([2, 0]).labels(KEY).equals("gpu").tolist() == [True, False]


def test_the_column_is_built_once_then_updated_per_change_not_rebuilt() -> None:
    snap = snapshot_of([node("a", "general"), node("b", "gpu")])
    col = snap.label_column(KEY)
    assert snap.label_column(KEY) is col
    codes_before = col.codes
    # A pod changes no label: the column is untouched.
    snap.apply(pb.ClusterDelta(upsert_pods=[pb.Pod(uid="u", name="p", node_name="a")]))
    assert snap.label_column(KEY).codes is codes_before
    # A relabelled node: its slot's code changes in place, the others stay.
    upsert(snap, node("a", "gpu"))
    assert snap.label_column(KEY) is col and col.codes is codes_before
    assert seen(snap) == {"a": "gpu", "b": "gpu"}
    # The label removed from a node.
    upsert(snap, node("b"))
    assert seen(snap) == {"a": "gpu", "b": None}


def test_removed_and_added_nodes_and_reused_slots() -> None:
    snap = snapshot_of([node("a", "general"), node("b", "gpu"), node("c", "general")])
    assert seen(snap) == truth(snap)
    slot_b = snap.nodes["b"].index
    delete(snap, "b")
    assert snap.label_column(KEY).codes[slot_b] == ABSENT
    assert seen(snap) == {"a": "general", "c": "general"}
    # The freed slot goes to the next node: it must not inherit b's value.
    upsert(snap, node("d"))
    assert snap.nodes["d"].index == slot_b
    assert seen(snap) == {"a": "general", "c": "general", "d": None}
    upsert(snap, node("e", "gpu"))
    assert seen(snap) == truth(snap)


def test_the_column_grows_with_the_snapshot() -> None:
    snap = snapshot_of([node("n0", "v0")])
    snap.label_column(KEY)
    many = [node(f"n{i}", f"v{i % 7}") for i in range(1, 300)]
    upsert(snap, *many)
    assert snap.columns.capacity >= 300
    assert len(snap.label_column(KEY).codes) == snap.columns.capacity
    assert seen(snap) == truth(snap)


def test_relabelling_churn_keeps_the_values_bounded_by_the_nodes() -> None:
    snap = snapshot_of([node("a", "x"), node("b", "y")])
    col = snap.label_column(KEY)
    for i in range(1000):
        upsert(snap, node("a", f"gen-{i}"))
    assert len(col.values) <= 2 * 2 + 16 + 1
    assert seen(snap) == {"a": "gen-999", "b": "y"}
    assert col.code("gen-0") < 0


def test_keys_are_independent_and_a_late_key_sees_the_current_nodes() -> None:
    snap = snapshot_of([node("a", "general")])
    snap.label_column(KEY)
    upsert(snap, make_node("b").label(KEY, "gpu").label("tier", "gold").obj())
    # "tier" asked for only now: built from the nodes as they are.
    assert seen(snap, "tier") == {"a": None, "b": "gold"}
    upsert(snap, make_node("b").label(KEY, "gpu").obj())
    assert seen(snap, "tier") == {"a": None, "b": None}
    assert seen(snap) == {"a": "general", "b": "gpu"}


def test_random_changes_agree_with_the_node_records() -> None:
    rng = random.Random(7)
    snap = Snapshot()
    names = [f"n{i}" for i in range(40)]
    values = [None, "", "general", "gpu", "batch"]
    for step in range(600):
        if step == 50:
            snap.label_column(KEY)
        name = rng.choice(names)
        if rng.random() < 0.25:
            delete(snap, name)
        else:
            w = make_node(name)
            value = rng.choice(values)
            if value is not None:
                w.label(KEY, value)
            if rng.random() < 0.5:
                w.label("other", rng.choice(["x", "y"]))
            upsert(snap, w.obj())
        if step >= 50 and snap.nodes:
            assert seen(snap) == truth(snap), step
            assert seen(snap, "other") == truth(snap, "other"), step


def test_a_detached_node_clone_has_its_own_labels() -> None:
    """Preemption's what-if clones reach a batch-only Filter through
    ``detached_batch``: the labels are the clone's."""
    snap = snapshot_of([node("a", "general")])
    snap.label_column(KEY)
    clone = NodeInfo(node("a", "gpu"))
    with detached_batch(clone) as batch:
        assert batch.labels(KEY).equals("gpu").tolist() == [True]
    assert seen(snap) == {"a": "general"}


@pytest.mark.parametrize("capacity", [1, 4])
def test_a_column_by_hand(capacity: int) -> None:
    col = LabelColumn(KEY, capacity)
    col.set(3, {KEY: "v"}, 8)
    assert len(col.codes) == 8 and col.live == 1
    col.set(3, {}, 8)
    assert col.live == 0
    assert NodeLabels(col, col.codes[np.array([3])]).present.tolist() == [False]


def test_codes_of_skips_values_no_node_holds() -> None:
    col = LabelColumn(KEY, 4)
    col.set(0, {KEY: "a"}, 4)
    col.set(1, {KEY: "b"}, 4)
    assert col.codes_of(["b", "zz", "a", ""]) == [col.code("b"), col.code("a")]
    assert col.codes_of([]) == []
