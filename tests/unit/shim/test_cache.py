"""shim/cache.py SchedulerCache, after upstream's pkg/scheduler/backend/cache/cache.go.

Each test names the upstream function whose behaviour it pins down. The cache's
truth is its ClusterStateLog: what the plugin service sees is what a replica
gets from ``state_since`` after a commit.
"""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from berth.api.v1 import cluster_pb2 as cpb
from berth.client import ClusterStateLog
from berth.framework.testing import make_node, make_pod
from berth.shim.cache import AssumeRefused, SchedulerCache
from tests.unit.shim.fakes import FakeClock

T0 = 1_760_000_000.0
TTL = 30.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def cache(clock: FakeClock) -> SchedulerCache:
    c = SchedulerCache(ClusterStateLog("c1"), clock=clock)
    for name in ("n1", "n2"):
        c.upsert_node(make_node(name).capacity(cpu="4", memory="8Gi", pods=110).obj())
    c.state.commit()
    return c


def pending_pod(uid: str = "p1", cpu: str = "1") -> cpb.Pod:
    """A pod as the queue holds it: not bound to a node."""
    return make_pod(uid).uid(uid).req(cpu=cpu).obj()


def bound(pod: cpb.Pod, node: str, phase: str = "Running") -> cpb.Pod:
    """The pod as the informer reports it once bound."""
    out = cpb.Pod()
    out.CopyFrom(pod)
    out.node_name = node
    out.phase = phase
    return out


def committed_delta(cache: SchedulerCache) -> cpb.ClusterDelta:
    """What a replica at the previous generation receives after the next commit."""
    base = cache.state.generation
    cache.state.commit()
    st = cache.state.state_since(base)
    assert not st.full
    return st.delta


def pods_on(cache: SchedulerCache, node: str) -> list[str]:
    return sorted(uid for uid, p in cache.state.pods.items() if p.node_name == node)


def cache_size(kind: str) -> float:
    value = REGISTRY.get_sample_value("scheduler_cache_size", {"type": kind})
    assert value is not None
    return value


# -- AssumePod / ForgetPod -------------------------------------------------------------


def test_assume_counts_the_pod_on_its_node_at_once(cache: SchedulerCache) -> None:
    """AssumePod: the pod occupies the node before the binding is written, so the
    next cycle (the next commit) sees the node's resources taken."""
    pod = pending_pod()
    assumed = cache.assume(pod, "n1")

    assert assumed.node_name == "n1"
    assert pod.node_name == "", "assume works on a copy; the queue's pod is untouched"
    assert cache.is_assumed("p1")
    assert cache.holds("p1")
    assert pods_on(cache, "n1") == ["p1"]
    delta = committed_delta(cache)
    assert [(p.uid, p.node_name) for p in delta.upsert_pods] == [("p1", "n1")]
    assert not delta.delete_pods


def test_assumed_copy_with_reserve_annotations_is_marked_assumed(cache: SchedulerCache) -> None:
    """Reserve's assume annotations go on the assumed copy, which is marked
    ``assumed`` (cluster.proto Pod.assumed) so plugins trust them there only;
    a copy without annotations stays unmarked, as the informer's record will
    be."""
    marked = cache.assume(pending_pod("p1"), "n1", {"example.dev/reserved": "x"})
    plain = cache.assume(pending_pod("p2"), "n2")
    assert marked.assumed and dict(marked.annotations) == {"example.dev/reserved": "x"}
    assert not plain.assumed
    delta = committed_delta(cache)
    assert {p.uid: p.assumed for p in delta.upsert_pods} == {"p1": True, "p2": False}


def test_forget_gives_the_node_its_resources_back(cache: SchedulerCache) -> None:
    """ForgetPod: the binding failed; the pod leaves the node in the next delta."""
    cache.assume(pending_pod(), "n1")
    cache.state.commit()

    cache.forget("p1")

    assert not cache.is_assumed("p1")
    assert not cache.holds("p1")
    delta = committed_delta(cache)
    assert list(delta.delete_pods) == ["p1"]
    assert not delta.upsert_pods


def test_assume_then_forget_before_a_commit_sends_no_pod(cache: SchedulerCache) -> None:
    """An assumption undone before any request carried it never reaches a replica
    as a placed pod (the uid may still be named as a delete: a no-op there)."""
    cache.assume(pending_pod(), "n1")
    cache.forget("p1")

    delta = committed_delta(cache)
    assert not delta.upsert_pods
    assert list(delta.delete_pods) in ([], ["p1"])
    assert cache.state.pods == {}


