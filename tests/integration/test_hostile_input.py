"""Hostile input through ``berth shim`` on a real kube-apiserver (issue 22):

* a poison pod (``berth.dev/gpu-memory: 1e100000000``, read by GPUCardFit) and a
  PodGroup whose ``minResources.cpu`` is ``1e100000000`` (read by Coscheduling) are
  answered Unschedulable with their reason while 50 ordinary pods created after them
  all bind, and the health endpoints answer throughout: the plugin server's gRPC
  health Check and the shim's ``/healthz``, polled from another thread, never fail.
  Run with the plugins behind ``berth serve`` (gRPC) and inside the shim;
* a pod whose ``spec.resourceClaims`` names a ResourceClaim that does not exist is
  reported Unschedulable with DynamicResources' reason (FailedScheduling event and
  PodScheduled=False), and never bound, while an ordinary pod created after it binds.

Pods select this test's nodes (``berth.dev/test=<namespace>``): nodes are cluster-wide.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from berth.dev.localcluster import Cluster, objects
from berth.dev.localcluster.testing import TEST_LABEL, NodeFactory
from berth.kube.rest import JSON, KubeApi
from tests.integration.shimtools import (
    EXAMPLES,
    Server,
    Shim,
    ensure_crds,
    failed_scheduling_notes,
    pod_path,
    pods_of,
    profile_for,
    running,
    wait_all_bound,
    wait_for,
    wait_unschedulable,
    write_config,
)

pytestmark = pytest.mark.integration

POISON = "1e100000000"
GANG_LABEL = "scheduling.x-k8s.io/pod-group"
PODGROUPS = "/apis/scheduling.x-k8s.io/v1alpha1"
ORDINARY = 50
# A probe that takes longer than this counts as failed (kubelet's default
# timeoutSeconds is 1; a loaded 2-core CI machine gets some slack).
PROBE_TIMEOUT = 2.0

# The seed plugins that read user-written quantities, on top of the defaults.
SEED_PLUGINS = """\
    plugins:
      multiPoint:
        enabled:
          - name: GPUCardFit
      preFilter:
        enabled:
          - name: Coscheduling
      postFilter:
        enabled:
          - name: Coscheduling
      reserve:
        enabled:
          - name: Coscheduling
      permit:
        enabled:
          - name: Coscheduling
