"""The per-snapshot index (index.py): it follows the snapshot's deltas, and
the counts PreFilter and PreScore build from it are the ones upstream's node
walks (filtering.go getExistingAntiAffinityCounts and
getIncomingAffinityAntiAffinityCounts, scoring.go processExistingPod) give,
on random clusters changed by random deltas. A cycle for a pod without terms
in a cluster without terms touches no node."""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping

import numpy as np
import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.cycle_state import CycleState
from berth.framework.model import PodInfo
from berth.framework.snapshot import NodeBatch, Snapshot
from berth.framework.testing import fresh_state
from berth.plugins.interpodaffinity import (
    PRE_FILTER_STATE_KEY,
    PRE_SCORE_STATE_KEY,
    inter_pod_affinity,
)
from berth.plugins.interpodaffinity import index as index_module
from berth.plugins.interpodaffinity.index import AffinityIndex, SlotCounts, affinity_index
from berth.plugins.interpodaffinity.inter_pod_affinity import Counts
from berth.plugins.interpodaffinity.terms import parsed_terms, pod_matches_all
from tests.plugins.interpodaffinity.testutil import info, node, pod, selector, setup, term

TOPOLOGY_KEYS = ("zone", "region", "hostname", "rack")
LABEL_KEYS = ("app", "tier", "team")
LABEL_VALUES = ("a", "b", "c")
NAMESPACE_NAMES = ("ns1", "ns2")


def random_node(rng: random.Random, i: int) -> pb.Node:
    labels = {"hostname": f"n{i}"}
    for key, values in (("zone", 3), ("region", 2), ("rack", 4)):
        # Some nodes lack a topology key, which must then count nothing.
        if rng.random() < 0.85:
            labels[key] = f"{key}{rng.randrange(values)}"
    return node(f"n{i}", **labels)


def random_labels(rng: random.Random) -> dict[str, str]:
    return {k: rng.choice(LABEL_VALUES) for k in LABEL_KEYS if rng.random() < 0.6}


def random_term(rng: random.Random) -> pb.PodAffinityTerm:
    key = rng.choice(LABEL_KEYS)
    op = rng.choice(("In", "NotIn", "Exists", "DoesNotExist"))
    values = rng.sample(LABEL_VALUES, rng.randint(1, 2)) if op in ("In", "NotIn") else []
    namespaces = rng.sample(NAMESPACE_NAMES, rng.randint(0, 2))
    return term(rng.choice(TOPOLOGY_KEYS), selector(exprs=[(key, op, values)]), namespaces)


def random_pod(rng: random.Random, name: str, node_name: str = "", terms: float = 0.5) -> pb.Pod:
    def some() -> list[pb.PodAffinityTerm]:
        return [random_term(rng) for _ in range(rng.randint(1, 2))] if rng.random() < terms else []

    def weighted() -> list[tuple[int, pb.PodAffinityTerm]]:
        return [(rng.randint(1, 100), t) for t in some()]

    return pod(
        name,
        namespace=rng.choice(NAMESPACE_NAMES),
        labels=random_labels(rng),
        node=node_name,
        affinity=some() if rng.random() < 0.5 else [],
        anti=some(),
        preferred=weighted(),
        preferred_anti=weighted(),
    )


def groups(index: AffinityIndex) -> list[SlotCounts]:
    return [
        *index.by_signature.values(),
        *index.required_anti.values(),
        *index.hard_affinity.values(),
        *index.weighted.values(),
    ]


def dense_agrees(slots: SlotCounts) -> bool:
    """A group's dense array, where it has one, holds its dict's counts."""
    if slots.dense is None:
        return True
    want = np.zeros(max(len(slots.dense), max(slots) + 1), dtype=np.int64)
    want[list(slots)] = list(slots.values())
    return (
        want[: len(slots.dense)].tolist() == slots.dense.tolist()
        and not want[len(slots.dense) :].any()
    )


def index_state(index: AffinityIndex) -> tuple[object, ...]:
    return (
        index.by_signature,
        index.labels,
        index.required_anti,
        index.hard_affinity,
        index.weighted,
    )


