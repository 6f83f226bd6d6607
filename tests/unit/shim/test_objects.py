"""shim/objects.py: the kinds plugins read kept in the cluster state (polled
here against a scripted API; the watch path is the Informer of
test_informer.py, exercised end to end in tests/integration/test_shim_objects.py),
and the writes plugins return applied as merge patches."""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

import orjson
import pytest

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.client import ClusterStateLog
from berth.kube.errors import ApiError
from berth.kube.rest import JSON, KubeApi, ListResult
from berth.shim.informer import Event
from berth.shim.objects import (
    IfServed,
    ObjectSources,
    Poller,
    Source,
    WriteFailed,
    collection_path,
    merge_sources,
    object_path,
    object_record,
    perform_writes,
    served,
    write_path,
)

METRICS = pb.ObjectKind(
    group="metrics.k8s.io",
    version="v1beta1",
    resource="nodes",
    kind="NodeMetrics",
    namespaced=False,
    poll_seconds=1,
    plugins=["LowCpu"],
)
SOURCE = merge_sources([METRICS])[("metrics.k8s.io", "nodes")]


def metrics(name: str, cpu: str) -> JSON:
    return {
        "metadata": {"name": name, "managedFields": [{"manager": "x"}]},
        "usage": {"cpu": cpu},
    }


class FakeApi:
    """Scripted lists (an ApiError in the script is raised) and recorded patches."""

    def __init__(self, lists: list[list[JSON] | ApiError] | None = None) -> None:
        self.lists = list(lists or [])
        self.listed: list[tuple[str, dict[str, Any]]] = []
        self.patches: list[tuple[str, JSON]] = []
        self.fail_patch_on: str | None = None

    def list(self, path: str, **params: Any) -> ListResult:
        self.listed.append((path, params))
        item = self.lists.pop(0) if len(self.lists) > 1 else self.lists[0]
        if isinstance(item, ApiError):
            raise item
        return ListResult(item, "1")

    def merge_patch(self, path: str, patch: JSON) -> JSON:
        if path == self.fail_patch_on:
            raise ApiError("PATCH", path, 403, b"forbidden")
        self.patches.append((path, patch))
        return {}

    def delete(self, path: str, *, uid: str = "", **params: Any) -> JSON:
        self.patches.append((f"DELETE {path}", {"uid": uid}))
        return {"metadata": {"name": path.rsplit("/", 1)[-1]}}

    def create(self, path: str, body: JSON) -> JSON:
        if path == self.fail_patch_on:
            raise ApiError("POST", path, 409, b"already exists")
        self.patches.append((f"POST {path}", body))
        return body


# -- sources -----------------------------------------------------------------------------------


def test_paths_for_core_and_group_kinds() -> None:
    assert collection_path("", "v1", "pods") == "/api/v1/pods"
    assert collection_path("scheduling.x-k8s.io", "v1alpha1", "podgroups", "ns") == (
        "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ns/podgroups"
    )
    assert object_path("apps", "v1", "deployments", "ns", "d", "status") == (
        "/apis/apps/v1/namespaces/ns/deployments/d/status"
    )
    assert object_path("metrics.k8s.io", "v1beta1", "nodes", "", "n1") == (
        "/apis/metrics.k8s.io/v1beta1/nodes/n1"
    )


def test_merge_sources_one_per_kind_across_profiles() -> None:
    pods_a = pb.ObjectKind(
        version="v1", resource="pods", kind="Pod", label_selector="a", plugins=["A"]
    )
    pods_b = pb.ObjectKind(
        version="v1", resource="pods", kind="Pod", label_selector="b", plugins=["B"]
    )
    slow = pb.ObjectKind()
    slow.CopyFrom(METRICS)
    slow.poll_seconds = 30
    merged = merge_sources([pods_a, pods_b, slow, METRICS])
    assert merged[("", "pods")].label_selector == ""
    assert merged[("", "pods")].plugins == {"A", "B"}
    assert merged[("metrics.k8s.io", "nodes")].poll_seconds == 1
    same = merge_sources([pods_a, pods_a])
    assert same[("", "pods")].label_selector == "a"
    assert same[("", "pods")].params() == {"labelSelector": "a"}


def test_merge_sources_skips_reads_without_resource() -> None:
    assert merge_sources([pb.ObjectKind(version="v1")]) == {}


