"""Builders for node affinity in tests: wire records of selectors and pods,
like upstream's v1.NodeSelectorTerm literals, only shorter.

    term(match("foo", "In", "bar"), fields=[match("metadata.name", "In", "n1")])
    affinity_pod(required=[term(...)], preferred=[(2, term(...))])
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.model import PodInfo
from berth.framework.testing import make_node

__all__ = ["affinity_pod", "labelled_node", "match", "name_in", "term"]


def match(key: str, operator: str, *values: str) -> pb.NodeSelectorRequirement:
    return pb.NodeSelectorRequirement(key=key, operator=operator, values=list(values))


def name_in(*names: str) -> pb.NodeSelectorRequirement:
    """``matchFields`` ``metadata.name In names``."""
    return match("metadata.name", "In", *names)


def term(
    *expressions: pb.NodeSelectorRequirement,
    fields: Iterable[pb.NodeSelectorRequirement] = (),
) -> pb.NodeSelectorTerm:
    return pb.NodeSelectorTerm(match_expressions=list(expressions), match_fields=list(fields))


def affinity_pod(
    required: Sequence[pb.NodeSelectorTerm] | None = None,
    preferred: Sequence[tuple[int, pb.NodeSelectorTerm]] = (),
    node_selector: Mapping[str, str] | None = None,
    node_affinity: bool = False,
    name: str = "pod",
) -> PodInfo:
    """A pod with ``nodeSelector``, and required (None: not set) and
    preferred node affinity. ``node_affinity`` sets an empty nodeAffinity
    even without terms."""
    pod = pb.Pod(uid=f"uid-{name}", name=name, namespace="default")
    if node_selector:
        pod.node_selector.update(node_selector)
    if node_affinity or required is not None or preferred:
        pod.affinity.node_affinity.SetInParent()
    if required is not None:
        pod.affinity.node_affinity.required.SetInParent()
        pod.affinity.node_affinity.required.terms.extend(required)
    for weight, preference in preferred:
        pod.affinity.node_affinity.preferred.add(weight=weight, preference=preference)
    return PodInfo(pod)


def labelled_node(name: str, labels: Mapping[str, str] | None = None) -> pb.Node:
    return make_node(name).capacity(cpu="4", memory="8Gi").labels(**(labels or {})).obj()
