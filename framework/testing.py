"""Fluent builders for pods and nodes in tests, like upstream's
pkg/scheduler/testing/wrappers.go (MakePod().Name(..).Req(..).Obj()).

    node = make_node("n1").capacity(cpu="4", memory="8Gi", pods=110).obj()
    pod = make_pod("p").req(cpu="500m", memory="1Gi").obj()
    pg = make_object(PODGROUP_KIND, "pg1", spec={"minMember": 3})
    snap = snapshot_of([node], [pod], objects=[pg])

A plugin under test reads the snapshot through its handle: build it with
``Handle("profile")`` and ``handle.bind_snapshot(snap)``, or use
``handle_for(snap)``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping
from typing import Any

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.cycle_state import CycleState
from berth.framework.handle import Handle
from berth.framework.model import PodInfo
from berth.framework.objects import ObjectKind
from berth.framework.snapshot import NodeBatch, Snapshot
from berth.framework.units import parse_quantity

_uids = itertools.count(1)


def resources(**quantities: str | int) -> pb.Resources:
    """``resources(cpu="500m", memory="1Gi", pods=110, **{"nvidia.com/gpu": 1})``.
    Keyword names with dots or slashes go through ``**{...}``."""
    r = pb.Resources()
    for name, value in quantities.items():
        q = parse_quantity(str(value))
        if name == "cpu":
            r.milli_cpu = q.milli()
        elif name == "memory":
            r.memory = q.value()
        elif name in ("ephemeral_storage", "ephemeral-storage"):
            r.ephemeral_storage = q.value()
        elif name == "pods":
            r.pods = q.value()
        else:
            r.scalar[name] = q.value()
    return r


class PodWrapper:
    def __init__(self, name: str, namespace: str = "default") -> None:
        self.pod = pb.Pod(uid=f"uid-{name}-{next(_uids)}", name=name, namespace=namespace)
        self.pod.scheduler_name = "default-scheduler"

    def uid(self, uid: str) -> PodWrapper:
        self.pod.uid = uid
        return self

    def namespace(self, ns: str) -> PodWrapper:
        self.pod.namespace = ns
        return self

    def node(self, name: str) -> PodWrapper:
        self.pod.node_name = name
        return self

    def priority(self, p: int) -> PodWrapper:
        self.pod.priority = p
        return self

    def labels(self, **labels: str) -> PodWrapper:
        self.pod.labels.update(labels)
        return self

    def label(self, key: str, value: str) -> PodWrapper:
        self.pod.labels[key] = value
        return self

    def container(self, name: str = "", image: str = "", **requests: str | int) -> PodWrapper:
        c = self.pod.containers.add(name=name or f"c{len(self.pod.containers)}", image=image)
        if requests:
            c.requests.CopyFrom(resources(**requests))
        return self

    def req(self, **requests: str | int) -> PodWrapper:
        """Adds a container requesting ``requests``."""
        c = self.pod.containers.add(name=f"c{len(self.pod.containers)}")
        c.requests.CopyFrom(resources(**requests))
        return self

    def init_req(self, restartable: bool = False, **requests: str | int) -> PodWrapper:
        c = self.pod.init_containers.add(
            name=f"init{len(self.pod.init_containers)}", restartable=restartable
        )
        c.requests.CopyFrom(resources(**requests))
        return self

    def overhead(self, **quantities: str | int) -> PodWrapper:
        self.pod.overhead.CopyFrom(resources(**quantities))
        return self

    def host_port(self, port: int, protocol: str = "TCP", host_ip: str = "") -> PodWrapper:
        if not self.pod.containers:
            self.container()
        self.pod.containers[-1].ports.add(
            container_port=port, host_port=port, protocol=protocol, host_ip=host_ip
        )
        return self

    def node_selector(self, **labels: str) -> PodWrapper:
        self.pod.node_selector.update(labels)
        return self

    def toleration(
        self, key: str, value: str = "", effect: str = "", operator: str = "Equal"
    ) -> PodWrapper:
        self.pod.tolerations.add(key=key, value=value, effect=effect, operator=operator)
        return self

    def scheduler(self, name: str) -> PodWrapper:
        self.pod.scheduler_name = name
        return self

    def obj(self) -> pb.Pod:
        return self.pod

    def info(self) -> PodInfo:
        return PodInfo(self.pod)


class NodeWrapper:
    def __init__(self, name: str) -> None:
        self.node = pb.Node(name=name, uid=f"node-uid-{name}")

    def capacity(self, **quantities: str | int) -> NodeWrapper:
        """Sets capacity and allocatable alike (a node with no reservations)."""
        quantities.setdefault("pods", 110)
        r = resources(**quantities)
        self.node.capacity.CopyFrom(r)
        self.node.allocatable.CopyFrom(r)
        return self

    def allocatable(self, **quantities: str | int) -> NodeWrapper:
        self.node.allocatable.CopyFrom(resources(**quantities))
        return self

    def labels(self, **labels: str) -> NodeWrapper:
        self.node.labels.update(labels)
        return self

    def label(self, key: str, value: str) -> NodeWrapper:
        self.node.labels[key] = value
        return self

    def taint(self, key: str, value: str = "", effect: str = "NoSchedule") -> NodeWrapper:
        self.node.taints.add(key=key, value=value, effect=effect)
        return self

    def unschedulable(self, flag: bool = True) -> NodeWrapper:
        self.node.unschedulable = flag
        return self

    def obj(self) -> pb.Node:
        return self.node


def make_pod(name: str = "pod", namespace: str = "default") -> PodWrapper:
    return PodWrapper(name, namespace)


def make_node(name: str) -> NodeWrapper:
    return NodeWrapper(name)


def make_object(
    kind: ObjectKind,
    name: str,
    namespace: str | None = None,
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    **fields: Any,
) -> pb.ClusterObject:
    """A ClusterObject of ``kind`` as a caller would ship it::

        make_object(PODGROUP, "pg1", spec={"minMember": 3})

    ``namespace`` defaults to "default" for namespaced kinds and "" for
    cluster-scoped ones; ``fields`` become top-level fields of the JSON
    (spec, status, usage, ...)."""
    if namespace is None:
        namespace = "default" if kind.namespaced else ""
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    api_version = f"{kind.group}/{kind.version}" if kind.group else kind.version
    body: dict[str, Any] = {"apiVersion": api_version, "kind": kind.kind, "metadata": meta}
    body.update(fields)
    return pb.ClusterObject(
        ref=pb.ObjectRef(group=kind.group, resource=kind.resource, namespace=namespace, name=name),
        version=kind.version,
        kind=kind.kind,
        json=json.dumps(body).encode(),
    )


def object_ref(kind: ObjectKind, name: str, namespace: str | None = None) -> pb.ObjectRef:
    """The ObjectRef of an object of ``kind`` (for ``delete_objects``)."""
    if namespace is None:
        namespace = "default" if kind.namespaced else ""
    return pb.ObjectRef(group=kind.group, resource=kind.resource, namespace=namespace, name=name)


def snapshot_of(
    nodes: Iterable[pb.Node],
    pods: Iterable[pb.Pod] = (),
    objects: Iterable[pb.ClusterObject] = (),
) -> Snapshot:
    """A snapshot holding ``nodes``, the (bound) ``pods`` and ``objects``
    (see ``make_object``)."""
    snap = Snapshot()
    delta = pb.ClusterDelta()
    delta.upsert_nodes.extend(nodes)
    delta.upsert_pods.extend(pods)
    delta.upsert_objects.extend(objects)
    snap.apply(delta)
    return snap


def apply_objects(
    snapshot: Snapshot,
    upsert: Iterable[pb.ClusterObject] = (),
    delete: Iterable[pb.ObjectRef] = (),
) -> Snapshot:
    """Applies object changes to ``snapshot`` (as a caller's delta would)."""
    delta = pb.ClusterDelta()
    delta.upsert_objects.extend(upsert)
    delta.delete_objects.extend(delete)
    snapshot.apply(delta)
    return snapshot


def batch_of(snapshot: Snapshot, names: Iterable[str] | None = None) -> NodeBatch:
    return snapshot.all_nodes() if names is None else snapshot.batch(names)


def handle_for(snapshot: Snapshot, profile: str = "test-profile") -> Handle:
    """A framework handle bound to ``snapshot``, to build a plugin with:
    ``MyPlugin(args, handle_for(snap))``."""
    handle = Handle(profile)
    handle.bind_snapshot(snapshot)
    return handle


def fresh_state(data: Mapping[str, bytes] | None = None) -> CycleState:
    return CycleState.decode(data or {})
