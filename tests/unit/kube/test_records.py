"""Kubernetes objects to berth.v1 records (berth/kube/records.py)."""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.model import PodInfo, pod_requests
from berth.framework.testing import resources
from berth.kube.records import (
    ObjectError,
    PodSlabs,
    node_record,
    occupies_node,
    pod_record,
    split_objects,
)


def pod_obj(**spec: Any) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}], **spec},
    }


def test_node_quantities_are_decoded_like_resource_quantity() -> None:
    n = node_record(
        {
            "kind": "Node",
            "metadata": {"name": "n1", "labels": {"zone": "a"}},
            "spec": {
                "unschedulable": True,
                "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}],
            },
            "status": {
                "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110", "nvidia.com/gpu": "2"},
                "allocatable": {
                    "cpu": "3900m",
                    "memory": "15Gi",
                    "pods": "110",
                    "nvidia.com/gpu": "2",
                },
            },
        }
    )
    assert (n.allocatable.milli_cpu, n.allocatable.memory, n.allocatable.pods) == (
        3900,
        15 * 2**30,
        110,
    )
    assert n.allocatable.scalar["nvidia.com/gpu"] == 2
    assert n.unschedulable and n.taints[0].effect == "NoSchedule"
    assert n.labels["zone"] == "a"


def test_requests_default_to_limits_as_the_api_server_does() -> None:
    """SetDefaults_Pod: a container with limits and no requests requests its limits."""
    p = pod_record(
        pod_obj(containers=[{"name": "c", "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}}])
    )
    r = pod_requests(p)
    assert (r.milli_cpu, r.memory) == (2000, 2**30)


def test_defaulting_requests_leaves_the_object_as_it_was() -> None:
    """The requests a limit defaults are the record's, not written into the
    decoded object (an informer keeps no copy of it, but a caller may)."""
    res = {"requests": {"memory": "1Gi"}, "limits": {"cpu": "2", "memory": "2Gi"}}
    obj = pod_obj(containers=[{"name": "c", "resources": res}])
    c = pod_record(obj).containers[0]
    assert (c.requests.milli_cpu, c.requests.memory, c.limits.memory) == (2000, 2**30, 2 * 2**30)
    assert res == {"requests": {"memory": "1Gi"}, "limits": {"cpu": "2", "memory": "2Gi"}}


def test_pod_spec_fields_the_plugins_read() -> None:
    p = pod_record(
        pod_obj(
            nodeName="n1",
            priority=100,
            schedulerName="my-scheduler",
            nodeSelector={"disk": "ssd"},
            tolerations=[{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
            initContainers=[
                {
                    "name": "side",
                    "restartPolicy": "Always",
                    "resources": {"requests": {"cpu": "100m"}},
                }
            ],
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "zone", "operator": "In", "values": ["a"]}
                                ]
                            }
                        ]
                    }
                },
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {"matchLabels": {"app": "web"}},
                            "topologyKey": "kubernetes.io/hostname",
                        }
                    ]
                },
            },
            topologySpreadConstraints=[
                {
                    "maxSkew": 1,
                    "topologyKey": "zone",
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "web"}},
                }
            ],
            volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data-0"}}],
        )
    )
    assert (p.node_name, p.priority, p.scheduler_name) == ("n1", 100, "my-scheduler")
    assert p.node_selector["disk"] == "ssd"
    assert p.tolerations[0].operator == "Exists"
    assert p.init_containers[0].restartable
    term = p.affinity.node_affinity.required.terms[0].match_expressions[0]
    assert (term.key, term.operator, list(term.values)) == ("zone", "In", ["a"])
    anti = p.affinity.pod_anti_affinity.required[0]
    assert anti.topology_key == "kubernetes.io/hostname"
    assert anti.label_selector.match_labels["app"] == "web"
    assert p.topology_spread_constraints[0].max_skew == 1
    assert list(p.pvc_names) == ["data-0"]


