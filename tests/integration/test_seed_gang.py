"""Coscheduling (gang scheduling, as kubernetes-sigs/scheduler-plugins does it) through
``berth shim`` on a real kube-apiserver, with deploy/examples/coscheduling (its
scheduler-config.yaml, profile renamed per test, and its PodGroup CRD):

* the issue's verification step: a gang of 4 with minMember 4 on room for 3 stays
  unbound: 3 members wait at Permit, the fourth fits no node and its PostFilter rejects
  the waiting ones at once (``optimistic rejection in PostFilter``, PostFilterResponse
  signals), long before their Permit timeout; they are unreserved and, as upstream
  handles a pod rejected while waiting at Permit, Unschedulable with Coscheduling
  recorded (upstream's FitError over their node), retried by Coscheduling's events.
  When room appears (a node is added) the member that fits waits at Permit and
  activates its siblings (ActivateSiblings, PermitResponse.activate_pod_uids): they
  leave the queue's waiting places at once and all 4 bind, long before the (long)
  backoff ends;
* a group with fewer pods than minMember is rejected at PreFilter with upstream's
  message, nothing is assumed; when the missing member is created, the shim hears of
  it (the grouped pods are objects the plugin reads) and the whole group binds.

Pods select this test's nodes (``berth.dev/test=<namespace>``): nodes are cluster-wide.
"""

from __future__ import annotations

import contextlib
import functools
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from berth.dev.localcluster import Cluster, objects
from berth.dev.localcluster.testing import TEST_LABEL, NodeFactory
from berth.kube.errors import ApiError
from berth.kube.rest import JSON, KubeApi
from tests.integration.shimtools import (
    EXAMPLES,
    Shim,
    assert_no_overcommit,
    ensure_crds,
    example_config_as,
    failed_scheduling_notes,
    pod_scheduled_condition,
    pods_of,
    profile_for,
    running,
    scheduled_events,
    wait_all_bound,
    wait_for,
)

pytestmark = pytest.mark.integration

SEED_PROFILE = "custom-scheduler"
LABEL = "scheduling.x-k8s.io/pod-group"
PODGROUPS = "/apis/scheduling.x-k8s.io/v1alpha1"
# The gang's Permit timeout and the shim's backoff (podInitialBackoffSeconds =
# podMaxBackoffSeconds) are both long: what the gang test sees happen within PROMPT
# seconds is neither a wait timing out nor a backoff running out.
TIMEOUT = 60
BACKOFF = 60
PROMPT = 20
REJECTED = "optimistic rejection in PostFilter"


@pytest.fixture(scope="module")
def podgroup_crd(kube: KubeApi) -> None:
    ensure_crds(kube, EXAMPLES / "coscheduling" / "podgroup-crd.yaml")


