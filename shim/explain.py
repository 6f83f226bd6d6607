"""Why a pod is pending, live: each pending pod's last scheduling attempt, kept
in memory within bounds, and the explanation ``berth explain`` prints
(``GET /debug/explain`` on the shim's secure port; docs/explain.md).

- ``AttemptStore`` keeps, per pending pod, its last attempt as compact
  tuples: the FitError text, the per-node rejections grouped by plugin and
  reason (a count and a few node names each), the node a Reserve or Permit
  plugin turned it away on, the preemption PostFilter chose. At most
  ``max_entries`` pods (the oldest attempt goes first) and a bounded size per
  entry; a pod's entry goes when it is bound or deleted (the queue's
  ``on_leave``). Recording happens only on a failed attempt; a pod that is
  placed costs nothing.
- ``Explainer`` answers for one pod or every pending one: the queue it sits
  in and why (backoff until when, unschedulable since when, the events its
  rejecting plugins registered, the PreEnqueue plugin that gates it), its
  last attempt, and on request (``live``) a fresh dry-run cycle through the
  plugin service over every node (Schedule with ``explain``: every node's
  Filter verdict, each feasible node's raw, normalised and weighted scores,
  PostFilter's preemption choice, nothing reserved), with the smallest
  changes that would make the pod fit (shim/explainfix.py). A pod of a
  PodGroup (Coscheduling's, or the Workload API's scheduling.k8s.io/v1alpha2
  one of the GangScheduling plugin) also gets its group: member by member,
  and the node-level reasons summed over the members.
- Pods that ask for it (annotation ``explain.berth.dev/enabled: "true"``)
  are scheduled with ``explain`` and get their attempt written to annotation
  ``explain.berth.dev/result`` (``result_annotation``), at most
  ``MAX_ANNOTATION_BYTES``, once per attempt.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.client.answers import rejected_by_status, rejected_count, rejected_nodes
from berth.framework.model import CALCULATE_RESOURCE_OPTIONS, pod_request_list, resource_list
from berth.framework.objects import ClusterObject
from berth.kube.records import EXPLAIN_RESULT_ANNOTATION
from berth.plugins.coscheduling.core import POD_GROUP_LABEL, PodGroup, PodGroupError
from berth.plugins.coscheduling.core import PODGROUP as COSCHEDULING_PODGROUP
from berth.plugins.gangscheduling.core import PODGROUP as WORKLOAD_PODGROUP
from berth.plugins.gangscheduling.core import WorkloadPodGroup
from berth.shim.explainfix import (
    aggregate,
    gpu_fix,
    label_fix,
    preemption_fix,
    resource_fixes,
)
from berth.shim.serving import DebugAnswer, DebugRequest

if TYPE_CHECKING:
    from berth.shim.binding import WaitingPods
    from berth.shim.cache import SchedulerCache
    from berth.shim.hints import HintMap
    from berth.shim.queue import QueuedPod, SchedulingQueue
    from berth.shim.service import PluginService

log = logging.getLogger(__name__)

__all__ = [
    "ENABLED_ANNOTATION",
    "MAX_ANNOTATION_BYTES",
    "RESULT_ANNOTATION",
    "Attempt",
    "AttemptStore",
    "Explainer",
    "Rejection",
    "attempt_of",
    "result_annotation",
    "wants_explain",
]

# A pod opts in with this annotation set to "true"; the shim writes the
# other one. The result annotation is left out of the pod records the shim
# keeps (berth/kube/records.py), so writing it is not a change of the pod.
ENABLED_ANNOTATION = "explain.berth.dev/enabled"
RESULT_ANNOTATION = EXPLAIN_RESULT_ANNOTATION
MAX_ANNOTATION_BYTES = 16 * 1024
TRUNCATED = "…(truncated)"

DEFAULT_MAX_ENTRIES = 2000
# Per attempt: distinct (plugin, code, reasons) groups kept, node names kept
# per group, characters of any text, victims named.
MAX_GROUPS = 16
MAX_SAMPLE_NODES = 8
MAX_TEXT = 2048
MAX_VICTIMS = 16
# Rows of a live explanation's node table, and pods of --all-pending.
MAX_LIVE_ROWS = 500
MAX_PENDING_PODS = 500

_CODE_NAMES = {
    int(v.number): v.name.removeprefix("CODE_").title().replace("_", "")
    for v in pb.Code.DESCRIPTOR.values
}
_CODE_NAMES[pb.CODE_UNSCHEDULABLE_AND_UNRESOLVABLE] = "UnschedulableAndUnresolvable"
# A namespace or pod name: a DNS subdomain (at most 253 characters).
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def code_name(code: int) -> str:
    return _CODE_NAMES.get(code, str(code))


def wants_explain(pod: cpb.Pod) -> bool:
    """Did the pod ask for explanations (annotation explain.berth.dev/enabled)?"""
    return pod.annotations.get(ENABLED_ANNOTATION) == "true"


def _cap(text: str, limit: int = MAX_TEXT) -> str:
    return text if len(text) <= limit else text[: limit - len(TRUNCATED)] + TRUNCATED


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True, slots=True)
class Rejection:
    """The nodes one plugin rejected with one status: how many, and a few
    of them by name."""

    plugin: str
    code: int
    reason: str
    count: int
    nodes: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "plugin": self.plugin,
            "code": code_name(self.code),
            "reason": self.reason,
            "nodes": self.count,
            "examples": list(self.nodes),
        }


@dataclass(frozen=True, slots=True)
class Attempt:
    """One failed scheduling attempt of a pod, compact."""

    at: float
    attempt: int
    error: bool
    message: str
    rejections: tuple[Rejection, ...] = ()
    # Rejected nodes left out once MAX_GROUPS groups were kept.
    other_nodes: int = 0
    # The node a Reserve or Permit plugin turned the pod away on.
    node: str = ""
    # PostFilter: the node it nominated, the victims it chose there, its message.
    nominated: str = ""
    victims: tuple[tuple[str, str], ...] = ()
    post_filter: str = ""

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "at": _iso(self.at),
            "attempt": self.attempt,
            "result": "error" if self.error else "unschedulable",
            "message": self.message,
            "rejections": [r.as_dict() for r in self.rejections],
        }
        if self.other_nodes:
            out["otherRejectedNodes"] = self.other_nodes
        if self.node:
            out["node"] = self.node
        if self.nominated or self.victims:
            out["preemption"] = {
                "nominatedNode": self.nominated,
                "victims": [f"{ns}/{name}" for ns, name in self.victims],
            }
        if self.post_filter:
            out["postFilter"] = self.post_filter
        return out


def _group(
    statuses: Iterable[tuple[Sequence[str], pb.Status]],
) -> tuple[tuple[Rejection, ...], int]:
    """Nodes and their status (several nodes of one status at a time, as the
    answer's rejected_groups carry them, or one) grouped by (plugin, code,
    reasons), at most MAX_GROUPS groups of at most MAX_SAMPLE_NODES names; the
    nodes of groups beyond that are counted."""
    groups: dict[tuple[str, int, tuple[str, ...]], tuple[list[int], list[str]]] = {}
    other = 0
    for nodes, st in statuses:
        key = (st.plugin, st.code, tuple(st.reasons))
        g = groups.get(key)
        if g is None:
            if len(groups) >= MAX_GROUPS:
                other += len(nodes)
                continue
            g = groups[key] = ([0], [])
        g[0][0] += len(nodes)
        room = MAX_SAMPLE_NODES - len(g[1])
        if room > 0:
            g[1].extend(nodes[:room])
    out = tuple(
        Rejection(plugin, code, _cap("; ".join(reasons), 512), n[0], tuple(names))
        for (plugin, code, reasons), (n, names) in sorted(
            groups.items(), key=lambda kv: (-kv[1][0][0], kv[0][0])
        )
    )
    return out, other


def attempt_of(
    attempt: int,
    message: str,
    *,
    error: bool,
    resp: pb.ScheduleResponse | None = None,
    node: str = "",
    status: pb.Status | None = None,
    num_nodes: int = 0,
) -> Attempt:
    """The compact record of a failed attempt: from the cycle's response
    (its Diagnosis and PostFilter), from the Reserve or Permit ``status`` on
    ``node``, or from the message alone (an error)."""
    rejections: tuple[Rejection, ...] = ()
    other = 0
    nominated = ""
    victims: tuple[tuple[str, str], ...] = ()
    post_filter = ""
    if resp is not None:
        d = resp.diagnosis
        if d.HasField("pre_filter_status") and d.pre_filter_status.code != pb.CODE_SUCCESS:
            st = d.pre_filter_status
            rejections = (
                Rejection(
                    st.plugin, st.code, _cap("; ".join(st.reasons), 512), num_nodes, ("(all)",)
                ),
            )
        else:
            rejections, other = _group(rejected_by_status(d))
        if resp.HasField("post_filter"):
            pf = resp.post_filter
            nominated = pf.nominated_node_name
            victims = tuple((v.namespace, v.name) for v in pf.victims[:MAX_VICTIMS])
            post_filter = _cap("; ".join(pf.status.reasons), 512)
    elif status is not None and node:
        rejections, other = _group([([node], status)])
    return Attempt(
        at=time.time(),
        attempt=attempt,
        error=error,
        message=_cap(message),
        rejections=rejections,
        other_nodes=other,
        node=node,
        nominated=nominated,
        victims=victims,
        post_filter=post_filter,
    )


class AttemptStore:
    """Each pending pod's last failed attempt, by uid: at most
    ``max_entries`` (the least recently recorded go first)."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self.max_entries = max_entries
        self._entries: OrderedDict[str, Attempt] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, uid: str) -> bool:
        return uid in self._entries

    def put(self, uid: str, attempt: Attempt) -> None:
        entries = self._entries
        entries[uid] = attempt
        entries.move_to_end(uid)
        while len(entries) > self.max_entries:
            entries.popitem(last=False)

    def get(self, uid: str) -> Attempt | None:
        return self._entries.get(uid)

    def drop(self, uid: str) -> None:
        """The pod was bound or deleted."""
        self._entries.pop(uid, None)