def test_pod_volumes_the_volume_plugins_read() -> None:
    """spec.volumes into Pod.volumes: claims (readOnly kept), generic ephemeral volumes
    with the claim the API creates (ephemeral.VolumeClaimName: <pod>-<volume>), the
    inline sources some plugins inspect as their whole JSON entry; other volumes left
    out. pvc_names keeps the claims' names."""
    gce = {"name": "disk", "gcePersistentDisk": {"pdName": "pd-1", "fsType": "ext4"}}
    csi = {"name": "inline-csi", "csi": {"driver": "hostpath.csi.k8s.io"}}
    p = pod_record(
        pod_obj(
            volumes=[
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-0"}},
                {"name": "logs", "persistentVolumeClaim": {"claimName": "logs", "readOnly": True}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                {"name": "cfg", "configMap": {"name": "cfg"}},
                {"name": "tmp", "emptyDir": {}},
                gce,
                csi,
            ]
        )
    )
    got = [(v.name, v.claim_name, v.ephemeral, v.read_only) for v in p.volumes]
    assert got == [
        ("data", "data-0", False, False),
        ("logs", "logs", False, True),
        ("scratch", "p-scratch", True, False),
        ("disk", "", False, False),
        ("inline-csi", "", False, False),
    ]
    assert [json.loads(v.source_json) if v.source_json else None for v in p.volumes] == [
        None,
        None,
        None,
        gce,
        csi,
    ]
    assert list(p.pvc_names) == ["data-0", "logs"]
    # A pod without volumes has none.
    assert not pod_record(pod_obj()).volumes


def test_defaults_for_a_hand_written_manifest() -> None:
    p = pod_record(
        {"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}}, assign_uid=True
    )
    assert p.namespace == "default"
    assert p.scheduler_name == "default-scheduler"
    assert p.uid


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({"kind": "Pod", "metadata": {"name": "p"}, "spec": {}}, "Pod p metadata.uid: required"),
        ({"kind": "Node", "metadata": {}}, "Node metadata.name: required"),
        (
            pod_obj(containers=[{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]),
            "Pod p spec.containers[0].resources.requests.cpu: quantity 'lots' is not a Kubernetes quantity",
        ),
    ],
    ids=["pod-without-uid", "node-without-name", "bad-quantity"],
)
def test_bad_objects_name_the_field(obj: dict[str, Any], message: str) -> None:
    convert = node_record if obj["kind"] == "Node" else pod_record
    with pytest.raises(ObjectError) as err:
        convert(obj)
    assert str(err.value).startswith(message)


def test_pods_decoded_into_shared_messages_are_the_records_pod_record_makes() -> None:
    """PodSlabs: the same records as pod_record, in shared messages of ``size``
    pods; each stays whole once its slab is full and dropped, whatever
    happens to the others, and a pod that fails leaves the next one intact."""
    objs = [
        pod_obj(
            nodeName=f"n{i}",
            tolerations=[{"key": "k", "operator": "Exists", "tolerationSeconds": i}],
            affinity={
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "zone"}
                    ]
                }
            },
        )
        for i in range(7)
    ]
    for i, o in enumerate(objs):
        o["metadata"] = {**o["metadata"], "uid": f"u{i}", "name": f"p{i}"}
    bad = pod_obj(containers=[{"name": "c", "resources": {"requests": {"cpu": "lots"}}}])
    slabs = PodSlabs(3)
    records = [slabs(o) for o in objs[:4]]
    with pytest.raises(ObjectError):
        slabs(bad)
    records += [slabs(o) for o in objs[4:]]
    del slabs, records[1:3]
    gc.collect()
    want = [pod_record(o) for i, o in enumerate(objs) if i not in (1, 2)]
    assert records == want
    assert [r.SerializeToString() for r in records] == [w.SerializeToString() for w in want]
    copy = pb.Pod()
    copy.CopyFrom(records[0])
    assert copy == want[0] and copy.affinity.pod_anti_affinity.required[0].topology_key == "zone"