class PodGroups:
    """PodGroups of a namespace, deleted at the end (no namespace controller runs)."""

    def __init__(self, kube: KubeApi, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.names: list[str] = []

    def path(self, name: str = "") -> str:
        base = f"{PODGROUPS}/namespaces/{self.namespace}/podgroups"
        return f"{base}/{name}" if name else base

    def create(self, name: str, min_member: int, timeout: int | None = None) -> JSON:
        spec: JSON = {"minMember": min_member}
        if timeout is not None:
            spec["scheduleTimeoutSeconds"] = timeout
        pg = self.kube.create(
            self.path(),
            {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": name},
                "spec": spec,
            },
        )
        self.names.append(name)
        return pg

    def delete_all(self) -> None:
        for name in self.names:
            with contextlib.suppress(ApiError):
                self.kube.delete(self.path(name))


@pytest.fixture
def podgroups(kube: KubeApi, namespace: str, podgroup_crd: None) -> Iterator[PodGroups]:
    pgs = PodGroups(kube, namespace)
    try:
        yield pgs
    finally:
        pgs.delete_all()


def gang_pod(namespace: str, name: str, profile: str, group: str, cpu: str) -> JSON:
    return objects.pod(
        name,
        namespace=namespace,
        cpu=cpu,
        scheduler_name=profile,
        labels={LABEL: group},
        node_selector={TEST_LABEL: namespace},
    )


def start_shim(
    cluster: Cluster, namespace: str, tmp_path: Path, backoff: int | None = None
) -> Shim:
    config = example_config_as(
        "coscheduling", SEED_PROFILE, profile_for(namespace), tmp_path / "scheduler-config.yaml"
    )
    if backoff is not None:
        with config.open("a") as f:
            f.write(f"podInitialBackoffSeconds: {backoff}\npodMaxBackoffSeconds: {backoff}\n")
    # --v=2: the per-pod lines (schedule_one.go's "Unable to schedule pod; no fit").
    return Shim(config, cluster.kubeconfig, tmp_path / "shim.log", extra=["--v=2"]).start()


def bound(kube: KubeApi, namespace: str) -> dict[str, str]:
    return {
        p["metadata"]["name"]: p["spec"]["nodeName"]
        for p in pods_of(kube, namespace)
        if p["spec"].get("nodeName")
    }


def assumed(shim: Shim) -> float:
    return shim.metric("scheduler_cache_size", type="assumed_pods")


def waiting(shim: Shim) -> float:
    return shim.metric("berth_shim_permit_waiting_pods")


def pods_in(pattern: str, text: str) -> set[str]:
    """The pod names the shim's log lines matching ``pattern`` (with a group
    ``pod``) name."""
    return {m.group("pod") for m in re.finditer(pattern, text)}


def test_gang_of_four_on_room_for_three_is_rejected_at_once_then_binds_without_waiting_for_backoff(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    podgroups: PodGroups,
    tmp_path: Path,
) -> None:
    profile = profile_for(namespace)
    # Room for 3: one 1500m member per 2-CPU node.
    nodes = [n["metadata"]["name"] for n in fake_nodes(3, cpu="2", memory="16Gi")]
    podgroups.create("gang", min_member=4, timeout=TIMEOUT)
    names = [f"gang-{i}" for i in range(4)]
    shim = start_shim(cluster, namespace, tmp_path, backoff=BACKOFF)
    with running(shim):
        created = time.monotonic()
        objects.create_pods(kube, [gang_pod(namespace, n, profile, "gang", "1500m") for n in names])

        # Three members wait at Permit; the fourth fits no node and its PostFilter
        # rejects them (coscheduling.go PostFilter), which the shim applies at once.
        waited_and_rejected = (
            rf"pod {namespace}/(?P<pod>gang-\d) waiting at Permit rejected by Coscheduling: "
            + REJECTED
        )

        def three_rejected() -> bool:
            assert bound(kube, namespace) == {}, "a member was bound without its gang"
            return len(pods_in(waited_and_rejected, shim.text())) >= 3

        wait_for(three_rejected, PROMPT + 10, "3 waiting members rejected by PostFilter", shim.log)
        took = time.monotonic() - created
        assert took < TIMEOUT / 2, f"rejected after {took:.1f}s: that is not at once"
        # Each rejected member is Unschedulable with upstream's FitError over its
        # node, Coscheduling recorded as the rejecting plugin (bindingCycle,
        # handleSchedulingFailure), not an error, and not by a timeout.
        unschedulable_line = (
            rf'Unable to schedule pod; no fit; waiting pod="{namespace}/(?P<pod>gang-\d)" '
            rf'profile="[^"]*" err="0/1 nodes are available: 1 {REJECTED}\." '
            'plugin="Coscheduling"'
        )
        wait_for(
            lambda: len(pods_in(unschedulable_line, shim.text())) >= 3,
            PROMPT,
            "3 rejected members unschedulable with Coscheduling's reason",
            shim.log,
        )
        log = shim.text()
        assert "rejected due to timeout" not in log
        # The member that fits no node says why, in upstream's words.
        assert "gets rejected due to Pod gang-" in log, log[-3000:]
        assert "is unschedulable even after PostFilter" in log

        # On room for 3 the gang never binds: with upstream's handling the member
        # that fits no node is retried when the others' room is freed
        # (EventAssignedPodDelete, NodeResourcesFit's hint), waits and activates
        # its siblings, and the gang is rejected again; none is ever bound.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            assert bound(kube, namespace) == {}, "a member was bound without its gang"
            time.sleep(0.5)

        # Room appears. The node's arrival moves the members Coscheduling rejected
        # (it registers Node/Add), and the first of them to wait activates any
        # sibling still parked: all bind long before a backoff of BACKOFF seconds.
        def moved_by_room() -> float:
            return sum(
                shim.metric("scheduler_queue_incoming_pods_total", event=event, queue=queue)
                for event in ("NodeAdd", "ForceActivate")
                for queue in ("Active", "Backoff")
            )

        before = moved_by_room()
        room = time.monotonic()
        nodes += [n["metadata"]["name"] for n in fake_nodes(1, prefix="extra", cpu="2")]
        wait_all_bound(kube, namespace, 4, timeout=PROMPT)
        took = time.monotonic() - room
        assert took < BACKOFF / 2, f"bound {took:.1f}s after the node came"
        assert moved_by_room() > before

        placed = bound(kube, namespace)
        assert sorted(placed) == names
        assert sorted(placed.values()) == sorted(nodes)
        assert_no_overcommit(kube, nodes)
        wait_for(lambda: assumed(shim) == 0, 30, "bound members confirmed", shim.log)
        wait_for(
            lambda: len(scheduled_events(kube, namespace)) == 4, 30, "Scheduled events", shim.log
        )
        assert set(scheduled_events(kube, namespace).values()) == {1}


def test_group_short_of_min_member_is_rejected_at_pre_filter_then_binds_when_complete(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    podgroups: PodGroups,
    tmp_path: Path,
) -> None:
    profile = profile_for(namespace)
    fake_nodes(2, cpu="4", memory="16Gi")
    podgroups.create("trio", min_member=3, timeout=30)
    shim = start_shim(cluster, namespace, tmp_path)
    with running(shim):
        objects.create_pods(
            kube, [gang_pod(namespace, f"trio-{i}", profile, "trio", "500m") for i in range(2)]
        )

        def rejected_at_pre_filter(name: str) -> bool:
            # A first cycle may run before the shim's watch of the grouped pods has seen
            # the other member ("current pods number: 1"); the FailedScheduling event
            # keeps its first note and counts the rest, so the later message shows in
            # the PodScheduled condition.
            want = (
                f"pre-filter pod {name} cannot find enough sibling pods, current pods number: 2, "
                "minMember of group: 3"
            )
            pod = kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
            cond = pod_scheduled_condition(pod) or {}
            return want in str(cond.get("message", "")) or any(
                want in note for note in failed_scheduling_notes(kube, namespace, name)
            )

        for name in ("trio-0", "trio-1"):
            wait_for(
                functools.partial(rejected_at_pre_filter, name), 60, f"{name} rejected", shim.log
            )
        # Nothing assumed, nothing waiting, nothing bound; it stays so.
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            assert (assumed(shim), waiting(shim)) == (0, 0)
            assert bound(kube, namespace) == {}
            time.sleep(0.2)

        # The third member arrives: the others are tried again and the group binds.
        objects.create_pods(kube, [gang_pod(namespace, "trio-2", profile, "trio", "500m")])
        wait_all_bound(kube, namespace, 3, timeout=60)
        assert sorted(bound(kube, namespace)) == ["trio-0", "trio-1", "trio-2"]
