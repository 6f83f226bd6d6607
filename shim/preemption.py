"""Carrying out a preemption the plugin service decided
(pkg/scheduler/framework/preemption/executor.go, asynchronous as
SchedulerAsyncPreemption has it by default).

The plugin service picks the node and the victims
(PostFilterResponse.nominated_node_name, victims, clear_nomination_pod_uids),
or, when the shim's extenders process preemption, lists every candidate and
the shim selects after them (``run_extenders``).
``PreemptionExecutor.start`` checks them first (shim/guard.py: in the cache,
on the nominated node, of lower priority, not the preemptor; one refused
victim refuses the preemption whole), then, in a task of its own that never
blocks the next cycle (prepareCandidateAsync), clears the nominations of
lower-priority pods on that node (clearNominatedNodeName) and preempts every
victim concurrently (PreemptPod): a victim waiting at Permit is rejected in
memory; any other gets the DisruptionTarget condition and is deleted.
Meanwhile the preemptor is held at PreEnqueue (``gate``,
IsPodRunningPreemption); a failed API call activates it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import logging
import time
from collections.abc import Callable, Mapping

import orjson

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.framework.preemption import RankedCandidate, VictimKey, pick_one_node, start_time
from berth.kube.errors import ApiError
from berth.kube.rest import KubeApi, pod_path
from berth.shim import guard, metrics
from berth.shim.background import ApiWorkers, Tasks
from berth.shim.binding import WaitingPods
from berth.shim.cache import SchedulerCache
from berth.shim.events import ObjectRef
from berth.shim.extenders import ExtenderError, Extenders
from berth.shim.podstatus import PodStatusWriter, Recorder, pod_ref
from berth.shim.queue import QueuedPod, SchedulingQueue, activate_pods

log = logging.getLogger(__name__)

# executor.go: the default preemption plugin, the gate it holds at PreEnqueue
# while a pod's preemption runs, and the texts of PreemptPod.
DEFAULT_PREEMPTION = "DefaultPreemption"
PREEMPTION_PLUGINS = frozenset({DEFAULT_PREEMPTION})
PREEMPTION_GATE_MESSAGE = "waiting for the preemption for this pod to be finished"
# v1.DisruptionTarget and v1.PodReasonPreemptionByScheduler.
DISRUPTION_TARGET = "DisruptionTarget"
REASON_PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"


class PreemptionExecutor:
    """executor.go Executor."""

    def __init__(
        self,
        *,
        api: KubeApi,
        workers: ApiWorkers,
        tasks: Tasks,
        cache: SchedulerCache,
        queue: SchedulingQueue,
        waiting: WaitingPods,
        recorders: Mapping[str, Recorder],
        status: PodStatusWriter,
    ) -> None:
        self._api = api
        self._workers = workers
        self._tasks = tasks
        self._cache = cache
        self._queue = queue
        self._waiting = waiting
        self._recorders = recorders
        self._status = status
        # Pods whose asynchronous preemption is running, to the plugin that
        # asked for it (Executor.preempting).
        self.preempting: dict[str, str] = {}

    def gate(self, pod: cpb.Pod) -> pb.Status | None:
        """DefaultPreemption.PreEnqueue (IsPodRunningPreemption): a pod whose
        preemption is still running waits for it; None lets it on."""
        plugin = self.preempting.get(pod.uid)
        if plugin is None:
            return None
        return pb.Status(
            code=pb.CODE_UNSCHEDULABLE_AND_UNRESOLVABLE,
            reasons=[PREEMPTION_GATE_MESSAGE],
            plugin=plugin,
        )

    async def run_extenders(
        self, extenders: Extenders, qp: QueuedPod, resp: pb.ScheduleResponse
    ) -> None:
        """preemption.go Preempt, steps 3 and 4: the interested extenders
        with a preempt verb narrow the candidates (callExtenders), then the
        best of those left is selected (SelectCandidate). For a pod such
        extenders are interested in, the shim asks the plugin service for
        every candidate (ScheduleRequest.preemption_candidates, one pod per
        cycle: SchedulingCycle.schedule); the answer is rewritten here
        into a selected one (node, victims, nominations to clear) before
        ``start`` checks and acts on it as on any other.

        No candidate left, or an extender failed: the preemption does not
        happen, the pod's nomination stays as it was (no PostFilterResult)
        and its FitError says why ("preemption: no candidate node for
        preemption", or "preemption: <the error>").

        A PostFilter plugin that selects its own way answers one candidate,
        selected: the extenders see that one only."""
        if not resp.HasField("post_filter"):
            return
        pf = resp.post_filter
        if pf.candidates:
            listed = {
                c.node_name: ([v.uid for v in c.victims], int(c.num_pdb_violations))
                for c in pf.candidates
            }
            names = {v.uid: (v.namespace, v.name) for c in pf.candidates for v in c.victims}
            clear = {c.node_name: list(c.clear_nomination_pod_uids) for c in pf.candidates}
        elif pf.nominated_node_name and pf.victims:
            listed = {
                pf.nominated_node_name: ([v.uid for v in pf.victims], int(pf.num_pdb_violations))
            }
            names = {v.uid: (v.namespace, v.name) for v in pf.victims}
            clear = {pf.nominated_node_name: list(pf.clear_nomination_pod_uids)}
        else:
            return
        pj = extenders.pod(qp.uid)
        kept = listed
        if extenders.preempts(pj):
            assert pj is not None
            try:
                kept = await extenders.process_preemption(
                    pj, listed, functools.partial(self._fetch, names), self._checker(names)
                )
            except ExtenderError as exc:
                _no_preemption(resp, pb.CODE_ERROR, f"preemption: {exc}")
                return
        node = self._select(kept)
        if not node:
            _no_preemption(
                resp, pb.CODE_UNSCHEDULABLE, "preemption: no candidate node for preemption"
            )
            return
        uids, violations = kept[node]
        del pf.candidates[:]
        pf.nominated_node_name = node
        pf.nominating_mode = pb.NOMINATING_MODE_OVERRIDE
        del pf.victims[:]
        for uid in uids:
            ns, name = names[uid]
            pf.victims.add(uid=uid, namespace=ns, name=name)
        pf.num_pdb_violations = violations
        pf.clear_nomination_pod_uids[:] = clear.get(node, [])
        if len(listed) > 1 or len(kept) > 1:
            log.info(
                "pod %s/%s: preemption selects node %s of %d candidate(s) (%d after the extenders)",
                qp.pod.namespace,
                qp.pod.name,
                node,
                len(listed),
                len(kept),
            )

    def _select(self, kept: Mapping[str, tuple[list[str], int]]) -> str:
        """SelectCandidate over the candidates left: one is taken as it is
        (the guard checks its victims in ``start``); several are ranked by
        upstream's default criteria on the victims' priorities and start
        times as the cache has them (the same pick the DefaultPreemption
        plugin makes; berth.framework.preemption). "" when none is left."""
        if len(kept) <= 1:
            return next(iter(kept), "")
        pods = self._cache.state.pods
        ranked: list[RankedCandidate] = []
        for node, (uids, violations) in kept.items():
            known = [pods.get(uid) for uid in uids]
            if any(p is None for p in known):
                # A victim deleted since the plugin service answered: the guard
                # would refuse this candidate whole (shim/guard.py), so it is
                # not one to select.
                log.debug("preemption candidate %s: a victim is gone; not selected", node)
                continue
            victims = [VictimKey(p.priority, start_time(p.start_unix_micros)) for p in known if p]
            ranked.append(RankedCandidate(node, violations, victims))
        return pick_one_node(ranked)

    async def _fetch(
        self, names: Mapping[str, tuple[str, str]], uids: list[str]
    ) -> dict[str, bytes]:
        """The victims' objects, from the API server, for the extenders sent
        full pods (a preemption has a few; the shim keeps no JSON of bound
        pods)."""
        out: dict[str, bytes] = {}
        for uid in uids:
            ns, name = names[uid]
            try:
                obj = await self._workers.call(self._api.get, pod_path(ns, name))
            except ApiError as exc:
                raise ExtenderError(f"reading victim {ns}/{name}: {exc}") from exc
            out[uid] = orjson.dumps(obj)
        return out

    def _checker(self, names: dict[str, tuple[str, str]]) -> Callable[[str, str, str], str | None]:
        """extender.go convertToVictims / convertPodUIDToPod: why a victim an
        extender names cannot be one (None when it can); a valid one not
        proposed by the plugin service is added to ``names``."""
        pods = self._cache.state.pods
        nodes = self._cache.nodes

        def check(extender: str, at: str, uid: str) -> str | None:
            if at not in nodes:
                return f'nodeinfo not found for node name "{at}"'
            known = pods.get(uid)
            if known is None or known.node_name != at:
                return (
                    f"extender: {extender} claims to preempt pod (UID: &{{{uid}}}) on node: "
                    f"{at}, but the pod is not found on that node"
                )
            names.setdefault(uid, (known.namespace, known.name))
            return None

        return check

    def start(self, qp: QueuedPod, pf: pb.PostFilterResponse) -> bool:
        """prepareCandidateAsync: victims already terminating need no call;
        with none left nothing starts. Otherwise the pod is marked as
        preempting (held at PreEnqueue) and the calls run in a task of their
        own. Runs before the pod goes back to the queue, so it is held at
        PreEnqueue from the start (prepareCandidateAsync runs inside
        PostFilter, before handleSchedulingFailure).

        First the shim checks what it is asked to do (shim/guard.py): one
        victim it cannot justify refuses the preemption whole (returns False,
        nothing is deleted); a nomination to clear that is not of a
        lower-priority pod nominated to the node is skipped."""
        pod = qp.pod
        node = pf.nominated_node_name
        plugin = pf.plugin or DEFAULT_PREEMPTION
        context = f"PostFilter of profile {qp.profile}, plugin {plugin}, node {node}"
        pods = self._cache.state.pods
        refused = guard.check_victims(pod, node, pf.victims, pods)
        if refused:
            guard.report(refused, pod, context)
            log.warning(
                "preemption for pod %s/%s on node %s refused: %d of its %d victim(s) fail the "
                "shim's checks; nothing is preempted and the pod stays unschedulable",
                pod.namespace,
                pod.name,
                node,
                len(refused),
                len(pf.victims),
            )
            return False
        victims: list[pb.Victim] = []
        for v in pf.victims:
            known = pods.get(v.uid)
            if known is not None and known.terminating:
                log.debug(
                    "victim %s/%s is already being deleted; no call for it", v.namespace, v.name
                )
                continue
            victims.append(v)
        if not victims:
            return True
        clear: list[str] = []
        for uid in pf.clear_nomination_pod_uids:
            other = self._pod(uid)
            if other is None:
                continue  # gone: nothing to clear (_clear_nominations skips it too)
            nominated = other.nominated_node_name or self._cache.nominated_to(uid)
            if not nominated:
                continue
            refusal = guard.check_nomination(pod, node, other, nominated)
            if refusal is not None:
                guard.report([refusal], pod, context)
                continue
            clear.append(uid)
        metrics.PREEMPTION_VICTIMS.observe(len(pf.victims))
        self.preempting[pod.uid] = plugin
        self._tasks.spawn(self._preempt(pod, node, plugin, victims, clear))
        return True

    def _pod(self, uid: str) -> cpb.Pod | None:
        """The queue's copy of a pending pod, else the cache's."""
        qp = self._queue.get(uid)
        return qp.pod if qp is not None else self._cache.state.pods.get(uid)

    async def _preempt(
        self,
        preemptor: cpb.Pod,
        node: str,
        plugin: str,
        victims: list[pb.Victim],
        clear_uids: list[str],
    ) -> None:
        """The goroutine of prepareCandidateAsync: clear the nominations of
        lower-priority pods on the node (a failure is noted, not fatal), then
        preempt every victim concurrently; the first failure cancels the rest.
        At the end the pod leaves the preempting set; after a failure it is
        activated (it might otherwise sit in the unschedulable pool with
        nothing left to move it), else, if an event or its backoff brought it
        to the gate meanwhile, it carries on towards the activeQ
        (SchedulingQueue.ungate).

        Upstream preempts the last victim on its own so that PreEnqueue can
        tell a finished deletion from a pending one, and a deletion event that
        arrives before the goroutine returns is not lost; here the gate is
        lifted in the event loop that delivers the deletions, and a pod an
        event sent to the gate meanwhile is sent on, so no such split is
        needed."""
        start = time.perf_counter()
        ok = True
        log.info(
            "preempting %d pod(s) on node %s for pod %s/%s: %s",
            len(victims),
            node,
            preemptor.namespace,
            preemptor.name,
            ", ".join(f"{v.namespace}/{v.name}" for v in victims),
        )
        try:
            if not await self._clear_nominations(clear_uids, node):
                ok = False
            tasks = [
                asyncio.ensure_future(self.preempt_pod(preemptor, node, plugin, v)) for v in victims
            ]
            done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            for t in done:
                exc = t.exception()
                if exc is not None:
                    ok = False
                    log.warning(
                        "preemption for pod %s/%s on node %s failed: %s",
                        preemptor.namespace,
                        preemptor.name,
                        node,
                        exc,
                    )
        finally:
            self.preempting.pop(preemptor.uid, None)
        result = "success" if ok else "error"
        metrics.preemption_finished(result, time.perf_counter() - start)
        log.info(
            "preemption for pod %s/%s on node %s finished: %s",
            preemptor.namespace,
            preemptor.name,
            node,
            result,
        )
        if ok:
            self._queue.ungate(preemptor.uid, plugin)
        else:
            activate_pods(self._queue, preemptor, "a failed preemption", [preemptor.uid])

    async def preempt_pod(
        self, preemptor: cpb.Pod, node: str, plugin: str, victim: pb.Victim
    ) -> None:
        """PreemptPod: a victim waiting at Permit is rejected in memory
        (WaitingPod.Preempt: it goes back to the queue as an error, no API
        call); any other gets the DisruptionTarget condition, then is deleted,
        with its uid as precondition (a victim already gone, or replaced by a
        pod of the same name, is no failure and gets no event). Then the
        Preempted event. Raises ApiError when a call fails."""
        note = f"Preempted by pod {preemptor.uid} on node {node}"
        w = self._waiting.get(victim.uid)
        if w is not None and not w.done.done():
            w.preempted = True
            w.reject(plugin, "preempted")
            log.info(
                "pod %s/%s waiting at Permit preempted by %s/%s",
                victim.namespace,
                victim.name,
                preemptor.namespace,
                preemptor.name,
            )
            note += " (in kube-scheduler memory)."
        else:
            now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            condition = {
                "type": DISRUPTION_TARGET,
                "status": "True",
                "reason": REASON_PREEMPTION_BY_SCHEDULER,
                "message": (
                    f"{preemptor.scheduler_name}: preempting to accommodate a higher priority pod"
                ),
                "lastTransitionTime": now,
            }
            patch = {"metadata": {"uid": victim.uid}, "status": {"conditions": [condition]}}
            path = pod_path(victim.namespace, victim.name)
            try:
                await self._workers.call(self._api.strategic_patch, f"{path}/status", patch)
                await self._workers.call(functools.partial(self._api.delete, path, uid=victim.uid))
            except ApiError as exc:
                # Gone (404), or replaced by a pod of the same name: the patch's
                # uid does not match (422 on metadata.uid), nor the deletion's
                # precondition (409).
                if exc.not_found or exc.conflict or exc.uid_mismatch:
                    log.info(
                        "victim %s/%s is already gone (%s)",
                        victim.namespace,
                        victim.name,
                        exc.reason or exc.status,
                    )
                    return
                raise
            log.info(
                "pod %s/%s preempted pod %s/%s on node %s",
                preemptor.namespace,
                preemptor.name,
                victim.namespace,
                victim.name,
                node,
            )
        self._recorders[preemptor.scheduler_name].record(
            ObjectRef(kind="Pod", namespace=victim.namespace, name=victim.name, uid=victim.uid),
            "Normal",
            "Preempted",
            "Preempting",
            note,
            related=pod_ref(preemptor),
        )

    async def _clear_nominations(self, uids: list[str], node: str) -> bool:
        """clearNominatedNodeName: lower-priority pods nominated to the node
        may no longer fit there; their status.nominatedNodeName is cleared
        (the informer brings the change to the nominator, which moves them).
        Returns False when a patch failed."""
        ok = True
        for uid in uids:
            pod = self._pod(uid)
            if pod is None or not pod.nominated_node_name:
                continue
            self._status.forget(uid)
            patch = {"metadata": {"uid": uid}, "status": {"nominatedNodeName": None}}
            try:
                await self._workers.call(
                    self._api.strategic_patch, pod_path(pod.namespace, pod.name, "status"), patch
                )
                log.info(
                    "cleared the nomination of pod %s/%s to node %s",
                    pod.namespace,
                    pod.name,
                    node,
                )
            except ApiError as exc:
                if exc.not_found or exc.conflict or exc.uid_mismatch:
                    continue
                log.warning(
                    "could not clear the nomination of pod %s/%s to node %s: %s",
                    pod.namespace,
                    pod.name,
                    node,
                    exc,
                )
                ok = False
        return ok


__all__ = [
    "DEFAULT_PREEMPTION",
    "PREEMPTION_GATE_MESSAGE",
    "PREEMPTION_PLUGINS",
    "PreemptionExecutor",
]


def _no_preemption(resp: pb.ScheduleResponse, code: int, message: str) -> None:
    """The PostFilter came to nothing (Preempt returning no result): no
    victims, no nomination change (ModeNoop), its message at the end of the
    FitError (Diagnosis.PostFilterMsg)."""
    pf = resp.post_filter
    pf.status.CopyFrom(pb.Status(code=code, reasons=[message], plugin=pf.plugin))  # type: ignore[arg-type]
    pf.nominated_node_name = ""
    pf.nominating_mode = pb.NOMINATING_MODE_NOOP
    del pf.victims[:]
    del pf.clear_nomination_pod_uids[:]
    del pf.candidates[:]
    pf.num_pdb_violations = 0
    fit = resp.diagnosis.message
    if fit:
        resp.diagnosis.message = f"{fit} {message}"
        resp.status.reasons[:] = [resp.diagnosis.message]