def result_annotation(
    attempt: int,
    resp: pb.ScheduleResponse | None,
    *,
    result: str,
    message: str = "",
    limit: int = MAX_ANNOTATION_BYTES,
) -> str:
    """The explain.berth.dev/result value of one attempt: its result,
    the selected node, every rejected node's plugin and reason, every scored
    node's total and per-plugin scores; at most ``limit`` bytes: node lists
    are cut (``"truncated": true``) and, last, the message."""
    doc: dict[str, Any] = {
        "attempt": attempt,
        "at": _iso(time.time()),
        "result": result,
    }
    filters: dict[str, str] = {}
    scores: dict[str, dict[str, int]] = {}
    if resp is not None:
        if resp.node:
            doc["selectedNode"] = resp.node
        for node, st in rejected_nodes(resp.diagnosis):
            filters[node] = f"{st.plugin}: {'; '.join(st.reasons)}"
        for sc in resp.scores:
            scores[sc.node] = {"total": sc.total, **dict(sc.plugins)}
        message = message or resp.diagnosis.message
    if message:
        doc["message"] = _cap(message)
    doc["filter"] = filters
    doc["scores"] = scores

    def dump() -> str:
        return json.dumps(doc, separators=(",", ":"), sort_keys=True, ensure_ascii=False)

    text = dump()
    keep = max(len(filters), len(scores))
    while len(text.encode()) > limit and keep > 0:
        keep //= 2
        doc["filter"] = dict(sorted(filters.items())[:keep])
        doc["scores"] = dict(sorted(scores.items(), key=lambda kv: (-kv[1]["total"], kv[0]))[:keep])
        doc["truncated"] = True
        text = dump()
    if len(text.encode()) > limit:
        doc["message"] = _cap(str(doc.get("message", "")), 256)
        doc["truncated"] = True
        text = dump()
    return text


