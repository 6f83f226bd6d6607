"""Which generation each replica behind one channel confirmed holding, so the
client sends each a delta it can apply (protos/README.md, "Replicas: what to
send to whom")."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

# The package's logger: every line of the client names berth.client.
log = logging.getLogger("berth.client")


@dataclass(slots=True)
class _Replica:
    # The generation it confirmed holding; -1 when it needs a full state.
    generation: int
    last_seen: float
    # ReplicaTracker._answers when it last answered.
    last_answer: int


class ReplicaTracker:
    """The generations the replicas behind one channel confirmed, by replica
    id (the ``berth-replica`` trailer; "" for a server that sends none).

    ``base()`` is the generation to send a delta from: the lowest any known
    replica confirmed, so whichever replica the channel picks can apply it;
    0 (a full state) while a known replica needs one, until it confirms.
    A replica that has not answered for a while (``forget_answers`` answers by
    others, or ``forget_seconds``) is forgotten, so a replica gone for good
    does not hold the base back; one that returns is at worst resent to from
    its own generation.

    ``exclusive``: the channel reaches one replica at a time (one address):
    a new id there replaces the previous one (the process was restarted).
    """

    def __init__(
        self,
        *,
        exclusive: bool = False,
        forget_answers: int = 64,
        forget_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.exclusive = exclusive
        self.forget_answers = forget_answers
        self.forget_seconds = forget_seconds
        self.clock = clock
        self.replicas: dict[str, _Replica] = {}
        self._answers = 0
        self._latest = 0.0
        # The base while no replica is known: 0, a full state.
        self._assumed = 0

    def base(self, *, optimistic: bool = False) -> int:
        """``optimistic``: leave out replicas that need a full state, for a
        request whose resend goes to the same replica (a stream): if it lands
        on one of them, that one answers STALE_SNAPSHOT and gets its full
        state, and nobody else does."""
        self._forget()
        known = [r.generation for r in self.replicas.values()]
        if optimistic:
            known = [g for g in known if g > 0]
        if not known:
            return self._assumed
        return max(0, min(known))

    def assume(self, generation: int) -> None:
        """Treat every known replica (and the next unknown one) as holding
        ``generation``; a wrong guess costs one STALE_SNAPSHOT answer."""
        self._assumed = generation
        for r in self.replicas.values():
            r.generation = generation

    def confirmed(self, replica: str, generation: int) -> bool:
        """``replica`` answered a request at ``generation``. True when the
        replica is new to this tracker."""
        r, new = self._seen(replica)
        r.generation = max(r.generation, generation)
        return new

    def stale(self, replica: str, have: int) -> bool:
        """``replica`` answered STALE_SNAPSHOT holding ``have`` (-1: nothing).
        True when the replica is new to this tracker."""
        r, new = self._seen(replica)
        r.generation = have if have > 0 else -1
        return new

    def needs_full(self) -> list[str]:
        return [k for k, r in self.replicas.items() if r.generation <= 0]

    def _seen(self, replica: str) -> tuple[_Replica, bool]:
        self._answers += 1
        now = self.clock()
        self._latest = max(self._latest, now)
        r = self.replicas.get(replica)
        new = r is None
        if r is None:
            if self.exclusive:
                self.replicas.clear()
            r = self.replicas[replica] = _Replica(-1, now, self._answers)
        r.last_seen = now
        r.last_answer = self._answers
        return r, new

    def _forget(self) -> None:
        if len(self.replicas) < 2:
            return
        # A replica needing a full state is waited for less long: with round
        # robin it answers again within one round.
        patience = max(self.forget_answers, 4 * len(self.replicas))
        patience_full = max(4, 2 * len(self.replicas))
        for key, r in list(self.replicas.items()):
            quiet = self._answers - r.last_answer
            if (
                quiet > (patience_full if r.generation <= 0 else patience)
                or self._latest - r.last_seen > self.forget_seconds
            ):
                log.info(
                    "replica %s not heard from in %d answers / %.0fs: forgotten",
                    key or "(unnamed)",
                    quiet,
                    self._latest - r.last_seen,
                )
                del self.replicas[key]