# -- upstream's walks, written plainly over every node and pod ---------------------


def _bump(counts: Counts, labels: Mapping[str, str], key: str, value: int) -> bool:
    if key not in labels:
        return False
    by_value = counts.setdefault(key, {})
    by_value[labels[key]] = by_value.get(labels[key], 0) + value
    return True


def walked_pre_filter(snap: Snapshot, incoming: PodInfo) -> tuple[Counts, Counts, Counts]:
    terms = parsed_terms(incoming)
    p = incoming.proto
    existing: Counts = {}
    affinity: Counts = {}
    anti: Counts = {}
    for ni in snap.nodes.values():
        labels = dict(ni.node.labels)
        for other in ni.pods.values():
            for t in parsed_terms(other).required_anti_affinity:
                if t.matches(p, {}):
                    _bump(existing, labels, t.topology_key, 1)
            if pod_matches_all(terms.required_affinity, other.proto):
                for t in terms.required_affinity:
                    _bump(affinity, labels, t.topology_key, 1)
            for t in terms.required_anti_affinity:
                if t.matches(other.proto, None):
                    _bump(anti, labels, t.topology_key, 1)
    return existing, affinity, anti


def walked_pre_score(snap: Snapshot, incoming: PodInfo, hard: int) -> Counts | None:
    terms = parsed_terms(incoming)
    p = incoming.proto
    score: Counts = {}
    counted = False
    for ni in snap.nodes.values():
        labels = dict(ni.node.labels)
        for other in ni.pods.values():
            o = other.proto
            for w, t in terms.preferred_affinity:
                if t.matches(o, None):
                    counted |= _bump(score, labels, t.topology_key, w)
            for w, t in terms.preferred_anti_affinity:
                if t.matches(o, None):
                    counted |= _bump(score, labels, t.topology_key, -w)
            ex = parsed_terms(other)
            if hard > 0:
                for t in ex.required_affinity:
                    if t.matches(p, {}):
                        counted |= _bump(score, labels, t.topology_key, hard)
            for w, t in ex.preferred_affinity:
                if t.matches(p, {}):
                    counted |= _bump(score, labels, t.topology_key, w)
            for w, t in ex.preferred_anti_affinity:
                if t.matches(p, {}):
                    counted |= _bump(score, labels, t.topology_key, -w)
    return score if counted else None


def positive(counts: Counts) -> Counts:
    return {k: {v: c for v, c in vs.items() if c} for k, vs in counts.items() if any(vs.values())}


# -- random deltas ------------------------------------------------------------------


def random_deltas(rng: random.Random, snap: Snapshot, steps: int) -> Iterator[None]:
    """Applies one random delta per step: pods added, moved, relabelled or
    deleted, nodes deleted (their pods orphaned), re-added or relabelled."""
    names = list(snap.nodes)
    next_pod = 0
    for _ in range(steps):
        delta = pb.ClusterDelta()
        for _ in range(rng.randint(1, 4)):
            roll = rng.random()
            pods = list(snap.pods)
            if roll < 0.45 or not pods:
                next_pod += 1
                delta.upsert_pods.append(random_pod(rng, f"d{next_pod}", rng.choice(names)))
            elif roll < 0.65:
                uid = rng.choice(pods)
                moved = random_pod(rng, "m", rng.choice(names))
                moved.uid = uid
                moved.name = snap.pods[uid].name
                delta.upsert_pods.append(moved)
            elif roll < 0.8:
                delta.delete_pods.append(rng.choice(pods))
            elif roll < 0.9:
                delta.delete_nodes.append(rng.choice(names))
            else:
                i = rng.randrange(len(names))
                delta.upsert_nodes.append(random_node(rng, i))
        # A node deleted and upserted in one delta: deletes apply first.
        deleted = set(delta.delete_nodes)
        for n in delta.upsert_nodes:
            deleted.discard(n.name)
        snap.apply(delta)
        if rng.random() < 0.5:
            back = pb.ClusterDelta()
            for name in deleted:
                back.upsert_nodes.append(random_node(rng, int(name[1:])))
            snap.apply(back)
        yield