class ExplainError(Exception):
    """A request /debug/explain cannot answer: ``code`` is its HTTP status."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class Explainer:
    """Builds explanations from the scheduler's parts, on the scheduler's
    event loop."""

    def __init__(
        self,
        *,
        cache: SchedulerCache,
        queue: SchedulingQueue,
        service: PluginService,
        store: AttemptStore,
        waiting: WaitingPods,
    ) -> None:
        self.cache = cache
        self.queue = queue
        self.service = service
        self.store = store
        self.waiting = waiting

    # -- HTTP ----------------------------------------------------------------------

    async def handle(self, req: DebugRequest) -> DebugAnswer:
        """GET /debug/explain?pod=NAMESPACE/NAME[&live=0], or ?all=1[&live=1]
        for every pending pod: the explanation as JSON. Registered on the
        secure port (shim/serving.py DebugRoutes), which authenticates the
        caller and runs this on the scheduler's loop within its deadline."""
        try:
            doc = await self._answer(req)
        except ExplainError as exc:
            return DebugAnswer.json(json.dumps({"error": str(exc)}).encode(), exc.code)
        return DebugAnswer.json(json.dumps(doc).encode())

    async def _answer(self, req: DebugRequest) -> dict[str, Any]:
        def one(name: str, default: str = "") -> str:
            values = req.query.get(name)
            if not values:
                return default
            if len(values) > 1:
                raise ExplainError(400, f"{name}: given {len(values)} times, at most once")
            return values[0]

        def flag(name: str, default: bool) -> bool:
            value = one(name, "1" if default else "0").lower()
            if value not in ("0", "1", "true", "false"):
                raise ExplainError(400, f"{name}: expected 0 or 1, got {value[:32]!r}")
            return value in ("1", "true")

        everything = flag("all", False)
        pod = one("pod")
        if everything == bool(pod):
            raise ExplainError(400, "give pod=NAMESPACE/NAME, or all=1 for every pending pod")
        if everything:
            return await self.pending(live=flag("live", False))
        ns, _, name = pod.partition("/")
        if not _NAME.match(ns) or not _NAME.match(name):
            raise ExplainError(400, f"pod: expected NAMESPACE/NAME (DNS names), got {pod[:300]!r}")
        return await self.explain(ns, name, live=flag("live", True))

    # -- one pod -------------------------------------------------------------------

    async def explain(self, namespace: str, name: str, *, live: bool) -> dict[str, Any]:
        qp = self.queue.find(namespace, name)
        if qp is None:
            for p in self.cache.state.pods.values():
                if p.namespace == namespace and p.name == name and p.node_name:
                    return {
                        "pod": f"{namespace}/{name}",
                        "uid": p.uid,
                        "status": "bound" if not self.cache.is_assumed(p.uid) else "assumed",
                        "node": p.node_name,
                        "why": [f"not pending: on node {p.node_name}"],
                    }
            raise ExplainError(
                404,
                f"pod {namespace}/{name} is not pending in this scheduler: it does not exist, "
                "it names another scheduler, or it is bound and gone from the cache",
            )
        return await self._report(qp, live=live)

    async def pending(self, *, live: bool) -> dict[str, Any]:
        pods = sorted(self.queue.pods(), key=lambda q: (q.pod.namespace, q.pod.name))
        out = []
        for qp in pods[:MAX_PENDING_PODS]:
            out.append(await self._report(qp, live=live))
        doc: dict[str, Any] = {"pods": out}
        if len(pods) > MAX_PENDING_PODS:
            doc["truncated"] = len(pods) - MAX_PENDING_PODS
        return doc

    async def _report(self, qp: QueuedPod, *, live: bool) -> dict[str, Any]:
        pod = qp.pod
        doc: dict[str, Any] = {
            "pod": f"{pod.namespace}/{pod.name}",
            "uid": pod.uid,
            "profile": qp.profile,
            "status": "pending",
            "queue": self._queue_state(qp),
        }
        why: list[str] = []
        fixes: list[str] = []
        last = self.store.get(qp.uid)
        if last is not None:
            doc["lastAttempt"] = last.as_dict()
        w = self.waiting.get(qp.uid)
        if w is not None:
            doc["status"] = "waiting"
            doc["waiting"] = {"node": w.node, "plugins": sorted(w.pending)}
            why.append(
                f"assumed on node {w.node}, waiting at Permit for {', '.join(sorted(w.pending))}"
            )
        elif qp.where == "gated":
            why.append(f"gated at PreEnqueue by {qp.gated_by or 'a plugin'}")
            if pod.scheduling_gates:
                fixes.append(
                    "remove the pod's scheduling gates: " + ", ".join(pod.scheduling_gates)
                )
        elif last is not None:
            why.append(last.message)
        if live and w is None and qp.where != "gated":
            resp = await self._dry_run(qp, doc)
            if resp is not None:
                self._live(qp, resp, doc, why, fixes)
                await self._preemption_what_if(qp, resp, doc, fixes)
                await self._verify_resources(qp, doc, fixes)
        for gang in GANGS:
            group = gang.member_of(pod)
            if group:
                doc["podGroup"] = self._group(gang, pod.namespace, group, why, fixes)
                break
        doc["why"] = why
        doc["fixes"] = fixes
        return doc

    def _queue_state(self, qp: QueuedPod) -> dict[str, Any]:
        q = self.queue
        where = qp.where or "incoming"
        out: dict[str, Any] = {
            "queue": where,
            "attempts": qp.attempts,
            "firstSeen": _iso(qp.first_seen),
            "since": _iso(qp.timestamp),
        }
        if where == "backoff":
            out["backoffUntil"] = _iso(qp.backoff_expiry)
            out["backoffSeconds"] = round(max(0.0, qp.backoff_expiry - q.clock()), 3)
        if where == "unschedulable":
            out["unschedulableSince"] = _iso(qp.timestamp)
            out["retriedAnywayAt"] = _iso(qp.timestamp + q.max_in_unschedulable)
        if qp.unschedulable_plugins:
            out["rejectedBy"] = sorted(qp.unschedulable_plugins)
        if qp.pending_plugins:
            out["pendingPlugins"] = sorted(qp.pending_plugins)
        if qp.gated_by:
            out["gatedBy"] = qp.gated_by
        moves = _moving_events(q.hints, qp.profile, qp.unschedulable_plugins | {qp.gated_by})
        if moves:
            out["movedBy"] = moves
        return out

    # -- a dry run -----------------------------------------------------------------

    async def _dry_run(
        self, qp: QueuedPod, doc: dict[str, Any], pod: cpb.Pod | None = None
    ) -> pb.ScheduleResponse | None:
        from berth.shim.service import ServiceUnavailable

        try:
            return await self.service.explain(qp.profile, pod or qp.pod)
        except ServiceUnavailable as exc:
            doc["liveError"] = str(exc)
            return None

    def _live(
        self,
        qp: QueuedPod,
        resp: pb.ScheduleResponse,
        doc: dict[str, Any],
        why: list[str],
        fixes: list[str],
    ) -> None:
        pod = qp.pod
        d = resp.diagnosis
        rows: list[dict[str, Any]] = []
        by_plugin: dict[str, list[str]] = {}
        for node, st in rejected_nodes(d):
            by_plugin.setdefault(st.plugin, []).append(node)
            if len(rows) < MAX_LIVE_ROWS:
                rows.append(
                    {
                        "node": node,
                        "plugin": st.plugin,
                        "code": code_name(st.code),
                        "reason": _cap("; ".join(st.reasons), 512),
                    }
                )
        scores: list[dict[str, Any]] = []
        for sc in resp.scores[:MAX_LIVE_ROWS]:
            scores.append(
                {
                    "node": sc.node,
                    "total": sc.total,
                    "plugins": {
                        p: {
                            "raw": sc.raw.get(p, 0),
                            "normalized": sc.normalized.get(p, 0),
                            "weighted": v,
                        }
                        for p, v in sorted(sc.plugins.items())
                    },
                }
            )
        live: dict[str, Any] = {
            "result": "fits" if resp.node else code_name(resp.status.code),
            "message": resp.diagnosis.message or "; ".join(resp.status.reasons),
            "evaluatedNodes": resp.evaluated_nodes,
            "feasibleNodes": resp.feasible_nodes,
            "rejected": rows,
            "scores": scores,
        }
        rejected = rejected_count(d)
        if rejected > len(rows):
            live["rejectedNotShown"] = rejected - len(rows)
        if resp.node:
            live["node"] = resp.node
        if d.HasField("pre_filter_status") and d.pre_filter_status.code != pb.CODE_SUCCESS:
            st = d.pre_filter_status
            live["preFilter"] = {
                "plugin": st.plugin,
                "code": code_name(st.code),
                "reason": "; ".join(st.reasons),
            }
        doc["live"] = live
        if resp.node:
            why.append(
                f"fits now: a cycle now would place it on {resp.node} "
                f"({resp.feasible_nodes} feasible node(s))"
            )
            fixes.append(_retry_hint(doc["queue"]))
        elif live["message"] and (not why or why[-1] != live["message"]):
            why.append(f"now: {live['message']}")
        pf = resp.post_filter
        if pf.victims and pf.nominated_node_name:
            prio = {p.uid: p.priority for p in self.cache.state.pods.values()}
            victims = [(v.namespace, v.name, prio.get(v.uid, 0)) for v in pf.victims]
            fixes.append(preemption_fix(pf.nominated_node_name, victims))
        if "NodeResourcesFit" in by_plugin:
            doc["_short"] = by_plugin["NodeResourcesFit"]
        affinity = by_plugin.get("NodeAffinity")
        if affinity:
            nodes = self.cache.nodes
            fix = label_fix(pod, {n: dict(nodes[n].labels) for n in affinity if n in nodes})
            if fix is not None:
                fixes.append(f"{fix.text()} ({fix.command()})")
        gpus = by_plugin.get("GPUCardFit")
        if gpus:
            fixes.append(gpu_fix(len(gpus), pod.annotations.get("berth.dev/gpu-memory")))

    async def _preemption_what_if(
        self, qp: QueuedPod, resp: pb.ScheduleResponse, doc: dict[str, Any], fixes: list[str]
    ) -> None:
        """A pod that may not preempt (preemptionPolicy Never, so
        DefaultPreemption's PodEligibleToPreemptOthers says no) and fits
        nowhere: a second dry run of the same pod allowed to preempt says
        whom DefaultPreemption would evict for it."""
        pod = qp.pod
        if resp.node or pod.preemption_policy != "Never" or resp.post_filter.victims:
            return
        d = resp.diagnosis
        if d.HasField("pre_filter_status") and d.pre_filter_status.code != pb.CODE_SUCCESS:
            return
        could = cpb.Pod()
        could.CopyFrom(pod)
        could.preemption_policy = "PreemptLowerPriority"
        check = await self._dry_run(qp, doc, could)
        if check is None:
            return
        pf = check.post_filter
        if pf.victims and pf.nominated_node_name:
            prio = {p.uid: p.priority for p in self.cache.state.pods.values()}
            victims = [(v.namespace, v.name, prio.get(v.uid, 0)) for v in pf.victims]
            fixes.append(
                "with preemptionPolicy PreemptLowerPriority (the pod has Never): "
                + preemption_fix(pf.nominated_node_name, victims)
            )

    async def _verify_resources(self, qp: QueuedPod, doc: dict[str, Any], fixes: list[str]) -> None:
        """The resource fixes for the nodes NodeResourcesFit rejected; the
        first is checked by a second dry run with the requests lowered, so
        a fix another plugin would still refuse is said to be one."""
        short: list[str] | None = doc.pop("_short", None)
        if not short:
            return
        pod = qp.pod
        requests = pod_request_list(pod, CALCULATE_RESOURCE_OPTIONS)
        found = resource_fixes(requests, self._free(short))
        if not found:
            return
        first = found[0]
        lowered = lower_requests(pod, first.less)
        check = await self._dry_run(qp, doc, lowered) if lowered is not None else None
        for i, fix in enumerate(found):
            text = fix.text()
            if i == 0 and check is not None:
                if check.node:
                    text += f" (checked: a cycle with those requests places it on {check.node})"
                else:
                    text += (
                        " (checked: with those requests other plugins still reject it: "
                        f"{check.diagnosis.message or '; '.join(check.status.reasons)})"
                    )
            fixes.append(text)

    def _free(self, names: Iterable[str]) -> dict[str, dict[str, int]]:
        """Allocatable minus what the pods on each node request (with a
        pod slot count), as NodeResourcesFit compares them."""
        nodes = self.cache.nodes
        free: dict[str, dict[str, int]] = {}
        for n in names:
            node = nodes.get(n)
            if node is None:
                continue
            room = dict(resource_list(node.allocatable))
            room["pods"] = node.allocatable.pods or 110
            free[n] = room
        for p in self.cache.state.pods.values():
            left = free.get(p.node_name) if p.node_name else None
            if left is None:
                continue
            for r, v in pod_request_list(p, CALCULATE_RESOURCE_OPTIONS).items():
                left[r] = left.get(r, 0) - v
            left["pods"] -= 1
        return free

    # -- a PodGroup ------------------------------------------------------------------

    def _group(
        self, gang: Gang, namespace: str, group: str, why: list[str], fixes: list[str]
    ) -> dict[str, Any]:
        """The pod's gang (Coscheduling's PodGroup or the Workload API's): its
        minimum, each member's state, and the node-level reasons summed over
        the pending members' last attempts."""
        out: dict[str, Any] = {"name": f"{namespace}/{group}", "api": gang.api}
        obj = self.cache.state.objects.get((*gang.key, namespace, group))
        minimum: int | None = None
        if obj is None:
            out["problem"] = "the PodGroup does not exist (or this scheduler does not read it)"
        else:
            try:
                minimum = gang.minimum(ClusterObject.from_proto(obj))
            except PodGroupError as exc:
                out["problem"] = str(exc)
            if minimum is None and "problem" not in out:
                out["problem"] = "the PodGroup has no gang policy: its pods are not held together"
        members: list[dict[str, Any]] = []
        counts: list[tuple[str, int]] = []
        assigned = 0
        for q in self.queue.pods():
            p = q.pod
            if p.namespace != namespace or gang.member_of(p) != group:
                continue
            w = self.waiting.get(q.uid)
            member: dict[str, Any] = {"pod": p.name, "queue": q.where or "incoming"}
            if w is not None:
                assigned += 1
                member["state"] = f"waiting at Permit on {w.node}"
            elif q.where == "gated":
                member["state"] = f"gated at PreEnqueue by {q.gated_by or 'a plugin'}"
            else:
                last = self.store.get(q.uid)
                member["state"] = "pending"
                if last is not None:
                    member["lastAttempt"] = last.message
                    for r in last.rejections:
                        counts.append((f"{r.plugin}: {r.reason}", r.count))
            members.append(member)
        for p in self.cache.state.pods.values():
            if (
                p.node_name
                and p.namespace == namespace
                and gang.member_of(p) == group
                and p.uid not in self.waiting
            ):
                assigned += 1
                members.append({"pod": p.name, "state": f"on {p.node_name}"})
        members.sort(key=lambda m: str(m["pod"]))
        out["members"] = members[:MAX_LIVE_ROWS]
        out["assigned"] = assigned
        out["nodeReasons"] = [{"reason": r, "nodes": n} for r, n in aggregate(counts)[:32]]
        if minimum is not None:
            out[gang.min_field] = minimum
            missing = minimum - len(members)
            why.append(
                f"PodGroup {namespace}/{group} needs {minimum} member(s): "
                f"{len(members)} exist, {assigned} assigned"
            )
            if missing > 0:
                fixes.append(
                    f"create {missing} more pod(s) {gang.joining(group)} in namespace "
                    f"{namespace} (or lower the PodGroup's {gang.min_field} to {len(members)})"
                )
        return out


