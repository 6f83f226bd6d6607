"""Fake object builders and bulk-request error reporting (no API server needed)."""

from __future__ import annotations

import pytest

from berth.dev.localcluster import objects
from berth.kube.errors import ApiError


def test_node_has_ready_status_and_allocatable_equal_to_capacity_by_default() -> None:
    n = objects.node("n1", cpu="8", memory="32Gi", pods=50, extended={"nvidia.com/gpu": "4"})
    status = n["status"]
    assert status["capacity"] == {
        "cpu": "8",
        "memory": "32Gi",
        "pods": "50",
        "ephemeral-storage": "100Gi",
        "nvidia.com/gpu": "4",
    }
    assert status["allocatable"] == status["capacity"]
    assert [(c["type"], c["status"]) for c in status["conditions"]] == [("Ready", "True")]
    assert n["metadata"]["labels"]["kubernetes.io/hostname"] == "n1"
    assert n["metadata"]["labels"][objects.FAKE_NODE_LABEL] == "true"


def test_node_allocatable_override_taints_labels_and_not_ready() -> None:
    n = objects.node(
        "n2",
        cpu="4",
        allocatable={"cpu": "3500m"},
        labels={"zone": "a"},
        taints=[objects.taint("dedicated", "gpu", "NoExecute")],
        ready=False,
        unschedulable=True,
    )
    assert n["status"]["allocatable"]["cpu"] == "3500m"
    assert n["status"]["capacity"]["cpu"] == "4"
    assert n["metadata"]["labels"]["zone"] == "a"
    assert n["spec"] == {
        "taints": [{"key": "dedicated", "value": "gpu", "effect": "NoExecute"}],
        "unschedulable": True,
    }
    assert n["status"]["conditions"][0]["status"] == "False"


def test_pod_requests_scheduler_and_placement_fields() -> None:
    p = objects.pod(
        "p",
        namespace="ns",
        cpu="2",
        memory=None,
        extended={"nvidia.com/gpu": "1"},
        scheduler_name="berth",
        node_selector={"zone": "a"},
        tolerations=[objects.toleration("dedicated", "gpu", "NoExecute")],
    )
    container = p["spec"]["containers"][0]
    assert container["resources"] == {
        "requests": {"cpu": "2", "nvidia.com/gpu": "1"},
        "limits": {"nvidia.com/gpu": "1"},
    }
    assert p["spec"]["schedulerName"] == "berth"
    assert p["spec"]["nodeSelector"] == {"zone": "a"}
    assert p["spec"]["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoExecute"}
    ]
    assert p["metadata"]["namespace"] == "ns"
    assert "nodeName" not in p["spec"]


def test_toleration_without_value_uses_exists() -> None:
    assert objects.toleration("k") == {"key": "k", "operator": "Exists"}


def test_run_concurrently_returns_results_and_collects_every_failure() -> None:
    assert sorted(objects.run_concurrently(lambda x: x * 2, [1, 2, 3], what="doublings")) == [
        2,
        4,
        6,
    ]

    def fail_odd(x: int) -> int:
        if x % 2:
            raise ValueError(f"odd {x}")
        return x

    with pytest.raises(objects.BulkError) as info:
        objects.run_concurrently(fail_odd, range(10), what="things", concurrency=4)
    assert len(info.value.failures) == 5
    assert str(info.value).startswith("5/10 things failed: 1: odd 1; 3: odd 3; 5: odd 5")
    assert "(and 2 more)" in str(info.value)


def test_api_error_carries_status_reason_and_message() -> None:
    body = b'{"kind":"Status","reason":"AlreadyExists","message":"nodes \\"n1\\" already exists"}'
    err = ApiError("POST", "/api/v1/nodes", 409, body)
    assert (err.status, err.reason) == (409, "AlreadyExists")
    assert str(err) == 'POST /api/v1/nodes -> HTTP 409 AlreadyExists: nodes "n1" already exists'


def test_api_error_with_a_non_json_body() -> None:
    err = ApiError("GET", "/x", 502, b"bad gateway")
    assert err.message == "bad gateway"


class _DroppingApi:
    """Stands in for KubeApi's create/get: drops the first ``drops`` creations
    (status 0, as a connection closed before any answer), after having stored
    the object when ``landed``."""

    def __init__(self, drops: int, landed: bool = False) -> None:
        self.drops = drops
        self.landed = landed
        self.stored: dict[str, dict[str, object]] = {}
        self.posts = 0

    def create(self, path: str, obj: dict[str, object]) -> dict[str, object]:
        self.posts += 1
        key = f"{path}/{obj['metadata']['name']}"  # type: ignore[index]
        if key in self.stored:
            raise ApiError("POST", path, 409, b'{"reason": "AlreadyExists"}')
        if self.drops:
            self.drops -= 1
            if self.landed:
                self.stored[key] = obj
            raise ApiError("POST", path, 0, b"Connection aborted")
        self.stored[key] = obj
        return obj

    def get(self, path: str) -> dict[str, object]:
        return self.stored[path]


def test_a_creation_without_an_answer_is_sent_again() -> None:
    pod = objects.pod("p", namespace="ns")
    api = _DroppingApi(drops=2)
    assert objects.create_pods(api, [pod]) == [pod]  # type: ignore[arg-type]
    assert api.posts == 3
    # The dropped attempt had created it: the repeat's 409 reads it back.
    api = _DroppingApi(drops=1, landed=True)
    assert objects.create_pods(api, [pod]) == [pod]  # type: ignore[arg-type]
    # A server that never answers fails the creation after CREATE_ATTEMPTS.
    api = _DroppingApi(drops=objects.CREATE_ATTEMPTS)
    with pytest.raises(objects.BulkError, match="unreachable"):
        objects.create_pods(api, [pod])  # type: ignore[arg-type]
    assert api.posts == objects.CREATE_ATTEMPTS
    # A first answer of 409 is the caller's conflict, not a repeat's.
    api = _DroppingApi(drops=0)
    api.stored["/api/v1/namespaces/ns/pods/p"] = pod
    with pytest.raises(objects.BulkError, match="409"):
        objects.create_pods(api, [pod])  # type: ignore[arg-type]
