"""The shim's Prometheus metrics, with kube-scheduler's names, labels and
buckets (pkg/scheduler/metrics/metrics.go).

The shim exports what it measures: the queue, the cache, attempts, binding,
Permit waits, event handling, preemption's actuation, leader election, and its
API requests (``rest_client_*``, berth/kube/metrics.py). What runs the plugins
is measured where they run (framework/observe.py: extension point and plugin
durations, plugin evaluations, the scheduling algorithm): on the plugin
server's /metrics with ``--plugin-server``, in this registry in-process.

The series recorded for every pod (attempts, their durations, queue moves and
arrivals, the SLI, event handling, binding goroutines) are per-thread cells
(berth/kube/metrics.py ``ThreadCell*``: no lock per record, summed at scrape
time, exposed as prometheus_client would); the rest are prometheus_client's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from prometheus_client import Counter, Gauge, Histogram

from berth.kube.metrics import ThreadCellCounter, ThreadCellGauge, ThreadCellHistogram

# metrics.go: ExponentialBuckets(0.001, 2, 15).
_ATTEMPT_BUCKETS = tuple(0.001 * 2**i for i in range(15))
# metrics.go: PodSchedulingAttempts, ExponentialBuckets(1, 2, 5).
_ATTEMPTS_BUCKETS = (1.0, 2.0, 4.0, 8.0, 16.0)
# metrics.go: PodSchedulingSLIDuration, ExponentialBuckets(0.01, 2, 20).
_SLI_BUCKETS = tuple(0.01 * 2**i for i in range(20))

SCHEDULE_ATTEMPTS = ThreadCellCounter(
    "scheduler_schedule_attempts_total",
    "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could "
    "not be scheduled, while 'error' means an internal scheduler problem.",
    ["result", "profile"],
)
ATTEMPT_DURATION = ThreadCellHistogram(
    "scheduler_scheduling_attempt_duration_seconds",
    "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
    ["result", "profile"],
    buckets=_ATTEMPT_BUCKETS,
)
PENDING_PODS = ThreadCellGauge(
    "scheduler_pending_pods",
    "Number of pending pods, by the queue type. 'active' means number of pods in activeQ; "
    "'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in "
    "unschedulablePods that the scheduler attempted to schedule and failed; 'gated' is the "
    "number of unschedulable pods that the scheduler never attempted to schedule because "
    "they are gated.",
    ["queue"],
)
QUEUE_INCOMING = ThreadCellCounter(
    "scheduler_queue_incoming_pods_total",
    "Number of pods added to scheduling queues by event and queue type.",
    ["queue", "event"],
)
POD_SCHEDULING_ATTEMPTS = ThreadCellHistogram(
    "scheduler_pod_scheduling_attempts",
    "Number of attempts to successfully schedule a pod.",
    [],
    buckets=_ATTEMPTS_BUCKETS,
)
POD_SCHEDULING_SLI = ThreadCellHistogram(
    "scheduler_pod_scheduling_sli_duration_seconds",
    "E2e latency for a pod being scheduled, from the time the pod enters the scheduling "
    "queue and might involve multiple scheduling attempts.",
    ["attempts"],
    buckets=_SLI_BUCKETS,
)
CACHE_SIZE = Gauge(
    "scheduler_cache_size",
    "Number of nodes, pods, and assumed (bound) pods in the scheduler cache.",
    ["type"],
)
# Berth's own: pods per scheduling call (1: ScheduleStream, more: one
# ScheduleBatch), to see how far --batch-size is used.
SCHEDULE_BATCH_PODS = Histogram(
    "berth_shim_schedule_batch_pods",
    "Pods sent to the plugin service in one scheduling call (Berth).",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
)
PERMIT_WAITING = Gauge(
    "berth_shim_permit_waiting_pods",
    "Number of pods waiting at Permit (Berth).",
)
# metrics.go: PermitWaitDuration, ExponentialBuckets(0.001, 2, 15); result is
# the wait's status code (framework.go WaitOnPermit): Success when allowed,
# Unschedulable when rejected or timed out, Error when preempted
# (waiting_pods_map.go Preempt).
PERMIT_WAIT_DURATION = Histogram(
    "scheduler_permit_wait_duration_seconds",
    "Duration of waiting on permit.",
    ["result"],
    buckets=_ATTEMPT_BUCKETS,
)
# metrics.go: unschedulableReasons. Counted as the queue counts it
# (scheduling_queue.go): each plugin that rejected a pod (UnschedulablePlugins
# and PendingPlugins) or gates it at PreEnqueue counts the pod once until the
# pod is popped for its next cycle or leaves the queue.
UNSCHEDULABLE_PODS = Gauge(
    "scheduler_unschedulable_pods",
    "The number of unschedulable pods broken down by plugin name. A pod will increment the "
    "gauge for all plugins that caused it to not schedule and so this metric have meaning "
    "only when broken down by plugin.",
    ["plugin", "profile"],
)
# metrics.go: EventHandlingLatency, ExponentialBuckets(0.0001, 2, 12), by the
# event's label (eventhandlers.go: NodeAdd, AssignedPodDelete, ...).
EVENT_HANDLING_DURATION = ThreadCellHistogram(
    "scheduler_event_handling_duration_seconds",
    "Event handling latency in seconds.",
    ["event"],
    buckets=tuple(0.0001 * 2**i for i in range(12)),
)
# metrics.go: Goroutines; the shim runs binding cycles as tasks, counted as
# upstream counts its binding goroutines (schedule_one.go runBindingCycle).
GOROUTINES = ThreadCellGauge(
    "scheduler_goroutines",
    "Number of running goroutines split by the work they do such as binding.",
    ["operation"],
)
# metrics.go: PodScheduledAfterFlush (schedule_one.go handleSchedulingResult:
# a pod bound after the unschedulable pool's 5-minute flush moved it).
POD_SCHEDULED_AFTER_FLUSH = Counter(
    "scheduler_pod_scheduled_after_flush_total",
    "Number of pods that were successfully scheduled after being flushed from "
    "unschedulablePods due to timeout. This metric helps detect potential queueing hint "
    "misconfigurations or event handling issues.",
)
# client-go leaderelection, as component-base registers it
# (metrics/prometheus/clientgo/leaderelection/metrics.go leaderGauge): 1 while
# this process holds the Lease, else 0; name is the Lease's name.
LEADER_ELECTION_MASTER_STATUS = Gauge(
    "leader_election_master_status",
    "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, "
    "1 indicates master. 'name' is the string used to identify the lease. Please make sure "
    "to group by name.",
    ["name"],
)
# metrics.go: PreemptionVictims, ExponentialBuckets(1, 2, 7).
_VICTIMS_BUCKETS = tuple(float(2**i) for i in range(7))
# metrics.go: PreemptionGoroutinesDuration, ExponentialBuckets(0.01, 2, 20).
_GOROUTINE_BUCKETS = tuple(0.01 * 2**i for i in range(20))

# The preemption's actuation runs in the shim (the plugin service only picks
# the victims), so these are the shim's: attempts are counted per cycle whose
# PostFilter ran a preemption plugin (DefaultPreemption.PostFilter counts every
# call), victims per preemption that deletes or rejects something
# (executor.go prepareCandidateAsync).
PREEMPTION_ATTEMPTS = Counter(
    "scheduler_preemption_attempts_total",
    "Total preemption attempts in the cluster till now",
)
PREEMPTION_VICTIMS = Histogram(
    "scheduler_preemption_victims",
    "Number of selected preemption victims",
    buckets=_VICTIMS_BUCKETS,
)
PREEMPTION_GOROUTINES_DURATION = Histogram(
    "scheduler_preemption_goroutines_duration_seconds",
    "Duration in seconds for running goroutines for the preemption.",
    ["result"],
    buckets=_GOROUTINE_BUCKETS,
)
PREEMPTION_GOROUTINES_EXECUTION = Counter(
    "scheduler_preemption_goroutines_execution_total",
    "Number of preemption goroutines executed.",
    ["result"],
)
PLUGIN_SERVICE_ERRORS = Counter(
    "berth_plugin_service_errors_total",
    "Calls to the plugin service that failed (unreachable, refused, timed out), by call.",
    ["call"],
)
# Berth's own: what the plugin service asked the shim to perform and the shim
# refused (shim/guard.py): kind "victim" (a preemption victim), "write" (an
# ObjectWrite of PreBind or PostBind) or "nomination" (a nomination to clear);
# reason names the check that failed.
REFUSED_WRITES = Counter(
    "berth_shim_refused_writes_total",
    "Actions the plugin service asked for that the shim refused (Berth), by kind (victim, "
    "write, nomination) and reason.",
    ["kind", "reason"],
)

# Queue places that scheduler_pending_pods reports; pods on their way to the
# activeQ (admission) count as active, pods in a cycle count nowhere.
_QUEUE_LABEL = {
    "": "active",
    "active": "active",
    "backoff": "backoff",
    "unschedulable": "unschedulable",
    "gated": "gated",
}


# Each metric's children by label values: ``labels()`` validates and looks up
# its arguments on every call, and these are called several times per pod.
_children: dict[tuple[object, tuple[str, ...]], Any] = {}


def _child(metric: Any, *values: str) -> Any:
    """A prometheus_client metric's child, looked up once (never a ``ThreadCell*``
    metric's: its cells belong to the thread that asked for them)."""
    key = (metric, values)
    child = _children.get(key)
    if child is None:
        child = _children[key] = metric.labels(*values)
    return child