def test_object_record_drops_managed_fields_and_fills_kind() -> None:
    rec = object_record(SOURCE, metrics("n1", "500m"))
    assert (rec.ref.group, rec.ref.resource, rec.ref.namespace, rec.ref.name) == (
        "metrics.k8s.io",
        "nodes",
        "",
        "n1",
    )
    assert (rec.version, rec.kind) == ("v1beta1", "NodeMetrics")
    body = json.loads(rec.json)
    assert body["apiVersion"] == "metrics.k8s.io/v1beta1"
    assert body["kind"] == "NodeMetrics"
    assert "managedFields" not in body["metadata"]
    assert body["usage"] == {"cpu": "500m"}


def test_object_record_keeps_namespace_and_served_version() -> None:
    src = Source("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup", 0, "")
    obj = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": "ns"},
    }
    rec = object_record(src, obj)
    assert rec.ref.namespace == "ns"
    assert orjson.loads(rec.json) == obj


def test_object_record_without_name_is_refused() -> None:
    from berth.kube.records import ObjectError

    with pytest.raises(ObjectError, match=r"nodes\.metrics\.k8s\.io: metadata\.name: required"):
        object_record(SOURCE, {"metadata": {}})


async def test_poller_delivers_differences_and_keeps_objects_on_errors() -> None:
    api = FakeApi(
        [
            [metrics("n1", "1"), metrics("n2", "2")],
            [metrics("n1", "1"), metrics("n2", "3")],
            ApiError("GET", "/apis/metrics.k8s.io/v1beta1/nodes", 503),
            [metrics("n2", "3")],
        ]
    )
    seen: list[list[tuple[str, str]]] = []
    poller = Poller(
        cast(KubeApi, api), SOURCE, lambda evs: seen.append([(e.type, e.key) for e in evs])
    )
    await poller.poll()
    assert poller.synced
    await poller.poll()
    with pytest.raises(ApiError):
        await poller.poll()
    await poller.poll()
    assert seen == [
        [("ADDED", "/n1"), ("ADDED", "/n2")],
        [("MODIFIED", "/n2")],
        [("DELETED", "/n1")],
    ]
    assert api.listed[0] == ("/apis/metrics.k8s.io/v1beta1/nodes", {})


async def test_sources_feed_the_state_and_drop_what_nobody_reads() -> None:
    api = FakeApi([[metrics("n1", "1")]])
    state = ClusterStateLog()
    changed: list[str] = []
    sources = ObjectSources(
        cast(KubeApi, api), state, lambda src, _changes: changed.append(src.name)
    )
    sources.update([METRICS])
    try:
        assert await sources.wait_synced() == []
        assert list(state.objects) == [("metrics.k8s.io", "nodes", "", "n1")]
        assert changed == ["nodes.metrics.k8s.io"]
        state.commit()
        # Same reads again: nothing restarts.
        sources.update([METRICS])
        assert not state.has_pending
        sources.update([])
        assert state.objects == {}
        state.commit()
        delta = state.state_since(1).delta
        assert [r.name for r in delta.delete_objects] == ["n1"]
    finally:
        sources.stop()


async def test_sources_report_a_kind_that_never_lists() -> None:
    api = FakeApi([ApiError("GET", "/apis/metrics.k8s.io/v1beta1/nodes", 404)])
    sources = ObjectSources(cast(KubeApi, api), ClusterStateLog())
    sources.sync_timeout = 0.2
    sources.update([METRICS])
    try:
        assert await sources.wait_synced() == ["nodes.metrics.k8s.io"]
    finally:
        sources.stop()
    await asyncio.sleep(0)


# -- writes ------------------------------------------------------------------------------------


def write(name: str, patch: bytes = b'{"a":1}', sub: str = "") -> pb.ObjectWrite:
    return pb.ObjectWrite(
        ref=cpb.ObjectRef(resource="pods", namespace="ns", name=name),
        version="v1",
        subresource=sub,
        merge_patch=patch,
        plugin="Card",
    )


def test_writes_are_applied_in_order_as_merge_patches() -> None:
    api = FakeApi()
    perform_writes(cast(KubeApi, api), [write("a"), write("b", b'{"b":null}', "status")])
    assert api.patches == [
        ("/api/v1/namespaces/ns/pods/a", {"a": 1}),
        ("/api/v1/namespaces/ns/pods/b/status", {"b": None}),
    ]
    assert write_path(write("x", sub="status")) == "/api/v1/namespaces/ns/pods/x/status"


