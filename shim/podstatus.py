"""What the scheduler tells about a pod it could not place: the PodScheduled
condition and the nominated node (schedule_one.go updatePod, called from
handleSchedulingFailure), and the events it records on pods.

``PodStatusWriter`` patches ``status`` only when what it would write changes,
one patch per pod at a time, the latest wanted status last. Other writes that
change a pod's status (a nomination set for a binding cycle or cleared for a
preemption) or the pod leaving call ``forget``, so the next wanted status is
written again.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from typing import Any, Protocol

from berth.api.v1 import cluster_pb2 as cpb
from berth.kube.errors import ApiError
from berth.kube.rest import KubeApi, pod_path
from berth.shim.background import ApiWorkers
from berth.shim.events import ObjectRef

log = logging.getLogger(__name__)

# schedule_one.go: the reasons of the PodScheduled condition.
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_SCHEDULER_ERROR = "SchedulerError"


class Recorder(Protocol):
    """What the scheduler needs of an event recorder (shim/events.py
    EventRecorder): one per profile, reporting as its schedulerName."""

    def record(
        self,
        regarding: ObjectRef,
        type_: str,
        reason: str,
        action: str,
        note: str,
        *,
        related: ObjectRef | None = None,
    ) -> None: ...


def pod_ref(pod: cpb.Pod) -> ObjectRef:
    return ObjectRef(kind="Pod", namespace=pod.namespace, name=pod.name, uid=pod.uid)


class PodStatusWriter:
    """updatePod: PodScheduled=False with a reason and message, and
    status.nominatedNodeName."""

    def __init__(self, api: KubeApi, workers: ApiWorkers) -> None:
        self._api = api
        self._workers = workers
        # Per pod: the status last wanted (reason, message, nominated node).
        self._wanted: dict[str, tuple[str, str, str | None]] = {}
        # Per pod: the lock that orders its status patches, and how many
        # patches hold or wait for it.
        self.locks: dict[str, tuple[asyncio.Lock, int]] = {}

    def forget(self, uid: str) -> None:
        """The pod's status changed by another write, or the pod is gone:
        the next status wanted for it is written even if it is the last one."""
        self._wanted.pop(uid, None)

    async def patch_condition(
        self, pod: cpb.Pod, reason: str, message: str, nominated: str | None
    ) -> None:
        """PodScheduled=False with the reason and message, and
        nominatedNodeName when ``nominated`` is not None and differs from the
        pod's (None: left as it is), patched only when they change."""
        want = (reason, message, nominated)
        uid = pod.uid
        if self._wanted.get(uid) == want:
            return
        self._wanted[uid] = want
        # One patch per pod at a time, the latest wanted status last: two
        # failures of one pod in quick succession must not land out of order
        # (the older message would stay while the cache says the newer one).
        lock, users = self.locks.get(uid) or (asyncio.Lock(), 0)
        self.locks[uid] = (lock, users + 1)
        try:
            async with lock:
                if self._wanted.get(uid) != want:
                    return  # superseded: the newer status's own task patches it
                await self._send(pod, reason, message, nominated)
        finally:
            lock, users = self.locks[uid]
            if users <= 1:
                del self.locks[uid]
            else:
                self.locks[uid] = (lock, users - 1)

    async def annotate(self, pod: cpb.Pod, key: str, value: str) -> None:
        """Sets one annotation of the pod, through the status subresource
        (what the scheduler may patch: podStatusStrategy keeps the metadata
        a patch brings, pkg/registry/core/pod/strategy.go), guarded by the
        pod's uid. A pod gone or replaced meanwhile is left alone."""
        patch = {"metadata": {"uid": pod.uid, "annotations": {key: value}}}
        try:
            await self._workers.call(
                self._api.strategic_patch, pod_path(pod.namespace, pod.name, "status"), patch
            )
        except ApiError as exc:
            if not exc.not_found and not exc.conflict and not exc.uid_mismatch:
                log.warning(
                    "could not write annotation %s of pod %s/%s: %s",
                    key,
                    pod.namespace,
                    pod.name,
                    exc,
                )

    async def _send(self, pod: cpb.Pod, reason: str, message: str, nominated: str | None) -> None:
        want = (reason, message, nominated)
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        status: dict[str, Any] = {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": reason,
                    "message": message,
                    "lastProbeTime": None,
                    "lastTransitionTime": now,
                }
            ]
        }
        if nominated is not None and nominated != pod.nominated_node_name:
            status["nominatedNodeName"] = nominated or None
        patch = {"metadata": {"uid": pod.uid}, "status": status}
        try:
            await self._workers.call(
                self._api.strategic_patch, pod_path(pod.namespace, pod.name, "status"), patch
            )
        except ApiError as exc:
            if self._wanted.get(pod.uid) == want:
                self._wanted.pop(pod.uid, None)
            if not exc.not_found and not exc.conflict and not exc.uid_mismatch:
                log.warning(
                    "could not update status of pod %s/%s: %s", pod.namespace, pod.name, exc
                )


__all__ = [
    "REASON_SCHEDULER_ERROR",
    "REASON_UNSCHEDULABLE",
    "PodStatusWriter",
    "Recorder",
    "pod_ref",
]