def test_forget_leaves_a_pod_the_informer_confirmed_alone(cache: SchedulerCache) -> None:
    """ForgetPod only undoes an assumption: once AddPod confirmed the pod it is
    the API server's truth, and a late forget does not remove it."""
    pod = pending_pod()
    cache.assume(pod, "n1")
    cache.add_or_update_pod(bound(pod, "n1"))

    cache.forget("p1")

    assert cache.holds("p1")
    assert pods_on(cache, "n1") == ["p1"]


def test_AssumePod_refuses_a_pod_the_informer_reports_bound(cache: SchedulerCache) -> None:
    """cache.go AssumePod: a pod already in the cache is refused and nothing
    changes. The informer reported the pod bound to n1 while a cycle placed it on
    n2: assuming it would move its usage to n2, and the binding's failure (409)
    would then forget it, leaving n1 short of a pod that is there."""
    pod = pending_pod()
    cache.add_or_update_pod(bound(pod, "n1"))
    cache.state.commit()

    with pytest.raises(AssumeRefused) as refused:
        cache.assume(pod, "n2")

    assert (refused.value.node, refused.value.assumed) == ("n1", False)
    assert not cache.is_assumed("p1")
    assert pods_on(cache, "n1") == ["p1"] and pods_on(cache, "n2") == []
    assert not cache.state.has_pending
    # ForgetPod of a pod that is not assumed removes nothing.
    assert cache.forget("p1") is False
    assert pods_on(cache, "n1") == ["p1"]


def test_AssumePod_refuses_a_pod_already_assumed(cache: SchedulerCache) -> None:
    pod = pending_pod()
    cache.assume(pod, "n1")

    with pytest.raises(AssumeRefused) as refused:
        cache.assume(pod, "n2")

    assert (refused.value.node, refused.value.assumed) == ("n1", True)
    assert pods_on(cache, "n1") == ["p1"] and pods_on(cache, "n2") == []


def test_a_nominated_pod_can_be_assumed(cache: SchedulerCache) -> None:
    """A nomination is not a placement: assume replaces it (DeleteNominatedPodIfExists)."""
    pod = pending_pod()
    cache.nominate(pod, "n2")
    cache.assume(pod, "n1")
    assert pods_on(cache, "n1") == ["p1"]
    assert cache.nominated == {}


def test_bound_node_is_what_the_informer_reported(cache: SchedulerCache) -> None:
    """Only the informer's word counts: an assumed or nominated pod is not bound."""
    assumed, nominated, confirmed = pending_pod("a"), pending_pod("n"), pending_pod("c")
    cache.assume(assumed, "n1")
    cache.nominate(nominated, "n1")
    cache.add_or_update_pod(bound(confirmed, "n2"))
    assert [cache.bound_node(u) for u in ("a", "n", "c", "ghost")] == ["", "", "n2", ""]


# -- AddPod / UpdatePod / RemovePod from the informer ----------------------------------


@pytest.mark.parametrize(
    ("assumed_on", "landed_on"),
    [("n1", "n1"), ("n1", "n2")],
    ids=["where-assumed", "elsewhere"],
)
def test_informer_add_confirms_an_assumed_pod_wherever_it_landed(
    cache: SchedulerCache, assumed_on: str, landed_on: str
) -> None:
    """AddPod on an assumed pod: updatePod replaces the assumption with the real
    pod, also when "the pod was added to a different node than it was assumed
    to" (the assumed node gets its resources back), and the pod is no longer
    assumed."""
    pod = pending_pod()
    cache.assume(pod, assumed_on)
    cache.finish_binding("p1")
    cache.state.commit()

    confirmed = cache.add_or_update_pod(bound(pod, landed_on))

    assert confirmed is True
    assert cache.assumed == {}
    assert not cache.is_assumed("p1")
    assert pods_on(cache, landed_on) == ["p1"]
    if assumed_on != landed_on:
        assert pods_on(cache, assumed_on) == []
    delta = committed_delta(cache)
    assert [(p.uid, p.node_name) for p in delta.upsert_pods] == [("p1", landed_on)]


