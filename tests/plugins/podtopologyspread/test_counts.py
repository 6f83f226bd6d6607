"""The per-snapshot indexes (counts.py) and the numpy forms of PreFilter,
Filter, PreScore and Score agree with upstream's walks over every node and
pod (filtering.go calPreFilterState, scoring.go initPreScoreState and
processAllNode, common.go countPodsMatchSelector), recomputed from scratch,
through random sequences of cluster changes."""

from __future__ import annotations

import random

import numpy as np

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.cycle_state import CycleState
from berth.framework.labels import (
    EVERYTHING,
    NOTHING,
    Requirement,
    Selector,
    selector_from_set,
)
from berth.framework.model import PodInfo
from berth.framework.nodeaffinity import required_node_affinity
from berth.framework.snapshot import Snapshot
from berth.framework.testing import make_object, snapshot_of
from berth.plugins.podtopologyspread import (
    PRE_FILTER_STATE_KEY,
    PRE_SCORE_STATE_KEY,
    PodTopologySpread,
    PodTopologySpreadArgs,
)
from berth.plugins.podtopologyspread.common import (
    LABEL_HOSTNAME,
    SERVICES,
    count_pods_match_selector,
    node_labels_match_spread_constraints,
)
from berth.plugins.podtopologyspread.counts import (
    MAX_TABLES,
    PodCountIndex,
    pod_count_index,
    topology_index,
)
from berth.plugins.podtopologyspread.pod_topology_spread import (
    _new_critical_paths,
    _update_critical_paths,
)
from tests.plugins.podtopologyspread.testutil import DNS, SA, C, node, pod, spread_pod

SELECTORS = [
    selector_from_set({"app": "web"}),
    Selector((Requirement("app", "Exists"),)),
    Selector(
        (
            Requirement("app", "In", frozenset({"web", "db"})),
            Requirement("v", "NotIn", frozenset({"1"})),
        )
    ),
]
ZONE = "zone"


def brute(snap: Snapshot, ns: str, sel: Selector) -> dict[str, int]:
    out = {}
    for name, ni in snap.nodes.items():
        n = count_pods_match_selector(ni.pods.values(), sel, ns)
        if n:
            out[name] = n
    return out


def random_node(rng: random.Random, name: str) -> pb.Node:
    tokens = [name]
    r = rng.random()
    if r < 0.8:
        tokens.append(f"{ZONE}={rng.choice(['z1', 'z2', 'z3'])}")
    elif r < 0.9:
        tokens.append(f"{ZONE}=")  # present, empty
    if rng.random() < 0.9:
        tokens.append(f"{LABEL_HOSTNAME}={name}")
    if rng.random() < 0.2:
        tokens.append("!taint")
    if rng.random() < 0.3:
        tokens.append("disk=ssd")
    return node(" ".join(tokens))


def random_pod_delta(
    rng: random.Random, snap: Snapshot, nodes: list[str], uids: list[str], step: int
) -> pb.ClusterDelta:
    delta = pb.ClusterDelta()
    r = rng.random()
    if r < 0.45 or not uids:
        uid = f"u{step}"
        uids.append(uid)
        p = delta.upsert_pods.add(
            uid=uid,
            name=uid,
            namespace=rng.choice(["default", "default", "other"]),
            node_name=rng.choice([*nodes, "", "gone"]),
        )
        p.labels.update(
            {
                k: v
                for k, v in (("app", rng.choice(["web", "db", "x"])), ("v", "1"))
                if rng.random() < 0.7
            }
        )
        p.terminating = rng.random() < 0.1
    elif r < 0.65:
        # An update: same uid, new record (labels, terminating, or a node).
        uid = rng.choice(uids)
        p = pb.Pod()
        p.CopyFrom(snap.pods[uid].proto)
        p.terminating = rng.random() < 0.3
        p.labels["app"] = rng.choice(["web", "db"])
        if rng.random() < 0.3:
            p.node_name = rng.choice(nodes)
        delta.upsert_pods.append(p)
    elif r < 0.85:
        delta.delete_pods.append(uids.pop(rng.randrange(len(uids))))
    elif r < 0.93:
        # A node relabelled (its record replaced) or added back.
        delta.upsert_nodes.append(random_node(rng, rng.choice([*nodes, "gone"])))
    else:
        delta.delete_nodes.append(rng.choice(nodes))
    return delta


