"""What the shim performs for the plugin service, checked before it acts.

The plugin service decides and the shim acts with its own credentials (the
plugin server has none), so an answer is no more trustworthy than whatever
sent it: a plugin bug, a replica that is not what it claims, a peer on a
plaintext connection. The shim performs only what it can justify:

- A preemption victim (PostFilterResponse.victims) must be a pod in the
  shim's cache with the uid, namespace and name the answer gives, bound or
  assumed on the node the answer nominates, of lower priority than the
  preemptor, and not the preemptor: the only pods upstream's DefaultPreemption
  can pick (plugins/defaultpreemption/default_preemption.go
  SelectVictimsOnNode takes the pods of the candidate node's NodeInfo that
  isPreemptionAllowed, priority below the preemptor's). One victim refused
  refuses the preemption whole: nothing is deleted or rejected, and the cycle
  counts as a failed preemption.
- A nomination to clear (PostFilterResponse.clear_nomination_pod_uids) must
  belong to a pod nominated to that node with lower priority than the
  preemptor (framework/preemption/executor.go getLowerPriorityNominatedPods);
  any other is skipped.
- An ObjectWrite (PreBind, PostBind) must be what the shim performs, a JSON
  merge patch on an object or its status, with no field this shim does not
  know, named by a valid path segment (a name "web/scale" would reach the
  scale subresource), and must target the pod being scheduled or a kind the plugin that
  asked for it declares (Plugin.writes, worked out from the configuration the
  shim loaded: framework/writes.py), in the pod's namespace when the
  kind is namespaced. One write refused refuses the answer's writes whole.

Each refusal is logged at WARNING and counted in
``berth_shim_refused_writes_total{kind, reason}``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import orjson
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.framework.writes import PluginWrites, declared_kind
from berth.shim import metrics
from berth.shim.objects import describe_write, kind_name, targets_pod

log = logging.getLogger(__name__)

# The metric's kind label.
VICTIM = "victim"
WRITE = "write"
NOMINATION = "nomination"

# Its reason label.
UNKNOWN_POD = "unknown_pod"
NAME_MISMATCH = "name_mismatch"
NOT_ON_NODE = "not_on_node"
NOT_LOWER_PRIORITY = "not_lower_priority"
PREEMPTOR = "preemptor"
NOT_NOMINATED_THERE = "not_nominated_there"
VERB = "verb"
SUBRESOURCE = "subresource"
MALFORMED = "malformed"
UNDECLARED = "undeclared"
OTHER_NAMESPACE = "other_namespace"

# The subresources a merge patch may go to: the object itself and its status.
WRITABLE_SUBRESOURCES = frozenset({"", "status"})


@dataclass(frozen=True, slots=True)
class Refusal:
    """One action the shim will not perform: ``kind`` and ``reason`` are the
    metric's labels, ``target`` says what was asked, ``why`` why not."""

    kind: str
    reason: str
    target: str
    why: str

    def __str__(self) -> str:
        return f"{self.target}: {self.why}"


def check_victims(
    preemptor: cpb.Pod, node: str, victims: Iterable[pb.Victim], pods: Mapping[str, cpb.Pod]
) -> list[Refusal]:
    """The victims the shim may not preempt for ``preemptor`` on ``node``;
    ``pods`` is the cache's pods by uid (bound, assumed, nominated)."""
    out: list[Refusal] = []
    for v in victims:
        target = f"victim {v.namespace}/{v.name} (uid {v.uid})"

        def refuse(reason: str, why: str, target: str = target) -> None:
            out.append(Refusal(VICTIM, reason, target, why))

        if v.uid == preemptor.uid or (v.namespace, v.name) == (
            preemptor.namespace,
            preemptor.name,
        ):
            refuse(PREEMPTOR, "is the preemptor itself")
            continue
        known = pods.get(v.uid)
        if known is None:
            refuse(UNKNOWN_POD, "no pod with that uid is in the shim's cache")
        elif (known.namespace, known.name) != (v.namespace, v.name):
            refuse(NAME_MISMATCH, f"that uid is pod {known.namespace}/{known.name}")
        elif known.node_name != node:
            where = f"on node {known.node_name}" if known.node_name else "not on any node"
            refuse(NOT_ON_NODE, f"is {where}, not on the nominated node {node}")
        elif known.priority >= preemptor.priority:
            refuse(
                NOT_LOWER_PRIORITY,
                f"its priority {known.priority} is not lower than the preemptor's "
                f"{preemptor.priority}",
            )
    return out


def check_nomination(preemptor: cpb.Pod, node: str, pod: cpb.Pod, nominated: str) -> Refusal | None:
    """May the shim clear the nomination of ``pod`` (nominated to
    ``nominated``) for ``preemptor``'s preemption on ``node``?"""
    target = f"nomination of pod {pod.namespace}/{pod.name} (uid {pod.uid})"
    if nominated != node:
        return Refusal(
            NOMINATION, NOT_NOMINATED_THERE, target, f"is to node {nominated}, not to {node}"
        )
    if pod.priority >= preemptor.priority:
        return Refusal(
            NOMINATION,
            NOT_LOWER_PRIORITY,
            target,
            f"its pod's priority {pod.priority} is not lower than the preemptor's "
            f"{preemptor.priority}",
        )
    return None