@pytest.mark.parametrize("dense", [False, True], ids=["dicts", "dense"])
@pytest.mark.parametrize("seed", range(6))
def test_index_follows_deltas_like_a_rebuild(
    seed: int, dense: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if dense:
        # A group reaching 3 slots gets a dense array, one back on 1 drops it.
        monkeypatch.setattr(index_module, "_DENSE_MIN", 3)
        monkeypatch.setattr(index_module, "_DENSE_RATIO", 1_000)
    rng = random.Random(seed)
    nodes = [random_node(rng, i) for i in range(12)]
    pods = [random_pod(rng, f"p{i}", rng.choice(nodes).name) for i in range(60)]
    snap, _ = setup(nodes, pods)
    index = affinity_index(snap)
    assert affinity_index(snap) is index
    seen: set[bool] = set()
    for _ in random_deltas(rng, snap, 40):
        rebuilt = AffinityIndex()
        rebuilt.add_all(snap)
        assert index_state(index) == index_state(rebuilt)
        assert all(map(dense_agrees, groups(index)))
        seen.update(g.dense is not None for g in groups(index))
    assert (True in seen) is dense
    # The pods and terms it counts are the snapshot's, not ones it forgot.
    assert sum(sum(s.values()) for s in index.by_signature.values()) == sum(
        len(ni.pods) for ni in snap.nodes.values()
    )


# A group's counts are summed per topology value by a Python loop over its
# slots when it has few, with numpy over the label column when it has many
# (inter_pod_affinity._VECTOR_SLOTS); each path is checked on its own, and
# mixed (some groups of one key by the loop, some with numpy, into the same
# counts by code).
# Groups on many slots also sum from their dense arrays ("dense": every group
# on 2 slots or more has one).
@pytest.mark.parametrize(
    ("vector_slots", "dense_min"),
    [(1_000_000, 1_000_000), (1, 1_000_000), (3, 1_000_000), (1_000_000, 2)],
    ids=["loop", "numpy", "mixed", "dense"],
)
@pytest.mark.parametrize("seed", range(6))
def test_counts_equal_upstreams_walk_over_every_pod(
    seed: int, vector_slots: int, dense_min: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inter_pod_affinity, "_VECTOR_SLOTS", vector_slots)
    monkeypatch.setattr(index_module, "_DENSE_MIN", dense_min)
    monkeypatch.setattr(index_module, "_DENSE_RATIO", 1_000)
    rng = random.Random(100 + seed)
    nodes = [random_node(rng, i) for i in range(10)]
    pods = [random_pod(rng, f"p{i}", rng.choice(nodes).name) for i in range(50)]
    snap, plugin = setup(nodes, pods)
    if dense_min < 1_000_000:
        assert any(g.dense is not None for g in groups(affinity_index(snap)))
    hard = plugin.hard_pod_affinity_weight
    checked = 0
    for _ in random_deltas(rng, snap, 15):
        for k in range(4):
            incoming = info(random_pod(rng, f"in{k}", terms=0.7))
            state = fresh_state()
            _, st = plugin.pre_filter(state, incoming, snap.all_nodes())
            existing, affinity, anti = walked_pre_filter(snap, incoming)
            terms = parsed_terms(incoming)
            if st.is_skip:
                assert not positive(existing)
                assert not terms.required_affinity and not terms.required_anti_affinity
            else:
                s = state.read(PRE_FILTER_STATE_KEY)
                assert s.existing_anti_affinity == positive(existing)
                assert s.affinity == positive(affinity)
                assert s.anti_affinity == positive(anti)
                # The batch Filter (label columns) agrees with the per-node one.
                batch = snap.all_nodes()
                verdicts = plugin.filter_nodes(state, incoming, batch)
                per_node = [plugin.filter(state, incoming, ni) for ni in batch]
                assert [verdicts.status_of(k) for k in range(len(batch))] == per_node
                # Through the wire (counts by value, as a later call gets
                # them): the same counts and the same verdicts.
                wired = CycleState.decode(state.encode())
                assert wired.read(PRE_FILTER_STATE_KEY) == s
                verdicts = plugin.filter_nodes(wired, incoming, batch)
                assert [verdicts.status_of(k) for k in range(len(batch))] == per_node
                # Again over part of the nodes, as the next chunk of a cycle
                # (the tables the first call kept).
                part = batch.take(list(range(len(batch)))[::-2])
                verdicts = plugin.filter_nodes(state, incoming, part)
                assert [verdicts.status_of(k) for k in range(len(part))] == [
                    plugin.filter(state, incoming, ni) for ni in part
                ]
                checked += 1
            state = fresh_state()
            st = plugin.pre_score(state, incoming, snap.all_nodes())
            want = walked_pre_score(snap, incoming, hard)
            if want is None:
                assert st.is_skip
            else:
                assert st.is_success
                assert state.read(PRE_SCORE_STATE_KEY).topology_score == want
                batch = snap.all_nodes()
                scores = plugin.score_nodes(state, incoming, batch).tolist()
                assert scores == [plugin.score(state, incoming, ni) for ni in batch]
    assert checked > 10


def test_a_cycle_without_terms_touches_no_node(monkeypatch: pytest.MonkeyPatch) -> None:
    # upstream visits only HavePodsWithAffinityList / HavePodsWithRequiredAntiAffinityList,
    # both empty here: PreFilter and PreScore must not walk the nodes.
    nodes = [node(f"n{i}", zone=f"z{i % 3}") for i in range(50)]
    pods = [pod(f"p{i}", labels={"app": "web"}, node=f"n{i % 50}") for i in range(200)]
    snap, plugin = setup(nodes, pods)
    batch = snap.all_nodes()
    affinity_index(snap)

    def refuse(*_: object) -> None:
        raise AssertionError("walked the nodes")

    monkeypatch.setattr(NodeBatch, "__iter__", refuse)
    monkeypatch.setattr(Snapshot, "slot", refuse)
    incoming = info(pod("in", labels={"app": "web"}))
    _, st = plugin.pre_filter(fresh_state(), incoming, batch)
    assert st.is_skip
    assert plugin.pre_score(fresh_state(), incoming, batch).is_skip


def test_pods_are_counted_per_group_not_per_pod() -> None:
    # 200 pods of one workload on 50 nodes: one signature whose counts are per node.
    nodes = [node(f"n{i}", zone=f"z{i % 3}") for i in range(50)]
    pods = [pod(f"p{i}", labels={"app": "web"}, node=f"n{i % 50}") for i in range(200)]
    snap, _ = setup(nodes, pods)
    index = affinity_index(snap)
    (slots,) = index.by_signature.values()
    assert len(slots) == 50 and set(slots.values()) == {4}


def test_a_dense_group_follows_the_snapshot_growing() -> None:
    # One workload with anti-affinity on 40 of 40 nodes: its groups keep
    # dense arrays over the snapshot's slots. Nodes added past the snapshot's
    # capacity, and the workload's pods on them, lengthen the arrays; pods
    # deleted until few slots are left drop them. PreFilter counts as the
    # walk over every pod all along.
    group = {"app": "web"}
    anti = term("hostname", selector(group))
    nodes = [node(f"n{i}", hostname=f"h{i}") for i in range(40)]
    pods = [pod(f"p{i}", labels=group, node=f"n{i}", anti=[anti]) for i in range(40)]
    snap, plugin = setup(nodes, pods)
    index = affinity_index(snap)
    first = groups(index)
    assert len(first) == 2 and all(g.dense is not None for g in first)
    short = max(len(g.dense) for g in first if g.dense is not None)
    incoming = info(pod("in", labels=group, anti=[anti]))

    def check() -> None:
        assert all(map(dense_agrees, groups(index)))
        state = fresh_state()
        _, st = plugin.pre_filter(state, incoming, snap.all_nodes())
        assert st.is_success
        s = state.read(PRE_FILTER_STATE_KEY)
        existing, _, anti_counts = walked_pre_filter(snap, incoming)
        assert (s.existing_anti_affinity, s.anti_affinity) == (
            positive(existing),
            positive(anti_counts),
        )

    check()
    delta = pb.ClusterDelta()
    for i in range(40, 3 * short):
        delta.upsert_nodes.append(node(f"n{i}", hostname=f"h{i}"))
        delta.upsert_pods.append(pod(f"p{i}", labels=group, node=f"n{i}", anti=[anti]))
    snap.apply(delta)
    assert all(g.dense is not None and len(g.dense) >= 3 * short for g in groups(index))
    check()
    delta = pb.ClusterDelta()
    delta.delete_pods.extend(f"default/p{i}" for i in range(3, 3 * short))
    snap.apply(delta)
    assert all(g.dense is None and len(g) == 3 for g in groups(index))
    check()


def test_batch_filter_follows_nodes_relabelled_after_pre_filter() -> None:
    # The tables a PreFilterState keeps are over a label column's codes: a
    # node relabelled with a new value, or one taking another node's value,
    # between PreFilter and Filter must be read as the per-node Filter reads it.
    nodes = [node(f"n{i}", hostname=f"n{i}") for i in range(40)]
    group = {"app": "web"}
    anti = term("hostname", selector(group))
    pods = [pod(f"p{i}", labels=group, node=f"n{i}", anti=[anti]) for i in range(36)]
    snap, plugin = setup(nodes, pods)
    incoming = info(pod("in", labels=group, anti=[anti]))
    state = fresh_state()
    _, st = plugin.pre_filter(state, incoming, snap.all_nodes())
    assert st.is_success

    def agree() -> int:
        batch = snap.all_nodes()
        verdicts = plugin.filter_nodes(state, incoming, batch)
        got = [verdicts.status_of(k) for k in range(len(batch))]
        assert got == [plugin.filter(state, incoming, ni) for ni in batch]
        return sum(st.is_success for st in got)

    assert agree() == 4
    delta = pb.ClusterDelta()
    delta.upsert_nodes.append(node("n37", hostname="n3"))
    delta.upsert_nodes.append(node("n38", hostname="fresh"))
    delta.upsert_nodes.append(node("n39", hostname="fresher"))
    snap.apply(delta)
    assert agree() == 3


def test_batch_filter_follows_a_label_column_compacted_after_pre_filter() -> None:
    # PreFilter keeps its counts by code of the hostname column; relabelling
    # every node to fresh hostnames, several times, makes the snapshot compact
    # the column (new codes, a new values list) before Filter runs: the codes
    # PreFilter counted must be read by the values they had then.
    nodes = [node(f"n{i}", hostname=f"n{i}") for i in range(40)]
    group = {"app": "web"}
    anti = term("hostname", selector(group))
    pods = [pod(f"p{i}", labels=group, node=f"n{i}", anti=[anti]) for i in range(30)]
    snap, plugin = setup(nodes, pods)
    incoming = info(pod("in", labels=group, anti=[anti]))
    state = fresh_state()
    _, st = plugin.pre_filter(state, incoming, snap.all_nodes())
    assert st.is_success
    before = snap.label_column("hostname").values
    for round_ in range(4):
        delta = pb.ClusterDelta()
        for i in range(40):
            # Nodes n0..n9 take the hostnames n20..n29 in the last round.
            name = f"n{i + 20}" if round_ == 3 and i < 10 else f"r{round_}-{i}"
            delta.upsert_nodes.append(node(f"n{i}", hostname=name))
        snap.apply(delta)
    assert snap.label_column("hostname").values is not before
    batch = snap.all_nodes()
    verdicts = plugin.filter_nodes(state, incoming, batch)
    got = [verdicts.status_of(k) for k in range(len(batch))]
    assert got == [plugin.filter(state, incoming, ni) for ni in batch]
    # n0..n9 now carry hostnames that held a pod at PreFilter (p20..p29);
    # every other hostname is fresh.
    assert [st.is_success for st in got] == [False] * 10 + [True] * 30