def test_tables_follow_random_changes() -> None:
    rng = random.Random(7)
    nodes = [f"n{i}" for i in range(6)]
    snap = snapshot_of([node(n) for n in nodes])
    index = pod_count_index(snap)
    for sel in SELECTORS:
        index.table("default", sel)
    built = index.tables_built
    uids: list[str] = []
    for step in range(600):
        snap.apply(random_pod_delta(rng, snap, nodes, uids, step))
        assert pod_count_index(snap) is index
        for sel in SELECTORS:
            for ns in ("default", "other"):
                got = index.table_by_node(snap, ns, sel)
                assert got == brute(snap, ns, sel), (step, sel, ns)
                # A table built now, from the grouped pods, agrees too.
                fresh = PodCountIndex(snap.columns.capacity)
                fresh.add_all(snap)
                assert fresh.table_by_node(snap, ns, sel) == got, (step, sel, ns)
    # The "default" tables were kept up to date, never rebuilt.
    assert index.tables_built == built + len(SELECTORS)


def test_topology_columns_follow_node_changes() -> None:
    rng = random.Random(11)
    nodes = [f"n{i}" for i in range(8)]
    snap = snapshot_of([random_node(rng, n) for n in nodes])
    topo = topology_index(snap)
    topo.column(snap, ZONE)
    uids: list[str] = []
    for step in range(400):
        snap.apply(random_pod_delta(rng, snap, nodes, uids, step))
        for key in (ZONE, LABEL_HOSTNAME, "disk"):
            col = topo.column(snap, key)
            assert len(col.codes) >= snap.columns.capacity
            want = np.full(len(col.codes), -1)
            for ni in snap.nodes.values():
                value = ni.node.labels.get(key)
                if value is not None:
                    want[ni.index] = col.code_of[value]
            assert col.codes.tolist() == want.tolist(), (step, key)
            assert all(col.values[c] == v for v, c in col.code_of.items())


def test_empty_and_nothing_selectors_count_nothing() -> None:
    snap = snapshot_of([node("n1")], [pod("p@n1 app=web")])
    index = pod_count_index(snap)
    assert not index.table("default", EVERYTHING).any()
    assert not index.table("default", NOTHING).any()


def test_the_least_recently_used_table_is_dropped() -> None:
    snap = snapshot_of([node("n1")], [pod("p@n1 app=web")])
    index = pod_count_index(snap)
    first = selector_from_set({"app": "web"})
    index.table("default", first)
    for i in range(MAX_TABLES):
        index.table("default", selector_from_set({"k": str(i)}))
    built = index.tables_built
    assert index.table_by_node(snap, "default", first) == {"n1": 1}
    assert index.tables_built == built + 1


# -- the plugin's numpy forms against upstream's walks ---------------------------------


def reference_pre_filter(
    plugin: PodTopologySpread, incoming: PodInfo, snap: Snapshot
) -> tuple[list[dict[str, int]], list[list[tuple[str, int]]]]:
    """calPreFilterState as upstream writes it: every node in order, every
    pod of the node."""
    proto = incoming.proto
    constraints = plugin.get_constraints(proto, DNS, snap)
    required = required_node_affinity(proto)
    counts: list[dict[str, int]] = [{} for _ in constraints]
    for ni in snap.all_nodes():
        if not node_labels_match_spread_constraints(ni.node.labels, constraints):
            continue
        for i, c in enumerate(constraints):
            if not c.match_node_inclusion_policies(proto, ni.node, required):
                continue
            value = ni.node.labels[c.topology_key]
            n = count_pods_match_selector(ni.pods.values(), c.selector, proto.namespace)
            counts[i][value] = counts[i].get(value, 0) + n
    paths = []
    for domain_counts in counts:
        p = _new_critical_paths()
        for value, num in domain_counts.items():
            _update_critical_paths(p, value, num)
        paths.append(p)
    return counts, paths