@dataclass(frozen=True, slots=True)
class Gang:
    """A gang API, as explain reads it: where its PodGroups are (group,
    resource), how a pod names its group, the PodGroup's minimum (None: no
    gang policy; PodGroupError: unreadable), and how the fix says to join."""

    api: str
    key: tuple[str, str]
    min_field: str
    member_of: Callable[[cpb.Pod], str]
    minimum: Callable[[ClusterObject], int | None]
    joining: Callable[[str], str]


GANGS: tuple[Gang, ...] = (
    # scheduler-plugins' Coscheduling (plugins/coscheduling).
    Gang(
        "scheduling.x-k8s.io/v1alpha1",
        (COSCHEDULING_PODGROUP.group, COSCHEDULING_PODGROUP.resource),
        "minMember",
        lambda p: p.labels.get(POD_GROUP_LABEL, ""),
        lambda o: PodGroup.from_object(o).min_member,
        lambda g: f"labelled {POD_GROUP_LABEL}={g}",
    ),
    # Kubernetes v1.36's Workload API (plugins/gangscheduling).
    Gang(
        "scheduling.k8s.io/v1alpha2",
        (WORKLOAD_PODGROUP.group, WORKLOAD_PODGROUP.resource),
        "minCount",
        lambda p: p.scheduling_group,
        lambda o: WorkloadPodGroup.from_object(o).min_count,
        lambda g: f"with spec.schedulingGroup.podGroupName {g}",
    ),
)


