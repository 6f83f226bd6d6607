"""Pod (anti-)affinity terms, parsed once per pod.

Port of the semantics of staging/src/k8s.io/kube-scheduler/framework/types.go
(AffinityTerm, AffinityTerm.Matches, GetAffinityTerms, GetWeightedAffinityTerms,
newAffinityTerm, getNamespacesFromPodAffinityTerm), of PodInfo.Update in
pkg/scheduler/framework/types.go (the four term lists, each parsed on its
own), with label selectors parsed by berth.framework.labels
(metav1.LabelSelectorAsSelector):

* a term counts pods in ``namespaces``, or in the pod's own namespace when
  neither ``namespaces`` nor ``namespaceSelector`` is set, or in namespaces
  whose labels ``namespaceSelector`` matches;
* ``matchLabelKeys``/``mismatchLabelKeys`` are not read: since v1.33 the API
  server merges them into ``labelSelector`` when the pod is created
  (pkg/registry/core/pod/strategy.go, applyMatchLabelKeysAndMismatchLabelKeys),
  and kube-scheduler reads only the merged selector.

Label key and value syntax is not checked (the API server validated the pod);
an unknown operator or a value count the operator does not take makes the
term list fail to parse, as LabelSelectorAsSelector does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.labels import Selector, SelectorError, label_selector_as_selector
from berth.framework.model import PodInfo

__all__ = [
    "AffinityTerm",
    "ParsedTerms",
    "Signature",
    "TermError",
    "compile_selector",
    "parsed_terms",
    "pod_matches_all",
    "signature",
]


class TermError(ValueError):
    """A term whose selector does not parse."""


def compile_selector(sel: pb.LabelSelector | None) -> Selector:
    """metav1.LabelSelectorAsSelector: None (unset) is Nothing, set but
    empty is Everything. Raises TermError for an unknown operator or a
    value count the operator does not take; label keys and values are not
    checked (the API server validated the pod)."""
    try:
        return label_selector_as_selector(sel, check_syntax=False)
    except SelectorError as exc:
        if exc.errors:
            raise TermError(f"{exc.errors[0].details[0]} (key {exc.key!r})") from None
        raise TermError(f"{exc.operator!r} is not a valid label selector operator") from None


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """fwk.AffinityTerm: a processed PodAffinityTerm."""

    namespaces: frozenset[str]
    selector: Selector
    topology_key: str
    namespace_selector: Selector

    def matches(self, pod: pb.Pod, ns_labels: Mapping[str, str] | None) -> bool:
        """AffinityTerm.Matches: the pod is in one of the namespaces, or its
        namespace's labels (``ns_labels``; None reads as no labels) match the
        namespace selector; and its labels match the selector."""
        return self.matches_parts(pod.namespace, pod.labels, ns_labels)

    def matches_parts(
        self, namespace: str, labels: Mapping[str, str], ns_labels: Mapping[str, str] | None
    ) -> bool:
        """``matches`` for a pod given as its namespace and labels (read
        once by callers that test many terms against one pod)."""
        if namespace in self.namespaces or self.namespace_selector.matches(ns_labels or {}):
            return self.selector.matches(labels)
        return False

    def with_namespaces(self, names: frozenset[str]) -> AffinityTerm:
        """The term with ``names`` added to its namespaces."""
        return AffinityTerm(
            self.namespaces | names, self.selector, self.topology_key, self.namespace_selector
        )


def _term(pod: pb.Pod, t: pb.PodAffinityTerm) -> AffinityTerm:
    selector = compile_selector(t.label_selector if t.HasField("label_selector") else None)
    has_ns_selector = t.HasField("namespace_selector")
    # getNamespacesFromPodAffinityTerm.
    if not t.namespaces and not has_ns_selector:
        namespaces = frozenset((pod.namespace,))
    else:
        namespaces = frozenset(t.namespaces)
    ns_selector = compile_selector(t.namespace_selector if has_ns_selector else None)
    return AffinityTerm(namespaces, selector, t.topology_key, ns_selector)


@dataclass(frozen=True, slots=True)
class ParsedTerms:
    """PodInfo's RequiredAffinityTerms, RequiredAntiAffinityTerms,
    PreferredAffinityTerms and PreferredAntiAffinityTerms (weight, term);
    ``errors`` lists the groups that did not parse, as PodInfo.Update words
    them (those groups are empty)."""

    required_affinity: tuple[AffinityTerm, ...] = ()
    required_anti_affinity: tuple[AffinityTerm, ...] = ()
    preferred_affinity: tuple[tuple[int, AffinityTerm], ...] = ()
    preferred_anti_affinity: tuple[tuple[int, AffinityTerm], ...] = ()
    errors: tuple[str, ...] = ()

    @property
    def scores_others(self) -> bool:
        """Do these terms, on an existing pod, score an incoming pod
        (required affinity through hardPodAffinityWeight, preferred terms)?"""
        return bool(
            self.required_affinity or self.preferred_affinity or self.preferred_anti_affinity
        )


_NO_TERMS: Final = ParsedTerms()
_CACHE_ATTR: Final = "_interpodaffinity_terms"


def _parse(pod: pb.Pod) -> ParsedTerms:
    if not pod.HasField("affinity"):
        return _NO_TERMS
    a = pod.affinity
    errors: list[str] = []

    def required(group: str, src: pb.PodAffinity | None) -> tuple[AffinityTerm, ...]:
        if src is None:
            return ()
        try:
            return tuple(_term(pod, t) for t in src.required)
        except TermError as exc:
            errors.append(f"{group}: {exc}")
            return ()

    def preferred(group: str, src: pb.PodAffinity | None) -> tuple[tuple[int, AffinityTerm], ...]:
        if src is None:
            return ()
        try:
            return tuple((w.weight, _term(pod, w.term)) for w in src.preferred)
        except TermError as exc:
            errors.append(f"{group}: {exc}")
            return ()

    aff = a.pod_affinity if a.HasField("pod_affinity") else None
    anti = a.pod_anti_affinity if a.HasField("pod_anti_affinity") else None
    if aff is None and anti is None:
        return _NO_TERMS
    return ParsedTerms(
        required("requiredAffinityTerms", aff),
        required("requiredAntiAffinityTerms", anti),
        preferred("preferredAffinityTerms", aff),
        preferred("preferredAntiAffinityTerms", anti),
        tuple(errors),
    )


# _parse's results by what they are parsed from (``_parse_key``): a workload's
# pods carry the same terms, so each distinct set is parsed once, not once per
# pod. Cleared when full, so a stream of distinct pods holds bounded memory.
_PARSED: dict[tuple[str, bytes, bytes], ParsedTerms] = {}
_PARSED_MAX: Final = 1024


def _parse_key(pod: pb.Pod) -> tuple[str, bytes, bytes] | None:
    """All that _parse reads of a pod with pod (anti-)affinity: its
    namespace (a term's default namespace) and the two groups' serialized
    form; None for a pod without either (no terms, nothing to parse)."""
    if not pod.HasField("affinity"):
        return None
    a = pod.affinity
    has_affinity, has_anti = a.HasField("pod_affinity"), a.HasField("pod_anti_affinity")
    if not has_affinity and not has_anti:
        return None
    return (
        pod.namespace,
        a.pod_affinity.SerializeToString(deterministic=True) if has_affinity else b"",
        a.pod_anti_affinity.SerializeToString(deterministic=True) if has_anti else b"",
    )


def parsed_terms(pod: PodInfo) -> ParsedTerms:
    """The pod's terms, parsed at the first call and kept on the PodInfo
    (which lives as long as the pod's record in the snapshot); pods with
    the same terms in one namespace share one ParsedTerms (immutable)."""
    cache = vars(pod)
    terms = cache.get(_CACHE_ATTR)
    if terms is None:
        key = _parse_key(pod.proto)
        if key is None:
            terms = _NO_TERMS
        else:
            terms = _PARSED.get(key)
            if terms is None:
                terms = _parse(pod.proto)
                if len(_PARSED) >= _PARSED_MAX:
                    _PARSED.clear()
                _PARSED[key] = terms
        cache[_CACHE_ATTR] = terms
    assert isinstance(terms, ParsedTerms)
    return terms


Signature = tuple[str, frozenset[tuple[str, str]]]


def signature(pod: PodInfo) -> Signature:
    """What a term reads of a pod it is matched against: its namespace and
    labels, hashable. Pods of one workload share it, so a cycle decides each
    term once per signature, not once per pod (index.py). Not kept on the
    PodInfo: the index keeps one per group, and a copy per pod would cost
    more memory than recomputing it when a pod comes or goes."""
    proto = pod.proto
    return (proto.namespace, frozenset(proto.labels.items()))


def pod_matches_all(terms: tuple[AffinityTerm, ...], pod: pb.Pod) -> bool:
    """filtering.go, podMatchesAllAffinityTerms: false without terms; else
    every term matches the pod (no namespace labels)."""
    if not terms:
        return False
    namespace, labels = pod.namespace, pod.labels
    return all(t.matches_parts(namespace, labels, None) for t in terms)
