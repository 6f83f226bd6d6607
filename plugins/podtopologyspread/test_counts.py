"""The count tables (counts.py) agree with counting every pod, as upstream's
countPodsMatchSelector does, through any sequence of cluster changes."""

from __future__ import annotations

import random

from berth_api.v1 import cluster_pb2 as pb
from plugins.framework.snapshot import Snapshot
from plugins.framework.testing import snapshot_of
from plugins.podtopologyspread.common import count_pods_match_selector
from plugins.podtopologyspread.counts import MAX_TABLES, PodCountIndex, pod_count_index
from plugins.podtopologyspread.selector import (
    EVERYTHING,
    NOTHING,
    Requirement,
    Selector,
    selector_from_set,
)
from plugins.podtopologyspread.testutil import node, pod

SELECTORS = [
    selector_from_set({"app": "web"}),
    Selector((Requirement("app", "Exists"),)),
    Selector((Requirement("app", "In", ("web", "db")), Requirement("v", "NotIn", ("1",)))),
]


def brute(snap: Snapshot, ns: str, sel: Selector) -> dict[str, int]:
    out = {}
    for name, ni in snap.nodes.items():
        n = count_pods_match_selector(ni.pods.values(), sel, ns)
        if n:
            out[name] = n
    return out


def live(table: dict[str, int], snap: Snapshot) -> dict[str, int]:
    return {k: v for k, v in table.items() if k in snap.nodes and v}


def test_tables_follow_random_changes() -> None:
    rng = random.Random(7)
    nodes = [f"n{i}" for i in range(5)]
    snap = snapshot_of([node(n) for n in nodes])
    index = pod_count_index(snap)
    for sel in SELECTORS:
        index.table("default", sel)
    built = index.tables_built
    uids: list[str] = []
    for step in range(400):
        delta = pb.ClusterDelta()
        r = rng.random()
        if r < 0.5 or not uids:
            uid = f"u{step}"
            uids.append(uid)
            p = delta.upsert_pods.add(
                uid=uid,
                name=uid,
                namespace=rng.choice(["default", "other"]),
                node_name=rng.choice([*nodes, "", "gone"]),
            )
            p.labels.update(
                {
                    k: v
                    for k, v in (("app", rng.choice(["web", "db", "x"])), ("v", "1"))
                    if rng.random() < 0.7
                }
            )
        elif r < 0.75:
            # An update: same uid, new record (labels, terminating, or node change).
            uid = rng.choice(uids)
            old = snap.pods[uid].proto
            p = pb.Pod()
            p.CopyFrom(old)
            p.terminating = rng.random() < 0.3
            p.labels["app"] = rng.choice(["web", "db"])
            delta.upsert_pods.append(p)
        else:
            uid = uids.pop(rng.randrange(len(uids)))
            delta.delete_pods.append(uid)
        snap.apply(delta)
        index = pod_count_index(snap)
        for sel in SELECTORS:
            for ns in ("default", "other"):
                assert live(index.table(ns, sel), snap) == brute(snap, ns, sel), (step, sel, ns)
    # The "default" tables were kept up to date, never rebuilt.
    assert index.tables_built == built + len(SELECTORS)


def test_empty_and_nothing_selectors_count_nothing() -> None:
    snap = snapshot_of([node("n1")], [pod("p@n1 app=web")])
    index = pod_count_index(snap)
    assert index.table("default", EVERYTHING) == {}
    assert index.table("default", NOTHING) == {}


def test_the_least_recently_used_table_is_dropped() -> None:
    snap = snapshot_of([node("n1")], [pod("p@n1 app=web")])
    index = PodCountIndex()
    index.sync(snap)
    first = selector_from_set({"app": "web"})
    index.table("default", first)
    for i in range(MAX_TABLES):
        index.table("default", selector_from_set({"k": str(i)}))
    built = index.tables_built
    assert index.table("default", first) == {"n1": 1}
    assert index.tables_built == built + 1
