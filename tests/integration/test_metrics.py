"""The metrics kube-scheduler has, moving on a real API server: ``berth shim`` (with
leader election) and ``berth serve`` as processes, the Coscheduling profile of
deploy/examples/coscheduling, a gang of two whose first member waits at Permit until the
second is placed, a pod no node fits, and each process's /metrics scraped before and
after.

- The shim: scheduler_unschedulable_pods{plugin,profile}, scheduler_pending_pods{queue},
  scheduler_permit_wait_duration_seconds{result}, scheduler_goroutines{operation}
  (a binding cycle runs while its pod waits at Permit),
  scheduler_event_handling_duration_seconds{event}, scheduler_schedule_attempts_total
  {result,profile}, scheduler_pod_scheduling_sli_duration_seconds{attempts},
  scheduler_framework_extension_point_duration_seconds{extension_point="Bind"} (the shim
  binds), leader_election_master_status{name}, rest_client_requests_total{code,method,host},
  rest_client_request_duration_seconds{verb,host}.
- The plugin server: scheduler_plugin_evaluation_total{plugin,extension_point,profile},
  scheduler_scheduling_algorithm_duration_seconds,
  scheduler_framework_extension_point_duration_seconds,
  berth_plugin_server_calls_total{method,code} and its duration.
"""

from __future__ import annotations

import contextlib
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from berth.dev.localcluster import Cluster, objects
from berth.dev.localcluster.ports import free_port
from berth.dev.localcluster.testing import TEST_LABEL, NodeFactory
from berth.kube.errors import ApiError
from berth.kube.metrics import host_label
from berth.kube.rest import JSON, KubeApi
from tests.integration.shimtools import (
    EXAMPLES,
    Server,
    Shim,
    ensure_crds,
    example_config_as,
    pods_of,
    profile_for,
    running,
    wait_all_bound,
    wait_for,
)

pytestmark = pytest.mark.integration

GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
PODGROUPS = "/apis/scheduling.x-k8s.io/v1alpha1"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> Samples:
    """Every sample of a /metrics page, by name and label set."""
    with urllib.request.urlopen(url, timeout=5) as answer:
        text = answer.read().decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: Samples, metric: str, /, **labels: str) -> float:
    return samples.get((metric, frozenset(labels.items())), 0.0)