def test_first_failed_write_stops_and_names_plugin_and_object() -> None:
    api = FakeApi()
    api.fail_patch_on = "/api/v1/namespaces/ns/pods/b"
    with pytest.raises(WriteFailed) as info:
        perform_writes(cast(KubeApi, api), [write("a"), write("b"), write("c")])
    assert info.value.index == 1
    assert "write by plugin 'Card' to pods ns/b" in str(info.value)
    assert "403" in str(info.value)
    assert [p for p, _ in api.patches] == ["/api/v1/namespaces/ns/pods/a"]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (write("a", b"{nope"), "merge_patch is not JSON"),
        (write("a", b"[1]"), "merge_patch must be a JSON object"),
        (pb.ObjectWrite(ref=cpb.ObjectRef(resource="pods"), version="v1"), "must be set"),
    ],
)
def test_malformed_writes_fail_without_a_request(bad: pb.ObjectWrite, message: str) -> None:
    api = FakeApi()
    with pytest.raises(WriteFailed, match=message):
        perform_writes(cast(KubeApi, api), [bad])
    assert api.patches == []


def test_assumed_pod_carries_reserve_annotations_into_the_state() -> None:
    from berth.shim.cache import SchedulerCache

    cache = SchedulerCache()
    pod = cpb.Pod(uid="u1", name="p", namespace="ns", annotations={"keep": "1"})
    cache.assume(pod, "n1", {"gpu/card": "0"})
    sent = cache.state.pods["u1"]
    assert sent.node_name == "n1"
    assert dict(sent.annotations) == {"keep": "1", "gpu/card": "0"}
    assert dict(pod.annotations) == {"keep": "1"}  # the queued pod is left alone


# -- DRA claims: versions carried across one list, written objects kept -------------------------

CLAIMS = pb.ObjectKind(
    group="resource.k8s.io",
    version="v1",
    resource="resourceclaims",
    kind="ResourceClaim",
    namespaced=True,
    plugins=["DynamicResources"],
)


def claim_write(patch: JSON, sub: str = "") -> pb.ObjectWrite:
    return pb.ObjectWrite(
        ref=cpb.ObjectRef(
            group="resource.k8s.io", resource="resourceclaims", namespace="ns", name="c"
        ),
        version="v1",
        subresource=sub,
        merge_patch=orjson.dumps(patch),
        plugin="DynamicResources",
    )


class VersionedApi(FakeApi):
    """Answers each patch with the object at the next resourceVersion, and
    refuses (409) a patch whose precondition is not the current version."""

    def __init__(self, version: int) -> None:
        super().__init__()
        self.version = version

    def merge_patch(self, path: str, patch: JSON) -> JSON:
        want = patch.get("metadata", {}).get("resourceVersion")
        if want is not None and want != str(self.version):
            raise ApiError("PATCH", path, 409, b"the object has been modified")
        self.patches.append((path, patch))
        self.version += 1
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "ns", "resourceVersion": str(self.version)},
            "status": patch.get("status", {}),
        }


def test_a_later_write_to_the_same_object_carries_the_version_the_earlier_one_made() -> None:
    """DynamicResources' finalizer, then the claim's status, both as of the
    claim the plugin saw (version 10): the second is sent at 11, the version
    the shim's own first write made, so it still fails on anyone else's."""
    api = VersionedApi(10)
    answers = perform_writes(
        cast(KubeApi, api),
        [
            claim_write({"metadata": {"resourceVersion": "10", "finalizers": ["f"]}}),
            claim_write({"metadata": {"resourceVersion": "10"}, "status": {"x": 1}}, "status"),
        ],
    )
    assert [p["metadata"]["resourceVersion"] for _, p in api.patches] == ["10", "11"]
    assert [a["metadata"]["resourceVersion"] for _, a in answers] == ["11", "12"]
    # Someone else's change in between: the precondition still fails.
    api = VersionedApi(10)
    with pytest.raises(WriteFailed, match="409"):
        perform_writes(
            cast(KubeApi, api),
            [claim_write({"metadata": {"resourceVersion": "9"}, "status": {"x": 1}}, "status")],
        )