def test_informer_add_of_a_pod_we_did_not_assume_confirms_nothing(
    cache: SchedulerCache,
) -> None:
    """AddPod of a pod another scheduler (or a kubelet) placed: just added."""
    other = bound(pending_pod("other"), "n2")
    assert cache.add_or_update_pod(other) is False
    assert pods_on(cache, "n2") == ["other"]
    assert cache.assumed == {}


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_a_finished_pod_leaves_its_node(cache: SchedulerCache, phase: str) -> None:
    """Terminal pods do not occupy nodes: upstream's pod informer lists only
    non-terminal pods (scheduler.go newPodInformer, field selector
    status.phase!=Succeeded,status.phase!=Failed), so a pod that finishes is a
    RemovePod for the cache."""
    pod = bound(pending_pod(), "n1")
    cache.add_or_update_pod(pod)
    cache.state.commit()

    cache.add_or_update_pod(bound(pod, "n1", phase=phase))

    assert not cache.holds("p1")
    assert pods_on(cache, "n1") == []
    assert list(committed_delta(cache).delete_pods) == ["p1"]


def test_an_assumed_pod_reported_finished_is_confirmed_and_removed(
    cache: SchedulerCache,
) -> None:
    pod = pending_pod()
    cache.assume(pod, "n1")
    assert cache.add_or_update_pod(bound(pod, "n1", phase="Succeeded")) is True
    assert cache.assumed == {}
    assert not cache.holds("p1")


def test_informer_update_replaces_the_pod(cache: SchedulerCache) -> None:
    """UpdatePod: the new object replaces the old one on its node."""
    pod = bound(pending_pod(cpu="1"), "n1")
    cache.add_or_update_pod(pod)
    cache.state.commit()
    bigger = bound(pending_pod(cpu="2"), "n1")

    cache.add_or_update_pod(bigger)

    assert cache.state.pods["p1"].containers[0].requests.milli_cpu == 2000
    delta = committed_delta(cache)
    assert [p.containers[0].requests.milli_cpu for p in delta.upsert_pods] == [2000]


@pytest.mark.parametrize("was_assumed", [True, False], ids=["assumed", "confirmed"])
def test_remove_pod_takes_it_off_its_node(cache: SchedulerCache, was_assumed: bool) -> None:
    """RemovePod: gone from the node, and from the assumed set if it was there."""
    pod = pending_pod()
    if was_assumed:
        cache.assume(pod, "n1")
    else:
        cache.add_or_update_pod(bound(pod, "n1"))
    cache.state.commit()

    cache.remove_pod("p1")

    assert not cache.holds("p1")
    assert cache.assumed == {}
    assert list(committed_delta(cache).delete_pods) == ["p1"]


def test_remove_of_an_unknown_pod_is_no_change(cache: SchedulerCache) -> None:
    cache.remove_pod("ghost")
    assert not cache.state.has_pending


# -- expiry (cleanupAssumedPods) -------------------------------------------------------


@pytest.mark.parametrize(
    ("binding_finished", "after", "want_expired"),
    [
        (False, 10 * TTL, False),  # still binding: never expires (bindingFinished)
        (True, 0.0, False),
        (True, TTL, False),  # at the deadline: not yet
        (True, TTL + 0.001, True),
        (True, 10 * TTL, True),
    ],
)
def test_expired_only_after_finish_binding_plus_ttl(
    cache: SchedulerCache,
    clock: FakeClock,
    binding_finished: bool,
    after: float,
    want_expired: bool,
) -> None:
    """cleanupAssumedPods skips pods whose binding has not finished
    (``!ps.bindingFinished``) and expires the others once ``now`` is past their
    deadline (FinishBinding sets deadline = now + ttl)."""
    cache.assume(pending_pod(), "n1")
    clock.advance(5.0)  # the bind takes a while; the ttl counts from its end
    if binding_finished:
        cache.finish_binding("p1")
    clock.advance(after)

    expired = cache.expired(TTL)

    assert [a.pod.uid for a in expired] == (["p1"] if want_expired else [])
    if want_expired:
        assert expired[0].node == "n1"
        assert expired[0].binding_finished == T0 + 5.0
    # expired() only reports: the pod still counts until the caller decides.
    assert cache.holds("p1")
    assert cache.is_assumed("p1")


