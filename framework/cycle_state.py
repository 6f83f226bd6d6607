"""CycleState: data one plugin writes and later calls of the same cycle read.

Upstream keeps CycleState in memory for a cycle
(pkg/scheduler/framework/cycle_state.go). Berth's server keeps nothing between
RPCs, so each entry must also travel to the caller and back: a plugin declares
a typed ``StateKey`` whose value type is a ``msgspec.Struct`` (or another type
msgspec can encode), and the framework encodes entries as msgpack on the way
out and decodes them lazily on first read. Decoding is typed, never pickle:
a caller cannot make the server build arbitrary objects.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Generic, TypeVar

import msgspec

from berth.framework.objects import ObjectWrite
from berth.framework.status import Status

T = TypeVar("T")

# The reserved state key under which the pods to activate travel between the
# calls of one cycle: upstream's framework.PodsToActivateKey
# (pkg/scheduler/framework/interface.go), a list of pod uids, msgpack.
PODS_TO_ACTIVATE_KEY: Final = "kubernetes.io/pods-to-activate"
_UIDS_DECODER = msgspec.msgpack.Decoder(list[str])

# The reserved state key under which what PreBindPreFlight found travels from
# the scheduling cycle to the PreBind call: the PreBind plugins that answered
# Skip (upstream's CycleState.SetSkipPreBindPlugins) or the pre-flight's
# Error, msgpack (``PreBindPreFlightRecord``).
PRE_BIND_PRE_FLIGHT_KEY: Final = "berth.dev/pre-bind-pre-flight"


class PreBindPreFlightRecord(msgspec.Struct, frozen=True, omit_defaults=True):
    """The wire form of a CycleState's pre-flight outcome: the PreBind plugins
    to skip, or the Error (message and plugin) that fails the binding cycle."""

    skip: list[str] = []
    error: str = ""
    error_plugin: str = ""
    # PreBind plugins that already succeeded in an earlier PreBind call of the
    # same binding cycle (one answered Wait): not run again.
    done: list[str] = []


_PRE_FLIGHT_DECODER = msgspec.msgpack.Decoder(PreBindPreFlightRecord)


class StateError(KeyError):
    """A state key was read before it was written, or held the wrong type."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "cycle state error"


class StateDecodeError(StateError):
    """An entry sent by the caller does not decode as its key's type: bad
    input, answered with INVALID_ARGUMENT."""


# The names of the keys created with ``scheduling_only=True``: dropped from
# the state a placed pod's response carries to the binding cycle.
_SCHEDULING_ONLY: Final[set[str]] = set()


class StateKey(Generic[T]):
    """A typed CycleState key. Create one per plugin datum at module level.

    ``scheduling_only``: the value is read only within the scheduling cycle
    (PreFilter to PostFilter, PreScore to NormalizeScore; in upstream, keys
    such as interpodaffinity's preFilterStateKey that only those points of
    the plugin read), never by Reserve, Permit or the binding cycle. The
    response that places a pod then leaves it out of the state it hands to
    the binding cycle (``CycleState.encode(binding=True)``), which spares
    encoding, sending and decoding it. Every other response carries it:
    the calls that go on with the scheduling cycle (extenders, PostFilter)
    need it.

    A value type may keep an in-memory form other than its wire form: it
    then has a class attribute ``Wire`` (a msgspec Struct), a method
    ``to_wire()`` returning one, and a classmethod ``from_wire(wire)``
    building the value from one. Encoding calls ``to_wire``, decoding
    decodes a ``Wire`` (typed, as any entry) and calls ``from_wire``."""

    __slots__ = ("_decoder", "_from_wire", "name", "scheduling_only", "type")

    def __init__(self, name: str, type_: type[T], *, scheduling_only: bool = False) -> None:
        if name == PODS_TO_ACTIVATE_KEY:
            raise ValueError(
                f"state key {name!r} is reserved for the pods to activate: use "
                "CycleState.activate_pods"
            )
        if name == PRE_BIND_PRE_FLIGHT_KEY:
            raise ValueError(
                f"state key {name!r} is reserved for the PreBind plugins that "
                "PreBindPreFlight skipped: the runtime keeps it"
            )
        self.name = name
        self.type = type_
        self.scheduling_only = scheduling_only
        if scheduling_only:
            _SCHEDULING_ONLY.add(name)
        wire = getattr(type_, "Wire", None)
        self._from_wire: Callable[[Any], T] | None = (
            None if wire is None else type_.from_wire  # type: ignore[attr-defined]
        )
        self._decoder: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(
            type_ if wire is None else wire
        )

    def decode(self, data: bytes) -> T:
        try:
            value = self._decoder.decode(data)
        except msgspec.DecodeError as exc:
            raise StateDecodeError(
                f"cycle state {self.name!r} does not decode as {self.type.__name__}: {exc}"
            ) from exc
        if self._from_wire is not None:
            return self._from_wire(value)
        out: T = value
        return out

    def __repr__(self) -> str:
        return f"StateKey({self.name!r}, {self.type.__name__})"