async def test_written_objects_count_at_once_and_older_watch_events_are_ignored() -> None:
    """assumecache.go Assume: what the shim wrote is in the state before its
    watch event arrives; an event older than it does not undo it."""
    state = ClusterStateLog()
    seen: list[tuple[str, str | None, str | None]] = []

    def version(o: cpb.ClusterObject | None) -> str | None:
        return None if o is None else orjson.loads(o.json)["metadata"]["resourceVersion"]

    sources = ObjectSources(
        cast(KubeApi, FakeApi([[]])),
        state,
        lambda _src, changes: seen.extend((t, version(o), version(n)) for t, o, n in changes),
    )
    src = merge_sources([CLAIMS])[("resource.k8s.io", "resourceclaims")]
    sources.sources[src.key] = src  # kept, without starting a watch

    def obj(version: str, allocated: bool) -> JSON:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "ns", "resourceVersion": version},
            "status": {"allocation": {}} if allocated else {},
        }

    key = ("resource.k8s.io", "resourceclaims", "ns", "c")
    sources._apply(src, [Event("ADDED", "ns/c", object_record(src, obj("10", False)), "")])
    sources.written([(claim_write({}, "status"), obj("12", True))])
    assert orjson.loads(state.objects[key].json)["metadata"]["resourceVersion"] == "12"
    # The write is a cluster event at once (pods waiting for the claim move).
    assert seen == [("ADDED", None, "10"), ("MODIFIED", "10", "12")]
    # The watch catches up: an event at 11 (before the write) is ignored ...
    sources._apply(src, [Event("MODIFIED", "ns/c", object_record(src, obj("11", False)), "")])
    assert orjson.loads(state.objects[key].json)["metadata"]["resourceVersion"] == "12"
    # ... the write's own event and later ones are taken.
    sources._apply(src, [Event("MODIFIED", "ns/c", object_record(src, obj("13", False)), "")])
    assert orjson.loads(state.objects[key].json)["status"] == {}
    # A kind the shim does not keep is not written into the state.
    other = pb.ObjectWrite(
        ref=cpb.ObjectRef(resource="pods", namespace="ns", name="p"), version="v1"
    )
    sources.written([(other, {"metadata": {"name": "p", "resourceVersion": "5"}})])
    assert ("", "pods", "ns", "p") not in state.objects


def test_a_create_posts_the_object_under_the_refs_name_then_later_writes_follow() -> None:
    """ObjectWrite.create: the object POSTed to its collection with the ref's
    namespace and name (generateName dropped), in order with the patches."""
    api = FakeApi()
    create = pb.ObjectWrite(
        ref=cpb.ObjectRef(
            group="resource.k8s.io", resource="resourceclaims", namespace="ns", name="c"
        ),
        version="v1",
        merge_patch=b'{"metadata":{"generateName":"p-","name":"x"},"spec":{}}',
        plugin="DynamicResources",
        create=True,
    )
    status = pb.ObjectWrite(
        ref=create.ref, version="v1", subresource="status", merge_patch=b'{"status":{}}'
    )
    answers = perform_writes(cast(KubeApi, api), [create, status])
    assert api.patches == [
        (
            "POST /apis/resource.k8s.io/v1/namespaces/ns/resourceclaims",
            {"metadata": {"name": "c", "namespace": "ns"}, "spec": {}},
        ),
        ("/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c/status", {"status": {}}),
    ]
    assert answers[0][1]["metadata"]["name"] == "c"
    api = FakeApi()
    api.fail_patch_on = "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims"
    with pytest.raises(WriteFailed, match="409") as info:
        perform_writes(cast(KubeApi, api), [create, status])
    assert info.value.index == 0 and api.patches == []


def test_a_delete_deletes_the_object_with_its_uid_as_the_precondition() -> None:
    """ObjectWrite.delete: DELETE on the ref, metadata.uid the precondition; a
    patch before it (the finalizer's removal) goes first."""
    api = FakeApi()
    ref = cpb.ObjectRef(
        group="resource.k8s.io", resource="resourceclaims", namespace="ns", name="c"
    )
    unfinalize = pb.ObjectWrite(
        ref=ref, version="v1", merge_patch=b'{"metadata":{"finalizers":[]}}'
    )
    delete = pb.ObjectWrite(
        ref=ref, version="v1", merge_patch=b'{"metadata":{"uid":"u1"}}', delete=True
    )
    perform_writes(cast(KubeApi, api), [unfinalize, delete])
    assert api.patches == [
        (
            "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c",
            {"metadata": {"finalizers": []}},
        ),
        ("DELETE /apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c", {"uid": "u1"}),
    ]


