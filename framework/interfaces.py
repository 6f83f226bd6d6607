"""One interface per Scheduler Framework extension point.

Mirrors upstream's staging/src/k8s.io/kube-scheduler/framework/interface.go:
every plugin derives from ``Plugin`` (a name) and from the base class of each
extension point it serves; the runtime finds them with isinstance.

Filter and Score come in two forms. The per-node form (``filter``,
``score``) is what a plugin author writes first. The batch form
(``filter_nodes``, ``score_nodes``) sees every candidate node at once as
numpy columns; hot plugins override it. Each form defaults to the other, so a
plugin overrides exactly one.
"""

from __future__ import annotations

import enum
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeAlias, cast

from berth.framework.cycle_state import CycleState
from berth.framework.events import ClusterEventWithHint, unroll_wildcard_resource
from berth.framework.model import NodeInfo, PodInfo
from berth.framework.objects import ObjectKind
from berth.framework.preemption import Candidate
from berth.framework.status import SUCCESS, Status

if TYPE_CHECKING:
    # numpy and the snapshot are imported where a method needs them, not here: a
    # process that only reads plugin classes (the shim checking its configuration
    # for a plugin server) never loads them. TypeVar: PEP 696 defaults
    # (typing.TypeVar has them from Python 3.13): a plugin class that names no
    # args type is Plugin[Any], as before typed args.
    import numpy as np
    import numpy.typing as npt
    from typing_extensions import TypeVar

    from berth.framework.handle import Handle
    from berth.framework.snapshot import NodeBatch

    ArgsT = TypeVar("ArgsT", default=Any)
else:
    ArgsT = typing.TypeVar("ArgsT")

# Score range (upstream's MinNodeScore, MaxNodeScore).
MIN_NODE_SCORE = 0
MAX_NODE_SCORE = 100


class Plugin(Generic[ArgsT]):
    """Root of every plugin. ``name`` is what configuration files use.

    A plugin with pluginConfig args names their type twice: as ``Args``, the
    msgspec.Struct the configuration is decoded into (upstream's
    decodeNestedObjects), and as the type parameter of its interfaces, so
    that ``self.args`` has that type for mypy::

        class PreferLabel(FilterPlugin[PreferLabelArgs], ScorePlugin[PreferLabelArgs]):
            name = "PreferLabel"
            Args = PreferLabelArgs

    The runtime hands every plugin with an ``Args`` type its decoded args
    (the type's defaults when the profile has no pluginConfig entry for it),
    so ``self.args`` is never None there; a plugin built by hand gets what it
    is given. A plugin without args leaves both out (``self.args`` is then
    None at run time).
    """

    name: ClassVar[str] = ""
    # The msgspec.Struct type of this plugin's pluginConfig args, or None when
    # it takes none (then only an empty args mapping is accepted).
    Args: ClassVar[type[Any] | None] = None

    def __init__(self, args: ArgsT | None = None, handle: Handle | None = None) -> None:
        self.args: ArgsT = cast(ArgsT, args)
        self._handle = handle

    @property
    def handle(self) -> Handle:
        if self._handle is None:
            raise RuntimeError(f"plugin {self.name} was built without a framework handle")
        return self._handle

    @property
    def has_handle(self) -> bool:
        """Whether the plugin was built with a framework handle (tests may
        build one without)."""
        return self._handle is not None

    @classmethod
    def reads(cls, args: Any) -> tuple[ObjectKind, ...]:
        """The kinds of objects beyond nodes and pods this plugin reads, given
        its decoded args (None without args). The caller watches (or polls)
        them and ships them in the cluster state; the plugin finds them with
        ``self.handle.snapshot.objects(group, resource)``. Default: none."""
        return ()

    @classmethod
    def writes(cls, args: Any) -> tuple[ObjectKind, ...]:
        """The kinds of objects this plugin asks the caller to change
        (``ObjectWrite`` from PreBind or PostBind), given its decoded args
        (None without args). The pod being scheduled needs no declaration.
        The caller performs a write only to that pod or to a kind its plugin
        declares here, and refuses any other (DESIGN principle 9): group,
        version and resource must match, and an object of a namespaced kind
        must be in the pod's namespace. Default: none."""
        return ()

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """The cluster events that may make a pod this plugin rejected
        schedulable, each with an optional hint (upstream's
        EnqueueExtensions.EventsToRegister; framework/events.py). Asked once
        when the profile is built, for plugins at PreEnqueue, PreFilter,
        Filter, Reserve and Permit (the points that reject); the answer must
        not depend on the cluster. An empty list: no event moves the pods
        this plugin rejected (only an update of the pod itself, or the
        periodic flush, does).

        Default, for a plugin that does not override it: every action on
        every resource, and on each kind it ``reads``, without hints, so its
        pods move on any event (upstream's defaultEnqueueExtension)."""
        return unroll_wildcard_resource(type(self).reads(self.args))

    @classmethod
    def implements_events(cls) -> bool:
        """Whether the plugin overrides ``events_to_register`` (upstream:
        implements EnqueueExtensions)."""
        return cls.events_to_register is not Plugin.events_to_register