def test_a_pod_that_fails_leaves_nothing_in_its_shared_message() -> None:
    """PodSlabs is all or nothing: a malformed pod (its error found part-way,
    after its entry was added) leaves no partial entry in the slab, so the
    slab holds whole records only and the next pods take its place."""
    good = [pod_obj() for _ in range(3)]
    for i, o in enumerate(good):
        o["metadata"] = {**o["metadata"], "uid": f"u{i}", "name": f"p{i}"}
    bad = pod_obj(containers=[{"name": "c", "resources": {"requests": {"cpu": "lots"}}}])
    slabs = PodSlabs(3)
    first = slabs(good[0])
    with pytest.raises(ObjectError):
        slabs(bad)
    rest = [slabs(o) for o in good[1:]]
    slab = slabs._slab
    assert slab is not None
    assert [p.name for p in slab] == ["p0", "p1", "p2"]
    assert [first, *rest] == [pod_record(o) for o in good]


def test_finished_pods_do_not_occupy_their_node() -> None:
    """The scheduler cache ignores Succeeded and Failed pods."""
    assert occupies_node(pod_record(pod_obj(nodeName="n")))
    done = pod_obj(nodeName="n")
    done["status"] = {"phase": "Succeeded"}
    assert not occupies_node(pod_record(done))
    assert not occupies_node(pod_record(pod_obj()))


def test_split_objects_reads_lists_and_documents() -> None:
    nodes, pods = split_objects(
        [
            {"apiVersion": "v1", "kind": "List", "items": [{"kind": "Node"}, pod_obj()]},
            {"kind": "Node"},
            None,
            {"kind": "ConfigMap"},
        ]
    )
    assert len(nodes) == 2 and len(pods) == 1


# -- pod-level resources and in-place resize ------------------------------------------
#
# testdata/ holds pods as kube-apiserver v1.36.3 returned them (kubectl get -o
# json) after `kubectl apply -f testdata/pod-level-manifests.yaml`, a
# `--subresource resize` patch and a status patch like the kubelet's:
#   pod-level.json          spec.resources.requests cpu 4, memory 1Gi
#   pod-level-limits.json   spec.resources.limits only; the API server defaulted
#                           the requests (cpu from the limit, memory from the
#                           containers)
#   pod-resized.json        app resized 1 -> 1500m CPU, resize Deferred: the
#                           kubelet still has 1 CPU allocated and applied
#   pod-level-resized.json  pod-level resize in progress: 1 CPU allocated, 500m
#                           applied, 768Mi memory applied
# The expected requests are what upstream's PodInfo.CalculateResource returns
# for the same JSON.

TESTDATA = Path(__file__).parent / "testdata"


def load(name: str) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads((TESTDATA / name).read_text())
    return obj


def test_decode_pod_level_resources_from_api_server_json() -> None:
    p = pod_record(load("pod-level.json"))
    assert p.HasField("pod_level_requests") and not p.HasField("pod_level_limits")
    assert p.pod_level_requests.milli_cpu == 4000
    assert p.pod_level_requests.memory == 2**30
    assert not p.HasField("pod_level_actuated_requests")
    info = PodInfo(p)
    assert (info.requests.milli_cpu, info.requests.memory) == (4000, 2**30)
    assert info.non_zero_requests == (4000, 2**30)


def test_decode_pod_level_defaults_like_the_api_server() -> None:
    """The manifests decode to the same pod-level records as the objects the
    API server stored (defaultPodRequests, defaultHugePagePodLimits)."""
    manifests = {
        d["metadata"]["name"]: d
        for d in yaml.safe_load_all((TESTDATA / "pod-level-manifests.yaml").read_text())
    }
    for name in ("pod-level", "pod-level-limits"):
        manifest = manifests[name]
        from_manifest = pod_record(manifest, assign_uid=True)
        from_server = pod_record(load(f"{name}.json"))
        assert from_manifest.pod_level_requests == from_server.pod_level_requests, name
        assert from_manifest.pod_level_limits == from_server.pod_level_limits, name
    limits = pod_record(load("pod-level-limits.json"))
    assert (limits.pod_level_requests.milli_cpu, limits.pod_level_requests.memory) == (
        2000,
        512 * 2**20,
    )