def _invalid_path_segment(value: str) -> str:
    """Why ``value`` cannot be a name in a request path, "" when it can
    (apimachinery/pkg/api/validation/path/name.go IsValidPathSegmentName, which
    client-go's rest.Request.Name applies before sending: no "." or "..", no "/"
    or "%")."""
    if value in (".", ".."):
        return f"may not be {value!r}"
    for illegal in ("/", "%"):
        if illegal in value:
            return f"may not contain {illegal!r} (got {value!r})"
    return ""


def _unknown_fields(msg: Message) -> int:
    return len(UnknownFieldSet(msg))


def check_writes(
    pod: cpb.Pod, writes: Sequence[pb.ObjectWrite], declared: PluginWrites
) -> list[Refusal]:
    """The writes the shim may not perform in ``pod``'s binding cycle;
    ``declared`` is what the profile's plugins declare they write."""
    out: list[Refusal] = []
    for w in writes:
        target = f"write by plugin {w.plugin or '(unnamed)'} to {describe_write(w)}"

        def refuse(reason: str, why: str, target: str = target) -> None:
            out.append(Refusal(WRITE, reason, target, why))

        unknown = _unknown_fields(w) + _unknown_fields(w.ref)
        if unknown:
            # A newer server asking for something other than a merge patch.
            refuse(
                VERB, f"carries {unknown} field(s) this shim does not know; it only merge-patches"
            )
            continue
        if not w.ref.resource or not w.ref.name or not w.version:
            refuse(MALFORMED, "ref.resource, ref.name and version must be set")
            continue
        bad_segment = _invalid_path_segment(w.ref.name) or _invalid_path_segment(w.ref.namespace)
        if bad_segment:
            # The API server decodes the path before routing it: a name "web/scale"
            # patches the StatefulSet's scale subresource, not an object "web/scale".
            refuse(MALFORMED, f"ref.name and ref.namespace {bad_segment}")
            continue
        try:
            patch = orjson.loads(w.merge_patch)
        except orjson.JSONDecodeError as exc:
            refuse(MALFORMED, f"merge_patch is not JSON: {exc}")
            continue
        if not isinstance(patch, dict):
            refuse(MALFORMED, "merge_patch is not a JSON object")
            continue
        if w.subresource not in WRITABLE_SUBRESOURCES:
            refuse(
                SUBRESOURCE,
                f"subresource {w.subresource!r}: the shim merge-patches only an object or its "
                "status",
            )
            continue
        if w.create and w.delete:
            refuse(MALFORMED, "a write either creates or deletes")
            continue
        if (w.create or w.delete) and w.subresource:
            refuse(SUBRESOURCE, "a create or delete names no subresource")
            continue
        if targets_pod(w, pod) and not (w.create or w.delete):
            continue
        kinds = declared.get(w.plugin, ())
        kind = declared_kind(kinds, w.ref.group, w.version, w.ref.resource)
        if kind is not None:
            if kind.namespaced and w.ref.namespace != pod.namespace:
                refuse(
                    OTHER_NAMESPACE,
                    f"{kind_name(kind.group, kind.resource)} are written only in the namespace "
                    f"of the pod being scheduled ({pod.namespace})",
                )
            elif not kind.namespaced and w.ref.namespace:
                refuse(
                    OTHER_NAMESPACE,
                    f"{kind_name(kind.group, kind.resource)} are cluster-scoped, but the write "
                    f"names namespace {w.ref.namespace}",
                )
            continue
        asked = f"{kind_name(w.ref.group, w.ref.resource)} (version {w.version})"
        if kinds:
            have = ", ".join(f"{kind_name(k.group, k.resource)} ({k.version})" for k in kinds)
            refuse(UNDECLARED, f"plugin declares writes to {have}, not to {asked}")
        else:
            refuse(
                UNDECLARED,
                f"{asked} is not the pod being scheduled, and the plugin declares no writes "
                "(Plugin.writes) in this profile",
            )
    return out


def report(refusals: Iterable[Refusal], pod: cpb.Pod, context: str) -> None:
    """Logs and counts each refusal; ``context`` says where the answer came
    from (e.g. "PostFilter of profile p")."""
    for r in refusals:
        metrics.refused(r.kind, r.reason)
        log.warning(
            "refused %s for pod %s/%s (%s): %s. The plugin service asked for it; the shim "
            "performs only victims it knows on the nominated node with lower priority, and writes "
            "to the pod being scheduled or to kinds its plugin declares. Check the plugin "
            "server's version, configuration and logs",
            r.target,
            pod.namespace,
            pod.name,
            context,
            r.why,
            extra={"pod": f"{pod.namespace}/{pod.name}", "refused": r.kind, "reason": r.reason},
        )


__all__ = [
    "MALFORMED",
    "NAME_MISMATCH",
    "NOMINATION",
    "NOT_LOWER_PRIORITY",
    "NOT_NOMINATED_THERE",
    "NOT_ON_NODE",
    "OTHER_NAMESPACE",
    "PREEMPTOR",
    "SUBRESOURCE",
    "UNDECLARED",
    "UNKNOWN_POD",
    "VERB",
    "VICTIM",
    "WRITABLE_SUBRESOURCES",
    "WRITE",
    "Refusal",
    "check_nomination",
    "check_victims",
    "check_writes",
    "report",
]