"""


class HealthPoller:
    """Polls health endpoints from a thread until stopped; counts the probes and
    the failures (an error, a timeout, or an answer other than healthy)."""

    def __init__(self, shim: Shim, server: Server | None) -> None:
        self.shim = shim
        self.server = server
        self.probes = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        channel = grpc.insecure_channel(self.server.address) if self.server else None
        stub = health_pb2_grpc.HealthStub(channel) if channel else None
        try:
            while not self._stop.wait(0.2):
                self.probes += 1
                status, body = self.shim.get("/healthz")
                if status != 200:
                    self.failures.append(f"shim /healthz: {status} {body[:200]!r}")
                if stub is not None:
                    try:
                        resp = stub.Check(health_pb2.HealthCheckRequest(), timeout=PROBE_TIMEOUT)
                        if resp.status != health_pb2.HealthCheckResponse.SERVING:
                            self.failures.append(f"server health: {resp.status}")
                    except grpc.RpcError as exc:
                        self.failures.append(f"server health: {exc.code()}")
        finally:
            if channel is not None:
                channel.close()

    @contextmanager
    def polling(self) -> Iterator[HealthPoller]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(10)


def our_pod(namespace: str, name: str, profile: str, **kwargs: object) -> JSON:
    return objects.pod(
        name,
        namespace=namespace,
        scheduler_name=profile,
        node_selector={TEST_LABEL: namespace},
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module")
def podgroup_crd(kube: KubeApi) -> None:
    ensure_crds(kube, EXAMPLES / "coscheduling" / "podgroup-crd.yaml")


@pytest.mark.parametrize("mode", ["grpc", "in-process"])
@pytest.mark.timeout(300)
def test_poison_quantities_stall_nothing_and_health_answers_throughout(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    tmp_path: Path,
    podgroup_crd: None,
    mode: str,
) -> None:
    profile = profile_for(namespace)
    fake_nodes(4, cpu="16", memory="32Gi")
    config = write_config(tmp_path / "scheduler-config.yaml", profile, extra=SEED_PLUGINS)
    server = Server(config, tmp_path / "serve.log") if mode == "grpc" else None
    shim = Shim(
        config,
        cluster.kubeconfig,
        tmp_path / "shim.log",
        server=server.address if server else None,
    )
    group_path = f"{PODGROUPS}/namespaces/{namespace}/podgroups"
    kube.create(
        group_path,
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "poison-pg", "namespace": namespace},
            "spec": {"minMember": 1, "minResources": {"cpu": POISON}},
        },
    )
    procs = [p for p in (server, shim) if p is not None]
    try:
        if server is not None:
            server.start()
        shim.start()
        with running(*procs), HealthPoller(shim, server).polling() as health:
            gpu = our_pod(namespace, "poison-gpu", profile)
            gpu["metadata"]["annotations"] = {"berth.dev/gpu-memory": POISON}
            gang = our_pod(namespace, "poison-gang", profile, labels={GANG_LABEL: "poison-pg"})
            objects.create_pods(kube, [gpu, gang])
            objects.create_pods(
                kube, [our_pod(namespace, f"p-{i}", profile) for i in range(ORDINARY)]
            )
            pods = wait_all_bound(kube, namespace, ORDINARY, timeout=120)
            gpu_cond = wait_unschedulable(kube, namespace, "poison-gpu", shim)
            gang_cond = wait_unschedulable(kube, namespace, "poison-gang", shim)
            # A few probes at least, however quickly the pods went.
            wait_for(lambda: health.probes >= 5, 30, "five health probes")
        bound = {p["metadata"]["name"] for p in pods if p["spec"].get("nodeName")}
        assert bound == {f"p-{i}" for i in range(ORDINARY)}
        assert "no free GPU card" in gpu_cond["message"], gpu_cond
        # The gap is the capped request (2^63-1 cores as millicores) less what is free.
        assert "resource gap: map[cpu:" in gang_cond["message"], gang_cond
        assert health.probes >= 5, health.probes
        assert health.failures == [], health.failures[:10]
    finally:
        kube.delete(f"{group_path}/poison-pg")


@pytest.mark.timeout(180)
def test_pod_with_a_missing_resource_claim_is_gated_and_never_bound(
    cluster: Cluster, kube: KubeApi, namespace: str, fake_nodes: NodeFactory, tmp_path: Path
) -> None:
    profile = profile_for(namespace)
    fake_nodes(2, cpu="8", memory="16Gi")
    config = write_config(tmp_path / "scheduler-config.yaml", profile)
    shim = Shim(config, cluster.kubeconfig, tmp_path / "shim.log")
    with running(shim.start()):
        dra = our_pod(namespace, "dra", profile)
        dra["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "gpu-claim"}]
        objects.create_pods(kube, [dra])
        # dynamicresources.go PreEnqueue (foreachPodResourceClaim): kept out of the
        # active queue, with upstream's message in the shim's log.
        gated = (
            f"pod {namespace}/dra gated by DynamicResources: "
            f'could not find ResourceClaim "{namespace}/gpu-claim"'
        )
        wait_for(lambda: gated in shim.text(), 60, "dra gated", shim.log)
        # An ordinary pod created after it binds: the scheduler goes on.
        objects.create_pods(kube, [our_pod(namespace, "plain", profile)])
        wait_for(
            lambda: bool(kube.get(pod_path(namespace, "plain"))["spec"].get("nodeName")),
            60,
            "plain bound",
            shim.log,
        )
        assert not failed_scheduling_notes(kube, namespace, "dra")
        assert not kube.get(pod_path(namespace, "dra"))["spec"].get("nodeName")
        assert [
            p["metadata"]["name"] for p in pods_of(kube, namespace) if p["spec"].get("nodeName")
        ] == ["plain"]