@dataclass(frozen=True, slots=True)
class QueuedPodInfo:
    pod: PodInfo
    enqueued_unix_micros: int
    attempts: int = 0


SortKey = tuple[int | float | str, ...]


class QueueSortPlugin(Plugin[ArgsT]):
    """Orders the scheduling queue: the pod with the smallest key pops first.

    Upstream's QueueSort has ``Less(a, b)``; a key is its batch form, so the
    caller can order many pods with one RPC.
    """

    def sort_key(self, pod: QueuedPodInfo) -> SortKey:
        raise NotImplementedError


class PreEnqueuePlugin(Plugin[ArgsT]):
    """Gates a pod before it enters the active queue (e.g. scheduling gates)."""

    def pre_enqueue(self, pod: PodInfo) -> Status:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class PreFilterResult:
    """Restricts the nodes Filter evaluates. ``None`` node names means all."""

    node_names: frozenset[str] | None = None

    def all_nodes(self) -> bool:
        return self.node_names is None

    def merge(self, other: PreFilterResult | None) -> PreFilterResult:
        """Intersection (upstream's PreFilterResult.Merge)."""
        if other is None or other.node_names is None:
            return self
        if self.node_names is None:
            return other
        return PreFilterResult(self.node_names & other.node_names)


class PreFilterPlugin(Plugin[ArgsT]):
    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch
    ) -> tuple[PreFilterResult | None, Status]:
        """Runs once per cycle before Filter. Skip means this plugin's Filter
        does not run this cycle."""
        raise NotImplementedError

    # PreFilterExtensions (upstream framework/interface.go): a plugin whose
    # PreFilter state depends on other pods updates that state when a pod is
    # added to or removed from a node for evaluation: nominated pods in
    # Filter (RunFilterPluginsWithNominatedPods) and victims in preemption's
    # dry runs (SelectVictimsOnNode). ``node`` already holds the change.

    def add_pod(
        self, state: CycleState, pod: PodInfo, pod_to_add: PodInfo, node: NodeInfo
    ) -> Status:
        """AddPod: ``pod_to_add`` now counts on ``node`` for ``pod``'s cycle."""
        return SUCCESS

    def remove_pod(
        self, state: CycleState, pod: PodInfo, pod_to_remove: PodInfo, node: NodeInfo
    ) -> Status:
        """RemovePod: ``pod_to_remove`` no longer counts on ``node``."""
        return SUCCESS

    @classmethod
    def has_extensions(cls) -> bool:
        """Upstream's PreFilterExtensions() != nil: the plugin overrides
        add_pod or remove_pod."""
        return (
            cls.add_pod is not PreFilterPlugin.add_pod
            or cls.remove_pod is not PreFilterPlugin.remove_pod
        )


# NodeVerdicts.all_pass's shared index: -1 for as many candidates as were
# asked for so far (read-only).
_ALL_PASS: npt.NDArray[np.int32] | None = None


@dataclass(slots=True)
class NodeVerdicts:
    """Filter results for a batch: ``status_index[k]`` is -1 when candidate k
    passed, else an index into ``statuses``. Sharing one Status among many
    nodes keeps batch results small."""

    status_index: npt.NDArray[np.int32]
    statuses: list[Status]

    @classmethod
    def all_pass(cls, n: int) -> NodeVerdicts:
        """Every candidate passed. The index is a read-only view of one shared
        array of -1 (no allocation per plugin and batch); code that builds
        verdicts to change starts from its own array."""
        global _ALL_PASS
        shared = _ALL_PASS
        if shared is None or len(shared) < n:
            import numpy as np

            grow = 0 if shared is None else 2 * len(shared)
            shared = np.full(max(n, 1024, grow), -1, dtype=np.int32)
            shared.setflags(write=False)
            _ALL_PASS = shared
        return cls(shared[:n], [])

    @classmethod
    def uniform(cls, n: int, status: Status) -> NodeVerdicts:
        if status.is_success:
            return cls.all_pass(n)
        import numpy as np

        return cls(np.zeros(n, dtype=np.int32), [status])

    @classmethod
    def from_statuses(cls, statuses: list[Status]) -> NodeVerdicts:
        import numpy as np

        table: dict[Status, int] = {}
        index = np.full(len(statuses), -1, dtype=np.int32)
        for k, st in enumerate(statuses):
            if not st.is_success:
                index[k] = table.setdefault(st, len(table))
        return cls(index, list(table))

    @classmethod
    def from_mask(cls, rejected: npt.NDArray[np.bool_], status: Status) -> NodeVerdicts:
        # 0 where rejected, -1 where passed, in one conversion and one
        # in-place subtraction (cheaper than np.where and a cast).
        import numpy as np

        index = rejected.astype(np.int32)
        index -= 1
        return cls(index, [status])

    def passed(self) -> npt.NDArray[np.bool_]:
        return self.status_index < 0

    def status_of(self, k: int) -> Status:
        i = int(self.status_index[k])
        return SUCCESS if i < 0 else self.statuses[i]


