"""shim/leader.py against a real kube-apiserver: candidates contending for one Lease.

Short durations (lease 3s, renew deadline 2s, retry 0.5s) keep the test quick; the Lease
lives in the test's namespace. Waits are on the electors' own events, each bounded by
what client-go's timing allows, so a slow or early hand-over fails with the numbers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from berth.dev.localcluster import Cluster
from berth.framework.profile import LeaderElectionConfig
from berth.kube.rest import JSON, KubeApi
from berth.shim.leader import JITTER_FACTOR, LeaderElector, lease_path

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

LEASE = "berth-scheduler"
CONFIG = LeaderElectionConfig(
    lease_duration_seconds=3.0, renew_deadline_seconds=2.0, retry_period_seconds=0.5
)
RETRY = CONFIG.retry_period_seconds
# A candidate's next attempt comes at most this long after its last (acquire's jitter).
MAX_RETRY_GAP = RETRY * (1 + JITTER_FACTOR)
# Room for API round trips and the event loop on a busy machine.
SLACK = 1.5
FIRST_LEADER_BOUND = 10.0


@dataclass
class Candidate:
    """An elector running ``run()`` in a task; ``started`` is set when it leads."""

    elector: LeaderElector
    started: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    async def lead(self) -> None:
        self.started.set()
        await asyncio.Event().wait()  # lead until cancelled

    def start(self) -> Candidate:
        self.task = asyncio.create_task(
            self.elector.run(self.lead), name=f"candidate {self.elector.identity}"
        )
        return self

    @property
    def identity(self) -> str:
        return self.elector.identity


@pytest.fixture
def candidate(cluster: Cluster, namespace: str) -> Iterator[Callable[[str], Candidate]]:
    """``candidate(name)`` starts an elector (a KubeApi client of its own) on the test's
    Lease; tasks are cancelled and clients closed at the end."""
    made: list[tuple[Candidate, KubeApi]] = []

    def make(name: str) -> Candidate:
        api = KubeApi.from_kubeconfig(str(cluster.kubeconfig))
        elector = LeaderElector(
            api, CONFIG, identity=f"{name}-{namespace}", lease_name=LEASE, lease_namespace=namespace
        )
        c = Candidate(elector).start()
        made.append((c, api))
        return c

    yield make
    for c, api in made:
        if c.task is not None:
            c.task.cancel()
        api.close()


async def read_lease(kube: KubeApi, namespace: str) -> JSON:
    """The Lease as the API server has it (on a thread: the electors share this loop)."""
    spec: JSON = (await asyncio.to_thread(kube.get, lease_path(namespace, LEASE)))["spec"]
    return spec


async def until(what: str, event: asyncio.Event, bound: float) -> float:
    """Wait for ``event`` at most ``bound`` seconds; the seconds it took."""
    began = time.monotonic()
    try:
        await asyncio.wait_for(event.wait(), bound)
    except TimeoutError:
        pytest.fail(f"{what}: not within {bound:.1f}s")
    return time.monotonic() - began


async def first_to_lead(candidates: list[Candidate]) -> Candidate:
    """The first of ``candidates`` to lead, within FIRST_LEADER_BOUND seconds."""
    waiters = {asyncio.create_task(c.started.wait()): c for c in candidates}
    done, pending = await asyncio.wait(
        waiters, timeout=FIRST_LEADER_BOUND, return_when=asyncio.FIRST_COMPLETED
    )
    for w in pending:
        w.cancel()
    if not done:
        pytest.fail(f"none of {len(candidates)} candidates led within {FIRST_LEADER_BOUND}s")
    return waiters[done.pop()]


async def standing_by(c: Candidate, holder: Candidate) -> None:
    """Wait until ``c`` has read the Lease and seen ``holder`` in it (it polls each retry
    period; there is no event to await for a read that changes nothing)."""
    deadline = time.monotonic() + FIRST_LEADER_BOUND
    while c.elector.observed_holder() != holder.identity:
        if time.monotonic() > deadline:
            pytest.fail(
                f"{c.identity} did not see {holder.identity} hold the lease within "
                f"{FIRST_LEADER_BOUND}s (it sees {c.elector.observed_holder()!r})"
            )
        await asyncio.sleep(RETRY / 5)


async def test_one_leader_clean_hand_over_then_take_over_after_a_crash(
    candidate: Callable[[str], Candidate], kube: KubeApi, namespace: str
) -> None:
    """leaderelection.go acquire/renew/release end to end, through the real API server's
    optimistic concurrency: one of two candidates leads; a stop() releases the Lease and the
    standby takes it at its next attempt; a leader that dies without releasing is replaced
    once the lease duration has passed without a renewal, and not before."""
    a, b = candidate("a"), candidate("b")
    leader = await first_to_lead([a, b])
    standby = b if leader is a else a

    # Exactly one leads, and the other has seen it and stands by.
    await standing_by(standby, leader)
    assert leader.elector.is_leader
    assert not standby.elector.is_leader and not standby.started.is_set()
    spec = await read_lease(kube, namespace)
    assert spec["holderIdentity"] == leader.identity
    assert spec["leaseDurationSeconds"] == 3
    transitions = spec["leaseTransitions"]

    # A clean stop releases the Lease: the standby takes it at its next attempt.
    await asyncio.wait_for(leader.elector.stop(), CONFIG.renew_deadline_seconds + SLACK)
    released = await read_lease(kube, namespace)
    assert released["holderIdentity"] == ""
    assert released["leaseDurationSeconds"] == 1
    await until("the standby taking the released lease", standby.started, MAX_RETRY_GAP + SLACK)
    spec = await read_lease(kube, namespace)
    assert spec["holderIdentity"] == standby.identity, spec
    assert spec["leaseTransitions"] == transitions + 1

    # A crash (run() cancelled: no release) leaves the Lease naming the dead leader until
    # a full lease duration passes without the standby seeing a renewal.
    leader, standby = standby, candidate("c")
    await standing_by(standby, leader)
    assert leader.task is not None
    leader.task.cancel()
    crashed_at = time.monotonic()
    with pytest.raises(asyncio.CancelledError):
        await leader.task
    spec = await read_lease(kube, namespace)
    assert spec["holderIdentity"] == leader.identity, "a crashed leader must not release"

    # The standby saw the last renewal at most one (jittered) retry gap after the crash,
    # and takes over at its first attempt a lease duration after that.
    bound = CONFIG.lease_duration_seconds + 2 * MAX_RETRY_GAP + SLACK
    await until("the standby taking over from a crashed leader", standby.started, bound)
    took = time.monotonic() - crashed_at
    # The last renewal was written at most one retry period (plus a round trip) before
    # the crash, so the lease cannot have expired much sooner than a duration after it.
    earliest = CONFIG.lease_duration_seconds - RETRY - 0.5
    assert took >= earliest, f"took over {took:.2f}s after the crash: before the lease expired"
    spec = await read_lease(kube, namespace)
    assert spec["holderIdentity"] == standby.identity
    assert spec["leaseTransitions"] == transitions + 2
    await standby.elector.stop()