Q = dict[str, str]


def resources_obj(requests: Q | None, limits: Q | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if requests is not None:
        out["requests"] = requests
    if limits is not None:
        out["limits"] = limits
    return out


HP = "hugepages-2Mi"
POD_RESOURCES_DEFAULTS: dict[str, tuple[dict[str, Any] | None, list[dict[str, Any]], Q, Q]] = {
    "pod-resources-unset": (None, [{"limits": {"cpu": "2m"}}], {}, {}),
    "pod-requests-unset-limits-set-container-resources-unset": (
        resources_obj(None, {"cpu": "4m", "memory": "8Mi"}),
        [{}, {}],
        {"cpu": "4m", "memory": "8Mi"},
        {"cpu": "4m", "memory": "8Mi"},
    ),
    "pod-requests-unset-limits-set-container-requests-set-limits-set": (
        resources_obj(None, {"cpu": "4m", "memory": "8Mi"}),
        [
            {"requests": {"cpu": "1m", "memory": "1Mi"}, "limits": {"cpu": "2m", "memory": "1Mi"}},
            {"requests": {"cpu": "1m", "memory": "2Mi"}, "limits": {"cpu": "1m", "memory": "5Mi"}},
        ],
        {"cpu": "2m", "memory": "3Mi"},
        {"cpu": "4m", "memory": "8Mi"},
    ),
    "pod-requests-unset-limits-set-container-memory-requests-set": (
        resources_obj(None, {"cpu": "4m", "memory": "8Mi"}),
        [{"requests": {"memory": "1Mi"}}, {"requests": {"memory": "5Mi"}}],
        {"cpu": "4m", "memory": "6Mi"},
        {"cpu": "4m", "memory": "8Mi"},
    ),
    "pod-requests-set-limits-unset-is-kept": (
        resources_obj({"cpu": "1"}, None),
        [{"requests": {"memory": "1Mi"}}],
        {"cpu": "1"},
        {},
    ),
    "pod-has-cpu-limit-container-hugepages-limits-set": (
        resources_obj(None, {"cpu": "5m"}),
        [{"limits": {"cpu": "2m", HP: "4Mi"}}, {"limits": {"cpu": "1m", HP: "2Mi"}}],
        {"cpu": "3m", HP: "6Mi"},
        {"cpu": "5m", HP: "6Mi"},
    ),
    "pod-has-cpu-request-container-hugepages-limits-set": (
        resources_obj({"cpu": "5m"}, None),
        [{"limits": {"cpu": "2m", HP: "4Mi"}}, {"limits": {"cpu": "1m", HP: "2Mi"}}],
        {"cpu": "5m", HP: "6Mi"},
        {HP: "6Mi"},
    ),
    "pod-hugepages-requests-set-are-not-limited-by-containers": (
        resources_obj({"cpu": "5m", HP: "10Mi"}, {"cpu": "5m", HP: "10Mi"}),
        [{"limits": {"cpu": "2m", HP: "4Mi"}}],
        {"cpu": "5m", HP: "10Mi"},
        {"cpu": "5m", HP: "10Mi"},
    ),
}


@pytest.mark.parametrize(
    ("pod_resources", "containers", "want_requests", "want_limits"),
    POD_RESOURCES_DEFAULTS.values(),
    ids=POD_RESOURCES_DEFAULTS.keys(),
)
def test_pod_resources_defaults(
    pod_resources: dict[str, Any] | None,
    containers: list[dict[str, Any]],
    want_requests: Q,
    want_limits: Q,
) -> None:
    """pkg/apis/core/v1 SetDefaults_Pod with PodLevelResources on
    (TestPodResourcesDefaults): defaultHugePagePodLimits, defaultPodRequests."""
    spec: dict[str, Any] = {
        "containers": [{"name": f"c{i}", "resources": r} for i, r in enumerate(containers)]
    }
    if pod_resources is not None:
        spec["resources"] = pod_resources
    p = pod_record({"kind": "Pod", "metadata": {"name": "p", "uid": "u"}, "spec": spec})
    assert p.HasField("pod_level_requests") is bool(want_requests)
    assert p.HasField("pod_level_limits") is bool(want_limits)
    assert p.pod_level_requests == resources(**want_requests)
    assert p.pod_level_limits == resources(**want_limits)


def test_pod_level_defaults_use_the_sidecar_formula() -> None:
    """defaultPodRequests takes AggregateContainerRequests: sidecars add, an
    init container raises the total to its step."""
    p = pod_record(
        pod_obj(
            resources={"limits": {"cpu": "4"}},
            containers=[{"name": "app", "resources": {"requests": {"memory": "1Gi"}}}],
            initContainers=[
                {
                    "name": "side",
                    "restartPolicy": "Always",
                    "resources": {"requests": {"memory": "256Mi"}},
                },
                {"name": "setup", "resources": {"requests": {"memory": "2Gi"}}},
            ],
        )
    )
    assert p.pod_level_requests == resources(cpu="4", memory=f"{2048 + 256}Mi")


def test_decode_resize_status_from_api_server_json() -> None:
    """status.containerStatuses / initContainerStatuses: allocatedResources and
    resources.requests, on the container of the same name."""
    p = pod_record(load("pod-resized.json"))
    app, side = p.containers[0], p.init_containers[0]
    assert app.requests.milli_cpu == 1500
    assert app.allocated_requests == resources(cpu="1", memory="1Gi")
    assert app.actuated_requests == resources(cpu="1", memory="1Gi")
    assert side.restartable
    assert side.allocated_requests == resources(cpu="100m", memory="64Mi")
    assert side.actuated_requests == resources(cpu="100m", memory="64Mi")
    assert not p.resize_infeasible  # Deferred
    info = PodInfo(p)
    # Deferred: max(spec 1500m, applied 1) + the sidecar.
    assert (info.requests.milli_cpu, info.requests.memory) == (1600, 2**30 + 64 * 2**20)
    # NodeResourcesFit's PreFilter reads the spec alone.
    assert info.spec_requests.milli_cpu == 1600


def test_decode_resize_infeasible_condition() -> None:
    """IsPodResizeInfeasible: PodResizePending with reason Infeasible drops the
    spec from the effective requests."""
    obj = load("pod-resized.json")
    obj["status"]["conditions"][0]["reason"] = "Infeasible"
    p = pod_record(obj)
    assert p.resize_infeasible
    assert PodInfo(p).requests.milli_cpu == 1100  # applied 1 + the sidecar's 100m


def test_decode_pod_level_resize_status_from_api_server_json() -> None:
    """status.allocatedResources and status.resources at pod level; a container
    status with an empty ``resources`` still marks the status as present."""
    p = pod_record(load("pod-level-resized.json"))
    assert p.pod_level_requests == resources(cpu="1", memory="512Mi")
    assert p.pod_level_limits == resources(memory="1Gi")
    assert p.pod_level_allocated_requests == resources(cpu="1", memory="512Mi")
    assert p.pod_level_actuated_requests == resources(cpu="500m", memory="768Mi")
    assert p.containers[0].HasField("actuated_requests")
    assert p.containers[0].actuated_requests == pb.Resources()
    assert not p.containers[0].HasField("allocated_requests")
    assert not p.resize_infeasible  # PodResizeInProgress is not read
    info = PodInfo(p)
    assert (info.requests.milli_cpu, info.requests.memory) == (1000, 768 * 2**20)


def test_decode_resize_status_edge_cases() -> None:
    """No ``resources`` (or null) in a status: not set; statuses of unknown
    names are ignored; the first PodResizePending condition decides."""
    obj = pod_obj(
        initContainers=[{"name": "init", "resources": {"requests": {"cpu": "1"}}}],
    )
    obj["status"] = {
        "containerStatuses": [
            {"name": "c", "allocatedResources": {"cpu": "2"}, "resources": None},
            {"name": "ghost", "resources": {"requests": {"cpu": "9"}}},
        ],
        "initContainerStatuses": [{"name": "init", "resources": {"requests": {"cpu": "3"}}}],
        "conditions": [
            {"type": "PodResizePending", "status": "True", "reason": "Deferred"},
            {"type": "PodResizePending", "status": "True", "reason": "Infeasible"},
        ],
    }
    p = pod_record(obj)
    c = p.containers[0]
    assert c.HasField("allocated_requests") and not c.HasField("actuated_requests")
    # Decoded on a plain init container too; only the computation ignores it.
    assert p.init_containers[0].actuated_requests.milli_cpu == 3000
    assert not p.resize_infeasible
    assert not p.HasField("pod_level_actuated_requests")
    assert PodInfo(p).requests.milli_cpu == 1000


def test_bad_status_quantity_names_the_field() -> None:
    obj = pod_obj()
    obj["status"] = {"containerStatuses": [{"name": "c", "allocatedResources": {"cpu": "x"}}]}
    with pytest.raises(ObjectError) as err:
        pod_record(obj)
    assert str(err.value).startswith(
        "Pod p status.containerStatuses[0].allocatedResources.cpu: quantity 'x'"
    )


def test_node_declared_features_facts() -> None:
    """The facts NodeDeclaredFeatures reads: restartPolicyRules actions,
    hostNetwork, hostUsers, status.declaredFeatures."""
    pod = pod_record(
        {
            "metadata": {"name": "p", "namespace": "d", "uid": "u"},
            "spec": {
                "hostNetwork": True,
                "hostUsers": False,
                "containers": [
                    {
                        "name": "c",
                        "restartPolicy": "Never",
                        "restartPolicyRules": [
                            {
                                "action": "RestartAllContainers",
                                "exitCodes": {"operator": "In", "values": [42]},
                            }
                        ],
                    }
                ],
            },
        }
    )
    assert list(pod.containers[0].restart_rule_actions) == ["RestartAllContainers"]
    assert pod.host_network and pod.HasField("host_users") and not pod.host_users
    assert not pod_record({"metadata": {"name": "q", "uid": "q"}, "spec": {}}).HasField(
        "host_users"
    )
    node = node_record(
        {
            "metadata": {"name": "n"},
            "status": {"declaredFeatures": ["RestartAllContainersOnContainerExits"]},
        }
    )
    assert list(node.declared_features) == ["RestartAllContainersOnContainerExits"]


def test_repeated_resource_lists_decode_alike_and_bad_ones_still_fail() -> None:
    """Decoded ResourceLists are reused by their items (berth.kube.records._resources):
    the reuse gives what a first decoding gives, a value that is not a string
    is never taken for an equal string's, and a bad quantity fails every time."""
    from berth.kube.records import resources

    def container(requests: dict[str, Any]) -> dict[str, Any]:
        return {"name": "c", "image": "i", "resources": {"requests": requests}}

    first = pod_record(pod_obj(containers=[container({"cpu": "1", "memory": "1Gi"})]))
    again = pod_record(pod_obj(containers=[container({"cpu": "1", "memory": "1Gi"})]))
    assert first == again and first.containers[0].requests.milli_cpu == 1000
    # The list the caller got is its own: changing it changes no later decoding.
    mine = resources({"cpu": "1", "memory": "1Gi"}, "x")
    mine.milli_cpu = 5
    assert resources({"cpu": "1", "memory": "1Gi"}, "x").milli_cpu == 1000
    # 1 == True as keys go: an int decodes as its number, a bool is no quantity.
    as_int = pod_record(pod_obj(containers=[container({"cpu": 1})]))
    assert as_int.containers[0].requests.milli_cpu == 1000
    for _ in range(2):
        with pytest.raises(ObjectError, match=r"containers\[0\]\.resources\.requests\.cpu"):
            pod_record(pod_obj(containers=[container({"cpu": True})]))
        with pytest.raises(ObjectError, match="not a Kubernetes quantity"):
            pod_record(pod_obj(containers=[container({"cpu": "lots"})]))
    with pytest.raises(ObjectError):
        pod_record(pod_obj(containers=[container({"cpu": ["1"]})]))


def test_preemption_facts() -> None:
    """What DefaultPreemption reads of a pod's status: startTime
    (util.GetPodStartTime) and the first DisruptionTarget condition
    (podTerminatingByPreemption)."""
    obj: dict[str, Any] = {
        "metadata": {"name": "v", "uid": "v", "deletionTimestamp": "2026-11-23T10:00:05Z"},
        "spec": {},
        "status": {
            "startTime": "2026-11-23T10:00:00Z",
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"},
                {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"},
            ],
        },
    }
    p = pod_record(obj)
    assert p.start_unix_micros == 1_795_428_000_000_000
    assert p.terminating and p.preempted_by_scheduler
    obj["status"]["conditions"][1]["reason"] = "DeletionByTaintManager"
    assert not pod_record(obj).preempted_by_scheduler
    obj["status"] = {}
    bare = pod_record(obj)
    assert bare.start_unix_micros == 0 and not bare.preempted_by_scheduler


def test_resource_claims_and_their_statuses() -> None:
    """spec.resourceClaims and status.resourceClaimStatuses, with upstream's nil
    pointers kept apart from empty strings (resourceclaim.Name): an entry with
    neither name, and a status whose claim was not generated, stay unset."""
    obj: dict[str, Any] = {
        "metadata": {"name": "p", "uid": "u", "namespace": "ns"},
        "spec": {
            "containers": [{"name": "c", "image": "i"}],
            "resourceClaims": [
                {"name": "gpu", "resourceClaimTemplateName": "gpu-template"},
                {"name": "shared", "resourceClaimName": "shared-claim"},
                {"name": "broken"},
                "not an entry",
            ],
        },
        "status": {
            "resourceClaimStatuses": [
                {"name": "gpu", "resourceClaimName": "p-gpu-x7k2"},
                {"name": "unneeded", "resourceClaimName": None},
            ]
        },
    }
    p = pod_record(obj)
    gpu, shared, broken = p.resource_claims
    assert (gpu.name, gpu.resource_claim_template_name) == ("gpu", "gpu-template")
    assert not gpu.HasField("resource_claim_name")
    assert (shared.name, shared.resource_claim_name) == ("shared", "shared-claim")
    assert not shared.HasField("resource_claim_template_name")
    assert broken.name == "broken"
    assert not broken.HasField("resource_claim_name")
    assert not broken.HasField("resource_claim_template_name")
    generated, unneeded = p.resource_claim_statuses
    assert (generated.name, generated.resource_claim_name) == ("gpu", "p-gpu-x7k2")
    assert unneeded.name == "unneeded" and not unneeded.HasField("resource_claim_name")
    # What the API server shows is never the caller's assumed copy.
    assert not p.assumed
    del obj["spec"]["resourceClaims"]
    del obj["status"]
    bare = pod_record(obj)
    assert not bare.resource_claims and not bare.resource_claim_statuses


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"priority": float("inf")}, "priority"),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {"weight": float("inf"), "preference": {}}
                        ]
                    }
                }
            },
            "weight",
        ),
        ({"topologySpreadConstraints": [{"maxSkew": float("-inf")}]}, "maxSkew"),
        ({"tolerations": [{"key": "k", "tolerationSeconds": float("inf")}]}, "tolerationSeconds"),
    ],
    ids=["priority", "preferred-weight", "max-skew", "toleration-seconds"],
)
def test_an_integer_json_cannot_hold_is_refused_naming_the_field(
    spec: dict[str, Any], field: str
) -> None:
    """A number beyond a double's range (1e400) decodes as infinity: the record is
    refused as an ObjectError, which the informer skips, not an OverflowError."""
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": spec}
    with pytest.raises(ObjectError, match=f"{field}: integer out of range"):
        pod_record(pod)