class FilterPlugin(Plugin[ArgsT]):
    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Can the pod run on this node? Unschedulable(AndUnresolvable) if not."""
        batch_verdicts = self.filter_nodes(state, pod, _single(node))
        return batch_verdicts.status_of(0)

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> NodeVerdicts:
        """Batch form: one verdict per candidate, aligned with ``nodes``."""
        if type(self).filter is FilterPlugin.filter:
            raise NotImplementedError(f"{self.name} implements neither filter nor filter_nodes")
        return NodeVerdicts.from_statuses([self.filter(state, pod, ni) for ni in nodes])


class NominatingMode(enum.IntEnum):
    """fwk.NominatingMode: whether a failed cycle changes the pod's
    nominated node. A PostFilterResult is always OVERRIDE (upstream's
    NewPostFilterResultWithNominatedNode); a plugin that means NOOP returns
    None."""

    NOOP = 0
    OVERRIDE = 1


@dataclass(frozen=True, slots=True)
class PostFilterResult:
    """upstream's PostFilterResult (NominatingInfo), plus what a preemption
    asks the caller to do, since the server itself holds no credentials
    (preemption/executor.go): evict ``victims`` (in order) so the pod fits
    on ``nominated_node_name``, and clear the nomination of the pods in
    ``clear_nomination_pod_uids``. ``plugin``, the plugin that returned it,
    is filled by the runtime (not part of equality)."""

    nominated_node_name: str = ""
    victims: tuple[PodInfo, ...] = ()
    clear_nomination_pod_uids: tuple[str, ...] = ()
    # How many of the victims a PodDisruptionBudget protects
    # (extenderv1.Victims.NumPDBViolations).
    num_pdb_violations: int = 0
    # Every candidate, none selected, when the caller asked for them
    # (CycleState.preemption_candidates): its extenders narrow them and it
    # selects one (preemption.go Preempt, steps 3 and 4). The fields above
    # are then empty.
    candidates: tuple[Candidate, ...] = ()
    plugin: str = field(default="", compare=False)


class PostFilterPlugin(Plugin[ArgsT]):
    def post_filter(
        self, state: CycleState, pod: PodInfo, rejected: Mapping[str, Status]
    ) -> tuple[PostFilterResult | None, Status]:
        """Runs when no node passed Filter, e.g. to preempt."""
        raise NotImplementedError


class PreScorePlugin(Plugin[ArgsT]):
    def pre_score(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> Status:
        """Runs once before Score over the feasible nodes. Skip means this
        plugin's Score does not run this cycle."""
        raise NotImplementedError


ScoreArray: TypeAlias = "npt.NDArray[np.int64]"


class ScorePlugin(Plugin[ArgsT]):
    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        """The node's score; raise to fail the cycle with an Error status."""
        return int(self.score_nodes(state, pod, _single(node))[0])

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> ScoreArray:
        """Batch form: one score per candidate, aligned with ``nodes``."""
        if type(self).score is ScorePlugin.score:
            raise NotImplementedError(f"{self.name} implements neither score nor score_nodes")
        import numpy as np

        return np.fromiter(
            (self.score(state, pod, ni) for ni in nodes), dtype=np.int64, count=len(nodes)
        )

    def normalize_score(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch, scores: ScoreArray
    ) -> Status:
        """ScoreExtensions.NormalizeScore: rescale ``scores`` in place to
        0..100. Plugins that override this have their scores normalised."""
        return SUCCESS

    @classmethod
    def has_normalize(cls) -> bool:
        return cls.normalize_score is not ScorePlugin.normalize_score


# One part of a pod's scheduling signature: (what it covers, a hashable value).
# Upstream's fwk.SignFragment; the keys are upstream's signer names
# (framework/signers.py) so that plugins reading the same part of a pod agree.
SignFragment = tuple[str, typing.Hashable]