def reference_pre_score(
    plugin: PodTopologySpread, incoming: PodInfo, snap: Snapshot, candidates: list[str]
) -> tuple[set[str], list[dict[str, int]]]:
    """initPreScoreState and processAllNode as upstream writes them."""
    proto = incoming.proto
    constraints = plugin.get_constraints(proto, SA, snap)
    require_all = bool(proto.topology_spread_constraints) or not plugin.system_defaulted
    required = required_node_affinity(proto)
    ignored: set[str] = set()
    counts: list[dict[str, int]] = [{} for _ in constraints]
    for name in candidates:
        labels = snap.nodes[name].node.labels
        if require_all and not node_labels_match_spread_constraints(labels, constraints):
            ignored.add(name)
            continue
        for i, c in enumerate(constraints):
            if c.topology_key != LABEL_HOSTNAME:
                counts[i].setdefault(labels.get(c.topology_key, ""), 0)
    for ni in snap.all_nodes():
        labels = ni.node.labels
        if require_all and not node_labels_match_spread_constraints(labels, constraints):
            continue
        for i, c in enumerate(constraints):
            value = labels.get(c.topology_key, "")
            if c.topology_key == LABEL_HOSTNAME or value not in counts[i]:
                continue
            if not c.match_node_inclusion_policies(proto, ni.node, required):
                continue
            counts[i][value] += count_pods_match_selector(
                ni.pods.values(), c.selector, proto.namespace
            )
    return ignored, counts


def random_incoming(rng: random.Random) -> PodInfo:
    constraints = []
    for _ in range(rng.choice([0, 1, 1, 2])):
        choices: list[str | dict[str, str]] = [{"app": "web"}, "app", {"app": "db", "v": "1"}, {}]
        sel = rng.choice(choices)
        constraints.append(
            C(
                rng.randint(1, 3),
                rng.choice([ZONE, ZONE, LABEL_HOSTNAME]),
                rng.choice([DNS, SA]),
                sel,
                min_domains=rng.choice([None, None, 2, 4]),
                naff=rng.choice([None, "Honor", "Ignore"]),
                ntaint=rng.choice([None, "Honor", "Ignore"]),
            )
        )
    return spread_pod(
        rng.choice(["app=web", "app=db v=1", "app=x"]),
        *constraints,
        node_selector={"disk": "ssd"} if rng.random() < 0.2 else None,
        affinity_in=(ZONE, ["z1", "z2"]) if rng.random() < 0.2 else None,
        namespace=rng.choice(["default", "default", "other"]),
    )


def check_cycle(
    plugins: list[PodTopologySpread], rng: random.Random, snap: Snapshot, step: int
) -> None:
    names = list(snap.nodes)
    for _ in range(3):
        plugin = rng.choice(plugins)
        incoming = random_incoming(rng)
        # PreFilter and Filter.
        state = CycleState()
        _, st = plugin.pre_filter(state, incoming, snap.all_nodes())
        want_counts, want_paths = reference_pre_filter(plugin, incoming, snap)
        if st.is_skip:
            assert want_counts == [], step
        else:
            assert st.is_success, st
            s = state.read(PRE_FILTER_STATE_KEY)
            assert s.tp_value_to_match_num == want_counts, step
            # The domains in node order too (the critical paths' ties).
            assert [list(d) for d in s.tp_value_to_match_num] == [list(d) for d in want_counts]
            assert s.critical_paths == want_paths, step
            batch = snap.all_nodes()
            verdicts = plugin.filter_nodes(state, incoming, batch)
            for k, ni in enumerate(batch):
                assert verdicts.status_of(k) == plugin.filter(state, incoming, ni), (step, ni.name)
        # PreScore, Score and NormalizeScore over a random candidate set.
        candidates = rng.sample(names, rng.randint(1, len(names))) if names else []
        batch = snap.batch(candidates)
        state = CycleState()
        st = plugin.pre_score(state, incoming, batch)
        if st.is_skip:
            continue
        assert st.is_success, st
        ps = state.read(PRE_SCORE_STATE_KEY)
        want_ignored, want_score_counts = reference_pre_score(plugin, incoming, snap, candidates)
        assert set(ps.ignored_nodes) == want_ignored, step
        assert ps.topology_value_to_pod_counts == want_score_counts, step
        scores = plugin.score_nodes(state, incoming, batch)
        assert scores.tolist() == [plugin.score(state, incoming, ni) for ni in batch], step


def test_plugin_agrees_with_upstreams_walks_through_random_changes() -> None:
    rng = random.Random(5)
    nodes = [f"n{i}" for i in range(10)]
    svc = make_object(SERVICES, "web", spec={"selector": {"app": "web"}})
    snap = snapshot_of([random_node(rng, n) for n in nodes], [], [svc])
    plugins = [
        PodTopologySpread(PodTopologySpreadArgs(defaulting_type="List")),
        PodTopologySpread(PodTopologySpreadArgs()),  # System defaults
    ]
    uids: list[str] = []
    for step in range(300):
        snap.apply(random_pod_delta(rng, snap, nodes, uids, step))
        check_cycle(plugins, rng, snap, step)
