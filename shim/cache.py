"""The scheduler cache, like upstream's (pkg/scheduler/backend/cache/cache.go).

It holds the nodes and the pods that occupy them, and is the truth the
plugin service sees: every change goes into a ``berth.client.ClusterStateLog``,
so each request carries only what changed since the replica's generation.

- ``assume``: after a successful cycle the pod counts on its node at once,
  before the binding is written (AssumePod), so the next cycle cannot
  overcommit the node. A pod the cache already holds (bound, as the informer
  reports it, or assumed) is refused with ``AssumeRefused``, as AssumePod
  refuses a pod already in podStates: a pod bound while its cycle ran (a
  binding that landed after its call failed, a second scheduler) must keep
  counting where it really is.
- ``finish_binding``: the bind was written; the informer will confirm it.
- ``forget``: the binding failed; the node gets its resources back (ForgetPod).
  Only an assumed copy is removed: a pod the informer has reported bound
  since stays (ForgetPod refuses a pod that is not assumed).
- ``add_pod`` from the informer confirms an assumed pod (AddPod on an assumed
  pod replaces it with the real one), wherever it actually landed.
- A copy of an assumed pod read from the API server (a binding in doubt,
  an expiry check) is applied only while the pod is still assumed
  (``still_assumed``): whatever the informer reported while the read was
  under way is newer, and a deleted pod must not come back.
- Expiry: upstream's cache does not expire assumed pods
  (scheduler.go durationToExpireAssumedPod = 0, kubernetes#106361: expiring
  raced with slow binds). Berth expires an assumed pod whose binding finished
  ``ttl`` ago without the informer confirming it, but only after asking the
  API server: a pod found bound is confirmed, a pod found gone is removed, a
  pod found unbound is forgotten and scheduled again. So a lost watch event
  cannot leak a node's resources, and a slow watch cannot overcommit one.

Nominated pods (upstream's nominator, pkg/scheduler/backend/queue/nominator.go)
live here too, since the plugin service sees them through the same cluster
state: a pending pod of this shim's profiles with a nominated node is upserted
with an empty ``node_name`` and ``nominated_node_name`` set, so the service
counts it on that node for pods of lower or equal priority
(RunFilterPluginsWithNominatedPods). ``nominated`` maps such pods to their
node; a pod leaves it when it is assumed, bound or deleted, or when its
nomination is cleared. No nominations: no entries, no cost.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from berth.api.v1 import cluster_pb2 as cpb
from berth.client import ClusterStateLog
from berth.kube.records import occupies_node
from berth.shim import metrics

log = logging.getLogger(__name__)

DEFAULT_ASSUMED_TTL = 30.0


class AssumeRefused(Exception):
    """AssumePod's error for a pod already in the cache ("pod ... is in the
    cache, so can't be assumed"): ``node`` is where it is, ``assumed`` says
    whether that is this scheduler's own assumption (else the informer
    reported it bound)."""

    def __init__(self, uid: str, node: str, *, assumed: bool) -> None:
        self.uid = uid
        self.node = node
        self.assumed = assumed
        what = "assumed" if assumed else "bound"
        super().__init__(f"pod {uid} is already {what} on node {node}, so it can't be assumed")


@dataclass(slots=True)
class Assumed:
    pod: cpb.Pod
    node: str
    binding_finished: float | None = None


class SchedulerCache:
    def __init__(
        self, state: ClusterStateLog | None = None, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.state = state or ClusterStateLog()
        self.clock = clock
        self.assumed: dict[str, Assumed] = {}
        # Pending pods nominated to a node: uid -> node (nominatedPodToNode).
        self.nominated: dict[str, str] = {}
        self._export_sizes()

    # -- nodes --------------------------------------------------------------------

    @property
    def nodes(self) -> dict[str, cpb.Node]:
        return self.state.nodes

    def upsert_node(self, node: cpb.Node) -> None:
        self.state.upsert_node(node)

    def delete_node(self, name: str) -> None:
        self.state.delete_node(name)

    # -- pods from the informer ---------------------------------------------------

    def add_or_update_pod(self, pod: cpb.Pod) -> bool:
        """An assigned pod as the API server has it. Returns True when it
        confirmed an assumed pod."""
        confirmed = self.assumed.pop(pod.uid, None) is not None
        # Bound: no longer a nominated pod (addNominatedPodUnlocked refuses a
        # scheduled pod); the upsert below replaces the nominated entry.
        self.nominated.pop(pod.uid, None)
        if occupies_node(pod):
            self.state.upsert_pod(pod)
        else:
            self.state.delete_pod(pod.uid)
        return confirmed

    def remove_pod(self, uid: str) -> None:
        self.assumed.pop(uid, None)
        self.nominated.pop(uid, None)
        self.state.delete_pod(uid)

    def holds(self, uid: str) -> bool:
        """Does the pod occupy a node here (bound or assumed; a nominated pod
        does not)?"""
        return uid in self.state.pods and uid not in self.nominated

    def bound_node(self, uid: str) -> str:
        """The node the informer last reported the pod bound to; empty when
        it reported none (pending, unknown, or only assumed here)."""
        if uid in self.assumed or uid in self.nominated:
            return ""
        pod = self.state.pods.get(uid)
        return pod.node_name if pod is not None else ""

    # -- nominated pods (nominator.go) ----------------------------------------------

    def nominate(self, pod: cpb.Pod, node: str) -> bool:
        """The pending ``pod`` is nominated to ``node`` (addNominatedPod with
        ModeOverride; an empty ``node`` clears the nomination). A pod that is
        assumed or bound is not nominated. Returns whether the cluster state
        changed."""
        uid = pod.uid
        if not node:
            return self.clear_nomination(uid)
        if uid in self.assumed or (uid in self.state.pods and uid not in self.nominated):
            return False
        current = self.state.pods.get(uid)
        record = pod
        if pod.node_name or pod.nominated_node_name != node:
            record = cpb.Pod()
            record.CopyFrom(pod)
            record.node_name = ""
            record.nominated_node_name = node
        if (
            self.nominated.get(uid) == node
            and current is not None
            and (current is record or current == record)
        ):
            return False
        self.nominated[uid] = node
        self.state.upsert_pod(record)
        return True

    def clear_nomination(self, uid: str) -> bool:
        """The pod is no longer nominated (deleteUnlocked). Returns whether
        the cluster state changed."""
        if self.nominated.pop(uid, None) is None:
            return False
        self.state.delete_pod(uid)
        return True

    def update_nominated(self, old_nominated: str, pod: cpb.Pod) -> bool:
        """An informer update of a pending pod of this shim's profiles
        (UpdateNominatedPod): the pod's status.nominatedNodeName decides,
        except that a nomination made in memory survives an update where the
        old and the new pod both show none yet (the status patch has not
        landed). Returns whether the cluster state changed."""
        node = pod.nominated_node_name
        if not old_nominated and not node:
            node = self.nominated.get(pod.uid, "")
        return self.nominate(pod, node)

    def nominated_to(self, uid: str) -> str:
        """The node the pod is nominated to here; empty when none."""
        return self.nominated.get(uid, "")

    # -- the scheduler's own placements ---------------------------------------------

    def assume(
        self, pod: cpb.Pod, node: str, annotations: Mapping[str, str] | None = None
    ) -> cpb.Pod:
        """The pod counts on ``node`` from now on (AssumePod). ``annotations``
        (Reserve's assume_annotations) go on the assumed copy, so later cycles
        see what this pod reserved until the informer brings the real pod.

        Raises AssumeRefused, changing nothing, when the cache already holds
        the pod (cache.go AssumePod: a pod in podStates is refused): the
        informer reported it bound, or it is assumed already. Overwriting the
        informer's copy would move its usage to ``node``, and the binding's
        failure (409, already assigned) would then forget it altogether."""
        if self.holds(pod.uid):
            a = self.assumed.get(pod.uid)
            where = a.node if a is not None else self.state.pods[pod.uid].node_name
            raise AssumeRefused(pod.uid, where, assumed=a is not None)
        assumed = cpb.Pod()
        assumed.CopyFrom(pod)
        assumed.node_name = node
        if annotations:
            assumed.annotations.update(annotations)
            # cluster.proto Pod.assumed: plugins trust Reserve's annotations
            # on this copy only.
            assumed.assumed = True
        # schedule_one.go assume: DeleteNominatedPodIfExists.
        self.nominated.pop(pod.uid, None)
        self.assumed[pod.uid] = Assumed(assumed, node)
        self.state.upsert_pod(assumed)
        return assumed

    def is_assumed(self, uid: str) -> bool:
        return uid in self.assumed

    def finish_binding(self, uid: str) -> None:
        a = self.assumed.get(uid)
        if a is not None:
            a.binding_finished = self.clock()

    def forget(self, uid: str) -> bool:
        """The binding failed: the node gets its resources back (ForgetPod).
        Only the assumed copy goes: a pod the informer has reported since
        (bound here, elsewhere, or finished) is its truth and stays, as
        ForgetPod refuses a pod that is not assumed; and since ``assume``
        refuses a pod the informer reported bound, an assumed copy never
        hides one, so removing it leaves what the informer last reported.
        Returns whether an assumed pod was forgotten."""
        if self.assumed.pop(uid, None) is not None:
            self.state.delete_pod(uid)
            return True
        return False

    def still_assumed(self, entry: Assumed | None) -> bool:
        """Is ``entry`` (``assumed.get(uid)`` taken before an API call) still the
        pod's assumption? False once the informer has reported the pod since
        (bound, finished or deleted: ``add_or_update_pod``, ``remove_pod``) or it
        was forgotten. A copy the caller read from the API server meanwhile may
        be older than what the informer reported, so it is applied only while
        this holds: a deleted pod put back from a GET's answer would never be
        removed, no event being left to remove it, and its node would keep its
        resources for good."""
        return entry is not None and self.assumed.get(entry.pod.uid) is entry

    def expired(self, ttl: float) -> list[Assumed]:
        """Assumed pods whose binding finished more than ``ttl`` ago and that
        the informer has not confirmed."""
        now = self.clock()
        return [
            a
            for a in self.assumed.values()
            if a.binding_finished is not None and now - a.binding_finished > ttl
        ]

    def _export_sizes(self) -> None:
        """scheduler_cache_size (metrics.go CacheSize), read when scraped
        rather than set on every change: upstream's cache refreshes it on a
        timer (cache.go updateMetrics), and setting three gauges on every
        informer event would cost CPU on the hot path for a value read only
        when scraped.
        The latest cache of the process is the one reported."""
        me = weakref.ref(self)

        def size(of: Callable[[SchedulerCache], int]) -> Callable[[], float]:
            def read() -> float:
                cache = me()
                return float(of(cache)) if cache is not None else 0.0

            return read

        metrics.CACHE_SIZE.labels("nodes").set_function(size(lambda c: len(c.state.nodes)))
        metrics.CACHE_SIZE.labels("pods").set_function(
            size(lambda c: len(c.state.pods) - len(c.nominated))
        )
        metrics.CACHE_SIZE.labels("assumed_pods").set_function(size(lambda c: len(c.assumed)))


__all__ = ["DEFAULT_ASSUMED_TTL", "AssumeRefused", "Assumed", "SchedulerCache"]