def pending_moved(old: str, new: str) -> None:
    a = _QUEUE_LABEL.get(old)
    b = _QUEUE_LABEL.get(new)
    if a == b:
        return
    if a is not None:
        PENDING_PODS.labels(a).dec()
    if b is not None:
        PENDING_PODS.labels(b).inc()


# The queue label of scheduler_queue_incoming_pods_total as upstream spells it
# (scheduling_queue.go: activeQ "Active", backoffQ "Backoff", unschedulableQ
# "Unschedulable"), by the shim's queue names.
QUEUE_LABELS: Final = {"active": "Active", "backoff": "Backoff", "unschedulable": "Unschedulable"}


def incoming(event: str, queue: str) -> None:
    """A pod entered ``queue`` ("active", "backoff", "unschedulable") because
    of ``event`` (a ClusterEvent label, or ScheduleAttemptFailure,
    BackoffComplete, ForceActivate, UnschedulableTimeout, PopFromBackoffQ)."""
    QUEUE_INCOMING.labels(QUEUE_LABELS.get(queue, queue), event).inc()


def unschedulable_plugins(profile: str, plugins: frozenset[str], delta: int) -> None:
    """``plugins`` start (delta 1) or stop (delta -1) counting one pod of
    ``profile`` in scheduler_unschedulable_pods."""
    for plugin in plugins:
        _child(UNSCHEDULABLE_PODS, plugin, profile).inc(delta)