def test_mappings_other_than_dicts_decode_as_dicts_and_non_mappings_as_absent() -> None:
    # The decoder's fast path takes plain dicts and None; any other Mapping
    # (a YAML loader's, a read-only view) must decode the same, and a value
    # that is no mapping at all must read as absent.
    from types import MappingProxyType

    plain = pod_obj(nodeSelector={"disk": "ssd"}, affinity={"podAntiAffinity": {}})
    plain["metadata"]["annotations"] = {"a": "1"}
    proxied = pod_obj(
        nodeSelector=MappingProxyType({"disk": "ssd"}),
        affinity=MappingProxyType({"podAntiAffinity": MappingProxyType({})}),
    )
    proxied["metadata"] = MappingProxyType(
        {**plain["metadata"], "annotations": MappingProxyType({"a": "1"})}
    )
    assert pod_record(proxied) == pod_record(plain)
    assert pod_record(plain).HasField("affinity")
    assert dict(pod_record(plain).annotations) == {"a": "1"}
    odd = pod_obj(nodeSelector=["disk"], affinity="x")
    odd["metadata"]["labels"] = 7
    rec = pod_record(odd)
    assert not rec.node_selector and not rec.labels and not rec.HasField("affinity")


def test_repeated_affinities_decode_alike_and_bad_ones_still_fail() -> None:
    """Converted affinities are reused by their JSON text (records._affinity_record):
    the reuse gives what a first conversion gives, a record changed by its holder
    changes no later one, and what the text cannot tell apart (infinity is written
    as null) is converted every time."""
    from berth.kube import records

    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"color": "green"}},
                    "topologyKey": "kubernetes.io/hostname",
                    "namespaces": ["bench"],
                }
            ]
        }
    }
    first = pod_record(pod_obj(affinity=anti))
    converted = pb.Affinity()
    records._affinity(anti, converted)
    assert first.affinity == converted
    assert converted in records._AFFINITY.values()
    first.affinity.pod_anti_affinity.required[0].topology_key = "changed"
    again = pod_record(pod_obj(affinity=anti))
    assert again.affinity == converted
    assert again.affinity.pod_anti_affinity.required[0].topology_key == "kubernetes.io/hostname"
    # A text past the key bound is converted, never kept (bounded memory).
    big = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 1,
                    "preference": {
                        "matchExpressions": [
                            {
                                "key": "k" * 60,
                                "operator": "In",
                                "values": [str(i) for i in range(2000)],
                            }
                        ]
                    },
                }
            ]
        }
    }
    kept = len(records._AFFINITY)
    assert len(pod_record(pod_obj(affinity=big)).affinity.node_affinity.preferred) == 1
    assert len(records._AFFINITY) == kept
    # An empty affinity is present, from the cache as on its first conversion.
    for _ in range(2):
        assert pod_record(pod_obj(affinity={})).HasField("affinity")

    def weighted(weight: Any) -> dict[str, Any]:
        term = {"weight": weight, "preference": {}}
        return {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [term]}}

    # A null weight reads as 0; infinity, which orjson also writes as null, is refused.
    for _ in range(2):
        assert (
            pod_record(pod_obj(affinity=weighted(None))).affinity.node_affinity.preferred[0].weight
            == 0
        )
        with pytest.raises(ObjectError, match="weight: integer out of range"):
            pod_record(pod_obj(affinity=weighted(float("inf"))))
