"""The scheduling queue's queueing hint map (pkg/scheduler/backend/queue,
QueueingHintMapPerProfile) built from DescribeProfiles' ``Profile.events``:
which plugin of which profile registered which cluster event, and whether it
has a hint the plugin service answers (QueueingHints).

``HintMap.judge`` is isPodWorthRequeuing (scheduling_queue.go) up to the
hints: a registration without a hint answers Queue at once; the plugins with
a hint for the event are returned for the caller to ask, all the pods of one
event in one QueueingHints call (``ask_hints``).
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from berth.api.v1 import scheduling_pb2 as pb
from berth.framework.events import ActionType, ClusterEvent


class Strategy(enum.IntEnum):
    """Where a pod an event may help goes (scheduling_queue.go
    queueingStrategy); larger wins."""

    # The event cannot help the pod: it stays unschedulable.
    SKIP = 0
    # Retry it once its backoff is over (the backoffQ, or the activeQ when
    # the backoff is already over).
    AFTER_BACKOFF = 1
    # Retry it now: a plugin whose Pending status held it answered Queue.
    IMMEDIATELY = 2


@dataclass(frozen=True, slots=True)
class Registered:
    """One event one plugin of a profile registered."""

    plugin: str
    event: ClusterEvent
    has_hint: bool


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the local half of isPodWorthRequeuing found: ``strategy`` from
    the registrations without hints, and ``ask``, the rejecting plugins with
    a hint for the event. ``decided`` when asking cannot change it."""

    strategy: Strategy
    ask: tuple[str, ...] = ()
    decided: bool = True


_SKIP = Verdict(Strategy.SKIP)
_AFTER_BACKOFF = Verdict(Strategy.AFTER_BACKOFF)
_IMMEDIATELY = Verdict(Strategy.IMMEDIATELY)


