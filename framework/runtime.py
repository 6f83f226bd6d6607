"""The runtime: runs one profile's plugins at each extension point.

Follows pkg/scheduler/framework/runtime/framework.go: NewFramework (build
the plugins, check the profile), and the RunXPlugins runner of each extension
point. Each method cites the upstream function it mirrors. Timing, metrics and
tracing wrap plugin calls here, never inside plugins. One scheduling cycle,
which decides which extension points run and in what order, is
framework/schedule_one.py.

Nominated pods (pods whose status.nominatedNodeName names a node, kept by the
snapshot apart from the NodeInfos) are honoured as upstream does: Filter runs
on a node with its equal-or-higher-priority nominated pods added, then, if
that passes, without them (framework.go, RunFilterPluginsWithNominatedPods).
The batch Filter path pays for this only on the nodes that have such pods.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from berth.framework import observe
from berth.framework.cycle_state import CycleState, StateDecodeError
from berth.framework.events import (
    ClusterEvent,
    QueueingHint,
    Registration,
    build_registrations,
)
from berth.framework.goquote import go_quote
from berth.framework.handle import Handle
from berth.framework.interfaces import (
    ENQUEUE_EXTENSION_POINTS,
    MAX_NODE_SCORE,
    MIN_NODE_SCORE,
    BindPlugin,
    FilterPlugin,
    NodeVerdicts,
    PermitPlugin,
    Plugin,
    PostBindPlugin,
    PostFilterPlugin,
    PostFilterResult,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    QueuedPodInfo,
    QueueSortPlugin,
    ReservePlugin,
    ScoreArray,
    ScorePlugin,
    SignPlugin,
    SortKey,
)
from berth.framework.model import NodeInfo, PodInfo
from berth.framework.objects import ObjectKind, ProfileRead, merge_reads
from berth.framework.profile import ProfileConfig
from berth.framework.registry import RegistryLike
from berth.framework.snapshot import NodeBatch, Snapshot, detached_batch
from berth.framework.status import SUCCESS, Code, Status
from berth.framework.writes import profile_writes

log = logging.getLogger(__name__)

# schedule_one.go: pluginMetricsSamplePercent.
PLUGIN_METRICS_SAMPLE_RATE = 0.10
# framework.go: maxTimeout for Permit waits.
MAX_PERMIT_TIMEOUT_SECONDS = 15 * 60.0

P = TypeVar("P", bound=Plugin)

# A waiting-pod signal as CycleState.signal_waiting_pod records it:
# (pod uid, plugin, allow, message).
Signal = tuple[str, str, bool, str]


class ProfileError(ValueError):
    """A profile the runtime cannot run (upstream's NewFramework errors)."""


def plugin_error_message(point: str, plugin: str, detail: str) -> str:
    """The text of the Error status an extension point makes of a plugin's
    error, worded as framework.go wraps it there (RunXPlugins)."""
    q = go_quote(plugin)
    if point == "Filter":
        return f"running {q} filter plugin: {detail}"
    if point == "Score":
        return f"running Score plugins: plugin {q} failed with: {detail}"
    if point == "NormalizeScore":
        return f"running Normalize on Score plugins: plugin {q} failed with: {detail}"
    if point == "PostFilter":
        # RunPostFilterPlugins passes the plugin's error on unwrapped.
        return detail
    if point == "PreFilterExtensionAddPod":
        return f"running AddPod on PreFilter plugin {q}: {detail}"
    if point == "PreFilterExtensionRemovePod":
        return f"running RemovePod on PreFilter plugin {q}: {detail}"
    if point == "PreBindPreFlight":
        return f"running PreBindPreFlight {q}: {detail}"
    return f"running {point} plugin {q}: {detail}"


class CycleError(Exception):
    """A plugin failed with an Error status: the cycle stops."""

    def __init__(self, status: Status) -> None:
        super().__init__(str(status))
        self.status = status


class DeadlineExceeded(Exception):
    """The request's deadline passed before the next plugin call: the cycle
    stops there, keeping nothing. Never a plugin's verdict: it passes through
    the plugin-call wrapper untouched, so the server can answer
    DEADLINE_EXCEEDED."""

    def __init__(self, point: str, plugin: str, late: float) -> None:
        super().__init__(
            f"the request's deadline passed {late * 1000:.0f} ms before {point} plugin "
            f"{plugin} could run"
        )
        self.point = point
        self.plugin = plugin
        self.late = late


class FilterError(CycleError):
    """A Filter plugin failed with an Error on some node. ``verdicts`` holds
    every node's outcome (the Error nodes with their Error status) and
    ``position`` the first node that failed with an Error."""

    def __init__(self, verdicts: NodeVerdicts, position: int) -> None:
        super().__init__(verdicts.status_of(position))
        self.verdicts = verdicts
        self.position = position


@dataclass(slots=True)
class ScoreOutcome:
    nodes: NodeBatch
    # Plugin name to its final (normalised, weighted) scores.
    weighted: dict[str, ScoreArray]
    totals: ScoreArray
    # Plugin name to its raw scores (Score, before NormalizeScore), and the
    # weights: what an explanation shows beside ``weighted`` (the arrays
    # phase 1 made anyway, kept by reference).
    raw: Mapping[str, ScoreArray] = field(default_factory=dict)
    weights: Mapping[str, int] = field(default_factory=dict)


class Framework:
    """One profile's plugins, built and checked once; serves many requests."""

    def __init__(
        self,
        profile: ProfileConfig,
        registry: RegistryLike,
        percentage_of_nodes_to_score: int = 0,
    ) -> None:
        self.profile = profile
        self.name = profile.scheduler_name
        self.handle = Handle(profile.scheduler_name)
        self.handle.bind_framework(self)
        pct = profile.percentage_of_nodes_to_score
        self.percentage_of_nodes_to_score = percentage_of_nodes_to_score if pct is None else pct
        # The share of the nodes the last Filter walk evaluated that passed:
        # how large the walk's first chunk is (schedule_one.py). Only the
        # walk's cost depends on it, never its outcome.
        self.filter_pass_ratio = 1.0
        self.record_plugin_metrics = False
        self.tracing = False
        # The current request's deadline on the time.perf_counter clock
        # (begin_request), checked before every plugin call; None: none.
        self.deadline: float | None = None
        self.instances: dict[str, Plugin] = {}
        for refs in profile.plugins.values():
            for ref in refs:
                if ref.name in self.instances:
                    continue
                cls = registry.get(ref.name)
                if cls is None:
                    raise ProfileError(
                        f"profile {self.name}: plugin {go_quote(ref.name)} is not registered"
                    )
                self.instances[ref.name] = cls(profile.plugin_args.get(ref.name), self.handle)

        self.pre_enqueue = self._at("preEnqueue", PreEnqueuePlugin)
        queue_sort = self._at("queueSort", QueueSortPlugin)
        self.pre_filter = self._at("preFilter", PreFilterPlugin)
        self.filter = self._at("filter", FilterPlugin)
        self.post_filter = self._at("postFilter", PostFilterPlugin)
        self.pre_score = self._at("preScore", PreScorePlugin)
        self.score = self._at("score", ScorePlugin)
        self.reserve = self._at("reserve", ReservePlugin)
        self.permit = self._at("permit", PermitPlugin)
        self.pre_bind = self._at("preBind", PreBindPlugin)
        self.bind = self._at("bind", BindPlugin)
        self.post_bind = self._at("postBind", PostBindPlugin)

        # framework.go, NewFramework: exactly one QueueSort, at least one Bind.
        if len(queue_sort) != 1:
            raise ProfileError(
                f"profile {self.name}: exactly one queueSort plugin must be enabled, "
                f"found {len(queue_sort)}"
            )
        self.queue_sort = queue_sort[0]
        if not self.bind:
            raise ProfileError(f"profile {self.name}: at least one bind plugin is needed")
        # A weight of 0 in the config means 1 (NewFramework); negative is
        # refused by config validation.
        self.score_weights: dict[str, int] = {}
        for ref in profile.enabled("score"):
            if ref.weight < 0:
                raise ProfileError(
                    f"profile {self.name}: score plugin {go_quote(ref.name)} has weight < 0"
                )
            self.score_weights[ref.name] = ref.weight or 1
        # scheduler_plugin_evaluation_total's children for the four points
        # upstream instruments (framework.go setInstrumentedPlugins), by
        # plugin name, made once.
        self.evaluations: dict[str, dict[str, observe.CounterCell]] = {
            point: {p.name: observe.evaluation_counter(p.name, point, self.name) for p in plugins}
            for point, plugins in (
                ("PreFilter", self.pre_filter),
                ("Filter", self.filter),
                ("PreScore", self.pre_score),
                ("Score", self.score),
            )
        }
        self._score_by_name = {p.name: p for p in self.score}
        # One reusable context per (extension point, plugin), made on first
        # use (``_plugin``).
        self._calls: dict[tuple[str, str], _PluginCall] = {}
        self.reads = self._collect_reads()
        # What its plugins declare they write beyond the pod being scheduled
        # (Plugin.writes): the only kinds a caller performs writes to.
        try:
            self.writes = profile_writes(profile, registry)
        except ValueError as exc:
            raise ProfileError(str(exc)) from exc
        # QueueSort needs the cluster state only when its plugin reads objects.
        self.queue_sort_reads = any(self.queue_sort.name in r.plugins for r in self.reads)
        # The events each rejecting plugin registered, with their hints
        # (buildQueueingHintMap), asked once.
        self.registrations = self._collect_registrations()
        # The plugins that sign pods for opportunistic batching, or None when
        # the profile cannot batch (framework/batch.py).
        self.signers: list[SignPlugin] | None = self._batchable_plugins()

    def _collect_registrations(self) -> tuple[Registration, ...]:
        """The profile's queueing hint map (scheduler.go buildQueueingHintMap
        over framework.go fillEnqueueExtensions): the events of every plugin
        at PreEnqueue, PreFilter, Filter, Reserve or Permit, in the order
        the profile names them."""
        pairs = []
        for name, plugin in self.instances.items():
            if not isinstance(plugin, ENQUEUE_EXTENSION_POINTS):
                continue
            try:
                events = list(plugin.events_to_register())
            except Exception as exc:
                raise ProfileError(
                    f"profile {self.name}: plugin {name}: events_to_register: {exc}"
                ) from exc
            pairs.append((name, events))
        return tuple(build_registrations(pairs))

    def _batchable_plugins(self) -> list[SignPlugin] | None:
        """framework.go computeBatchablePlugins: every PreFilter, Filter,
        PreScore and Score plugin must sign pods, or the profile does not
        batch."""
        signing: dict[str, SignPlugin] = {}
        unsigned: list[str] = []
        for plugin in (*self.pre_filter, *self.filter, *self.pre_score, *self.score):
            if plugin.name in signing or plugin.name in unsigned:
                continue
            if isinstance(plugin, SignPlugin):
                signing[plugin.name] = plugin
            else:
                unsigned.append(plugin.name)
        if unsigned:
            log.info(
                "profile %s: opportunistic batching is off: plugins %s do not sign pods",
                self.name,
                ", ".join(unsigned),
            )
            return None
        never = [name for name, plugin in signing.items() if not plugin.signs_any_pod()]
        if never:
            log.info(
                "profile %s: opportunistic batching is off: plugins %s sign no pod as configured",
                self.name,
                ", ".join(never),
            )
            return None
        return list(signing.values())

    def disable_signatures(self, reason: str) -> None:
        """Turns opportunistic batching off for this profile (upstream does
        when the scheduler has extenders)."""
        if self.signers is not None:
            log.info("profile %s: opportunistic batching is off: %s", self.name, reason)
        self.signers = None

    def filter_rejects(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, node: str
    ) -> bool | None:
        """framework.go RunFilterPlugins on one node, without nominated pods:
        whether the Filter plugins reject ``pod`` there (None: an Error)."""
        verdicts, first_error = self._filter_batch(state, pod, snapshot.batch([node]))
        if first_error >= 0:
            return None
        return verdicts.status_of(0).is_rejected

    def queueing_hints(
        self, pod: PodInfo, plugins: Iterable[str], event: ClusterEvent, old: Any, new: Any
    ) -> list[str]:
        """Which of ``plugins`` (the pod's rejecting plugins) answer Queue to
        ``event`` (isPodWorthRequeuing, one plugin at a time): a plugin that
        registered a matching event without a hint answers Queue; one with a
        hint answers what the hint does, Queue when the hint raises (logged,
        as upstream's QueueingHintFn error). A plugin that registered no
        matching event does not answer."""
        wanted = set(plugins)
        queued: list[str] = []
        for reg in self.registrations:
            if reg.plugin not in wanted or reg.plugin in queued:
                continue
            if not reg.event.matches(event):
                continue
            if reg.hint is None:
                queued.append(reg.plugin)
                continue
            try:
                hint = reg.hint(pod, old, new)
            except Exception:
                log.exception(
                    "queueing hint of plugin %s for event %s failed for pod %s; "
                    "the pod is retried as if it answered Queue",
                    reg.plugin,
                    event.label,
                    pod.key,
                )
                hint = QueueingHint.QUEUE
            if hint == QueueingHint.QUEUE:
                queued.append(reg.plugin)
        return queued

    def _collect_reads(self) -> tuple[ProfileRead, ...]:
        """What the profile's plugins read beyond nodes and pods
        (Plugin.reads, given each plugin's args), one entry per kind."""
        pairs: list[tuple[str, ObjectKind]] = []
        for name, plugin in self.instances.items():
            try:
                kinds = type(plugin).reads(self.profile.plugin_args.get(name))
                pairs.extend((name, kind) for kind in kinds)
            except (TypeError, ValueError) as exc:
                raise ProfileError(f"profile {self.name}: plugin {name}: reads: {exc}") from exc
        try:
            return merge_reads(pairs)
        except ValueError as exc:
            raise ProfileError(f"profile {self.name}: {exc}") from exc

    def _at(self, point: str, kind: type[P]) -> list[P]:
        out: list[P] = []
        for ref in self.profile.enabled(point):
            plugin = self.instances[ref.name]
            if not isinstance(plugin, kind):
                raise ProfileError(
                    f"profile {self.name}: plugin {go_quote(ref.name)} does not extend {point} plugin"
                )
            out.append(plugin)
        return out

    def plugins_at(self, point: str) -> list[tuple[str, int]]:
        """(name, weight) of the plugins at an extension point, in order."""
        if point == "score":
            return [(p.name, self.score_weights[p.name]) for p in self.score]
        if point == "queueSort":
            return [(self.queue_sort.name, 0)]
        return [(r.name, 0) for r in self.profile.enabled(point)]

    # -- plumbing -------------------------------------------------------------

    def begin_request(self, deadline: float | None = None) -> None:
        """Called once per request: decides whether this request's plugin
        calls are timed (upstream samples 10% of cycles,
        pluginMetricsSamplePercent in schedule_one.go). ``deadline``
        (time.perf_counter clock): no plugin call starts after it
        (DeadlineExceeded), so a cycle whose caller gave up stops at the
        next plugin, or the next chunk of nodes of a Filter walk."""
        self.deadline = deadline
        self.record_plugin_metrics = random.random() < PLUGIN_METRICS_SAMPLE_RATE
        # Spans are made only under a recorded parent; whether there is one
        # does not change during a request.
        self.tracing = observe.tracing_active()

    def _plugin(self, point: str, plugin: Plugin) -> _PluginCall:
        """Times and traces one plugin call. The body appends its status to
        the yielded list so the metric can carry it. The context of a
        (point, plugin) is reused (a cycle makes some 40 plugin calls), or a
        new one made when that one is in use (a plugin's call made while
        another call of the same plugin at the same point runs)."""
        key = (point, plugin.name)
        call = self._calls.get(key)
        if call is None or call.plugin is not plugin:
            call = self._calls[key] = _PluginCall(self, point, plugin)
        elif call.active:
            return _PluginCall(self, point, plugin)
        return call

    def extension_point(self, point: str) -> _ExtensionPointCall:
        return _ExtensionPointCall(self, point)

    # -- queueing -------------------------------------------------------------

    def run_pre_enqueue(self, pod: PodInfo) -> Status:
        """framework.go, RunPreEnqueuePlugins: the first non-success wins."""
        with self.extension_point("PreEnqueue") as ep:
            for pl in self.pre_enqueue:
                with self._plugin("PreEnqueue", pl) as box:
                    st = pl.pre_enqueue(pod)
                    box.append(st)
                if not st.is_success:
                    st = st.with_plugin(pl.name)
                    ep.append(st)
                    return st
            return SUCCESS

    def queue_sort_keys(self, pods: list[QueuedPodInfo]) -> list[SortKey]:
        pl = self.queue_sort
        with self.extension_point("QueueSort"), self._plugin("QueueSort", pl):
            return [pl.sort_key(p) for p in pods]

    # -- scheduling cycle -----------------------------------------------------

    def run_pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch
    ) -> tuple[PreFilterResult | None, Status]:
        """framework.go, RunPreFilterPlugins."""
        result, status, _ = self.run_pre_filter_with_plugins(state, pod, nodes)
        return result, status

    def run_pre_filter_with_plugins(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch
    ) -> tuple[PreFilterResult | None, Status, set[str]]:
        """framework.go, RunPreFilterPlugins, also returning the plugins whose
        PreFilterResult restricted the nodes (upstream's third result).

        Unschedulable does not stop the loop: the remaining plugins run (they
        may prepare state PostFilter needs) and the last Unschedulable status
        is returned as it is. UnschedulableAndUnresolvable stops at once, as
        does any other code (Pending included), which is an Error. The Skip
        set is saved whatever the outcome."""
        skip: set[str] = set()
        try:
            with self.extension_point("PreFilter") as ep:
                result, st, with_nodes = self._pre_filter_loop(state, pod, nodes, skip)
                if not st.is_success:
                    ep.append(st)
                return result, st, with_nodes
        finally:
            state.skip_filter_plugins = skip

    def _pre_filter_loop(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch, skip: set[str]
    ) -> tuple[PreFilterResult | None, Status, set[str]]:
        result: PreFilterResult | None = None
        with_nodes: set[str] = set()
        rejection: Status | None = None
        evaluated = self.evaluations["PreFilter"]
        for pl in self.pre_filter:
            evaluated[pl.name].inc()
            with self._plugin("PreFilter", pl) as box:
                r, st = pl.pre_filter(state, pod, nodes)
                box.append(st)
            if st.is_skip:
                skip.add(pl.name)
                continue
            if not st.is_success:
                st = st.with_plugin(pl.name)
                if st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                    return None, st, set()
                if st.code is Code.UNSCHEDULABLE:
                    rejection = st
                    continue
                err = Status.error(plugin_error_message("PreFilter", pl.name, st.message), pl.name)
                return None, err, set()
            if r is not None and not r.all_nodes():
                with_nodes.add(pl.name)
            result = r if result is None else result.merge(r)
            if result is not None and result.node_names is not None and not result.node_names:
                names = sorted(with_nodes)
                if len(names) == 1:
                    msg = f"node(s) didn't satisfy plugin {names[0]}"
                else:
                    msg = f"node(s) didn't satisfy plugin(s) [{' '.join(names)}] simultaneously"
                return result, Status.unresolvable(msg), with_nodes
        return result, rejection or SUCCESS, with_nodes

    def filter_verdicts(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch
    ) -> tuple[NodeVerdicts, int]:
        """framework.go, RunFilterPluginsWithNominatedPods over a batch: each
        node stops at its first non-success. A status that is not a rejection
        is an Error for that node; returns the verdicts and the position of
        the first node with an Error (-1 when none).

        The batch runs without nominated pods (RunFilterPlugins); then the
        nodes that have nominated pods of equal or higher priority (other
        than ``pod``) are filtered again one by one with those pods added:
        where that first pass of upstream's fails, its status is the node's,
        else the batch verdict stands (upstream's second pass, without them)."""
        verdicts, first_error = self._filter_batch(state, pod, nodes)
        if nodes.snapshot.has_nominated_pods:
            verdicts, first_error = self._with_nominated_pods(
                state, pod, nodes, verdicts, first_error
            )
        return verdicts, first_error

    def _with_nominated_pods(
        self,
        state: CycleState,
        pod: PodInfo,
        nodes: NodeBatch,
        verdicts: NodeVerdicts,
        first_error: int,
    ) -> tuple[NodeVerdicts, int]:
        """The nominated-pods pass of filter_verdicts, only over the batch's
        nodes that have equal-or-higher-priority nominated pods."""
        snap = nodes.snapshot
        positions = np.flatnonzero(snap.nominated_slot_mask()[nodes.idx])
        if not positions.size:
            return verdicts, first_error
        index = verdicts.status_index
        statuses = verdicts.statuses
        changed = False
        for k in positions.tolist():
            ni = snap.slot(int(nodes.idx[k]))
            pods = ge_nominated_pods(snap, ni.name, pod)
            if not pods:
                continue
            st = self._filter_with_pods_added(state, pod, ni, pods)
            if st.is_success:
                continue
            if not changed:
                index = index.copy()
                statuses = list(statuses)
            index[k] = len(statuses)
            statuses.append(st)
            changed = True
        if not changed:
            return verdicts, first_error
        errors = [i for i, st in enumerate(statuses) if st.code is Code.ERROR]
        hit = np.flatnonzero(np.isin(index, errors)) if errors else positions[:0]
        return NodeVerdicts(index, statuses), int(hit[0]) if hit.size else -1

    def _filter_with_pods_added(
        self, state: CycleState, pod: PodInfo, node: NodeInfo, pods: list[PodInfo]
    ) -> Status:
        """The first pass of RunFilterPluginsWithNominatedPods
        (addGENominatedPods, then RunFilterPlugins): ``pods`` added to a
        clone of the node and, through the PreFilter extensions, to a clone of
        the cycle state. An AddPod failure is the node's Error."""
        node_out = node.clone()
        state_out = state.clone()
        for p in pods:
            node_out.add_pod(p)
            st = self.run_pre_filter_extension_add_pod(state_out, pod, p, node_out)
            if not st.is_success:
                return Status.error(st.message)
        return self.run_filter_plugins(state_out, pod, node_out)

    def run_filter_with_nominated_pods(
        self, state: CycleState, pod: PodInfo, node: NodeInfo
    ) -> Status:
        """framework.go, RunFilterPluginsWithNominatedPods on one node (which
        may be a clone outside the snapshot, as preemption's dry runs pass):
        with the nominated pods of equal or higher priority added first; if
        that passes, again without them. The nominated pods are those of the
        snapshot the handle is bound to."""
        pods = ge_nominated_pods(self.handle.snapshot, node.name, pod)
        if pods:
            st = self._filter_with_pods_added(state, pod, node, pods)
            if not st.is_success:
                return st
        return self.run_filter_plugins(state, pod, node)

    def run_filter_plugins(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """framework.go, RunFilterPlugins on one node: the first non-success
        stops, with the plugin set; one that is not a rejection is an
        Error."""
        evaluated = self.evaluations["Filter"]
        for pl in self.filter:
            if pl.name in state.skip_filter_plugins:
                continue
            evaluated[pl.name].inc()
            try:
                with self._plugin("Filter", pl) as box:
                    st = _filter_one(pl, state, pod, node)
                    box.append(st)
            except CycleError as exc:
                return exc.status
            if st.is_success:
                continue
            if not st.is_rejected:
                return Status.error(plugin_error_message("Filter", pl.name, st.message), pl.name)
            return st.with_plugin(pl.name)
        return SUCCESS

    def run_pre_filter_extension_add_pod(
        self, state: CycleState, pod: PodInfo, pod_to_add: PodInfo, node: NodeInfo
    ) -> Status:
        """framework.go, RunPreFilterExtensionAddPod: every PreFilter plugin
        with extensions that did not Skip; the first failure is an Error."""
        return self._pre_filter_extension("PreFilterExtensionAddPod", state, pod, pod_to_add, node)

    def run_pre_filter_extension_remove_pod(
        self, state: CycleState, pod: PodInfo, pod_to_remove: PodInfo, node: NodeInfo
    ) -> Status:
        """framework.go, RunPreFilterExtensionRemovePod."""
        return self._pre_filter_extension(
            "PreFilterExtensionRemovePod", state, pod, pod_to_remove, node
        )

    def _pre_filter_extension(
        self, point: str, state: CycleState, pod: PodInfo, other: PodInfo, node: NodeInfo
    ) -> Status:
        for pl in self.pre_filter:
            if not pl.has_extensions() or pl.name in state.skip_filter_plugins:
                continue
            try:
                with self._plugin(point, pl) as box:
                    if point == "PreFilterExtensionAddPod":
                        st = pl.add_pod(state, pod, other, node)
                    else:
                        st = pl.remove_pod(state, pod, other, node)
                    box.append(st)
            except CycleError as exc:
                return exc.status
            if not st.is_success:
                log.error(
                    "pod %s: %s of %s on node %s failed: %s",
                    pod.key,
                    point,
                    pl.name,
                    node.name,
                    st.message,
                )
                return Status.error(plugin_error_message(point, pl.name, st.message), pl.name)
        return SUCCESS

    def _filter_batch(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch
    ) -> tuple[NodeVerdicts, int]:
        """framework.go, RunFilterPlugins over a batch (filter_verdicts
        without the nominated pods)."""
        n = len(nodes)
        index = np.full(n, -1, dtype=np.int32)
        statuses: list[Status] = []
        remaining = np.arange(n, dtype=np.int64)
        first_error = -1
        evaluated = self.evaluations["Filter"]
        skip = state.skip_filter_plugins
        # ``nodes`` itself while no node has been rejected (no copy of it).
        batch = nodes
        for pl in self.filter:
            if remaining.size == 0:
                break
            if pl.name in skip:
                continue
            # One evaluation per node the plugin is run on, as upstream's
            # per-node Filter calls count.
            evaluated[pl.name].inc(remaining.size)
            try:
                with self._plugin("Filter", pl) as box:
                    verdicts = pl.filter_nodes(state, pod, batch)
                    # No statuses: every index is -1, nothing to look at.
                    if verdicts.statuses:
                        failed = verdicts.status_index >= 0
                        any_failed = bool(np.count_nonzero(failed))
                    else:
                        any_failed = False
                    box.append(verdicts.statuses[0] if any_failed else SUCCESS)
            except CycleError as exc:
                # The batch call raised: which node it choked on is unknown,
                # so the first node still in play takes the Error.
                index[remaining] = len(statuses)
                statuses.append(exc.status)
                k = int(remaining[0])
                first_error = k if first_error < 0 else min(first_error, k)
                remaining = remaining[:0]
                continue
            if not any_failed:
                continue
            base = len(statuses)
            for j, st in enumerate(verdicts.statuses):
                if st.is_rejected:
                    statuses.append(st.with_plugin(pl.name))
                    continue
                statuses.append(
                    Status.error(plugin_error_message("Filter", pl.name, st.message), pl.name)
                )
                hit = remaining[verdicts.status_index == j]
                if hit.size:
                    k = int(hit[0])
                    first_error = k if first_error < 0 else min(first_error, k)
            index[remaining[failed]] = verdicts.status_index[failed] + base
            remaining = remaining[~failed]
            batch = nodes.take(remaining)
        return NodeVerdicts(index, statuses), first_error

    def run_filter(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> NodeVerdicts:
        """RunFilterPlugins over a batch; an Error on any node raises
        FilterError (which carries every node's verdict)."""
        verdicts, first_error = self.filter_verdicts(state, pod, nodes)
        if first_error >= 0:
            raise FilterError(verdicts, first_error)
        return verdicts

    def run_post_filter(
        self, state: CycleState, pod: PodInfo, rejected: Mapping[str, Status]
    ) -> tuple[PostFilterResult | None, Status]:
        """framework.go, RunPostFilterPlugins: the first Success or
        UnschedulableAndUnresolvable ends the loop with that plugin's result;
        any other non-rejection is an Error (no result). Otherwise every plugin
        runs, the reasons are combined under the first rejecting plugin, and
        the result of the last plugin that returned one (a non-noop result) is
        kept, even though the status is Unschedulable."""
        with self.extension_point("PostFilter") as ep:
            result: PostFilterResult | None = None
            reasons: list[str] = []
            rejector = ""
            for pl in self.post_filter:
                with self._plugin("PostFilter", pl) as box, _acting(state, pl):
                    r, st = pl.post_filter(state, pod, rejected)
                    box.append(st)
                if r is not None and r.plugin != pl.name:
                    r = replace(r, plugin=pl.name)
                if st.is_success:
                    return r, st
                if st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                    st = st.with_plugin(pl.name)
                    ep.append(st)
                    return r, st
                if not st.is_rejected:
                    # fwk.AsStatus(s.AsError()).WithPlugin: the plugin's own
                    # message, with no "running PostFilter plugin" prefix (it
                    # ends up in the FitError as Diagnosis.PostFilterMsg).
                    st = Status.error(st.message or "error", pl.name)
                    ep.append(st)
                    return None, st
                if r is not None:
                    result = r
                reasons.extend(st.reasons)
                rejector = rejector or pl.name
            st = Status(Code.UNSCHEDULABLE, tuple(reasons), rejector)
            ep.append(st)
            return result, st

    def run_pre_score(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> Status:
        """framework.go, RunPreScorePlugins: anything but Success or Skip is
        an Error; the Skip set is saved whatever the outcome."""
        skip: set[str] = set()
        try:
            with self.extension_point("PreScore") as ep:
                evaluated = self.evaluations["PreScore"]
                for pl in self.pre_score:
                    evaluated[pl.name].inc()
                    with self._plugin("PreScore", pl) as box:
                        st = pl.pre_score(state, pod, nodes)
                        box.append(st)
                    if st.is_skip:
                        skip.add(pl.name)
                        continue
                    if not st.is_success:
                        st = Status.error(
                            plugin_error_message("PreScore", pl.name, st.message), pl.name
                        )
                        ep.append(st)
                        return st
                return SUCCESS
        finally:
            state.skip_score_plugins = skip

    def run_score_raw(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch
    ) -> dict[str, ScoreArray]:
        """Phase 1 of framework.go RunScorePlugins: each plugin's raw scores."""
        raw: dict[str, ScoreArray] = {}
        evaluated = self.evaluations["Score"]
        for pl in self.score:
            if pl.name in state.skip_score_plugins:
                continue
            evaluated[pl.name].inc(len(nodes))
            with self._plugin("Score", pl) as box:
                scores = np.asarray(pl.score_nodes(state, pod, nodes), dtype=np.int64)
                box.append(SUCCESS)
            if scores.shape != (len(nodes),):
                got = scores.shape[0] if scores.ndim else 0
                raise CycleError(
                    Status.error(
                        plugin_error_message(
                            "Score", pl.name, f"returned {got} scores for {len(nodes)} nodes"
                        ),
                        pl.name,
                    )
                )
            raw[pl.name] = scores
        return raw

    def normalize_and_weigh(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch, raw: Mapping[str, ScoreArray]
    ) -> dict[str, ScoreArray]:
        """Phases 2 and 3 of RunScorePlugins: NormalizeScore of every plugin,
        then the [0, 100] range check of every score, then the weights. Where
        upstream's parallel loops would report whichever error came first,
        this reports the first plugin in order (NormalizeScore) and the first
        node, then the first plugin at it (range check)."""
        names, matrix = self._normalize_and_weigh(state, pod, nodes, raw)
        return {name: matrix[i] for i, name in enumerate(names)}

    def _normalize_and_weigh(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch, raw: Mapping[str, ScoreArray]
    ) -> tuple[list[str], npt.NDArray[np.int64]]:
        """normalize_and_weigh as the plugins' names in order and one matrix,
        a row per plugin (a copy of its raw scores, normalised in place, then
        weighted), so the range check, the weights and the totals are one
        numpy operation each over every plugin, not one per plugin."""
        by_name = self._score_by_name
        for name in raw:
            if name not in by_name:
                raise CycleError(
                    Status.error(f"plugin {go_quote(name)} is not a score plugin of {self.name}")
                )
        plugins = [p for p in self.score if p.name in raw]
        names = [p.name for p in plugins]
        matrix = np.empty((len(names), len(nodes)), dtype=np.int64)
        for i, name in enumerate(names):
            matrix[i] = raw[name]
        for i, pl in enumerate(plugins):
            if not pl.has_normalize():
                continue
            with self._plugin("NormalizeScore", pl) as box:
                st = pl.normalize_score(state, pod, nodes, matrix[i])
                box.append(st)
            if not st.is_success:
                raise CycleError(
                    Status.error(
                        plugin_error_message("NormalizeScore", pl.name, st.message), pl.name
                    )
                )
        # One comparison for both bounds: shifted by MIN_NODE_SCORE and read
        # as unsigned, a score below the range wraps to a huge number.
        shifted = matrix - MIN_NODE_SCORE if MIN_NODE_SCORE else matrix
        bad = shifted.view(np.uint64) > MAX_NODE_SCORE - MIN_NODE_SCORE
        if np.count_nonzero(bad):
            # The first node with a bad score, then the first plugin at it.
            k = int(np.argmax(bad.any(axis=0)))
            rank = int(np.argmax(bad[:, k]))
            name = names[rank]
            raise CycleError(
                Status.error(
                    "applying score defaultWeights on Score plugins: "
                    f"plugin {go_quote(name)} returns an invalid score {int(matrix[rank, k])}, "
                    f"it should in the range of [{MIN_NODE_SCORE}, {MAX_NODE_SCORE}] "
                    "after normalizing",
                    name,
                )
            )
        # Most weights are 1: only the other rows are multiplied.
        for i, name in enumerate(names):
            weight = self.score_weights[name]
            if weight != 1:
                matrix[i] *= weight
        return names, matrix

    def run_score(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> ScoreOutcome:
        with self.extension_point("Score"):
            raw = self.run_score_raw(state, pod, nodes)
            names, matrix = self._normalize_and_weigh(state, pod, nodes, raw)
        weighted = {name: matrix[i] for i, name in enumerate(names)}
        totals: ScoreArray = matrix.sum(axis=0, dtype=np.int64)
        return ScoreOutcome(nodes, weighted, totals, raw, self.score_weights)

    def run_reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        """framework.go, RunReservePluginsReserve: the first failure stops;
        the caller then runs Unreserve on every Reserve plugin."""
        with self.extension_point("Reserve") as ep:
            for pl in self.reserve:
                with self._plugin("Reserve", pl) as box, _acting(state, pl):
                    st = pl.reserve(state, pod, node)
                    box.append(st)
                if not st.is_success:
                    # The pod is not assumed: its annotations have no copy to go on.
                    state.assume_annotations.clear()
                    st = st.with_plugin(pl.name)
                    if not st.is_rejected:
                        st = Status.error(
                            plugin_error_message("Reserve", pl.name, st.message), pl.name
                        )
                    ep.append(st)
                    return st
            return SUCCESS

    def run_unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        """framework.go, RunReservePluginsUnreserve: every plugin, in reverse."""
        with self.extension_point("Unreserve"):
            for pl in reversed(self.reserve):
                try:
                    with self._plugin("Unreserve", pl), _acting(state, pl):
                        pl.unreserve(state, pod, node)
                except CycleError as exc:
                    log.error("unreserve of %s failed (ignored, as upstream): %s", pl.name, exc)

    def run_permit(
        self, state: CycleState, pod: PodInfo, node: str
    ) -> tuple[Status, dict[str, float]]:
        """framework.go, RunPermitPlugins: a rejection stops; Wait from any
        plugin makes the pod wait, each timeout capped at 15 minutes. The Wait
        status is the last waiting plugin's own, its reasons kept, with
        upstream's sentence appended."""
        with self.extension_point("Permit") as ep:
            waits: dict[str, float] = {}
            wait_status: Status | None = None
            for pl in self.permit:
                with self._plugin("Permit", pl) as box, _acting(state, pl):
                    st, timeout = pl.permit(state, pod, node)
                    box.append(st)
                if st.is_success:
                    continue
                if st.is_rejected:
                    st = st.with_plugin(pl.name)
                    ep.append(st)
                    return st, {}
                if st.is_wait:
                    waits[pl.name] = min(max(timeout, 0.0), MAX_PERMIT_TIMEOUT_SECONDS)
                    wait_status = st
                    continue
                st = Status.error(plugin_error_message("Permit", pl.name, st.message), pl.name)
                ep.append(st)
                return st, {}
            if wait_status is not None:
                st = Status(
                    Code.WAIT,
                    (
                        *wait_status.reasons,
                        "one or more plugins asked to wait and no plugin rejected pod",
                    ),
                    wait_status.plugin,
                )
                ep.append(st)
                return st, waits
            return SUCCESS, {}

    def run_pre_bind_pre_flights(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        """framework.go, RunPreBindPreFlights: Success when any PreBind plugin
        answers Success (some PreBind has work), Skip when all answer Skip
        (also with no PreBind plugin), Error at the first plugin's Error; any
        other code (Unschedulable, Wait, ...) is unsupported and an Error too.
        The plugins that skipped are recorded in ``state``
        (SetSkipPreBindPlugins), so ``run_pre_bind`` leaves them out, also
        after the state's round trip through the caller. An Error is recorded
        in ``state`` as well: the binding cycle fails with it (schedule_one.go
        bindingCycle returns it before PreBind), so ``run_pre_bind`` answers
        it without running any plugin. A plugin that raises answers Error."""
        with self.extension_point("PreBindPreFlight") as ep:
            skip: set[str] = set()
            answer = Status(Code.SKIP)
            for pl in self.pre_bind:
                try:
                    with self._plugin("PreBindPreFlight", pl) as box, _acting(state, pl):
                        st = pl.pre_bind_pre_flight(state, pod, node)
                        box.append(st)
                except CycleError as exc:
                    # A plugin that raised: worded by _PluginCall as upstream
                    # wraps the plugin's error.
                    return self._pre_flight_failed(state, ep, exc.status.with_plugin(pl.name))
                if st.is_success:
                    answer = SUCCESS
                elif st.is_skip:
                    skip.add(pl.name)
                elif st.code is Code.ERROR:
                    return self._pre_flight_failed(
                        state,
                        ep,
                        Status.error(
                            plugin_error_message("PreBindPreFlight", pl.name, st.message),
                            pl.name,
                        ),
                    )
                else:
                    return self._pre_flight_failed(
                        state,
                        ep,
                        Status.error(
                            f"PreBindPreFlight {pl.name} returned "
                            f"{go_quote(observe.CODE_LABEL[st.code])}, which is unsupported. "
                            "It is supposed to return Success, Skip, or Error status",
                            pl.name,
                        ),
                    )
            state.skip_pre_bind_plugins = skip
            state.pre_bind_pre_flight_error = None
            ep.append(answer)
            return answer

    @staticmethod
    def _pre_flight_failed(state: CycleState, ep: list[Status], st: Status) -> Status:
        """RunPreBindPreFlights returned an Error: nothing is skipped, and the
        PreBind call answers the Error (the binding cycle fails with it)."""
        log.error("PreBindPreFlight failed: %s", st.message)
        state.skip_pre_bind_plugins = set()
        state.pre_bind_pre_flight_error = st
        ep.append(st)
        return st

    def run_pre_bind(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        """framework.go, RunPreBindPlugins: the first failure stops; the
        plugins whose PreBindPreFlight answered Skip are not run
        (GetSkipPreBindPlugins). When RunPreBindPreFlights failed, its Error
        is the answer and no plugin runs (bindingCycle stops there). A Skip
        returned by PreBind itself is neither Success nor a rejection, hence
        an Error. Upstream may run PreBind plugins that allow it in parallel
        (PreBindPreFlightResult.AllowParallel); Berth runs them in order.

        A plugin that must wait for something outside the scheduler, where
        upstream's PreBind blocks polling (DynamicResources' binding
        conditions), answers Wait and asks for a recheck
        (``CycleState.recheck_pre_bind_after``): the call answers Wait with
        the writes so far, the plugins before it are recorded as done
        (``pre_bind_done``), and the caller calls again later, when only the
        waiting plugin and those after it run. Wait without a recheck delay is
        an Error."""
        with self.extension_point("PreBind") as ep:
            failed = state.pre_bind_pre_flight_error
            if failed is not None:
                ep.append(failed)
                return failed
            before = len(state.plugin_writes)
            skipped = state.skip_pre_bind_plugins | state.pre_bind_done
            state.pre_bind_recheck_after = 0.0
            for pl in self.pre_bind:
                if pl.name in skipped:
                    continue
                try:
                    with self._plugin("PreBind", pl) as box, _acting(state, pl):
                        st = pl.pre_bind(state, pod, node)
                        box.append(st)
                except CycleError:
                    # A failed PreBind binds nothing: its writes are not wanted.
                    state.drop_writes_after(before)
                    raise
                if st.is_wait and state.pre_bind_recheck_after > 0:
                    st = st.with_plugin(pl.name)
                    ep.append(st)
                    return st
                state.pre_bind_recheck_after = 0.0
                if not st.is_success:
                    state.drop_writes_after(before)
                    st = st.with_plugin(pl.name)
                    if not st.is_rejected:
                        message = st.message
                        if st.is_wait:
                            message = f"answered Wait without asking for a recheck: {message}"
                        st = Status.error(
                            plugin_error_message("PreBind", pl.name, message), pl.name
                        )
                    ep.append(st)
                    return st
                state.pre_bind_done.add(pl.name)
            return SUCCESS

    def run_bind(
        self, state: CycleState, pod: PodInfo, node: str
    ) -> tuple[Status, BindPlugin | None]:
        """framework.go, RunBindPlugins: the first plugin that does not Skip
        decides; all skipping is Skip."""
        with self.extension_point("Bind") as ep:
            for pl in self.bind:
                with self._plugin("Bind", pl) as box:
                    st = pl.bind(state, pod, node)
                    box.append(st)
                if st.is_skip:
                    continue
                if not st.is_success:
                    st = st.with_plugin(pl.name)
                    if not st.is_rejected:
                        st = Status.error(
                            plugin_error_message("Bind", pl.name, st.message), pl.name
                        )
                    ep.append(st)
                    return st, None
                return st.with_plugin(pl.name), pl
            ep.append(Status(Code.SKIP))
            return Status(Code.SKIP), None

    def run_post_bind(self, state: CycleState, pod: PodInfo, node: str) -> None:
        with self.extension_point("PostBind"):
            for pl in self.post_bind:
                try:
                    with self._plugin("PostBind", pl), _acting(state, pl):
                        pl.post_bind(state, pod, node)
                except CycleError as exc:
                    log.error("post-bind of %s failed (ignored, as upstream): %s", pl.name, exc)


class _acting:
    """Names the plugin being called on the CycleState, so what it asks of
    the caller (writes, annotations, signals) is attributed to it."""

    __slots__ = ("plugin", "state")

    def __init__(self, state: CycleState, plugin: Plugin) -> None:
        self.state = state
        self.plugin = plugin

    def __enter__(self) -> None:
        self.state.current_plugin = self.plugin.name

    def __exit__(self, *exc: object) -> None:
        self.state.current_plugin = ""


class _PluginCall:
    """Context for one plugin call: converts a raised exception into an Error
    status (CycleError); when sampled or traced, times and spans the call."""

    __slots__ = ("active", "box", "fw", "plugin", "point", "span", "start")

    def __init__(self, fw: Framework, point: str, plugin: Plugin) -> None:
        self.fw = fw
        self.point = point
        self.plugin = plugin
        self.box: list[Status] = []
        self.span: Any = None
        self.start = 0.0
        self.active = False

    def __enter__(self) -> list[Status]:
        fw = self.fw
        deadline = fw.deadline
        if deadline is not None:
            late = time.perf_counter() - deadline
            if late >= 0:
                raise DeadlineExceeded(self.point, self.plugin.name, late)
        self.active = True
        box = self.box
        if box:
            box.clear()
        if fw.tracing:
            self.span = observe.plugin_span(self.point, self.plugin.name)
            self.span.__enter__()
        if fw.record_plugin_metrics:
            self.start = time.perf_counter()
        return box

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        self.active = False
        err: CycleError | None = None
        if exc is not None:
            self.box.insert(0, Status(Code.ERROR))
            if not isinstance(exc, (CycleError, StateDecodeError, DeadlineExceeded)) and isinstance(
                exc, Exception
            ):
                log.exception("plugin %s failed at %s", self.plugin.name, self.point)
                err = CycleError(
                    Status.error(
                        plugin_error_message(self.point, self.plugin.name, repr(exc)),
                        self.plugin.name,
                    )
                )
        if self.start:
            status = self.box[0] if self.box else SUCCESS
            observe.observe_plugin(
                self.point, self.plugin.name, status.code, time.perf_counter() - self.start
            )
            self.start = 0.0
        if self.span is not None:
            span, self.span = self.span, None
            span.__exit__(kind, exc, tb)
        if err is not None:
            raise err from exc


class _ExtensionPointCall:
    """Context for one extension point: always timed (upstream records
    extension point durations for every cycle), spanned when traced."""

    __slots__ = ("box", "fw", "point", "span", "start")

    def __init__(self, fw: Framework, point: str) -> None:
        self.fw = fw
        self.point = point
        self.box: list[Status] = []
        self.span: Any = None
        self.start = 0.0

    def __enter__(self) -> list[Status]:
        if self.fw.tracing:
            self.span = observe.extension_point_span(self.point, self.fw.name)
            self.span.__enter__()
        self.start = time.perf_counter()
        return self.box

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        status = self.box[0] if self.box else (SUCCESS if exc is None else Status(Code.ERROR))
        observe.observe_extension_point(
            self.point, self.fw.name, status.code, time.perf_counter() - self.start
        )
        if self.span is not None:
            self.span.__exit__(kind, exc, tb)


def ge_nominated_pods(snapshot: Snapshot, node: str, pod: PodInfo) -> list[PodInfo]:
    """framework.go, addGENominatedPods' choice: the pods nominated to
    ``node`` with a priority at least ``pod``'s, other than ``pod`` itself."""
    nominated = snapshot.nominated_pods_for_node(node)
    if not nominated:
        return []
    priority = pod.priority
    return [p for p in nominated.values() if p.priority >= priority and p.uid != pod.uid]


def _filter_one(pl: FilterPlugin, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
    """One plugin's Filter on one node: its per-node form, or for a plugin
    that only has the batch form, a one-node batch (over the node's snapshot,
    or a scratch one when the node is a clone)."""
    if type(pl).filter is not FilterPlugin.filter:
        return pl.filter(state, pod, node)
    owner = node.owner
    if isinstance(owner, Snapshot) and owner.nodes.get(node.name) is node:
        return pl.filter_nodes(state, pod, NodeBatch(owner, np.asarray([node.index]))).status_of(0)
    with detached_batch(node) as batch:
        return pl.filter_nodes(state, pod, batch).status_of(0)