def total(samples: Samples, metric: str, /, **labels: str) -> float:
    """The sum of ``metric``'s samples whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == metric and want <= ls)


def changed(before: Samples, after: Samples, metric: str, /, **labels: str) -> float:
    return total(after, metric, **labels) - total(before, metric, **labels)


@contextlib.contextmanager
def podgroup(kube: KubeApi, namespace: str, name: str, min_member: int) -> Iterator[None]:
    path = f"{PODGROUPS}/namespaces/{namespace}/podgroups"
    kube.create(
        path,
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": {"minMember": min_member, "scheduleTimeoutSeconds": 120},
        },
    )
    try:
        yield
    finally:
        with contextlib.suppress(ApiError):
            kube.delete(f"{path}/{name}")


def pod(namespace: str, name: str, profile: str, cpu: str, group: str | None = None) -> JSON:
    return objects.pod(
        name,
        namespace=namespace,
        cpu=cpu,
        scheduler_name=profile,
        labels={GROUP_LABEL: group} if group else None,
        node_selector={TEST_LABEL: namespace},
    )


def create(kube: KubeApi, namespace: str, body: JSON) -> None:
    kube.create(f"/api/v1/namespaces/{namespace}/pods", body)


def config(namespace: str, profile: str, path: Path) -> Path:
    """Coscheduling's example profile, renamed, with a Lease of the test's own, and
    podGroupRejectPercentage 100: a member no node fits leaves the waiting ones waiting
    (coscheduling.go PostFilter rejects them only while the unassigned share is above
    it)."""
    example_config_as("coscheduling", "custom-scheduler", profile, path)
    text = path.read_text()
    assert text.count("podGroupRejectPercentage: 10\n") == 1, text
    path.write_text(
        text.replace("podGroupRejectPercentage: 10\n", "podGroupRejectPercentage: 100\n")
        + "leaderElection:\n  leaderElect: true\n  leaseDuration: 15s\n  renewDeadline: 10s\n"
        f"  retryPeriod: 1s\n  resourceName: {profile}\n  resourceNamespace: {namespace}\n"
    )
    return path


def test_each_new_metric_moves_on_the_shim_and_the_plugin_server(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    tmp_path: Path,
) -> None:
    """A gang of two: ``small`` fits and waits at Permit for ``big``, which no node fits
    (NodeResourcesFit) until a larger node is added; then both bind."""
    ensure_crds(kube, EXAMPLES / "coscheduling" / "podgroup-crd.yaml")
    profile = profile_for(namespace)
    cfg = config(namespace, profile, tmp_path / "scheduler-config.yaml")
    fake_nodes(2, cpu="4", memory="16Gi")
    server_metrics = free_port()
    server = Server(
        cfg, tmp_path / "server.log", extra=["--metrics-listen", f"127.0.0.1:{server_metrics}"]
    )
    shim = Shim(
        cfg, cluster.kubeconfig, tmp_path / "shim.log", server=server.address, leader_elect=True
    )
    server_url = f"http://127.0.0.1:{server_metrics}/metrics"
    shim_url = f"http://127.0.0.1:{shim.metrics_port}/metrics"
    host = host_label(kube.host)

    def shim_value(metric: str, /, **labels: str) -> float:
        return value(scrape(shim_url), metric, **labels)

    fit = {"plugin": "NodeResourcesFit", "profile": profile}
    with running(shim, server), podgroup(kube, namespace, "pair", 2):
        # Both members exist before the shim starts, so neither is tried while its
        # sibling is missing (Coscheduling's PreFilter would turn it away). A new
        # process's counters start at zero: that is the shim's "before".
        create(kube, namespace, pod(namespace, "small", profile, "1", group="pair"))
        create(kube, namespace, pod(namespace, "big", profile, "8", group="pair"))
        shim_before: Samples = {}
        server.start()
        server_before = scrape(server_url)
        shim.start()
        wait_for(
            lambda: shim_value("leader_election_master_status", name=profile) == 1.0,
            30,
            "the shim to lead",
            shim.log,
        )
        wait_for(
            lambda: (
                shim_value("berth_shim_permit_waiting_pods") == 1.0
                and shim_value("scheduler_unschedulable_pods", **fit) == 1.0
            ),
            30,
            "small to wait at Permit and big to count under NodeResourcesFit",
            shim.log,
        )
        waiting = scrape(shim_url)
        fake_nodes(1, prefix="large", cpu="16", memory="16Gi")
        wait_all_bound(kube, namespace, 2, timeout=60)
        wait_for(
            lambda: shim_value("scheduler_goroutines", operation="binding") == 0.0,
            30,
            "the binding cycles to end",
            shim.log,
        )
        shim_after = scrape(shim_url)
        server_after = scrape(server_url)

    bound = {p["metadata"]["name"] for p in pods_of(kube, namespace) if p["spec"].get("nodeName")}
    assert bound == {"small", "big"}

    # The shim, while small waited: its binding cycle was under way, big was counted
    # under the plugin that rejected it and in the unschedulable queue.
    assert value(waiting, "scheduler_goroutines", operation="binding") == 1
    assert value(waiting, "scheduler_unschedulable_pods", **fit) == 1
    assert value(waiting, "scheduler_pending_pods", queue="unschedulable") >= 1
    # Once bound: big left the gauge, small's wait ended allowed.
    assert value(shim_after, "scheduler_unschedulable_pods", **fit) == 0
    assert (
        changed(
            shim_before,
            shim_after,
            "scheduler_permit_wait_duration_seconds_count",
            result="Success",
        )
        >= 1
    )
    assert (
        changed(
            shim_before,
            shim_after,
            "scheduler_schedule_attempts_total",
            result="scheduled",
            profile=profile,
        )
        == 2
    )
    assert (
        changed(
            shim_before,
            shim_after,
            "scheduler_schedule_attempts_total",
            result="unschedulable",
            profile=profile,
        )
        >= 1
    )
    assert (
        changed(shim_before, shim_after, "scheduler_pod_scheduling_sli_duration_seconds_count") == 2
    )
    for event, least in (("UnschedulablePodAdd", 2), ("AssignedPodAdd", 2), ("NodeAdd", 3)):
        got = changed(
            shim_before, shim_after, "scheduler_event_handling_duration_seconds_count", event=event
        )
        assert got >= least, event
    assert value(shim_after, "leader_election_master_status", name=profile) == 1
    # DefaultBinder alone: the shim binds, and times the Bind extension point itself.
    binds = changed(
        shim_before,
        shim_after,
        "scheduler_framework_extension_point_duration_seconds_count",
        extension_point="Bind",
        status="Success",
        profile=profile,
    )
    assert binds == 2
    # Bindings, events and the Lease's creation are POSTs (201), the informers' lists
    # and watches GETs.
    created = changed(
        shim_before, shim_after, "rest_client_requests_total", code="201", method="POST", host=host
    )
    assert created >= 2
    # big's PodScheduled=False condition is a PATCH; the Lease, read before it was
    # created, answered 404 (every code is counted, as client-go counts it).
    assert (
        changed(shim_before, shim_after, "rest_client_requests_total", method="PATCH", host=host)
        >= 1
    )
    assert (
        changed(
            shim_before,
            shim_after,
            "rest_client_requests_total",
            code="404",
            method="GET",
            host=host,
        )
        >= 1
    )
    assert (
        total(shim_after, "rest_client_request_duration_seconds_count", verb="GET", host=host) >= 1
    )
    posts = changed(
        shim_before,
        shim_after,
        "rest_client_request_duration_seconds_count",
        verb="POST",
        host=host,
    )
    assert posts >= 2

    # The plugin server ran every cycle.
    for point in ("PreFilter", "Filter", "PreScore", "Score"):
        got = changed(
            server_before,
            server_after,
            "scheduler_plugin_evaluation_total",
            plugin="NodeResourcesFit",
            extension_point=point,
            profile=profile,
        )
        assert got >= 1, point
    # Filter counts one evaluation per node: at least both first nodes for big's
    # failed attempt, and for small's.
    filtered = changed(
        server_before,
        server_after,
        "scheduler_plugin_evaluation_total",
        plugin="NodeResourcesFit",
        extension_point="Filter",
        profile=profile,
    )
    assert filtered >= 4
    assert (
        changed(
            server_before, server_after, "scheduler_scheduling_algorithm_duration_seconds_count"
        )
        >= 3
    )
    permits = changed(
        server_before,
        server_after,
        "scheduler_framework_extension_point_duration_seconds_count",
        extension_point="Permit",
        profile=profile,
    )
    assert permits >= 2
    assert changed(server_before, server_after, "berth_plugin_server_calls_total", code="OK") >= 3
    assert (
        changed(server_before, server_after, "berth_plugin_server_call_duration_seconds_count") >= 3
    )
    # What the shim measures is not on the server's page.
    assert total(server_after, "scheduler_schedule_attempts_total") == 0