def test_a_confirmed_pod_never_expires(cache: SchedulerCache, clock: FakeClock) -> None:
    pod = pending_pod()
    cache.assume(pod, "n1")
    cache.finish_binding("p1")
    cache.add_or_update_pod(bound(pod, "n1"))
    clock.advance(10 * TTL)
    assert cache.expired(TTL) == []
    assert cache.holds("p1")


def test_finish_binding_of_an_unknown_pod_is_ignored(cache: SchedulerCache) -> None:
    cache.finish_binding("ghost")
    assert cache.assumed == {}


# -- metrics -----------------------------------------------------------------------------


def test_cache_size_gauge_follows_assumed_and_confirmed_pods(cache: SchedulerCache) -> None:
    """scheduler_cache_size{type=nodes|pods|assumed_pods} (metrics.go CacheSize)."""
    pod = pending_pod()
    cache.assume(pod, "n1")
    assert (cache_size("nodes"), cache_size("pods"), cache_size("assumed_pods")) == (2, 1, 1)
    cache.add_or_update_pod(bound(pod, "n1"))
    assert (cache_size("pods"), cache_size("assumed_pods")) == (1, 0)
    cache.remove_pod("p1")
    assert (cache_size("pods"), cache_size("assumed_pods")) == (0, 0)
    cache.delete_node("n2")
    assert cache_size("nodes") == 1


# -- nominated pods (backend/queue/nominator.go) ------------------------------------------


def test_addNominatedPod_puts_a_pending_pod_in_the_state_on_no_node(cache: SchedulerCache) -> None:
    """A nominated pod is in the cluster state with an empty node_name and its
    nominated node, and occupies no node (the service keeps it apart)."""
    pod = pending_pod()
    assert cache.nominate(pod, "n1")
    assert cache.nominated_to("p1") == "n1"
    assert not cache.holds("p1")
    assert pods_on(cache, "n1") == []
    assert pod.nominated_node_name == "", "nominate works on a copy"
    (up,) = committed_delta(cache).upsert_pods
    assert (up.uid, up.node_name, up.nominated_node_name) == ("p1", "", "n1")
    # The same nomination again changes nothing; another node replaces it.
    assert not cache.nominate(pod, "n1")
    assert cache.nominate(pod, "n2")
    (up,) = committed_delta(cache).upsert_pods
    assert up.nominated_node_name == "n2"
    # ModeOverride with an empty name clears it.
    assert cache.nominate(pod, "")
    assert list(committed_delta(cache).delete_pods) == ["p1"]
    assert cache.nominated == {}


def test_addNominatedPod_refuses_a_scheduled_pod(cache: SchedulerCache) -> None:
    """addNominatedPodUnlocked: a pod already assumed or bound is not nominated."""
    pod = pending_pod()
    cache.assume(pod, "n1")
    assert not cache.nominate(pod, "n2")
    other = pending_pod("p2")
    cache.add_or_update_pod(bound(other, "n2"))
    assert not cache.nominate(other, "n1")
    assert cache.nominated == {}
    assert pods_on(cache, "n1") == ["p1"] and pods_on(cache, "n2") == ["p2"]


def test_assume_and_bind_and_remove_end_a_nomination(cache: SchedulerCache) -> None:
    """DeleteNominatedPodIfExists at assume; a bound or deleted pod leaves the nominator."""
    for uid in ("a", "b", "c"):
        cache.nominate(pending_pod(uid), "n2")
    cache.assume(pending_pod("a"), "n1")
    cache.add_or_update_pod(bound(pending_pod("b"), "n1"))
    cache.remove_pod("c")
    assert cache.nominated == {}
    assert pods_on(cache, "n1") == ["a", "b"]
    assert "c" not in cache.state.pods
    assert cache_size("pods") == 2


def test_UpdateNominatedPod_keeps_a_nomination_the_update_does_not_know_yet(
    cache: SchedulerCache,
) -> None:
    pod = pending_pod()
    cache.nominate(pod, "n1")
    assert not cache.update_nominated("", pending_pod())
    assert cache.nominated_to("p1") == "n1"
    # The pod had a nomination and lost it: the update decides.
    assert cache.update_nominated("n1", pending_pod())
    assert cache.nominated == {}


def test_forget_says_whether_it_forgot(cache: SchedulerCache) -> None:
    cache.assume(pending_pod(), "n1")
    assert cache.forget("p1")
    assert not cache.forget("p1")
