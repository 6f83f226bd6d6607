"""Fake nodes and pods, at volume, on a real API server with no kubelet.

Builders return plain dicts (the JSON the API server takes), so tests and benchmarks can
tweak any field. Bulk helpers send requests from a thread pool over pooled connections.

There is no kubelet in the local cluster, and its kube-controller-manager runs no node
controller, so:

- nodes are created with their status (capacity, allocatable, Ready condition) in the create
  request: the API server keeps a Node's status on create, and nothing ever changes it;
- bound pods are deleted with ``gracePeriodSeconds=0``, which removes them at once instead of
  waiting for a kubelet to confirm;
- namespaces are finalized by `delete_namespace` itself, at once: a cluster may run without
  the namespace controller (``ClusterConfig.controllers``), and where it runs it takes seconds.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from berth.dev.localcluster.errors import LocalClusterError
from berth.kube.errors import ApiError
from berth.kube.rest import JSON, KubeApi, segment

FAKE_NODE_LABEL = "berth.dev/fake-node"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
DEFAULT_CONCURRENCY = 16

T = TypeVar("T")
R = TypeVar("R")


class BulkError(LocalClusterError):
    """Some requests of a bulk operation failed; ``failures`` has (item, error) pairs."""

    def __init__(self, what: str, total: int, failures: list[tuple[str, Exception]]) -> None:
        self.failures = failures
        shown = "; ".join(f"{name}: {err}" for name, err in failures[:3])
        more = f" (and {len(failures) - 3} more)" if len(failures) > 3 else ""
        super().__init__(f"{len(failures)}/{total} {what} failed: {shown}{more}")


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- builders --------------------------------------------------------------------------------


def taint(key: str, value: str = "", effect: str = "NoSchedule") -> JSON:
    return {"key": key, "value": value, "effect": effect}


def toleration(
    key: str, value: str | None = None, effect: str | None = None, operator: str | None = None
) -> JSON:
    tol: JSON = {"key": key, "operator": operator or ("Equal" if value is not None else "Exists")}
    if value is not None:
        tol["value"] = value
    if effect is not None:
        tol["effect"] = effect
    return tol


def node(
    name: str,
    *,
    cpu: str = "4",
    memory: str = "16Gi",
    pods: int = 110,
    ephemeral_storage: str = "100Gi",
    extended: Mapping[str, str] | None = None,
    allocatable: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[JSON] = (),
    ready: bool = True,
    unschedulable: bool = False,
) -> JSON:
    """A Node with capacity (``cpu``, ``memory``, ``pods``, ``extended`` e.g. nvidia.com/gpu);
    allocatable equals capacity unless ``allocatable`` overrides some of it."""
    capacity = {
        "cpu": cpu,
        "memory": memory,
        "pods": str(pods),
        "ephemeral-storage": ephemeral_storage,
        **(extended or {}),
    }
    now = _now()
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                FAKE_NODE_LABEL: "true",
                **(labels or {}),
            },
        },
        "spec": {"taints": list(taints), "unschedulable": unschedulable},
        "status": {
            "capacity": capacity,
            "allocatable": {**capacity, **(allocatable or {})},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "KubeletReady" if ready else "KubeletNotReady",
                    "message": "fake node created by berth.dev.localcluster",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "addresses": [{"type": "Hostname", "address": name}],
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "v0.0.0-fake",
                "containerRuntimeVersion": "fake://0",
                "kernelVersion": "",
                "osImage": "",
                "kubeProxyVersion": "",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
        },
    }


def pod(
    name: str,
    *,
    namespace: str,
    cpu: str | None = "100m",
    memory: str | None = "128Mi",
    extended: Mapping[str, str] | None = None,
    scheduler_name: str = "default-scheduler",
    labels: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
    tolerations: Sequence[JSON] = (),
    node_name: str | None = None,
    priority_class_name: str | None = None,
) -> JSON:
    """A single-container pause Pod requesting ``cpu``/``memory`` (None: no request)."""
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    requests.update(extended or {})
    container: JSON = {"name": "pause", "image": PAUSE_IMAGE, "resources": {}}
    if requests:
        container["resources"] = {"requests": requests}
        if extended:  # extended resources must have limits == requests
            container["resources"]["limits"] = dict(extended)
    spec: JSON = {
        "schedulerName": scheduler_name,
        "containers": [container],
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
    }
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        spec["tolerations"] = list(tolerations)
    if node_name:
        spec["nodeName"] = node_name
    if priority_class_name:
        spec["priorityClassName"] = priority_class_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": spec,
    }


# --- bulk operations -------------------------------------------------------------------------


def run_concurrently(
    fn: Callable[[T], R],
    items: Iterable[T],
    *,
    what: str,
    key: Callable[[T], str] = str,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> list[R]:
    """Apply ``fn`` to every item from ``concurrency`` threads; raise BulkError if any failed."""
    todo = list(items)
    results: list[R] = []
    failures: list[tuple[str, Exception]] = []

    def attempt(item: T) -> tuple[T, R | None, Exception | None]:
        try:
            return item, fn(item), None
        except Exception as err:  # collected and re-raised as one BulkError below
            return item, None, err

    with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(todo) or 1))) as pool:
        for item, result, err in pool.map(attempt, todo):
            if err is not None:
                failures.append((key(item), err))
            else:
                results.append(result)  # type: ignore[arg-type]
    if failures:
        raise BulkError(what, len(todo), failures)
    return results


def _name(obj: JSON) -> str:
    return str(obj["metadata"]["name"])


# A creation whose connection dropped before any answer (the API server closed a
# keep-alive connection the pool reused, or restarted) is sent again this many times.
CREATE_ATTEMPTS = 4


def create_once(client: KubeApi, path: str, obj: JSON) -> JSON:
    """POST ``obj`` to the collection ``path``, sent again while the server
    gave no answer or a temporary one; when a repeat finds the object already
    there (409), the first attempt created it, and the object is read back."""
    for attempt in range(CREATE_ATTEMPTS):
        try:
            return client.create(path, obj)
        except ApiError as err:
            if attempt and err.conflict:
                return client.get(f"{path}/{segment(_name(obj))}")
            if not err.temporary or attempt == CREATE_ATTEMPTS - 1:
                raise
            time.sleep(0.1 * 2**attempt)
    raise AssertionError("unreachable")  # the loop returns or raises


def create_nodes(
    client: KubeApi, nodes: Iterable[JSON], *, concurrency: int = DEFAULT_CONCURRENCY
) -> list[JSON]:
    return run_concurrently(
        lambda n: create_once(client, "/api/v1/nodes", n),
        nodes,
        what="node creations",
        key=_name,
        concurrency=concurrency,
    )


def create_pods(
    client: KubeApi, pods: Iterable[JSON], *, concurrency: int = DEFAULT_CONCURRENCY
) -> list[JSON]:
    def create(p: JSON) -> JSON:
        ns = segment(p["metadata"]["namespace"])
        return create_once(client, f"/api/v1/namespaces/{ns}/pods", p)

    return run_concurrently(create, pods, what="pod creations", key=_name, concurrency=concurrency)


def _ignore_not_found(call: Callable[[], Any]) -> None:
    try:
        call()
    except ApiError as err:
        if err.status != 404:
            raise


def delete_nodes(
    client: KubeApi, names: Iterable[str], *, concurrency: int = DEFAULT_CONCURRENCY
) -> None:
    run_concurrently(
        lambda n: _ignore_not_found(lambda: client.delete(f"/api/v1/nodes/{segment(n)}")),
        names,
        what="node deletions",
        concurrency=concurrency,
    )


def delete_fake_nodes(client: KubeApi, label_selector: str = f"{FAKE_NODE_LABEL}=true") -> int:
    """Delete every node matching ``label_selector`` in one request; returns how many."""
    listed = client.get("/api/v1/nodes", labelSelector=label_selector)
    count = len(listed.get("items", []))
    if count:
        client.delete("/api/v1/nodes", labelSelector=label_selector)
    return count


def delete_pods(
    client: KubeApi,
    namespace: str,
    names: Iterable[str] | None = None,
    *,
    label_selector: str | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> None:
    """Delete pods at once (gracePeriodSeconds=0), bound or not; no kubelet needed.

    With ``names`` None, deletes every pod in the namespace matching ``label_selector``.
    """
    base = f"/api/v1/namespaces/{segment(namespace)}/pods"
    if names is None:
        client.delete(base, gracePeriodSeconds=0, labelSelector=label_selector)
        return
    run_concurrently(
        lambda n: _ignore_not_found(
            lambda: client.delete(f"{base}/{segment(n)}", gracePeriodSeconds=0)
        ),
        names,
        what="pod deletions",
        concurrency=concurrency,
    )


def create_namespace(client: KubeApi, name: str, labels: Mapping[str, str] | None = None) -> JSON:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    if labels:
        body["metadata"]["labels"] = dict(labels)  # type: ignore[index]
    return client.create("/api/v1/namespaces", body)


def delete_namespace(client: KubeApi, name: str) -> None:
    """Delete a namespace's pods, then the namespace, finalizing it ourselves.

    Without the namespace controller the API server would leave it Terminating forever, and
    with it a test would wait seconds for discovery and deletion; pods are what tests leave in
    it (events expire on their own).
    """
    ns = segment(name)
    try:
        client.delete(f"/api/v1/namespaces/{ns}/pods", gracePeriodSeconds=0)
        client.delete(f"/api/v1/namespaces/{ns}")
        current = client.get(f"/api/v1/namespaces/{ns}")
    except ApiError as err:
        if err.status == 404:
            return
        raise
    current["spec"] = {"finalizers": []}
    _ignore_not_found(
        lambda: client.request("PUT", f"/api/v1/namespaces/{ns}/finalize", body=current)
    )


# --- waiting through watches -----------------------------------------------------------------


def wait_for_objects(
    client: KubeApi,
    path: str,
    predicate: Callable[[JSON], bool],
    *,
    count: int = 1,
    label_selector: str | None = None,
    field_selector: str | None = None,
    timeout: float = 60.0,
    resource_version: str | None = None,
) -> dict[str, JSON]:
    """Wait, through a watch on the collection at ``path``, until ``count`` objects satisfy
    ``predicate``; return them by name.

    Lists first (objects already done count), then watches from the list's resourceVersion,
    re-listing if the watch expires. With ``resource_version`` (from an earlier list), skips
    the first list: only changes after that version count, each seen as a watch event.
    Raises TimeoutError saying how many were seen.
    """
    selectors = {"labelSelector": label_selector, "fieldSelector": field_selector}

    def relist() -> tuple[str, dict[str, JSON]]:
        listed = client.get(path, **selectors)
        matching = {_name(o): o for o in listed.get("items", []) if predicate(o)}
        return str(listed["metadata"]["resourceVersion"]), matching

    if resource_version is None:
        rv, done = relist()
    else:
        rv, done = resource_version, {}
    deadline = time.monotonic() + timeout
    while len(done) < count:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        for event in client.watch(
            path,
            timeout_seconds=max(1, int(remaining)),
            resourceVersion=rv,
            labelSelector=label_selector,
            fieldSelector=field_selector,
        ):
            obj = event["object"]
            if event["type"] == "ERROR":  # e.g. 410 Gone: start again from a fresh list
                rv, done = relist()
                break
            rv = obj["metadata"].get("resourceVersion", rv)
            if event["type"] in ("ADDED", "MODIFIED") and predicate(obj):
                done[_name(obj)] = obj
            elif event["type"] in ("MODIFIED", "DELETED"):
                done.pop(_name(obj), None)
            if len(done) >= count or time.monotonic() >= deadline:
                break
    if len(done) < count:
        raise TimeoutError(
            f"only {len(done)}/{count} objects at {path} reached the expected state within "
            f"{timeout:g}s"
        )
    return done


def wait_for_pods(
    client: KubeApi,
    namespace: str,
    predicate: Callable[[JSON], bool],
    *,
    count: int = 1,
    label_selector: str | None = None,
    field_selector: str | None = None,
    timeout: float = 60.0,
    resource_version: str | None = None,
) -> dict[str, JSON]:
    """`wait_for_objects` for the pods of ``namespace``."""
    return wait_for_objects(
        client,
        f"/api/v1/namespaces/{segment(namespace)}/pods",
        predicate,
        count=count,
        label_selector=label_selector,
        field_selector=field_selector,
        timeout=timeout,
        resource_version=resource_version,
    )


def is_bound(p: JSON) -> bool:
    return bool(p.get("spec", {}).get("nodeName"))