def permit_waited(result: str, seconds: float) -> None:
    """One wait at Permit ended with ``result`` (Success, Unschedulable, Error)."""
    _child(PERMIT_WAIT_DURATION, result).observe(seconds)


def event_handled(event: str, seconds: float) -> None:
    """One cluster event (its ClusterEvent label) went through the handlers."""
    EVENT_HANDLING_DURATION.labels(event).observe(seconds)


def leading(name: str, leader: bool) -> None:
    """This process holds (or no longer holds) the Lease ``name``."""
    _child(LEADER_ELECTION_MASTER_STATUS, name).set(1.0 if leader else 0.0)


# Only the binding loop (the event loop) moves it: one writer.
BINDING_GOROUTINES: Final = GOROUTINES.labels("binding")


def attempt(result: str, profile: str, seconds: float) -> None:
    SCHEDULE_ATTEMPTS.labels(result, profile).inc()
    ATTEMPT_DURATION.labels(result, profile).observe(seconds)


def scheduled(attempts: int, since_first_seen: float) -> None:
    POD_SCHEDULING_ATTEMPTS.labels().observe(attempts)
    POD_SCHEDULING_SLI.labels(str(attempts)).observe(since_first_seen)


def preemption_finished(result: str, seconds: float) -> None:
    """One asynchronous preemption ended ("success" or "error")."""
    _child(PREEMPTION_GOROUTINES_DURATION, result).observe(seconds)
    _child(PREEMPTION_GOROUTINES_EXECUTION, result).inc()


def refused(kind: str, reason: str) -> None:
    """One action the plugin service asked for was refused (shim/guard.py)."""
    _child(REFUSED_WRITES, kind, reason).inc()


@dataclass
class Counters:
    """What the shim did, for logs, the demo and tests."""

    cycles: int = 0
    scheduled: int = 0
    bound: int = 0
    unschedulable: int = 0
    errors: int = 0
    bind_failures: int = 0
    service_failures: int = 0


__all__ = [
    "ATTEMPT_DURATION",
    "BINDING_GOROUTINES",
    "CACHE_SIZE",
    "EVENT_HANDLING_DURATION",
    "GOROUTINES",
    "LEADER_ELECTION_MASTER_STATUS",
    "PENDING_PODS",
    "PERMIT_WAITING",
    "PERMIT_WAIT_DURATION",
    "POD_SCHEDULED_AFTER_FLUSH",
    "PREEMPTION_ATTEMPTS",
    "PREEMPTION_GOROUTINES_DURATION",
    "PREEMPTION_GOROUTINES_EXECUTION",
    "PREEMPTION_VICTIMS",
    "QUEUE_INCOMING",
    "REFUSED_WRITES",
    "SCHEDULE_ATTEMPTS",
    "SCHEDULE_BATCH_PODS",
    "UNSCHEDULABLE_PODS",
    "Counters",
    "attempt",
    "event_handled",
    "incoming",
    "leading",
    "pending_moved",
    "permit_waited",
    "preemption_finished",
    "refused",
    "scheduled",
    "unschedulable_plugins",
]