def lower_requests(pod: cpb.Pod, less: Mapping[str, int]) -> cpb.Pod | None:
    """A copy of ``pod`` whose container requests are ``less`` lower in
    total, taken from the containers in order (none below 0); None when the
    containers' requests cannot give that much (pod-level requests, say)."""
    from berth.framework.model import CPU, EPHEMERAL_STORAGE, MEMORY

    out = cpb.Pod()
    out.CopyFrom(pod)
    for resource, amount in less.items():
        left = amount
        for c in out.containers:
            if left <= 0:
                break
            r = c.requests
            if resource == CPU and r.HasField("milli_cpu"):
                take = min(left, r.milli_cpu)
                r.milli_cpu -= take
            elif resource == MEMORY and r.HasField("memory"):
                take = min(left, r.memory)
                r.memory -= take
            elif resource == EPHEMERAL_STORAGE:
                take = min(left, r.ephemeral_storage)
                r.ephemeral_storage -= take
            elif resource in r.scalar:
                take = min(left, r.scalar[resource])
                r.scalar[resource] -= take
            else:
                take = 0
            left -= take
        if left > 0:
            return None
    return out


def _moving_events(hints: HintMap, profile: str, plugins: Iterable[str]) -> list[dict[str, Any]]:
    """The cluster events the rejecting (or gating) plugins registered:
    what may move the pod out of the unschedulable pool."""
    out = []
    for plugin, events in hints.registered(profile, plugins):
        out.append({"plugin": plugin, "events": events})
    return out


def _retry_hint(queue: Mapping[str, Any]) -> str:
    where = queue.get("queue")
    if where == "backoff":
        return f"nothing to change: it is retried when its backoff ends at {queue['backoffUntil']}"
    if where == "unschedulable":
        return (
            "nothing to change now: it is retried on one of the events listed under movedBy, "
            f"or at {queue['retriedAnywayAt']} at the latest"
        )
    return "nothing to change: it is retried shortly"