# -- kinds read only where served (ObjectKind.if_served) --------------------------------------

WORKLOAD_PODGROUPS = pb.ObjectKind(
    group="scheduling.k8s.io",
    version="v1alpha2",
    resource="podgroups",
    kind="PodGroup",
    namespaced=True,
    plugins=["GangScheduling"],
    if_served=True,
)


class DiscoveryApi(FakeApi):
    """Answers discovery GETs from a script: a JSON body or an ApiError."""

    def __init__(self, discovery: JSON | ApiError) -> None:
        super().__init__([[]])
        self.discovery = discovery
        self.gets: list[str] = []

    def get(self, path: str, **params: Any) -> JSON:
        self.gets.append(path)
        if isinstance(self.discovery, ApiError):
            raise self.discovery
        return self.discovery


@pytest.mark.parametrize(
    ("discovery", "want"),
    [
        pytest.param(
            {"resources": [{"name": "workloads"}, {"name": "podgroups"}]}, True, id="served"
        ),
        pytest.param({"resources": [{"name": "workloads"}]}, False, id="resource absent"),
        pytest.param(ApiError("GET", "/apis/scheduling.k8s.io/v1alpha2", 404), False, id="404"),
        pytest.param({"resources": "nonsense"}, False, id="malformed list"),
    ],
)
def test_served_asks_discovery_for_the_group_version(
    discovery: JSON | ApiError, want: bool
) -> None:
    api = DiscoveryApi(discovery)
    src = merge_sources([WORKLOAD_PODGROUPS])[("scheduling.k8s.io", "podgroups")]
    assert served(cast(KubeApi, api), src) is want
    assert api.gets == ["/apis/scheduling.k8s.io/v1alpha2"]


def test_served_passes_other_errors_on() -> None:
    api = DiscoveryApi(ApiError("GET", "/apis/scheduling.k8s.io/v1alpha2", 403))
    src = merge_sources([WORKLOAD_PODGROUPS])[("scheduling.k8s.io", "podgroups")]
    with pytest.raises(ApiError):
        served(cast(KubeApi, api), src)


def test_merge_sources_read_where_served_only_when_every_reader_says_so() -> None:
    plain = pb.ObjectKind()
    plain.CopyFrom(WORKLOAD_PODGROUPS)
    plain.if_served = False
    assert merge_sources([WORKLOAD_PODGROUPS])[("scheduling.k8s.io", "podgroups")].if_served
    both = merge_sources([WORKLOAD_PODGROUPS, plain])
    assert not both[("scheduling.k8s.io", "podgroups")].if_served


async def test_a_kind_not_served_costs_one_discovery_request_and_one_info_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api = DiscoveryApi(ApiError("GET", "/apis/scheduling.k8s.io/v1alpha2", 404))
    sources = ObjectSources(cast(KubeApi, api), ClusterStateLog())
    sources.sync_timeout = 5.0
    caplog.set_level("INFO", logger="berth.shim.objects")
    sources.update([WORKLOAD_PODGROUPS])
    try:
        # Synced at once (no "not listed within" warning), nothing listed or watched.
        assert await sources.wait_synced() == []
        await asyncio.sleep(0.05)
        assert api.listed == []
        assert api.gets == ["/apis/scheduling.k8s.io/v1alpha2"]
    finally:
        sources.stop()
    lines = [r for r in caplog.records if "not served" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelname == "INFO"
    assert "--runtime-config=scheduling.k8s.io/v1alpha2=true" in lines[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= 30]


class StubRunner:
    def __init__(self) -> None:
        self.started = False
        self.stopped = False
        self._synced = asyncio.Event()

    def start(self) -> None:
        self.started = True
        self._synced.set()

    def stop(self) -> None:
        self.stopped = True

    async def wait_synced(self) -> None:
        await self._synced.wait()


async def test_a_served_kind_is_watched() -> None:
    api = DiscoveryApi({"resources": [{"name": "podgroups"}]})
    src = merge_sources([WORKLOAD_PODGROUPS])[("scheduling.k8s.io", "podgroups")]
    runner = StubRunner()
    gate = IfServed(cast(KubeApi, api), src, cast(Any, runner))
    gate.start()
    await asyncio.wait_for(gate.wait_synced(), 5)
    assert runner.started and gate.synced
    gate.stop()
    assert runner.stopped
