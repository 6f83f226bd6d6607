"""Short builders for PodTopologySpread tests, standing in for upstream's
st.MakePod().SpreadConstraint(...) and st.MakeNode().Label(...) chains:

    node("node-a zone=zone1 node=node-a")          # labels; "foo=" is an empty value
    node("node-y node=node-y !taint")              # + the unschedulable NoSchedule taint
    pod("p-a1@node-a foo=")                        # bound to node-a, label foo=""
    pod("p-a1@node-a ns=ns1 foo= !terminating")    # in ns1, terminating
    spread_pod("foo=", C(1, "zone", DNS, "foo"))   # incoming pod with a constraint
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.model import PodInfo

__all__ = ["DNS", "SA", "C", "node", "pod", "spread_pod"]

DNS: Final = "DoNotSchedule"
SA: Final = "ScheduleAnyway"

Selector = str | Mapping[str, str] | None


def _labels(tokens: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for t in tokens:
        key, _, value = t.partition("=")
        out[key] = value
    return out


def node(spec: str) -> pb.Node:
    name, *rest = spec.split()
    n = pb.Node(name=name)
    n.labels.update(_labels([t for t in rest if not t.startswith("!")]))
    if "!taint" in rest:
        # taints in upstream's filtering/scoring tests: TaintNodeUnschedulable.
        n.taints.add(key="node.kubernetes.io/unschedulable", effect="NoSchedule")
    return n


def pod(spec: str) -> pb.Pod:
    head, *rest = spec.split()
    name, _, node_name = head.partition("@")
    ns = "default"
    labels: list[str] = []
    terminating = False
    for t in rest:
        if t.startswith("ns="):
            ns = t[3:]
        elif t == "!terminating":
            terminating = True
        else:
            labels.append(t)
    p = pb.Pod(uid=f"uid-{ns}-{name}", name=name, namespace=ns, node_name=node_name)
    p.labels.update(_labels(labels))
    p.terminating = terminating
    return p


def _selector(sel: Selector, into: pb.LabelSelector) -> None:
    """None leaves it unset (nil); a string is ``Exists(key)`` (upstream's
    fooSelector/barSelector); a mapping is matchLabels ({} is an empty
    selector)."""
    into.SetInParent()
    if isinstance(sel, str):
        into.match_expressions.add(key=sel, operator="Exists")
    elif sel is not None:
        into.match_labels.update(sel)


def C(
    max_skew: int,
    key: str,
    when: str,
    sel: Selector,
    min_domains: int | None = None,
    naff: str | None = None,
    ntaint: str | None = None,
    mlk: Sequence[str] = (),
) -> pb.TopologySpreadConstraint:
    """st.PodWrapper.SpreadConstraint's arguments, in its order (named
    like it, capitalised, to read like upstream's cases)."""
    c = pb.TopologySpreadConstraint(
        max_skew=max_skew,
        topology_key=key,
        when_unsatisfiable=when,
        node_affinity_policy=naff or "",
        node_taints_policy=ntaint or "",
        match_label_keys=list(mlk),
    )
    if sel is not None:
        _selector(sel, c.label_selector)
    if min_domains is not None:
        c.min_domains = min_domains
    return c


def spread_pod(
    labels: str,
    *constraints: pb.TopologySpreadConstraint,
    node_selector: Mapping[str, str] | None = None,
    affinity_in: tuple[str, Sequence[str]] | None = None,
    affinity_not_in: tuple[str, Sequence[str]] | None = None,
    tolerations: Sequence[pb.Toleration] = (),
    namespace: str = "default",
    owner: tuple[str, str] | None = None,
) -> PodInfo:
    """The incoming pod ``p``: labels as in ``pod``, its constraints, and
    optionally a nodeSelector and one required node affinity term
    (st.PodWrapper.NodeAffinityIn / NodeAffinityNotIn)."""
    p = pb.Pod(uid="uid-p", name="p", namespace=namespace)
    p.labels.update(_labels(labels.split()))
    p.topology_spread_constraints.extend(constraints)
    if node_selector:
        p.node_selector.update(node_selector)
    for spec, op in ((affinity_in, "In"), (affinity_not_in, "NotIn")):
        if spec is None:
            continue
        key, values = spec
        term = p.affinity.node_affinity.required.terms.add()
        term.match_expressions.add(key=key, operator=op, values=list(values))
    p.tolerations.extend(tolerations)
    if owner is not None:
        p.owner_kind, p.owner_name = owner
    return PodInfo(p)
