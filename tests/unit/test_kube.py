"""Kubernetes objects to berth.v1 records (berth/kube.py)."""

from __future__ import annotations

from typing import Any

import pytest

from berth.kube import ObjectError, node_record, occupies_node, pod_record, split_objects
from plugins.framework.model import pod_requests


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
