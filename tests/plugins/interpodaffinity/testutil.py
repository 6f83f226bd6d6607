"""Builders and shared fixtures for InterPodAffinity tests: pods with
(anti-)affinity terms as wire records, a plugin bound to a snapshot, and the
label sets, namespaces, terms and node sets upstream's case tables
(filtering_test.go, scoring_test.go) use over and over."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.model import PodInfo
from berth.framework.snapshot import Snapshot
from berth.framework.status import Status
from berth.framework.testing import handle_for, make_object, snapshot_of
from berth.plugins.interpodaffinity.args import InterPodAffinityArgs
from berth.plugins.interpodaffinity.inter_pod_affinity import (
    ERR_REASON_AFFINITY,
    ERR_REASON_ANTI_AFFINITY,
    ERR_REASON_EXISTING_ANTI_AFFINITY,
    NAMESPACES,
    InterPodAffinity,
)

Expr = tuple[str, str, Sequence[str]]


def selector(
    match_labels: Mapping[str, str] | None = None, exprs: Iterable[Expr] = ()
) -> pb.LabelSelector:
    sel = pb.LabelSelector(match_labels=dict(match_labels or {}))
    for key, op, values in exprs:
        sel.match_expressions.add(key=key, operator=op, values=list(values))
    return sel


def term(
    topology_key: str,
    label_selector: pb.LabelSelector | None,
    namespaces: Sequence[str] = (),
    namespace_selector: pb.LabelSelector | None = None,
) -> pb.PodAffinityTerm:
    t = pb.PodAffinityTerm(topology_key=topology_key, namespaces=list(namespaces))
    if label_selector is not None:
        t.label_selector.CopyFrom(label_selector)
    if namespace_selector is not None:
        t.namespace_selector.CopyFrom(namespace_selector)
    return t


def term_in(key: str, topology_key: str, *values: str) -> pb.PodAffinityTerm:
    """upstream testing wrappers' PodAffinityIn: ``key In values``."""
    return term(topology_key, selector(exprs=[(key, "In", values)]))


def term_not_in(key: str, topology_key: str, *values: str) -> pb.PodAffinityTerm:
    return term(topology_key, selector(exprs=[(key, "NotIn", values)]))


def term_exists(key: str, topology_key: str) -> pb.PodAffinityTerm:
    return term(topology_key, selector(exprs=[(key, "Exists", ())]))


def pod(
    name: str = "p",
    namespace: str = "default",
    labels: Mapping[str, str] | None = None,
    node: str = "",
    affinity: Iterable[pb.PodAffinityTerm] = (),
    anti: Iterable[pb.PodAffinityTerm] = (),
    preferred: Iterable[tuple[int, pb.PodAffinityTerm]] = (),
    preferred_anti: Iterable[tuple[int, pb.PodAffinityTerm]] = (),
    uid: str = "",
) -> pb.Pod:
    p = pb.Pod(name=name, namespace=namespace, uid=uid or f"{namespace}/{name}", node_name=node)
    p.labels.update(labels or {})
    affinity, anti = list(affinity), list(anti)
    preferred, preferred_anti = list(preferred), list(preferred_anti)
    if affinity or preferred:
        p.affinity.pod_affinity.required.extend(affinity)
        for w, t in preferred:
            p.affinity.pod_affinity.preferred.add(weight=w, term=t)
    if anti or preferred_anti:
        p.affinity.pod_anti_affinity.required.extend(anti)
        for w, t in preferred_anti:
            p.affinity.pod_anti_affinity.preferred.add(weight=w, term=t)
    return p


def node(name: str, **labels: str) -> pb.Node:
    n = pb.Node(name=name)
    n.labels.update(labels)
    return n


def namespace(name: str, **labels: str) -> pb.ClusterObject:
    return make_object(NAMESPACES, name, labels=labels)


def setup(
    nodes: Iterable[pb.Node],
    pods: Iterable[pb.Pod] = (),
    namespaces: Iterable[pb.ClusterObject] = (),
    args: InterPodAffinityArgs | None = None,
) -> tuple[Snapshot, InterPodAffinity]:
    existing = list(pods)
    for i, p in enumerate(existing):
        if not p.name:
            p.name = f"existing-{i}"
            p.uid = f"{p.namespace}/existing-{i}"
    snap = snapshot_of(nodes, existing, namespaces)
    return snap, InterPodAffinity(args, handle_for(snap))


def info(p: pb.Pod) -> PodInfo:
    return PodInfo(p)


# -- shared fixtures ------------------------------------------------------------------

# Filter's answers (filtering.go's ErrReasons with their codes).
AFF = Status.unresolvable(ERR_REASON_AFFINITY)
ANTI = Status.unschedulable(ERR_REASON_ANTI_AFFINITY)
EXISTING = Status.unschedulable(ERR_REASON_EXISTING_ANTI_AFFINITY)
OK = Status()

# Pod and node label sets of upstream's tables.
S1 = {"security": "S1"}
S2 = {"security": "S2"}
SECURITYSCAN = {"service": "securityscan"}
RG_CHINA = {"region": "China"}
RG_CHINA_AZ1 = {"region": "China", "az": "az1"}
RG_INDIA = {"region": "India"}
AZ1 = {"az": "az1"}
AZ2 = {"az": "az2"}

# scoring_test.go's namespaces, labelled with their team.
TEAM_NAMESPACES = (
    namespace("subteam1.team1", team="team1"),
    namespace("subteam2.team1", team="team1"),
    namespace("subteam1.team2", team="team2"),
    namespace("subteam2.team2", team="team2"),
)


def exists_without(key: str, absent: str = "wrongkey") -> pb.LabelSelector:
    """``key Exists, absent DoesNotExist``: upstream's two-requirement selector."""
    return selector(exprs=[(key, "Exists", ()), (absent, "DoesNotExist", ())])


def team_term(
    topology_key: str, team: str, key: str, value: str, namespaces: Sequence[str] = ()
) -> pb.PodAffinityTerm:
    """A term selecting ``key In (value)`` in the namespaces of ``team``
    (a namespaceSelector on the namespaces' ``team`` label)."""
    return term(
        topology_key,
        selector(exprs=[(key, "In", [value])]),
        namespaces,
        namespace_selector=selector({"team": team}),
    )


def securityscan_pod(
    node_name: str = "node1",
    anti: Iterable[pb.PodAffinityTerm] = (),
    namespace: str = "default",
    labels: Mapping[str, str] = SECURITYSCAN,
) -> pb.Pod:
    """filtering_test.go's usual existing pod: ``service: securityscan``
    on node1."""
    return pod("existing", namespace=namespace, labels=labels, node=node_name, anti=anti)


def hosts(*names: str, **labels: str) -> list[pb.Node]:
    """Nodes with a ``hostname`` label of their own and ``labels``."""
    return [node(n, hostname=n, **labels) for n in names]


def two_zones(region: str = "") -> list[pb.Node]:
    """nodeA in zone z1, nodeB in zone z2 (both in ``region`` when given),
    each with its hostname."""
    extra = {"region": region} if region else {}
    return [
        node("nodeA", zone="z1", hostname="nodeA", **extra),
        node("nodeB", zone="z2", hostname="nodeB", **extra),
    ]
