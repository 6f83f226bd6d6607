"""A hostile plugin server against ``berth shim`` on a real API server (issue 22; shim/guard.py).

The plugin server here is a small gRPC SchedulingService written for the test, not Berth's:
it ignores the cluster state and answers

* the pod ``preemptor`` with no fit and a PostFilter that nominates the node of a
  kube-system pod (priority not lower than the preemptor's) and names that pod as the
  victim, which upstream's DefaultPreemption could never pick
  (plugins/defaultpreemption/default_preemption.go SelectVictimsOnNode:
  isPreemptionAllowed needs a lower priority);
* the pod ``writer`` with a node, then a PreBind that asks for a merge patch on an
  unrelated PersistentVolume (its reclaim policy to Delete), attributed to a plugin that
  declares no writes.

The shim runs with the cluster's admin credentials, so only its own checks stand between
those answers and the cluster. Both are refused and counted in
``berth_shim_refused_writes_total`` (read from the shim's /metrics); the kube-system pod and
the PV are untouched; neither pod is lost: the preemptor is reported Unschedulable and the
writer is retried with backoff.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.api.v1 import scheduling_pb2_grpc as pb_grpc
from berth.dev.localcluster import Cluster, objects
from berth.dev.localcluster.testing import TEST_LABEL, NodeFactory
from berth.kube.errors import ApiError
from berth.kube.rest import JSON, KubeApi, segment
from tests.integration.shimtools import (
    Shim,
    failed_scheduling_notes,
    pod_path,
    pod_scheduled_condition,
    profile_for,
    running,
    wait_for,
    wait_unschedulable,
    write_config,
)

pytestmark = pytest.mark.integration

REFUSED = "berth_shim_refused_writes_total"
# A plugin of the default profile that declares no writes (Plugin.writes).
NOT_A_WRITER = "NodeResourcesFit"


class HostileService(pb_grpc.SchedulingServiceServicer):
    """Answers the shim's calls without any plugin: what a compromised or buggy server
    could send. ``calls`` counts (method, pod name)."""

    def __init__(self, profile: str, node: str, victim: JSON, pv: str) -> None:
        self.profile = profile
        self.node = node
        meta = victim["metadata"]
        self.victim = pb.Victim(uid=meta["uid"], namespace=meta["namespace"], name=meta["name"])
        self.pv = pv
        self.calls: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def _count(self, method: str, pod: cpb.Pod) -> None:
        with self._lock:
            self.calls[(method, pod.name)] += 1

    def DescribeProfiles(self, request: Any, context: Any) -> pb.DescribeProfilesResponse:
        points = {
            "preEnqueue": ["SchedulingGates", "DefaultPreemption"],
            "queueSort": ["PrioritySort"],
            "postFilter": ["DefaultPreemption"],
            "preBind": ["VolumeBinding"],
            "bind": ["DefaultBinder"],
        }
        return pb.DescribeProfilesResponse(
            profiles=[
                pb.Profile(
                    scheduler_name=self.profile,
                    extension_points=[
                        pb.ExtensionPoint(name=k, plugins=[pb.PluginRef(name=n) for n in v])
                        for k, v in points.items()
                    ],
                )
            ]
        )

    def _answer(self, req: pb.ScheduleRequest | pb.ScheduleBatchRequest, pod: cpb.Pod) -> Any:
        self._count("Schedule", pod)
        gen = req.state.generation
        if pod.name == "writer":
            return pb.ScheduleResponse(
                status=pb.Status(),
                node=self.node,
                reserve_status=pb.Status(),
                permit=pb.PermitResponse(status=pb.Status()),
                generation=gen,
            )
        resp = pb.ScheduleResponse(
            status=pb.Status(code=pb.CODE_UNSCHEDULABLE),
            diagnosis=pb.Diagnosis(
                message="0/1 nodes are available: 1 Insufficient cpu.",
                unschedulable_plugins=["NodeResourcesFit"],
            ),
            generation=gen,
        )
        if pod.name == "preemptor":
            resp.post_filter.CopyFrom(
                pb.PostFilterResponse(
                    status=pb.Status(),
                    nominated_node_name=self.node,
                    victims=[self.victim],
                    plugin="DefaultPreemption",
                    nominating_mode=pb.NOMINATING_MODE_OVERRIDE,
                )
            )
        return resp

    def Schedule(self, request: pb.ScheduleRequest, context: Any) -> pb.ScheduleResponse:
        resp: pb.ScheduleResponse = self._answer(request, request.pod)
        return resp

    def ScheduleStream(
        self, request_iterator: Iterable[pb.ScheduleRequest], context: Any
    ) -> Iterator[pb.ScheduleStreamResponse]:
        for req in request_iterator:
            yield pb.ScheduleStreamResponse(response=self._answer(req, req.pod))

    def ScheduleBatch(
        self, request: pb.ScheduleBatchRequest, context: Any
    ) -> pb.ScheduleBatchResponse:
        return pb.ScheduleBatchResponse(
            results=[self._answer(request, p) for p in request.pods],
            generation=request.state.generation,
        )

    def PreBind(self, request: pb.NodeRequest, context: Any) -> pb.StatusResponse:
        self._count("PreBind", request.pod)
        patch = {"spec": {"persistentVolumeReclaimPolicy": "Delete"}}
        write = pb.ObjectWrite(
            ref=cpb.ObjectRef(group="", resource="persistentvolumes", name=self.pv),
            version="v1",
            merge_patch=orjson.dumps(patch),
            plugin=NOT_A_WRITER,
        )
        return pb.StatusResponse(status=pb.Status(), writes=[write])

    def PostBind(self, request: pb.NodeRequest, context: Any) -> pb.StatusResponse:
        self._count("PostBind", request.pod)
        return pb.StatusResponse(status=pb.Status())

    def Unreserve(self, request: pb.NodeRequest, context: Any) -> pb.StatusResponse:
        return pb.StatusResponse(status=pb.Status())

    def PreEnqueue(self, request: pb.PreEnqueueRequest, context: Any) -> pb.PreEnqueueResponse:
        return pb.PreEnqueueResponse(status=pb.Status())

    def Sync(self, request: pb.SyncRequest, context: Any) -> pb.SyncResponse:
        return pb.SyncResponse()


@pytest.fixture
def kube_system_pod(kube: KubeApi, namespace: str, fake_nodes: NodeFactory) -> Iterator[JSON]:
    """A pod in kube-system bound to this test's node, as a cluster add-on would be;
    system-node-critical when the API server has that class."""
    (node,) = fake_nodes(1, cpu="2", memory="4Gi")
    try:
        kube.get("/apis/scheduling.k8s.io/v1/priorityclasses/system-node-critical")
        cls: str | None = "system-node-critical"
    except ApiError:
        cls = None
    name = f"guard-{namespace}"[:63].rstrip("-")
    spec = objects.pod(
        name,
        namespace="kube-system",
        node_name=node["metadata"]["name"],
        scheduler_name="someone-else",
        priority_class_name=cls,
        labels={TEST_LABEL: namespace},
    )
    created = kube.create("/api/v1/namespaces/kube-system/pods", spec)
    try:
        yield created
    finally:
        try:
            kube.delete(pod_path("kube-system", name), gracePeriodSeconds=0)
        except ApiError as exc:
            if exc.status != 404:  # a shim that deleted it failed the test already
                raise


@pytest.fixture
def unrelated_pv(kube: KubeApi, namespace: str) -> Iterator[JSON]:
    name = f"guard-{namespace}"[:63].rstrip("-")
    kube.create(
        "/api/v1/persistentvolumes",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name, "labels": {TEST_LABEL: namespace}},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "hostPath": {"path": f"/tmp/{name}"},
            },
        },
    )
    path = f"/api/v1/persistentvolumes/{segment(name)}"
    try:
        # The PV controller's first pass makes it Available (a status write): the test
        # compares against the volume after that, so only someone else's write counts.
        wait_for(
            lambda: (kube.get(path).get("status") or {}).get("phase") == "Available",
            30,
            f"PersistentVolume {name} Available",
        )
        yield kube.get(path)
    finally:
        kube.delete(path)


@pytest.fixture
def hostile_server(
    namespace: str, kube_system_pod: JSON, unrelated_pv: JSON
) -> Iterator[tuple[HostileService, str]]:
    # The RPCs it leaves out answer UNIMPLEMENTED (the generated servicer's default).
    service = HostileService(  # type: ignore[abstract]
        profile_for(namespace),
        kube_system_pod["spec"]["nodeName"],
        kube_system_pod,
        unrelated_pv["metadata"]["name"],
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    pb_grpc.add_SchedulingServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield service, f"127.0.0.1:{port}"
    finally:
        server.stop(grace=None)


def test_a_hostile_plugin_server_deletes_no_kube_system_pod_and_patches_no_pv(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    tmp_path: Path,
    kube_system_pod: JSON,
    unrelated_pv: JSON,
    hostile_server: tuple[HostileService, str],
) -> None:
    service, address = hostile_server
    profile = profile_for(namespace)
    victim = kube_system_pod["metadata"]
    shim = Shim(
        write_config(tmp_path / "config.yaml", profile),
        cluster.kubeconfig,
        tmp_path / "shim.log",
        server=address,
    )
    with running(shim.start()):
        for name in ("preemptor", "writer"):
            kube.create(
                f"/api/v1/namespaces/{namespace}/pods",
                objects.pod(name, namespace=namespace, scheduler_name=profile),
            )

        def counted(kind: str, reason: str) -> bool:
            return shim.metric(REFUSED, kind=kind, reason=reason) >= 1

        wait_for(lambda: counted("victim", "not_lower_priority"), 60, "victim refused", shim.log)
        wait_for(lambda: counted("write", "undeclared"), 60, "PV write refused", shim.log)
        # The preemptor is not lost: reported Unschedulable, not nominated by the answer.
        wait_unschedulable(kube, namespace, "preemptor", shim)
        assert not kube.get(pod_path(namespace, "preemptor"))["status"].get("nominatedNodeName")
        # The writer is not lost either: its binding cycle failed without writing, and it
        # is retried after its backoff (another Schedule and PreBind).
        wait_for(lambda: service.calls[("PreBind", "writer")] >= 2, 60, "writer retried", shim.log)
        writer = kube.get(pod_path(namespace, "writer"))
        assert not writer["spec"].get("nodeName")
        cond = pod_scheduled_condition(writer)
        assert cond is not None and cond["reason"] == "SchedulerError", cond
        assert cond["message"].startswith(
            "PreBind writes refused by the scheduler: write by "
            f"plugin {NOT_A_WRITER} to persistentvolumes"
        ), cond
        assert any(
            "PreBind writes refused by the scheduler" in n
            for n in failed_scheduling_notes(kube, namespace, "writer")
        )
        log = shim.text()
    # The kube-system pod: there, not terminating, not marked for disruption.
    pod = kube.get(pod_path("kube-system", victim["name"]))
    assert pod["metadata"]["uid"] == victim["uid"]
    assert not pod["metadata"].get("deletionTimestamp")
    assert all(c["type"] != "DisruptionTarget" for c in pod["status"].get("conditions") or [])
    # The PV: unchanged.
    pv = kube.get(f"/api/v1/persistentvolumes/{segment(unrelated_pv['metadata']['name'])}")
    assert pv["metadata"]["resourceVersion"] == unrelated_pv["metadata"]["resourceVersion"]
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    # Each refusal says which object and why, at WARNING (klog's header letter W).
    victim_line = next(
        line for line in log.splitlines() if f"refused victim kube-system/{victim['name']}" in line
    )
    assert victim_line.startswith("W") and "is not lower than the preemptor's" in victim_line
    write_line = next(
        line
        for line in log.splitlines()
        if f"refused write by plugin {NOT_A_WRITER} to persistentvolumes" in line
    )
    assert write_line.startswith("W") and "declares no writes" in write_line
