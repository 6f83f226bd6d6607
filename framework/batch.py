"""Opportunistic batching: the next pod of the same kind reuses the last cycle's ranking.

Follows pkg/scheduler/framework/runtime/batch.go (OpportunisticBatch, KEP 5598;
the OpportunisticBatching feature gate, beta and on in v1.36) and
framework.go (computeBatchablePlugins, SignPod):

- A profile signs pods only when every PreFilter, Filter, PreScore and Score
  plugin is a ``SignPlugin`` (and, as upstream, it has no extenders). A pod's
  signature is its scheduler name plus every plugin's fragments; a plugin that
  cannot sign the pod (inter-pod affinity, topology spread constraints, DRA
  claims, ...) leaves it without one.
- After a cycle that scored nodes, the other feasible nodes, best first, are
  kept with the pod's signature (``store``).
- The next cycle gets a hint (``node_hint``), the head of that list, only
  when: it is the very next cycle of the scheduler (no pod of another profile
  in between), the last cycle succeeded, the signature is equal, the list is
  at most 500 ms old, and the node chosen last now rejects this pod (Filter).
  The last condition is what makes the ranking still right: the pods go one
  per node, so the next best node of the last ranking is this pod's best.
- The hint is then filtered like a nominated node (schedule_one.go
  evaluateNominatedNode); when it passes, no other node is evaluated or
  scored. When it fails the cycle runs over every node as usual.

Where the state lives is the caller's business: the plugin server keeps one
per profile with each caller's snapshot (server/schedule.py), so a caller
whose next cycle goes to another replica just gets no hint.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from berth.framework import signers
from berth.framework.interfaces import ScoreArray, SignPlugin
from berth.framework.model import PodInfo
from berth.framework.observe import BATCH_ATTEMPTS, BATCH_CACHE_FLUSHED, CounterCell
from berth.framework.snapshot import NodeBatch, Snapshot

__all__ = [
    "MAX_BATCH_AGE",
    "OpportunisticBatch",
    "Signature",
    "batch_for",
    "sign_pod",
    "sorted_other_nodes",
]

log = logging.getLogger(__name__)

# batch.go maxBatchAge.
MAX_BATCH_AGE = 0.5

# A pod's signature: its fragments by signer name, sorted; equal signatures
# mean equal results (SignPlugin).
Signature = tuple[tuple[str, Hashable], ...]

# metrics.go: scheduler_batch_attempts_total's results and
# scheduler_batch_cache_flushed_total's reasons.
NO_HINT, HINT_USED, HINT_NOT_USED = "no_hint", "hint_used", "hint_not_used"
FLUSH_POD_FAILED = "pod_failed"
FLUSH_POD_SKIPPED = "pod_skipped"
FLUSH_NODE_MISSING = "node_missing"
FLUSH_NODE_NOT_FULL = "node_not_full"
FLUSH_EMPTY_LIST = "empty_list"
FLUSH_EXPIRED = "expired"
FLUSH_POD_INCOMPATIBLE = "pod_incompatible"
FLUSH_POD_NOT_BATCHABLE = "pod_not_batchable"


def sign_pod(profile: str, plugins: Sequence[SignPlugin] | None, pod: PodInfo) -> Signature | None:
    """framework.go SignPod: the pod's signature over the profile's signing
    plugins, or None when signatures are off for the profile (``plugins``
    None) or a plugin cannot sign the pod."""
    if plugins is None:
        return None
    sig: dict[str, Hashable] = {signers.SCHEDULER_NAME: pod.proto.scheduler_name}
    for plugin in plugins:
        fragments = plugin.sign_pod(pod)
        if not isinstance(fragments, list):
            log.debug(
                "profile %s: pod %s is not signed: %s says %s",
                profile,
                pod.key,
                plugin.name,
                fragments.message,
            )
            return None
        for key, value in fragments:
            sig[key] = value
    return tuple(sorted(sig.items()))


def sorted_other_nodes(
    nodes: NodeBatch, totals: ScoreArray, chosen: str, rng: random.Random | None
) -> list[str]:
    """schedule_one.go newSortedNodeScores after the chosen node's Pop: the
    other scored nodes, highest total first, ties in random order (upstream's
    heap orders equal totals by a random number per node)."""
    names = nodes.names
    tie = np.random.default_rng((rng or random).getrandbits(64)).random(len(names))
    order = np.lexsort((tie, -totals.astype(np.int64)))
    return [names[int(i)] for i in order if names[int(i)] != chosen]


def batch_for(snapshot: Snapshot, profile: str) -> OpportunisticBatch:
    """The profile's batching state kept with ``snapshot`` (one per caller's
    cluster on a server), made on first use."""
    batch = snapshot.batches.get(profile)
    if not isinstance(batch, OpportunisticBatch):
        batch = OpportunisticBatch(profile)
        snapshot.batches[profile] = batch
    return batch


@dataclass(slots=True)
class _State:
    signature: Signature
    nodes: list[str]  # best first; the hint is popped from the head
    created: float


class OpportunisticBatch:
    """batch.go OpportunisticBatch for one profile: the last cycle and the
    ranking it left. Not thread-safe: one cycle of a profile at a time, as
    the caller's cluster lock guarantees on the server."""

    def __init__(self, profile: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.profile = profile
        self._clock = clock
        self._state: _State | None = None
        self._last_cycle = 0
        self._last_chosen = ""
        self._last_succeeded = False
        # The profile's series, looked up once.
        self._attempts = {
            result: BATCH_ATTEMPTS.labels(profile, result)
            for result in (NO_HINT, HINT_USED, HINT_NOT_USED)
        }
        self._flushed: dict[str, CounterCell] = {}
        # Pods placed on a hint, for tests and logs (batch.go batchedPods).
        self.batched_pods = 0

    def node_hint(
        self,
        filter_node: Callable[[str], bool | None],
        snapshot: Snapshot,
        signature: Signature | None,
        cycle: int,
    ) -> str:
        """batch.go GetNodeHint: the next node of the last ranking, or "".
        ``filter_node(name)`` runs the profile's Filter plugins for this pod on
        one node and says whether they rejected it (None: an error)."""
        if not self._compatible(filter_node, snapshot, signature, cycle):
            self._attempts[NO_HINT].inc()
            return ""
        assert self._state is not None
        return self._state.nodes.pop(0)

    def store(
        self,
        signature: Signature | None,
        hinted: str,
        chosen: str,
        others: list[str] | None,
        cycle: int,
        unsigned_others: int = 0,
    ) -> None:
        """batch.go StoreScheduleResults, after a cycle chose ``chosen``:
        remember the cycle; keep the ranking when the hint was taken, else
        replace it with ``others`` (the cycle's other nodes, best first).
        For a pod without a signature the ranking is not built: the caller
        says how many other nodes it had (``unsigned_others``), so the flush
        is counted as upstream's, which always gets the ranking."""
        self._last_cycle = cycle
        self._last_chosen = chosen
        self._last_succeeded = True
        if hinted and hinted == chosen:
            self._attempts[HINT_USED].inc()
            self.batched_pods += 1
            return
        if hinted:
            self._attempts[HINT_NOT_USED].inc()
        if signature is not None and others:
            self._state = _State(signature, others, self._clock())
            return
        ranked = bool(others) or unsigned_others > 0
        self._flush(FLUSH_POD_NOT_BATCHABLE if ranked else FLUSH_EMPTY_LIST)
        self._state = None

    def failed(self, cycle: int) -> None:
        """A cycle of this profile found no node (or failed): the next one
        cannot use the ranking (upstream records success only in
        StoreScheduleResults, so its next cycle finds lastCycle behind)."""
        self._last_cycle = cycle
        self._last_succeeded = False

    def _flush(self, reason: str) -> None:
        cell = self._flushed.get(reason)
        if cell is None:
            cell = self._flushed[reason] = BATCH_CACHE_FLUSHED.labels(self.profile, reason)
        cell.inc()

    def _compatible(
        self,
        filter_node: Callable[[str], bool | None],
        snapshot: Snapshot,
        signature: Signature | None,
        cycle: int,
    ) -> bool:
        """batch.go batchStateCompatible. A reason to flush is counted; the
        ranking itself stays until the next ``store`` replaces it, as
        upstream's does."""
        state = self._state
        if state is None or not state.nodes:
            return False
        if cycle != self._last_cycle + 1:
            self._flush(FLUSH_POD_SKIPPED)
            return False
        if not self._last_succeeded:
            self._flush(FLUSH_POD_FAILED)
            return False
        if signature is None or signature != state.signature:
            self._flush(FLUSH_POD_INCOMPATIBLE)
            return False
        if self._clock() > state.created + MAX_BATCH_AGE:
            self._flush(FLUSH_EXPIRED)
            return False
        if self._last_chosen not in snapshot.nodes:
            self._flush(FLUSH_NODE_MISSING)
            return False
        # Only when the node chosen last cannot take this pod is the next
        # node of the ranking this pod's best (KEP 5598).
        if filter_node(self._last_chosen) is not True:
            self._flush(FLUSH_NODE_NOT_FULL)
            return False
        return True