def _to_wire(value: Any) -> Any:
    """msgspec's enc_hook: the wire form of a value msgspec cannot encode
    itself (StateKey's ``to_wire``)."""
    to_wire = getattr(value, "to_wire", None)
    if to_wire is None:
        raise NotImplementedError(f"cannot encode {type(value).__name__}: it has no to_wire()")
    return to_wire()


_ENCODER = msgspec.msgpack.Encoder(enc_hook=_to_wire)


class CycleState:
    """The state of one scheduling cycle.

    Values written in this process stay Python objects; values received from a
    caller stay encoded until a plugin reads them with their key.

    Besides data, a call collects what plugins ask the caller to do (they
    travel in the response of the call, never in the state sent back):
    writes (``add_write``, PreBind/PostBind), annotations on the assumed pod
    (``annotate_assumed_pod``, Reserve) and signals to waiting pods
    (``signal_waiting_pod``, PostFilter/Permit/Unreserve). The runtime sets
    ``current_plugin`` around each plugin call so each is attributed.

    Pods to activate (``activate_pods``, upstream's PodsToActivate) are the
    exception: like upstream's, they live in the state itself, under the
    reserved key ``PODS_TO_ACTIVATE_KEY``, so what PreFilter .. Reserve ask
    for reaches the end of the scheduling cycle (Permit) when each point is
    its own call; the runtime takes them out when the caller is to act.

    So is what PreBindPreFlight found (``skip_pre_bind_plugins``, upstream's
    Set/GetSkipPreBindPlugins, and ``pre_bind_pre_flight_error``): it is
    worked out at the end of the scheduling cycle and read by the PreBind
    call, so it travels under the reserved key ``PRE_BIND_PRE_FLIGHT_KEY``,
    with the PreBind plugins that already succeeded when a PreBind call
    answered Wait (``pre_bind_done``), so the next call runs only the rest.
    """

    __slots__ = (
        "_activate",
        "_encoded",
        "_values",
        "_writes",
        "assume_annotations",
        "current_plugin",
        "permit_signals",
        "pre_bind_done",
        "pre_bind_pre_flight_error",
        "pre_bind_recheck_after",
        "preemption_candidates",
        "skip_filter_plugins",
        "skip_pre_bind_plugins",
        "skip_score_plugins",
    )

    def __init__(self) -> None:
        self._values: dict[str, object] = {}
        self._encoded: dict[str, bytes] = {}
        self.skip_filter_plugins: set[str] = set()
        self.skip_score_plugins: set[str] = set()
        # PreBind plugins whose PreBindPreFlight answered Skip: their PreBind
        # is not run (upstream's SetSkipPreBindPlugins).
        self.skip_pre_bind_plugins: set[str] = set()
        # The Error of RunPreBindPreFlights, if it failed: the binding cycle
        # fails with it (the PreBind call answers it without running plugins).
        self.pre_bind_pre_flight_error: Status | None = None
        # PreBind plugins that succeeded in an earlier PreBind call of this
        # binding cycle (a later plugin answered Wait): not run again.
        self.pre_bind_done: set[str] = set()
        # Seconds after which a PreBind plugin that answers Wait asks to be
        # called again (``recheck_pre_bind_after``); 0: not asked.
        self.pre_bind_recheck_after = 0.0
        # (pod uid, plugin, allow, message) signals raised by Permit or
        # Unreserve plugins for pods that are already waiting; the caller
        # applies them.
        self.permit_signals: list[tuple[str, str, bool, str]] = []
        # (plugin, write) in the order plugins added them.
        self._writes: list[tuple[str, ObjectWrite]] = []
        # Annotations Reserve plugins put on the assumed pod.
        self.assume_annotations: dict[str, str] = {}
        # Uids of pods to move to the active queue, in the order asked (a
        # dict as an ordered set).
        self._activate: dict[str, None] = {}
        # The plugin the runtime is calling, "" outside plugin calls.
        self.current_plugin = ""
        # The caller's HTTP extenders process this cycle's preemption
        # (upstream's Handle.Extenders, which a stateless server has not): a
        # preempting PostFilter plugin answers every candidate unselected
        # (PostFilterResult.candidates) and the caller selects after its
        # extenders. Set from the request; not sent back.
        self.preemption_candidates = False

    # -- what plugins ask the caller to do -----------------------------------

    def add_write(self, write: ObjectWrite) -> None:
        """Asks the caller to apply ``write`` (a JSON merge patch) with its own
        credentials: honoured from PreBind (before binding; a failed write
        fails the binding cycle), PostBind (after binding), PostFilter
        (after the failed cycle; a failure is only reported) and the binding
        cycle's Unreserve (best effort, undoing PreBind's). Writes are
        performed in the order they were added."""
        if not isinstance(write, ObjectWrite):
            raise TypeError(f"add_write takes an ObjectWrite, got {type(write).__name__}")
        target = f"{write.resource}.{write.group or 'core'} {write.namespace}/{write.name}"
        if not write.resource or not write.name or not write.version:
            raise ValueError(f"ObjectWrite {target}: resource, version and name must be set")
        if not isinstance(write.merge_patch, Mapping):
            raise ValueError(
                f"ObjectWrite {target}: merge_patch must be a mapping (a JSON object), "
                f"got {type(write.merge_patch).__name__}"
            )
        try:
            json.dumps(write.merge_patch)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"ObjectWrite {target}: merge_patch is not JSON: {exc}") from exc
        self._writes.append((self.current_plugin, write))

    def annotate_assumed_pod(self, key: str, value: str) -> None:
        """During Reserve: the caller puts ``key: value`` on its assumed copy of
        the pod, so later cycles see it in the pod's annotations. To keep it
        on the real pod, also write it at PreBind (``add_write``)."""
        if not isinstance(key, str) or not key:
            raise ValueError(f"annotate_assumed_pod: key must be a non-empty string, got {key!r}")
        if not isinstance(value, str):
            raise ValueError(
                f"annotate_assumed_pod: value of {key!r} must be a string, "
                f"got {type(value).__name__}"
            )
        self.assume_annotations[key] = value

    def signal_waiting_pod(self, pod_uid: str, allow: bool, message: str = "") -> None:
        """During Permit or Unreserve: asks the caller to allow (or reject, with
        ``message``) the pod ``pod_uid`` that waits in Permit, upstream's
        WaitingPod.Allow/Reject."""
        if not pod_uid:
            raise ValueError("signal_waiting_pod: pod_uid must not be empty")
        self.permit_signals.append((pod_uid, self.current_plugin, bool(allow), message))

    def recheck_pre_bind_after(self, seconds: float) -> None:
        """During PreBind, with a Wait answer: the plugin waits for something
        outside the scheduler (upstream's PreBind would block, polling) and
        asks the caller to call PreBind again in ``seconds`` (> 0) with fresh
        cluster state. The caller performs the writes added so far and keeps
        the pod assumed meanwhile; the plugins that already succeeded are not
        run again. The plugin ends the wait: Success, or an Error once its own
        timeout passes."""
        if not seconds > 0:
            raise ValueError(f"recheck_pre_bind_after: seconds must be positive, got {seconds!r}")
        self.pre_bind_recheck_after = float(seconds)

    def activate_pods(self, uids: Iterable[str]) -> None:
        """Asks the caller to move the pending pods ``uids`` to its active
        queue when they wait in its backoff or unschedulable pools (upstream's
        PodsToActivate, filled e.g. by Coscheduling's ActivateSiblings). Honoured
        at the end of a scheduling cycle that succeeds (Permit answers Success
        or Wait), for what any point from PreFilter to Permit asked, and at the
        end of a binding cycle that succeeds, for what PreBind and PostBind
        asked; a failed cycle activates nothing. Pods the caller does not hold
        in those pools are left as they are."""
        if isinstance(uids, (str, bytes)):
            raise TypeError("activate_pods takes an iterable of pod uids, not one string")
        for uid in uids:
            if not isinstance(uid, str) or not uid:
                raise ValueError(
                    f"activate_pods: a pod uid must be a non-empty string, got {uid!r}"
                )
            self._activate[uid] = None

    @property
    def pods_to_activate(self) -> list[str]:
        """The uids asked for so far, in order, each once."""
        return list(self._activate)

    def take_activations(self) -> list[str]:
        """The uids asked for so far; clears them (upstream clears the map
        once the scheduling cycle has activated them)."""
        out = list(self._activate)
        self._activate.clear()
        return out

    @property
    def writes(self) -> list[ObjectWrite]:
        """The writes added so far, in order."""
        return [w for _, w in self._writes]

    @property
    def plugin_writes(self) -> list[tuple[str, ObjectWrite]]:
        """(plugin, write) pairs, in order."""
        return list(self._writes)

    def take_writes(self) -> list[tuple[str, ObjectWrite]]:
        """The (plugin, write) pairs added so far; clears them."""
        out, self._writes = self._writes, []
        return out

    def drop_writes_after(self, count: int) -> None:
        """Forgets writes added after the first ``count`` (a failed PreBind)."""
        del self._writes[count:]

    def take_signals(self) -> list[tuple[str, str, bool, str]]:
        """The waiting-pod signals raised so far; clears them."""
        out, self.permit_signals = self.permit_signals, []
        return out

    def write(self, key: StateKey[T], value: T) -> None:
        self._values[key.name] = value
        self._encoded.pop(key.name, None)

    def read(self, key: StateKey[T]) -> T:
        """The value under ``key``; StateError when it was never written."""
        value = self._values.get(key.name, _MISSING)
        if value is _MISSING:
            raw = self._encoded.pop(key.name, None)
            if raw is None:
                raise StateError(
                    f"cycle state has no {key.name!r}: its PreFilter/PreScore did not run"
                )
            value = key.decode(raw)
            self._values[key.name] = value
        if not isinstance(value, key.type):
            raise StateError(
                f"cycle state {key.name!r} holds {type(value).__name__}, not {key.type.__name__}"
            )
        return value

    def get(self, key: StateKey[T]) -> T | None:
        """The value under ``key``, or None when it was never written."""
        try:
            return self.read(key)
        except StateError:
            if key.name in self._values or key.name in self._encoded:
                raise
            return None

    def delete(self, key: StateKey[Any]) -> None:
        self._values.pop(key.name, None)
        self._encoded.pop(key.name, None)

    def __contains__(self, key: StateKey[Any]) -> bool:
        return key.name in self._values or key.name in self._encoded

    def clone(self) -> CycleState:
        """A copy for what-if evaluation (upstream's Clone, used by preemption).

        Python values are shared, so plugins must treat written values as
        immutable and write a new value instead of changing one in place.
        """
        other = CycleState()
        other._values = dict(self._values)
        other._encoded = dict(self._encoded)
        # Shared, as upstream's PodsToActivate.Clone returns itself.
        other._activate = self._activate
        other.skip_filter_plugins = set(self.skip_filter_plugins)
        other.skip_score_plugins = set(self.skip_score_plugins)
        other.skip_pre_bind_plugins = set(self.skip_pre_bind_plugins)
        other.pre_bind_pre_flight_error = self.pre_bind_pre_flight_error
        other.pre_bind_done = set(self.pre_bind_done)
        other.preemption_candidates = self.preemption_candidates
        return other

    # -- wire form ---------------------------------------------------------

    def encode(self, binding: bool = False) -> dict[str, bytes]:
        """Every entry as bytes, for the response; with ``binding``, for the
        binding cycle of a placed pod, without the entries of keys created
        ``scheduling_only``."""
        if binding:
            out = {n: v for n, v in self._encoded.items() if n not in _SCHEDULING_ONLY}
            for name, value in self._values.items():
                if name not in _SCHEDULING_ONLY:
                    out[name] = _ENCODER.encode(value)
        else:
            out = dict(self._encoded)
            for name, value in self._values.items():
                out[name] = _ENCODER.encode(value)
        if self._activate:
            out[PODS_TO_ACTIVATE_KEY] = _ENCODER.encode(list(self._activate))
        err = self.pre_bind_pre_flight_error
        if err is not None:
            out[PRE_BIND_PRE_FLIGHT_KEY] = _ENCODER.encode(
                PreBindPreFlightRecord(error=err.message or "error", error_plugin=err.plugin)
            )
        elif self.skip_pre_bind_plugins or self.pre_bind_done:
            out[PRE_BIND_PRE_FLIGHT_KEY] = _ENCODER.encode(
                PreBindPreFlightRecord(
                    skip=sorted(self.skip_pre_bind_plugins), done=sorted(self.pre_bind_done)
                )
            )
        return out

    @classmethod
    def decode(
        cls,
        data: Mapping[str, bytes],
        skip_filter: Iterable[str] = (),
        skip_score: Iterable[str] = (),
    ) -> CycleState:
        state = cls()
        state._encoded = dict(data)
        raw = state._encoded.pop(PODS_TO_ACTIVATE_KEY, None)
        if raw is not None:
            try:
                uids = _UIDS_DECODER.decode(raw)
            except msgspec.DecodeError as exc:
                raise StateDecodeError(
                    f"cycle state {PODS_TO_ACTIVATE_KEY!r} is not a msgpack list of pod uids: {exc}"
                ) from exc
            state._activate = dict.fromkeys(u for u in uids if u)
        raw = state._encoded.pop(PRE_BIND_PRE_FLIGHT_KEY, None)
        if raw is not None:
            try:
                record = _PRE_FLIGHT_DECODER.decode(raw)
            except msgspec.DecodeError as exc:
                raise StateDecodeError(
                    f"cycle state {PRE_BIND_PRE_FLIGHT_KEY!r} is not a msgpack map with "
                    f"skip and done (plugin names), error and error_plugin (strings): {exc}"
                ) from exc
            state.skip_pre_bind_plugins = {n for n in record.skip if n}
            state.pre_bind_done = {n for n in record.done if n}
            if record.error:
                state.pre_bind_pre_flight_error = Status.error(record.error, record.error_plugin)
        state.skip_filter_plugins = set(skip_filter)
        state.skip_score_plugins = set(skip_score)
        return state


_MISSING = object()