class HintMap:
    """Per profile, the events its rejecting plugins registered. A profile
    the map does not know (the plugin service not asked yet, or a shim run
    without one) moves its pods on every event, as upstream treats a profile
    without a hint map (isPodWorthRequeuing: queueAfterBackoff)."""

    def __init__(self, profiles: Mapping[str, Sequence[Registered]] | None = None) -> None:
        self._profiles = {name: tuple(regs) for name, regs in (profiles or {}).items()}
        self._by_plugin: dict[str, dict[str, tuple[ClusterEvent, ...]]] = {
            name: _events_by_plugin(regs) for name, regs in self._profiles.items()
        }
        # Per (profile, event): the plugins whose registrations match it,
        # without and with a hint, in registration order (events recur: one
        # lookup per event instead of a walk of the registrations per pod).
        self._matching: dict[tuple[str, ClusterEvent], tuple[frozenset[str], tuple[str, ...]]] = {}
        self._interested: dict[ClusterEvent, bool] = {}

    @classmethod
    def from_profiles(cls, events: Mapping[str, Iterable[pb.RegisteredEvent]]) -> HintMap:
        """From DescribeProfiles' ``Profile.events`` per profile."""
        return cls(
            {
                name: [
                    Registered(
                        e.plugin, ClusterEvent(e.resource, ActionType(e.action_type)), e.has_hint
                    )
                    for e in regs
                ]
                for name, regs in events.items()
            }
        )

    @property
    def known(self) -> bool:
        """Does the map know any profile?"""
        return bool(self._profiles)

    def has_hints(self) -> bool:
        """Does any registration have a hint (so QueueingHints may be asked)?"""
        return any(r.has_hint for regs in self._profiles.values() for r in regs)

    def interested(self, event: ClusterEvent) -> bool:
        """isEventOfInterest: a wildcard event, an unknown profile, or a
        registration matching it."""
        if event.is_wildcard or not self._profiles:
            return True
        known = self._interested.get(event)
        if known is None:
            known = self._interested[event] = any(
                r.event.matches(event) for regs in self._profiles.values() for r in regs
            )
        return known

    def _matches(self, profile: str, event: ClusterEvent) -> tuple[frozenset[str], tuple[str, ...]]:
        key = (profile, event)
        found = self._matching.get(key)
        if found is None:
            plain: set[str] = set()
            hinted: list[str] = []
            for r in self._profiles.get(profile, ()):
                if not r.event.matches(event):
                    continue
                if r.has_hint:
                    if r.plugin not in hinted:
                        hinted.append(r.plugin)
                else:
                    plain.add(r.plugin)
            found = self._matching[key] = (frozenset(plain), tuple(hinted))
        return found

    def registered(self, profile: str, plugins: Iterable[str]) -> list[tuple[str, list[str]]]:
        """For each of ``plugins`` (sorted) that registered events in
        ``profile``, their labels (ClusterEvent.label, e.g. NodeAdd), with
        "(hint)" after those a QueueingHint judges: what may move a pod
        those plugins rejected or gated."""
        wanted = {p for p in plugins if p}
        found: dict[str, list[str]] = {}
        for r in self._profiles.get(profile, ()):
            if r.plugin in wanted:
                label = r.event.label + (" (hint)" if r.has_hint else "")
                labels = found.setdefault(r.plugin, [])
                if label not in labels:
                    labels.append(label)
        return sorted(found.items())

    def gating_matches(self, profile: str, plugin: str, event: ClusterEvent) -> bool:
        """Whether ``event`` may interest the PreEnqueue plugin that gated a
        pod (movePodsToActiveOrBackoffQueue's GatingPluginEvents check). For
        a profile the map does not know, none does: a gated pod is checked
        again when it is updated."""
        by_plugin = self._by_plugin.get(profile)
        if by_plugin is None:
            return False
        return any(e.matches(event) for e in by_plugin.get(plugin, ()))

    def judge(
        self,
        profile: str,
        unschedulable: frozenset[str],
        pending: frozenset[str],
        event: ClusterEvent,
        *,
        target_uid: str = "",
        pod_uid: str = "",
    ) -> Verdict:
        """isPodWorthRequeuing for one pod, without calling hints.
        ``target_uid``: the one pod a wildcard event is for (ForceActivate of
        a pod in flight), "" for all."""
        rejectors = unschedulable | pending
        if not rejectors:
            return _AFTER_BACKOFF
        if event.is_wildcard:
            if target_uid and target_uid != pod_uid:
                return _SKIP
            return _AFTER_BACKOFF
        if profile not in self._profiles:
            return _AFTER_BACKOFF
        plain, hinted = self._matches(profile, event)
        strategy = Strategy.SKIP
        queued = rejectors & plain
        if queued:
            if queued & pending:
                return _IMMEDIATELY
            strategy = Strategy.AFTER_BACKOFF
        ask = [p for p in hinted if p in rejectors]
        if not ask:
            return _AFTER_BACKOFF if strategy else _SKIP
        # Asking can only raise the strategy: to AFTER_BACKOFF, or to
        # IMMEDIATELY through a Pending plugin.
        if strategy == Strategy.AFTER_BACKOFF and not (set(ask) & pending):
            return _AFTER_BACKOFF
        return Verdict(strategy, tuple(ask), decided=False)

    @staticmethod
    def settle(verdict: Verdict, queueing: Iterable[str], pending: frozenset[str]) -> Strategy:
        """The strategy once the asked plugins answered: ``queueing`` are
        those that answered Queue."""
        strategy = verdict.strategy
        for plugin in queueing:
            if plugin in pending:
                return Strategy.IMMEDIATELY
            strategy = max(strategy, Strategy.AFTER_BACKOFF)
        return strategy

    @staticmethod
    def assume_queue(verdict: Verdict, pending: frozenset[str]) -> Strategy:
        """The strategy when the hints cannot be asked: every asked plugin
        taken as answering Queue (upstream takes a hint's error as Queue)."""
        return HintMap.settle(verdict, verdict.ask, pending)


def _events_by_plugin(regs: Sequence[Registered]) -> dict[str, tuple[ClusterEvent, ...]]:
    out: dict[str, list[ClusterEvent]] = {}
    for r in regs:
        out.setdefault(r.plugin, []).append(r.event)
    return {k: tuple(v) for k, v in out.items()}


# ask_hints(event, old, new, [(profile, pod, plugins)]) -> per pod, the
# plugins that answered Queue (the QueueingHints RPC).
AskHints = Callable[
    [ClusterEvent, Any, Any, Sequence[tuple[str, Any, Sequence[str]]]],
    Awaitable[list[tuple[str, ...]]],
]


__all__ = ["AskHints", "HintMap", "Registered", "Strategy", "Verdict"]