class SignPlugin(Plugin[ArgsT]):
    """Upstream's fwk.SignPlugin (kube-scheduler framework/interface.go, KEP 5598
    opportunistic batching): a PreFilter, Filter, PreScore or Score plugin says
    which parts of a pod its results depend on. Two pods whose fragments are
    equal for every such plugin of a profile must get the same feasibility and
    the same scores on the same nodes in the same state; the framework then
    reuses one pod's ranking for the next (framework/batch.py).

    Batching is off for a profile in which any such plugin is not a
    SignPlugin, so an out-of-tree plugin that does not sign costs nothing but
    the optimisation."""

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """The fragments of ``pod`` this plugin's results depend on, or a
        rejecting Status when the pod cannot be signed (e.g. it has
        inter-pod affinity): that pod is scheduled on its own."""
        raise NotImplementedError

    def signs_any_pod(self) -> bool:
        """False when this plugin's configuration leaves no pod signable
        (PodTopologySpread with default constraints): the profile then does
        not batch, and no cycle spends time signing. Default: True."""
        return True


class ReservePlugin(Plugin[ArgsT]):
    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        raise NotImplementedError

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        """Undo ``reserve``; must be idempotent and must not fail."""
        raise NotImplementedError


class PermitPlugin(Plugin[ArgsT]):
    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        """Success, a rejection, or Wait with a timeout in seconds."""
        raise NotImplementedError


class PreBindPlugin(Plugin[ArgsT]):
    def pre_bind_pre_flight(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """PreBindPreFlight (upstream framework/interface.go): will this
        plugin's PreBind have work for the pod on ``node_name``? Runs at the
        end of the scheduling cycle, once Permit lets the pod on (Success or
        Wait), with the cycle's state. Success: PreBind has work (or may);
        Skip: none, so PreBind is not called for this plugin and, when every
        PreBind plugin skips, the caller need not call PreBind at all; Error:
        the binding cycle fails. Any other code is treated as an Error.

        The default answers Success, which is always safe (PreBind runs as
        before): override it only where the answer is certain, and keep it
        cheap and free of side effects (no writes)."""
        return SUCCESS

    def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """Before binding: Success, or an Error (the binding cycle fails and
        the caller unreserves). Writes go through ``state.add_write``. A
        plugin that must wait for something outside the scheduler (upstream's
        PreBind would block, polling) returns ``Status.wait(...)`` after
        ``state.recheck_pre_bind_after(seconds)``: its writes are performed,
        the pod stays assumed, and PreBind is called again later with fresh
        cluster state and the cycle state this call left (the plugins before
        it are not run again); the plugin ends the wait with Success or an
        Error once its own timeout passes."""
        raise NotImplementedError


class BindPlugin(Plugin[ArgsT]):
    # True when Success means "the caller writes the Binding through the API
    # server": the plugin server holds no credentials (DefaultBinder).
    caller_binds: ClassVar[bool] = False

    def bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """Success when bound (or, with caller_binds, to be bound by the
        caller); Skip to let the next Bind plugin decide."""
        raise NotImplementedError


class PostBindPlugin(Plugin[ArgsT]):
    def post_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        raise NotImplementedError


def _single(node: NodeInfo) -> NodeBatch:
    """A one-node batch, to call a batch method for one node."""
    import numpy as np

    from berth.framework.snapshot import NodeBatch, Snapshot

    if not isinstance(node.owner, Snapshot):
        raise RuntimeError(
            f"node {node.name} is not part of a snapshot; call filter_nodes/score_nodes instead"
        )
    return NodeBatch(node.owner, np.asarray([node.index], dtype=np.int64))


EXTENSION_POINTS: dict[str, type[Plugin]] = {
    "preEnqueue": PreEnqueuePlugin,
    "queueSort": QueueSortPlugin,
    "preFilter": PreFilterPlugin,
    "filter": FilterPlugin,
    "postFilter": PostFilterPlugin,
    "preScore": PreScorePlugin,
    "score": ScorePlugin,
    "reserve": ReservePlugin,
    "permit": PermitPlugin,
    "preBind": PreBindPlugin,
    "bind": BindPlugin,
    "postBind": PostBindPlugin,
}
"""Extension point names as KubeSchedulerConfiguration spells them, in cycle
order, to the interface a plugin implements to serve there."""


# The extension points whose plugins reject pods and so register events
# (framework/runtime/framework.go shouldHaveEnqueueExtensions).
ENQUEUE_EXTENSION_POINTS: tuple[type[Plugin], ...] = (
    PreEnqueuePlugin,
    PreFilterPlugin,
    FilterPlugin,
    ReservePlugin,
    PermitPlugin,
)
