"""NodeAffinityArgs: the ``pluginConfig`` args of NodeAffinity.

Field names are upstream's (staging/src/k8s.io/kube-scheduler/config/v1/
types_pluginargs.go, NodeAffinityArgs, whose ``addedAffinity`` is a
core/v1 NodeAffinity). There are no defaults: no ``addedAffinity`` means
every node matches. ``validate()`` is upstream's ValidateNodeAffinityArgs
(pkg/scheduler/apis/config/validation/validation_pluginargs.go): both
halves of ``addedAffinity`` must parse as node selectors do.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from berth.framework.nodeaffinity import compile_node_selector, compile_preferred_terms

__all__ = [
    "NodeAffinity",
    "NodeAffinityArgs",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "PreferredSchedulingTerm",
]

Int32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]

_REQUIRED_PATH = "addedAffinity.requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED_PATH = "addedAffinity.preferredDuringSchedulingIgnoredDuringExecution"


class NodeSelectorRequirement(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    key: str = ""
    # In, NotIn, Exists, DoesNotExist, Gt, Lt (matchFields: In, NotIn).
    operator: str = ""
    values: list[str] = msgspec.field(default_factory=list)


class NodeSelectorTerm(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    match_expressions: list[NodeSelectorRequirement] = msgspec.field(default_factory=list)
    match_fields: list[NodeSelectorRequirement] = msgspec.field(default_factory=list)


class NodeSelector(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    node_selector_terms: list[NodeSelectorTerm] = msgspec.field(default_factory=list)


class PreferredSchedulingTerm(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    # Upstream's API checks 1..100 on pods; args take any int32, and a
    # term of weight 0 is ignored.
    weight: Int32 = 0
    preference: NodeSelectorTerm = msgspec.field(default_factory=NodeSelectorTerm)


class NodeAffinity(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """core/v1 NodeAffinity."""

    # Present, even with no terms, means "nodes must match": with no terms
    # no node does.
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] = (
        msgspec.field(default_factory=list)
    )


class NodeAffinityArgs(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """Args of NodeAffinity: affinity every pod gets on top of its own."""

    added_affinity: NodeAffinity | None = None

    def validate(self) -> None:
        """ValidateNodeAffinityArgs. Raises ValueError naming every bad
        field as ``<field.path>: <reason>``, joined with "; "."""
        affinity = self.added_affinity
        if affinity is None:
            return
        errors: list[str] = []
        required = affinity.required_during_scheduling_ignored_during_execution
        if required is not None:
            _, errs = compile_node_selector(required.node_selector_terms, _REQUIRED_PATH)
            errors += [str(e) for e in errs]
        preferred = affinity.preferred_during_scheduling_ignored_during_execution
        if preferred:
            _, errs = compile_preferred_terms(preferred, _PREFERRED_PATH)
            errors += [str(e) for e in errs]
        if errors:
            raise ValueError("; ".join(dict.fromkeys(errors)))
