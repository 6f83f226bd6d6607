"""``berth demo``: Berth scheduling real pods on a local control plane, end to end.

What it does, in order (each step prints a progress line on stderr):

1. builds the upstream binaries that are missing (``hack/build-k8s.sh``; cached afterwards);
2. starts etcd, kube-apiserver and kube-controller-manager (`berth.dev.localcluster`), its own
   control plane on free loopback ports with its state in ``<state dir>/cluster``, apart from
   ``berth cluster up``'s;
3. creates the namespace ``berth-demo``, five fake nodes of different sizes (one cordoned) and
   what the custom plugins read: the label ``avoid=true`` on one node, the GPU cards of two
   others as clusters describe them (one node's in DRA ResourceSlices of resource.k8s.io/v1,
   as NVIDIA's DRA driver publishes them; another's in NVIDIA GPU Feature Discovery labels,
   that node tainted for GPU pods only), NodeMetrics saying how busy each node is (served by a
   CustomResourceDefinition of group metrics.k8s.io standing in for metrics-server, as
   tests/integration/test_seed_data_plugins.py does), the PodGroup CRD and a PodGroup, and the
   RBAC the shim's user needs for them (deploy/components/rbac-*);
4. starts ``berth serve`` (on a free port) and ``berth shim`` (against the plugin server, as
   user system:kube-scheduler) with a configuration of two profiles: ``berth-demo``
   (upstream's defaults) and ``custom-scheduler`` (the scheduler name of deploy/examples/avoidnode's
   configuration: the defaults plus AvoidNodePlugin, LowCpuScheduler, GPUCardFit and
   Coscheduling); only pods naming one of them
   are Berth's, so no other scheduler competes for them;
5. creates pods with ``schedulerName: berth-demo``: some fit, some cannot (too much CPU, too
   much memory, a GPU no node has); and pods with ``schedulerName: custom-scheduler``, one or
   more per custom plugin, each laid out so that the plugin alone decides its outcome;
6. waits until every pod is bound or marked PodScheduled=False, and prints where each went or
   why it could not (the FailedScheduling message the shim wrote), the GPU card GPUCardFit
   chose, and whether the gang was bound together. An outcome other than the expected one is
   an error (exit 1).

By default everything keeps running afterwards (processes detached, recorded in
``<state dir>/demo.json``) so kubectl can look at it; ``--down`` stops it all. ``--once``
tears it down right after printing. The state dir is ``--state-dir``, else
``$BERTH_DEMO_DIR``, else ``${BERTH_CACHE:-~/.cache/berth}/demo``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from types import FrameType
from typing import TextIO

import yaml

from berth.dev.localcluster import binaries, objects
from berth.dev.localcluster.cluster import (
    ClusterConfig,
    ClusterState,
    cluster_status,
    kube_client,
    read_state,
    start_cluster,
    stop_cluster,
)
from berth.dev.localcluster.errors import LocalClusterError, StateError
from berth.dev.localcluster.ports import LOOPBACK, free_port
from berth.dev.localcluster.process import ProcessRecord, is_ours, log_tail, spawn, stop
from berth.dev.nodemetrics import METRICS_PATH, node_metrics_crd, node_metrics_object
from berth.framework.units import QuantityError, parse_quantity
from berth.kube.config import ConfigurationError
from berth.kube.errors import ApiError
from berth.kube.rest import JSON, KubeApi

NAMESPACE = "berth-demo"
PROFILE = "berth-demo"
SEED_PROFILE = "custom-scheduler"  # as in deploy/examples/avoidnode/scheduler-config.yaml
STATE_FILE = "demo.json"
DEFAULT_TIMEOUT = 60.0
START_TIMEOUT = 60.0  # for each of berth serve and berth shim
SEED_DATA_TIMEOUT = 30.0  # CRDs established and served, RBAC in effect
STEPS = 6
DEMO_LABEL = "berth.dev/demo"
SEED_LABEL = "berth.dev/demo-seed"  # on the custom-scheduler pods: the plugin they show

# What the custom plugins read and write (their README.md files say more).
HOSTNAME = "kubernetes.io/hostname"
AVOID_LABEL = "avoid"  # AvoidNodePlugin: a node labelled avoid=true is rejected
GPU_CARDS = "berth.dev/gpu-cards"  # GPUCardFit, node: JSON list of each card's memory
# GPUCardFit and GPUPriorityPlugin read a node's cards from DRA ResourceSlices first, then GFD
# labels, then HAMi's annotation, then berth.dev/gpu-cards (plugins/gpucard/README.md).
SLICES_PATH = "/apis/resource.k8s.io/v1/resourceslices"
DRA_DRIVER = "gpu.nvidia.com"  # NVIDIA's DRA driver (k8s-dra-driver-gpu)
GFD_PRODUCT = "nvidia.com/gpu.product"
GPU_TAINT = "nvidia.com/gpu"  # the taint GPU node pools commonly carry: GPU pods only
GPU_MEMORY = "berth.dev/gpu-memory"  # GPUCardFit, pod: what it needs on one card
GPU_CARD = "berth.dev/gpu-card"  # GPUCardFit, pod: the card PreBind wrote
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"  # Coscheduling: the pod's PodGroup
PODGROUPS_PATH = f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{NAMESPACE}/podgroups"
PODGROUP_CRD = binaries.REPO_ROOT / "deploy" / "examples" / "coscheduling" / "podgroup-crd.yaml"
CRDS_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
SEED_RBAC = "berth-demo:seed-plugins"
SCHEDULER_USER = "system:kube-scheduler"

# The nodes the custom plugins' stories play on. The custom-scheduler pods share the berth-demo
# nodes; they request little, so the berth-demo pods fit as before. The GFD node is tainted:
# only the pod that tolerates it goes there.
AVOIDED_NODE = "demo-small"
GPU_NODE = "demo-medium"
GFD_NODE = "demo-gpu"
HOT_NODE = "demo-large"
GANG = "demo-gang"
GANG_SIZE = 3
GANG_TIMEOUT_SECONDS = 30  # how long the first members wait at Permit for the others

CONFIG_YAML = f"""\
# Written by `berth demo`: two profiles, so only pods with schedulerName {PROFILE} or
# {SEED_PROFILE} are Berth's.
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
profiles:
  # Upstream's default plugins.
  - schedulerName: {PROFILE}
  # The defaults plus the custom plugins, as deploy/examples/<plugin>/scheduler-config.yaml
  # enable them one by one. Coscheduling runs at every point it serves but queueSort: all
  # profiles of a scheduler share one queue sort, and {PROFILE} keeps PrioritySort (a gang
  # meets at Permit whatever the order the queue gives its members).
  - schedulerName: {SEED_PROFILE}
    plugins:
      multiPoint:
        enabled:
          - name: GPUCardFit
      preFilter:
        enabled:
          - name: Coscheduling
      filter:
        enabled:
          - name: AvoidNodePlugin
          - name: LowCpuScheduler
      postFilter:
        enabled:
          - name: Coscheduling
      score:
        enabled:
          - name: LowCpuScheduler
      reserve:
        enabled:
          - name: Coscheduling
      permit:
        enabled:
          - name: Coscheduling
    pluginConfig:
      # NodeMetrics polled every second, not 15: the demo's pods are created as soon as the
      # shim is ready. The demo writes its NodeMetrics once (nothing refreshes them as
      # metrics-server would), so they are kept fresh for a day.
      - name: LowCpuScheduler
        args:
          metricsPollSeconds: 1
          metricsMaxAgeSeconds: 86400
      - name: Coscheduling
        args:
          permitWaitingTimeSeconds: {GANG_TIMEOUT_SECONDS}
"""


class DemoError(Exception):
    """The demo could not run; the message says what happened and what to do next."""


# --- what the demo creates -----------------------------------------------------------------


@dataclass(frozen=True)
class DemoNode:
    name: str
    cpu: str
    memory: str
    cordoned: bool = False
    avoid: bool = False  # labelled avoid=true (AvoidNodePlugin)
    cpu_used: Fraction | None = None  # CPU usage its NodeMetrics report (LowCpuScheduler)
    # Its GPUs' memory, one entry per device of a ResourceSlice of DRA_DRIVER (GPUCardFit).
    gpu_devices: tuple[str, ...] = ()
    # Its NVIDIA GPU Feature Discovery labels (GPUCardFit), and its taint for GPU pods only.
    gfd_labels: Mapping[str, str] = field(default_factory=dict)
    gpu_taint: bool = False


@dataclass(frozen=True)
class DemoPod:
    name: str
    cpu: str
    memory: str
    extended: Mapping[str, str] = field(default_factory=dict)
    # None: must stay Pending; "": fits somewhere; a name: fits only there.
    fits_on: str | None = ""

    @property
    def requests(self) -> str:
        parts = [f"cpu {self.cpu}", f"memory {self.memory}"]
        parts += [f"{name} {value}" for name, value in sorted(self.extended.items())]
        return ", ".join(parts)


NODES: tuple[DemoNode, ...] = (
    DemoNode("demo-small", cpu="2", memory="4Gi", avoid=True, cpu_used=Fraction(10, 100)),
    DemoNode(
        "demo-medium",
        cpu="4",
        memory="8Gi",
        cpu_used=Fraction(20, 100),
        gpu_devices=("40Gi", "30Gi"),
    ),
    DemoNode("demo-large", cpu="8", memory="16Gi", cpu_used=Fraction(90, 100)),
    DemoNode("demo-cordoned", cpu="16", memory="64Gi", cordoned=True, cpu_used=Fraction(5, 100)),
    # One 24Gi card by GFD's labels (gpu.memory in MiB); tainted, so only pods that tolerate
    # nvidia.com/gpu come here and every other outcome stays as on the four nodes above.
    DemoNode(
        GFD_NODE,
        cpu="2",
        memory="4Gi",
        cpu_used=Fraction(10, 100),
        gfd_labels={
            "nvidia.com/gpu.count": "1",
            "nvidia.com/gpu.memory": "24576",
            GFD_PRODUCT: "NVIDIA-L4",
        },
        gpu_taint=True,
    ),
)

# The pods that fit need 7.5 CPUs and 6.5Gi together, so they fit in any order: each outcome is
# the same whatever the scores choose.
PODS: tuple[DemoPod, ...] = (
    DemoPod("web-1", cpu="250m", memory="256Mi"),
    DemoPod("web-2", cpu="250m", memory="256Mi"),
    DemoPod("api", cpu="1", memory="2Gi"),
    DemoPod("batch", cpu="6", memory="4Gi", fits_on="demo-large"),
    DemoPod("too-much-cpu", cpu="12", memory="1Gi", fits_on=None),
    DemoPod("too-much-memory", cpu="500m", memory="48Gi", fits_on=None),
    DemoPod("wants-gpu", cpu="500m", memory="1Gi", extended={"nvidia.com/gpu": "1"}, fits_on=None),
)


@dataclass(frozen=True)
class Expect:
    """A custom-scheduler pod's outcome."""

    node: str | None  # where it must be bound; None: it must stay Pending
    reason: str = ""  # Pending: text its FailedScheduling message must contain
    card: str | None = None  # bound: the GPU card GPUCardFit's PreBind must have written


@dataclass(frozen=True)
class SeedPod:
    """A pod with schedulerName custom-scheduler that shows one custom plugin at work. Each
    requests cpu 100m and memory 128Mi: together they leave the berth-demo pods room."""

    name: str
    plugin: str
    wants: str  # what about the pod matters, for the table
    expect: Expect
    node_selector: Mapping[str, str] = field(default_factory=dict)
    prefers: str = ""  # a node it prefers (preferred node affinity, weight 100)
    gpu_memory: str = ""  # berth.dev/gpu-memory
    gpu_toleration: bool = False  # tolerates the GPU node's taint
    group: str = ""  # PodGroup (label scheduling.x-k8s.io/pod-group)
    # Pods of one contest compete for one thing: exactly one of them meets ``expect``
    # (which one is up to the queue), the others meet ``lose``.
    contest: str = ""
    lose: Expect | None = None


# Every custom-scheduler pod meets the same nodes: demo-small is labelled avoid=true, demo-large
# reports 90% CPU (above LowCpuScheduler's threshold of 80%), demo-cordoned is cordoned,
# demo-gpu is tainted for GPU pods; so demo-medium, the node whose GPUs ResourceSlices
# describe, is the only one left for them, and each outcome below follows.
_NO_CARD = Expect(None, reason="no free GPU card (ResourceSlices)")
_DEVICE = f"{DRA_DRIVER}/{GPU_NODE}/gpu-"  # GPUCardFit's card id of a DRA device
SEED_PODS: tuple[SeedPod, ...] = (
    SeedPod(
        "avoid-me",
        "AvoidNodePlugin",
        f"nodeSelector {AVOIDED_NODE}",
        Expect(None, reason=f"node {AVOIDED_NODE} is labeled avoid=true"),
        node_selector={HOSTNAME: AVOIDED_NODE},
    ),
    SeedPod(
        "likes-large",
        "LowCpuScheduler",
        f"prefers {HOT_NODE} (node affinity, weight 100)",
        Expect(GPU_NODE),
        prefers=HOT_NODE,
    ),
    SeedPod(
        "pinned-hot",
        "LowCpuScheduler",
        f"nodeSelector {HOT_NODE}",
        Expect(None, reason="1 cpu usage too high"),
        node_selector={HOSTNAME: HOT_NODE},
    ),
    # Two pods of 40Gi on a node with DRA devices of 40Gi and 30Gi: one gets gpu-0 (whole: it
    # does not allow multiple allocations), the other none.
    SeedPod(
        "gpu-40gi-a",
        "GPUCardFit",
        "40Gi of GPU memory on one card",
        Expect(GPU_NODE, card=_DEVICE + "0"),
        gpu_memory="40Gi",
        contest="the 40Gi card",
        lose=_NO_CARD,
    ),
    SeedPod(
        "gpu-40gi-b",
        "GPUCardFit",
        "40Gi of GPU memory on one card",
        Expect(GPU_NODE, card=_DEVICE + "0"),
        gpu_memory="40Gi",
        contest="the 40Gi card",
        lose=_NO_CARD,
    ),
    # Best fit: the 30Gi device, whether or not the 40Gi one is taken.
    SeedPod(
        "gpu-30gi",
        "GPUCardFit",
        "30Gi of GPU memory on one card",
        Expect(GPU_NODE, card=_DEVICE + "1"),
        gpu_memory="30Gi",
    ),
    # Selected by GFD's product label, as users pick a GPU model: card 0 of the GFD labels.
    SeedPod(
        "gpu-l4",
        "GPUCardFit",
        f"20Gi on one card, nodeSelector {GFD_PRODUCT}=NVIDIA-L4",
        Expect(GFD_NODE, card="0"),
        node_selector={GFD_PRODUCT: "NVIDIA-L4"},
        gpu_memory="20Gi",
        gpu_toleration=True,
    ),
    *(
        SeedPod(
            f"gang-{i}",
            "Coscheduling",
            f"PodGroup {GANG} (minMember {GANG_SIZE})",
            Expect(GPU_NODE),
            group=GANG,
        )
        for i in range(1, GANG_SIZE + 1)
    ),
)


def node_objects() -> list[JSON]:
    nodes = []
    for n in NODES:
        labels = {DEMO_LABEL: "true", **n.gfd_labels}
        if n.avoid:
            labels[AVOID_LABEL] = "true"
        taints = [{"key": GPU_TAINT, "value": "present", "effect": "NoSchedule"}]
        obj = objects.node(
            n.name,
            cpu=n.cpu,
            memory=n.memory,
            labels=labels,
            unschedulable=n.cordoned,
            taints=taints if n.gpu_taint else (),
        )
        nodes.append(obj)
    return nodes


def resource_slices() -> list[JSON]:
    """A ResourceSlice per node with ``gpu_devices``, as NVIDIA's DRA driver publishes one:
    a pool named after the node, a device per GPU with its memory as capacity ``memory`` and
    attributes ``type``, ``productName``, ``uuid``."""
    slices = []
    for n in NODES:
        if not n.gpu_devices:
            continue
        devices = [
            {
                "name": f"gpu-{i}",
                "attributes": {
                    "type": {"string": "gpu"},
                    "productName": {"string": f"NVIDIA A100 {memory}"},
                    "uuid": {"string": f"GPU-{n.name}-{i}"},
                },
                "capacity": {"memory": {"value": memory}},
            }
            for i, memory in enumerate(n.gpu_devices)
        ]
        slices.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{n.name}-{DRA_DRIVER}", "labels": {DEMO_LABEL: "true"}},
                "spec": {
                    "driver": DRA_DRIVER,
                    "nodeName": n.name,
                    "pool": {"name": n.name, "generation": 1, "resourceSliceCount": 1},
                    "devices": devices,
                },
            }
        )
    return slices


def pod_objects() -> list[JSON]:
    return [
        objects.pod(
            p.name,
            namespace=NAMESPACE,
            cpu=p.cpu,
            memory=p.memory,
            extended=p.extended or None,
            scheduler_name=PROFILE,
            labels={DEMO_LABEL: "true"},
        )
        for p in PODS
    ]


def seed_pod_objects() -> list[JSON]:
    pods = []
    for p in SEED_PODS:
        labels = {DEMO_LABEL: "true", SEED_LABEL: p.plugin}
        if p.group:
            labels[POD_GROUP_LABEL] = p.group
        obj = objects.pod(
            p.name,
            namespace=NAMESPACE,
            scheduler_name=SEED_PROFILE,
            labels=labels,
            node_selector=p.node_selector or None,
        )
        if p.gpu_memory:
            obj["metadata"]["annotations"] = {GPU_MEMORY: p.gpu_memory}
        if p.gpu_toleration:
            obj["spec"]["tolerations"] = [
                {"key": GPU_TAINT, "operator": "Exists", "effect": "NoSchedule"}
            ]
        if p.prefers:
            term = {
                "matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [p.prefers]}]
            }
            obj["spec"]["affinity"] = {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 100, "preference": term}
                    ]
                }
            }
        pods.append(obj)
    return pods


# --- what the custom plugins read ------------------------------------------------------------


def node_metrics(node: DemoNode, now: dt.datetime) -> JSON:
    """The NodeMetrics metrics-server would report for ``node``: CPU in nanocores, memory
    (the working set) at the same share of the node's."""
    assert node.cpu_used is not None
    cpu = parse_quantity(node.cpu).exact * node.cpu_used
    memory = parse_quantity(node.memory).exact * node.cpu_used
    return node_metrics_object(
        node.name,
        cpu=f"{round(cpu * 10**9)}n",
        memory=f"{round(memory / 1024)}Ki",
        at=now,
        window="20s",
        labels={DEMO_LABEL: "true"},
    )


def pod_group() -> JSON:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": GANG, "namespace": NAMESPACE, "labels": {DEMO_LABEL: "true"}},
        "spec": {"minMember": GANG_SIZE, "scheduleTimeoutSeconds": GANG_TIMEOUT_SECONDS},
    }


# What the shim's user (system:kube-scheduler) needs beyond kube-scheduler's own role, as the
# components deploy/components/rbac-* grant it to the shim's ServiceAccount.
SEED_RULES: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    ("metrics.k8s.io", "nodes", ("list",), "LowCpuScheduler reads NodeMetrics"),
    ("scheduling.x-k8s.io", "podgroups", ("list", "watch"), "Coscheduling reads PodGroups"),
    ("", "pods", ("patch",), "GPUCardFit's PreBind writes the card on the pod"),
)


def seed_rbac() -> tuple[JSON, JSON]:
    role: JSON = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": SEED_RBAC, "labels": {DEMO_LABEL: "true"}},
        "rules": [
            {"apiGroups": [group], "resources": [resource], "verbs": list(verbs)}
            for group, resource, verbs, _why in SEED_RULES
        ],
    }
    binding: JSON = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": SEED_RBAC, "labels": {DEMO_LABEL: "true"}},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": SEED_RBAC,
        },
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": SCHEDULER_USER}
        ],
    }
    return role, binding


def _poll(what: str, check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() >= deadline:
            raise DemoError(
                f"{what}: not within {timeout:g}s; if the machine is just slow, run again"
            )
        time.sleep(0.1)


def _ensure_crd(client: KubeApi, crd: JSON) -> str:
    """Creates a CRD, waits until it is Established and its resource answers; returns the
    resource's path."""
    name = str(crd["metadata"]["name"])
    client.create(CRDS_PATH, crd)

    def established() -> bool:
        conds = (client.get(f"{CRDS_PATH}/{name}").get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Established" and c.get("status") == "True" for c in conds)

    spec = crd["spec"]
    version = next(v["name"] for v in spec["versions"] if v.get("served"))
    path = f"/apis/{spec['group']}/{version}/{spec['names']['plural']}"

    def served() -> bool:
        try:
            client.get(path)
        except ApiError:
            return False
        return True

    _poll(f"CRD {name} established", established, SEED_DATA_TIMEOUT)
    _poll(f"{path} served", served, SEED_DATA_TIMEOUT)
    return path


def _podgroup_crds() -> list[JSON]:
    try:
        docs = [d for d in yaml.safe_load_all(PODGROUP_CRD.read_text()) if d]
    except (OSError, yaml.YAMLError) as exc:
        raise DemoError(f"cannot read the PodGroup CRD {PODGROUP_CRD}: {exc}") from exc
    if not docs or any(d.get("kind") != "CustomResourceDefinition" for d in docs):
        raise DemoError(f"{PODGROUP_CRD}: expected CustomResourceDefinitions only")
    return docs


def create_seed_data(client: KubeApi) -> list[str]:
    """ResourceSlices, CRDs, NodeMetrics, the PodGroup and RBAC; returns a line per thing, for
    the progress."""
    done = []
    for obj in resource_slices():
        client.create(SLICES_PATH, obj)
        devices = obj["spec"]["devices"]
        done.append(
            f"ResourceSlice {obj['metadata']['name']} (resource.k8s.io/v1, driver {DRA_DRIVER}): "
            + ", ".join(f"{d['name']} {d['capacity']['memory']['value']}" for d in devices)
            + f" on {obj['spec']['nodeName']}"
        )
    _ensure_crd(client, node_metrics_crd())
    now = dt.datetime.now(dt.UTC)
    reported = [n for n in NODES if n.cpu_used is not None]
    for n in reported:
        client.create(METRICS_PATH, node_metrics(n, now))
    done.append(
        "NodeMetrics (metrics.k8s.io/v1beta1 from a CRD, standing in for metrics-server): "
        + ", ".join(f"{n.name} {_percent(n.cpu_used)} CPU" for n in reported)
    )
    for crd in _podgroup_crds():
        _ensure_crd(client, crd)
    client.create(PODGROUPS_PATH, pod_group())
    done.append(
        f"PodGroup {NAMESPACE}/{GANG} (minMember {GANG_SIZE}), CRD from "
        f"{PODGROUP_CRD.relative_to(binaries.REPO_ROOT)}"
    )
    role, binding = seed_rbac()
    client.create("/apis/rbac.authorization.k8s.io/v1/clusterroles", role)
    client.create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)
    done.append(
        f"ClusterRole {SEED_RBAC} for {SCHEDULER_USER}: "
        + "; ".join(
            f"{'/'.join(verbs)} {resource}{'.' + group if group else ''} ({why})"
            for group, resource, verbs, why in SEED_RULES
        )
    )
    return done


def wait_seed_access(scheduler_kubeconfig: Path) -> None:
    """Waits until the shim's user may do what the custom plugins need (the RBAC authorizer
    learns of a new binding through its informers): a shim started earlier would schedule
    without NodeMetrics or PodGroups until its next list."""
    with kube_client(scheduler_kubeconfig) as client:
        for group, resource, verbs, _why in SEED_RULES:
            for verb in verbs:
                review: JSON = {
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SelfSubjectAccessReview",
                    "spec": {
                        "resourceAttributes": {"group": group, "resource": resource, "verb": verb}
                    },
                }

                def allowed(review: JSON = review) -> bool:
                    path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
                    answer = client.create(path, review)
                    return bool((answer.get("status") or {}).get("allowed"))

                _poll(f"{SCHEDULER_USER} allowed to {verb} {resource}", allowed, SEED_DATA_TIMEOUT)


def _percent(fraction: Fraction | None) -> str:
    return "-" if fraction is None else f"{round(fraction * 100)}%"


# --- state ---------------------------------------------------------------------------------


def default_state_dir() -> Path:
    override = os.environ.get("BERTH_DEMO_DIR")
    return Path(override) if override else binaries.cache_root() / "demo"


@dataclass
class DemoState:
    """Contents of ``<state dir>/demo.json``, written after every process start so that
    ``--down`` can stop whatever a demo killed half-way left behind."""

    state_dir: Path
    started_at: str
    kubeconfig: str = ""
    kubectl: str = ""
    server: str = ""  # berth serve's gRPC address
    metrics: str = ""  # berth shim's /healthz, /readyz, /metrics
    processes: list[ProcessRecord] = field(default_factory=list)

    @property
    def cluster_dir(self) -> Path:
        return self.state_dir / "cluster"

    @property
    def logs(self) -> Path:
        return self.state_dir / "logs"

    @property
    def config(self) -> Path:
        return self.state_dir / "scheduler-config.yaml"

    def save(self) -> None:
        data = {
            "state_dir": str(self.state_dir),
            "started_at": self.started_at,
            "kubeconfig": self.kubeconfig,
            "kubectl": self.kubectl,
            "server": self.server,
            "metrics": self.metrics,
            "processes": [p.to_json() for p in self.processes],
        }
        path = self.state_dir / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        tmp.replace(path)

    @classmethod
    def load(cls, state_dir: Path) -> DemoState | None:
        path = state_dir / STATE_FILE
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, json.JSONDecodeError) as err:
            raise StateError(
                f"cannot read {path}: {err}; if no demo is running, delete that file"
            ) from err
        try:
            return cls(
                state_dir=state_dir,
                started_at=str(data["started_at"]),
                kubeconfig=str(data.get("kubeconfig", "")),
                kubectl=str(data.get("kubectl", "")),
                server=str(data.get("server", "")),
                metrics=str(data.get("metrics", "")),
                processes=[ProcessRecord.from_json(p) for p in data.get("processes", [])],
            )
        except (KeyError, TypeError, ValueError) as err:
            raise StateError(f"malformed demo state {path}: {err}; delete that file") from err


def running_demo(state_dir: Path) -> DemoState | None:
    """The demo recorded in ``state_dir`` if all of its processes and its cluster are up."""
    state = DemoState.load(state_dir)
    if state is None or not state.processes or not all(is_ours(p) for p in state.processes):
        return None
    status = cluster_status(state.cluster_dir)
    return state if status is not None and status.healthy else None


def stop_demo(state_dir: Path) -> list[str]:
    """Stop the shim, the plugin server and the cluster recorded in ``state_dir`` (only
    processes that are still the ones started). Returns one line per action."""
    done: list[str] = []
    state = DemoState.load(state_dir)
    if state is not None:
        done += [stop(p) for p in reversed(state.processes)]
    cluster_dir = state_dir / "cluster"
    if read_state(cluster_dir) is not None:
        done += stop_cluster(cluster_dir)
    (state_dir / STATE_FILE).unlink(missing_ok=True)
    return done


# --- progress ------------------------------------------------------------------------------


class Progress:
    def __init__(self, out: TextIO) -> None:
        self.out = out

    def step(self, number: int, text: str) -> None:
        print(f"[demo {number}/{STEPS}] {text}", file=self.out, flush=True)

    def detail(self, number: int, text: str) -> None:
        print(f"[demo {number}/{STEPS}]   {text}", file=self.out, flush=True)


# --- starting the pieces -------------------------------------------------------------------


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"  # log lines reach the log files as they happen
    return env


def _berth(*args: str) -> list[str]:
    # sys.executable, not the `berth` script: the recorded argv[0] must be what /proc shows.
    return [sys.executable, "-m", "berth", *args]


def _wait_for(
    what: str,
    record: ProcessRecord,
    proc: subprocess.Popen[bytes],
    check: Callable[[], bool],
    timeout: float,
) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if proc.poll() is not None:
            raise DemoError(
                f"{what} exited with code {proc.returncode} while starting. Last lines of "
                f"{record.log_path}:\n{log_tail(record.log_path)}"
            )
        if time.monotonic() >= deadline:
            raise DemoError(
                f"{what} was not ready within {timeout:g}s. Last lines of {record.log_path}:\n"
                f"{log_tail(record.log_path)}\nIf the machine is just slow, run again"
            )
        time.sleep(0.2)


_LISTENING = re.compile(r"berth serve: listening on port (\d+)")


def _served_port(log_path: str) -> int | None:
    try:
        match = _LISTENING.search(Path(log_path).read_text(errors="replace"))
    except OSError:
        return None
    return int(match.group(1)) if match else None


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2.0) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def start_serve(state: DemoState, *, die_with_parent: bool) -> None:
    log_path = state.logs / "serve.log"
    log_path.unlink(missing_ok=True)
    # Loopback only, one machine: plaintext gRPC and open health and metrics, said explicitly.
    argv = _berth(
        "serve", "--config", str(state.config), "--listen", f"{LOOPBACK}:0", "--insecure-plaintext"
    )
    proc, record = spawn(
        "berth serve", argv, log_path, env=_child_env(), die_with_parent=die_with_parent
    )
    state.processes.append(record)
    state.save()
    _wait_for(
        "berth serve",
        record,
        proc,
        lambda: _served_port(record.log_path) is not None,
        START_TIMEOUT,
    )
    state.server = f"{LOOPBACK}:{_served_port(record.log_path)}"
    state.save()


def start_shim(state: DemoState, cluster: ClusterState, *, die_with_parent: bool) -> None:
    log_path = state.logs / "shim.log"
    log_path.unlink(missing_ok=True)
    state.metrics = f"{LOOPBACK}:{free_port()}"
    argv = _berth(
        "shim",
        "--config",
        str(state.config),
        "--plugin-server",
        state.server,
        "--insecure-plaintext",
        # kube-scheduler's own identity and RBAC role: the shim needs nothing more.
        "--kubeconfig",
        str(cluster.scheduler_kubeconfig),
        "--no-leader-elect",
        "--metrics-listen",
        state.metrics,
        "--insecure-metrics",
    )
    proc, record = spawn(
        "berth shim", argv, log_path, env=_child_env(), die_with_parent=die_with_parent
    )
    state.processes.append(record)
    state.save()
    _wait_for(
        "berth shim",
        record,
        proc,
        lambda: _http_ok(f"http://{state.metrics}/readyz"),
        START_TIMEOUT,
    )


# --- the pods' outcome ---------------------------------------------------------------------


@dataclass(frozen=True)
class PodOutcome:
    name: str
    requests: str
    node: str | None  # None: pending
    message: str  # why it is pending; "" when bound or not tried yet
    settled: bool  # bound, or found unschedulable
    scheduler: str = PROFILE  # spec.schedulerName
    card: str = ""  # the GPU card GPUCardFit wrote on the pod (annotation berth.dev/gpu-card)
    group: str = ""  # its PodGroup (label scheduling.x-k8s.io/pod-group)


def _scheduled_condition(pod: JSON) -> JSON | None:
    for cond in pod.get("status", {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled":
            result: JSON = cond
            return result
    return None


def _failed_scheduling_event(client: KubeApi, name: str) -> str:
    """The latest FailedScheduling message for pod ``name``, from the events (core/v1 view)."""
    try:
        events = client.get(
            f"/api/v1/namespaces/{NAMESPACE}/events",
            fieldSelector=f"involvedObject.kind=Pod,involvedObject.name={name},"
            "reason=FailedScheduling",
        ).get("items", [])
    except ApiError:
        return ""
    if not events:
        return ""

    def when(event: JSON) -> str:
        return str(
            event.get("eventTime") or event.get("lastTimestamp") or event.get("firstTimestamp")
        )

    return str(max(events, key=when).get("message", ""))


def pod_outcomes(client: KubeApi) -> list[PodOutcome]:
    """One outcome per demo pod (in the order of PODS, then SEED_PODS), then any pod the user
    added."""
    listed = client.get(f"/api/v1/namespaces/{NAMESPACE}/pods").get("items", [])
    by_name = {str(p["metadata"]["name"]): p for p in listed}
    known = {p.name: p for p in PODS}
    seeds = {p.name for p in SEED_PODS}
    order = [p.name for p in PODS if p.name in by_name]
    order += [p.name for p in SEED_PODS if p.name in by_name]
    order += sorted(n for n in by_name if n not in known and n not in seeds)
    outcomes = []
    for name in order:
        pod = by_name[name]
        requests = known[name].requests if name in known else _requests_of(pod)
        node = pod.get("spec", {}).get("nodeName") or None
        cond = _scheduled_condition(pod)
        unschedulable = (
            node is None
            and cond is not None
            and cond.get("status") == "False"
            and cond.get("reason") == "Unschedulable"
        )
        message = ""
        if node is None and cond is not None and cond.get("status") == "False":
            message = str(cond.get("message") or "") or _failed_scheduling_event(client, name)
        meta = pod.get("metadata", {})
        outcomes.append(
            PodOutcome(
                name,
                requests,
                node,
                message,
                settled=node is not None or unschedulable,
                scheduler=str(pod.get("spec", {}).get("schedulerName") or ""),
                card=str((meta.get("annotations") or {}).get(GPU_CARD, "")),
                group=str((meta.get("labels") or {}).get(POD_GROUP_LABEL, "")),
            )
        )
    return outcomes


def _requests_of(pod: JSON) -> str:
    total: dict[str, list[str]] = {}
    for container in pod.get("spec", {}).get("containers") or []:
        for res, qty in ((container.get("resources") or {}).get("requests") or {}).items():
            total.setdefault(str(res), []).append(str(qty))
    return ", ".join(f"{res} {'+'.join(qs)}" for res, qs in sorted(total.items())) or "-"


def wait_for_outcomes(
    client: KubeApi, progress: Progress, step: int, timeout: float
) -> tuple[list[PodOutcome], bool]:
    """Poll until every pod is settled or ``timeout`` passes; (outcomes, all settled)."""
    deadline = time.monotonic() + timeout
    start = time.monotonic()
    last_line = ""
    last_print = 0.0
    while True:
        outcomes = pod_outcomes(client)
        bound = sum(1 for o in outcomes if o.node)
        failed = sum(1 for o in outcomes if o.settled and not o.node)
        waiting = len(outcomes) - bound - failed
        now = time.monotonic()
        line = f"{bound} bound, {failed} unschedulable, {waiting} not decided yet"
        if line != last_line or now - last_print >= 5.0:
            progress.detail(step, f"{line} ({now - start:.1f}s)")
            last_line, last_print = line, now
        if waiting == 0:
            return outcomes, True
        if now >= deadline:
            return outcomes, False
        time.sleep(0.25)


def unexpected(outcomes: list[PodOutcome]) -> list[str]:
    """Ways the outcome differs from what the demo's pods and nodes imply."""
    problems = []
    got = {o.name: o for o in outcomes}
    for pod in PODS:
        o = got.get(pod.name)
        if o is None:
            problems.append(f"pod {pod.name} is missing")
        elif pod.fits_on is None and o.node:
            problems.append(f"{pod.name} should not fit anywhere but was bound to {o.node}")
        elif pod.fits_on is not None and not o.node:
            problems.append(f"{pod.name} fits but is Pending: {o.message or 'not tried'}")
        elif pod.fits_on and o.node != pod.fits_on:
            problems.append(f"{pod.name} fits only on {pod.fits_on} but went to {o.node}")
    return problems + unexpected_seeds(got)


def unexpected_seeds(got: Mapping[str, PodOutcome]) -> list[str]:
    """The custom-scheduler pods: each as its Expect says; of a contest, exactly one winner."""
    problems: list[str] = []
    contests: dict[str, list[SeedPod]] = {}
    for pod in SEED_PODS:
        o = got.get(pod.name)
        if o is None:
            problems.append(f"pod {pod.name} is missing")
        elif pod.contest:
            contests.setdefault(pod.contest, []).append(pod)
        else:
            problems += _differs(pod, pod.expect, o)
    for contest, pods in contests.items():
        winners = [p.name for p in pods if got[p.name].node]
        if len(winners) != 1:
            problems.append(
                f"exactly one of {', '.join(p.name for p in pods)} should get {contest}; "
                f"{len(winners)} were bound ({', '.join(winners) or 'none'})"
            )
        for pod in pods:
            expect = pod.expect if pod.name in winners or pod.lose is None else pod.lose
            problems += _differs(pod, expect, got[pod.name])
    return problems


def _differs(pod: SeedPod, expect: Expect, o: PodOutcome) -> list[str]:
    why = f"({pod.plugin})"
    if expect.node is None:
        if o.node:
            return [f"{pod.name} should stay Pending {why} but was bound to {o.node}"]
        problems = []
        if expect.reason not in o.message:
            problems.append(
                f"{pod.name} is Pending, but its FailedScheduling message lacks "
                f"{expect.reason!r} {why}: {o.message or '(none)'}"
            )
        if o.card:
            problems.append(f"{pod.name} is Pending but carries {GPU_CARD}={o.card} {why}")
        return problems
    if not o.node:
        return [f"{pod.name} should be bound to {expect.node} {why} but is Pending: {o.message}"]
    problems = []
    if o.node != expect.node:
        problems.append(f"{pod.name} should be bound to {expect.node} {why} but went to {o.node}")
    if expect.card is not None and o.card != expect.card:
        problems.append(
            f"{pod.name} should have GPU card {expect.card} written on it {why}, "
            f"has {o.card or 'none'}"
        )
    return problems


# --- output --------------------------------------------------------------------------------


def _table(rows: list[tuple[str, ...]], indent: str = "  ") -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


@dataclass(frozen=True)
class NodeRow:
    name: str
    cpu: str
    memory: str
    cordoned: bool
    avoid: bool = False  # labelled avoid=true
    cpu_used: str = "-"  # from its NodeMetrics, as a percentage of allocatable CPU
    gpus: str = "-"  # its GPU cards and where they are described


def _cpu_used(metrics: JSON | None, allocatable: str) -> str:
    if metrics is None:
        return "-"
    try:
        used = parse_quantity(str((metrics.get("usage") or {}).get("cpu"))).exact
        total = parse_quantity(allocatable).exact
    except QuantityError:
        return "?"
    return _percent(used / total) if total > 0 else "?"


def _gpus(slices: list[JSON], labels: Mapping[str, str], annotations: Mapping[str, str]) -> str:
    """A node's GPU cards from the first source GPUCardFit reads (framework/gpus.py)."""
    devices = [
        f"{d.get('name')} {((d.get('capacity') or {}).get('memory') or {}).get('value', '?')}"
        for s in slices
        for d in (s.get("spec") or {}).get("devices") or []
    ]
    if devices:
        return "ResourceSlices: " + ", ".join(devices)
    if "nvidia.com/gpu.count" in labels:
        memory = labels.get("nvidia.com/gpu.memory", "?")
        product = labels.get(GFD_PRODUCT, "")
        return f"GFD labels: {labels['nvidia.com/gpu.count']} x {memory}Mi {product}".rstrip()
    annotation = annotations.get(GPU_CARDS)
    if annotation is None:
        return "-"
    try:
        cards = json.loads(annotation)
    except json.JSONDecodeError:
        return annotation
    text = ", ".join(str(c) for c in cards) if isinstance(cards, list) else annotation
    return f"{GPU_CARDS}: {text}"


def node_rows(client: KubeApi) -> list[NodeRow]:
    """The cluster's nodes as they are now (the user may have uncordoned or added some)."""
    try:
        metrics = {str(m["metadata"]["name"]): m for m in client.get(METRICS_PATH).get("items", [])}
    except ApiError:
        metrics = {}  # no NodeMetrics API (a demo of an older berth)
    try:
        slices: list[JSON] = client.get(SLICES_PATH).get("items", [])
    except ApiError:
        slices = []  # no resource.k8s.io/v1 (an older API server)
    rows = []
    for n in client.get("/api/v1/nodes").get("items", []):
        name = str(n["metadata"]["name"])
        alloc = n.get("status", {}).get("allocatable") or {}
        labels = n["metadata"].get("labels") or {}
        annotations = n["metadata"].get("annotations") or {}
        rows.append(
            NodeRow(
                name=name,
                cpu=str(alloc.get("cpu", "?")),
                memory=str(alloc.get("memory", "?")),
                cordoned=bool(n.get("spec", {}).get("unschedulable")),
                avoid=labels.get(AVOID_LABEL) == "true",
                cpu_used=_cpu_used(metrics.get(name), str(alloc.get("cpu", "0"))),
                gpus=_gpus(
                    [s for s in slices if (s.get("spec") or {}).get("nodeName") == name],
                    labels,
                    annotations,
                ),
            )
        )
    order = {n.name: i for i, n in enumerate(NODES)}
    return sorted(rows, key=lambda r: (order.get(r.name, len(order)), r.name))


def _pending_lines(pending: list[PodOutcome]) -> list[str]:
    width = max(len(o.name) for o in pending)
    return [
        f"  {o.name.ljust(width)}  {o.message or '(no scheduling attempt seen yet)'}"
        for o in pending
    ]


def render(nodes: list[NodeRow], outcomes: list[PodOutcome]) -> str:
    lines = ["Nodes (fake: no kubelet; created with their capacity):"]
    rows: list[tuple[str, ...]] = [
        ("NODE", "CPU", "MEMORY", "CPU USED (NodeMetrics)", "GPU CARDS (where described)", "")
    ]
    for n in nodes:
        notes = ["labelled avoid=true"] if n.avoid else []
        notes += ["cordoned (spec.unschedulable)"] if n.cordoned else []
        notes += [
            f"tainted {GPU_TAINT}" for node in NODES if node.name == n.name and node.gpu_taint
        ]
        rows.append((n.name, n.cpu, n.memory, n.cpu_used, n.gpus, ", ".join(notes)))
    lines += _table(rows)

    plain = [o for o in outcomes if o.scheduler != SEED_PROFILE]
    lines += ["", f"Pods in namespace {NAMESPACE} (schedulerName {PROFILE}):"]
    rows = [("POD", "REQUESTS", "NODE")]
    rows += [(o.name, o.requests, o.node or "Pending") for o in plain]
    lines += _table(rows)
    pending = [o for o in plain if not o.node]
    if pending:
        lines += ["", "Why the Pending pods were not scheduled (FailedScheduling):"]
        lines += _pending_lines(pending)

    seeded = [o for o in outcomes if o.scheduler == SEED_PROFILE]
    if seeded:
        lines += ["", *render_seeds(seeded, nodes)]
    return "\n".join(lines)


def render_seeds(outcomes: list[PodOutcome], nodes: list[NodeRow]) -> list[str]:
    """The custom-scheduler section: each pod with the plugin it shows, what about it
    matters, where it went, and the GPU card or the gang it was bound with."""
    seeds = {p.name: p for p in SEED_PODS}
    used = {n.name: n.cpu_used for n in nodes}
    lines = [
        f"Pods in namespace {NAMESPACE} (schedulerName {SEED_PROFILE}: upstream's defaults plus "
        "the custom plugins AvoidNodePlugin, LowCpuScheduler, GPUCardFit, Coscheduling):"
    ]
    rows: list[tuple[str, ...]] = [("POD", "PLUGIN", "WHAT MATTERS", "NODE", "")]
    for o in outcomes:
        seed = seeds.get(o.name)
        note = ""
        if o.node and o.card:
            note = f"GPU card {o.card} ({GPU_CARD}, written by PreBind)"
        elif o.node and seed and seed.prefers and o.node != seed.prefers:
            note = f"not {seed.prefers}: its NodeMetrics say {used.get(seed.prefers, '?')} CPU used"
        elif o.node and o.group:
            members = [m for m in outcomes if m.group == o.group]
            bound = sum(1 for m in members if m.node)
            note = f"PodGroup {o.group}: {bound} of {len(members)} bound"
        rows.append(
            (
                o.name,
                seed.plugin if seed else "-",
                seed.wants if seed else o.requests,
                o.node or "Pending",
                note,
            )
        )
    lines += _table(rows)
    pending = [o for o in outcomes if not o.node]
    if pending:
        lines += ["", f"Why the Pending {SEED_PROFILE} pods were not scheduled (FailedScheduling):"]
        lines += _pending_lines(pending)
    return lines


def usage_hints(
    state: DemoState, *, detached: bool, outcomes: list[PodOutcome] | None = None
) -> str:
    if not detached:
        return (
            "--once: everything stops now. Run without --once to keep the cluster, the "
            "server and the shim running for kubectl."
        )
    kubectl = shlex.quote(state.kubectl)
    example = next((p.name for p in PODS if p.fits_on is None), "POD")
    # The 40Gi pod left without a card: which one is up to the queue.
    rivals = [p.name for p in SEED_PODS if p.contest]
    pending = {o.name for o in outcomes or [] if not o.node}
    no_card = next((name for name in rivals if name in pending), rivals[-1])
    gpu_columns = (
        "POD:.metadata.name,NODE:.spec.nodeName,"
        f"NEEDS:.metadata.annotations.{GPU_MEMORY.replace('.', chr(92) + '.')},"
        f"CARD:.metadata.annotations.{GPU_CARD.replace('.', chr(92) + '.')}"
    )
    return "\n".join(
        [
            "Look at it with kubectl (pods stay STATUS Pending there: no kubelet runs them; "
            "NODE is where Berth bound them):",
            f"  export KUBECONFIG={shlex.quote(state.kubeconfig)}",
            f"  {kubectl} get pods -n {NAMESPACE} -o wide",
            f"  {kubectl} describe pod -n {NAMESPACE} {example}",
            f"  {kubectl} uncordon demo-cordoned    # Pending pods that fit there get scheduled",
            "",
            f"The custom plugins' checks (schedulerName {SEED_PROFILE}):",
            f"  {kubectl} describe pod -n {NAMESPACE} avoid-me    # Events: FailedScheduling "
            f"... node {AVOIDED_NODE} is labeled avoid=true",
            f"  {kubectl} top node    # the NodeMetrics LowCpuScheduler reads: {HOT_NODE} at 90%",
            f"  {kubectl} describe pod -n {NAMESPACE} pinned-hot    # FailedScheduling ... "
            "cpu usage too high",
            f"  {kubectl} get pods -n {NAMESPACE} -l {SEED_LABEL}=GPUCardFit -o "
            f"custom-columns={shlex.quote(gpu_columns)}",
            f"  {kubectl} describe pod -n {NAMESPACE} {no_card}    # FailedScheduling ... "
            "no free GPU card",
            f"  {kubectl} get podgroups -n {NAMESPACE}",
            f"  {kubectl} get pods -n {NAMESPACE} -l {POD_GROUP_LABEL}={GANG} -o wide",
            f"  {kubectl} label node {AVOIDED_NODE} avoid-    # avoid-me gets scheduled there",
            "",
            f"Berth keeps running: berth serve at {state.server}, berth shim with health and "
            f"metrics at http://{state.metrics}/metrics.",
            f"Logs: {state.logs / 'serve.log'}, {state.logs / 'shim.log'}, "
            f"{state.cluster_dir / 'logs'}/",
            f"Stop everything: berth demo --down{_state_dir_flag(state.state_dir)}"
            "   (or ./hack/demo.sh --down)",
        ]
    )


def _state_dir_flag(state_dir: Path) -> str:
    return "" if state_dir == default_state_dir() else f" --state-dir {shlex.quote(str(state_dir))}"


# --- the command ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    state_dir: Path
    once: bool
    timeout: float
    build: bool
    bin_dir: Path | None


@contextlib.contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """SIGTERM unwinds like Ctrl-C, so a terminated demo still stops what it started."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_demo(opts: Options, out: TextIO, err: TextIO) -> int:
    progress = Progress(err)
    state_dir = opts.state_dir
    if DemoState.load(state_dir) is not None or read_state(state_dir / "cluster") is not None:
        if not opts.once:
            current = running_demo(state_dir)
            if current is not None:
                return show_running(current, out, err)
        elif running_demo(state_dir) is not None:
            raise DemoError(
                f"a demo is already running from {state_dir}; stop it first "
                f"(berth demo --down{_state_dir_flag(state_dir)}) or pass another --state-dir"
            )
        print(f"berth demo: cleaning up a stopped demo in {state_dir}", file=err)
        for line in stop_demo(state_dir):
            print(f"  {line}", file=err)

    progress.step(
        1,
        "upstream binaries (hack/build-k8s.sh builds what is missing; a cold build "
        "takes 10-20 minutes, later runs reuse the cache)",
    )
    try:
        bin_dir = binaries.ensure_binaries(opts.bin_dir, build=opts.build)
    except LocalClusterError as exc:
        raise DemoError(str(exc)) from exc
    progress.detail(1, f"using {bin_dir}")

    state_dir.mkdir(parents=True, exist_ok=True)
    state = DemoState(
        state_dir=state_dir,
        started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        kubectl=str(bin_dir / "kubectl"),
    )
    state.logs.mkdir(exist_ok=True)
    state.config.write_text(CONFIG_YAML)
    state.save()
    finished = False
    try:
        with _sigterm_as_exit():
            code = _run_steps(opts, state, bin_dir, progress, out, err)
            finished = True
    finally:
        if opts.once or not finished:
            _teardown(state_dir, "--once" if finished else "the demo did not finish", err)
    return code


def _teardown(state_dir: Path, why: str, err: TextIO) -> None:
    """Stop everything; a terminal or pipe gone away (BrokenPipeError) must not stop that."""
    with contextlib.suppress(OSError):
        print(f"[demo] stopping everything ({why})", file=err, flush=True)
    done = stop_demo(state_dir)
    with contextlib.suppress(OSError):
        for line in done:
            print(f"  {line}", file=err, flush=True)


def _run_steps(
    opts: Options, state: DemoState, bin_dir: Path, progress: Progress, out: TextIO, err: TextIO
) -> int:
    die = opts.once  # a --once demo's processes die with it, whatever kills it
    api_port = free_port()
    etcd_port = free_port(avoid=frozenset({api_port}))
    peer_port = free_port(avoid=frozenset({api_port, etcd_port}))
    progress.step(
        2,
        "starting etcd, kube-apiserver and kube-controller-manager "
        f"(state in {state.cluster_dir}) ...",
    )
    began = time.monotonic()
    try:
        cluster = start_cluster(
            ClusterConfig(
                state_dir=state.cluster_dir,
                bin_dir=bin_dir,
                default_apiserver_port=api_port,
                default_etcd_client_port=etcd_port,
                default_etcd_peer_port=peer_port,
                die_with_parent=die,
            )
        )
    except LocalClusterError as exc:
        raise DemoError(str(exc)) from exc
    state.kubeconfig = str(cluster.kubeconfig)
    state.save()
    progress.detail(
        2,
        f"ready in {time.monotonic() - began:.1f}s: Kubernetes {cluster.kubernetes_version} at "
        f"{cluster.server} (" + ", ".join(f"{p.name} pid {p.pid}" for p in cluster.processes) + ")",
    )

    with cluster.cluster.client() as client:
        progress.step(
            3,
            f"creating namespace {NAMESPACE}, {len(NODES)} nodes and what the custom plugins "
            "read (NodeMetrics, a PodGroup, their CRDs, RBAC for the shim)",
        )
        try:
            objects.create_namespace(client, NAMESPACE)
            objects.create_nodes(client, node_objects())
            for line in create_seed_data(client):
                progress.detail(3, line)
            wait_seed_access(cluster.scheduler_kubeconfig)
        except (LocalClusterError, ApiError) as exc:
            if isinstance(exc, ApiError) and exc.status == 0:
                raise  # the API server is gone: cmd_demo says so
            raise DemoError(f"could not create the demo's objects: {exc}") from exc

        progress.step(
            4,
            f"starting berth serve and berth shim, profiles {PROFILE} and {SEED_PROFILE} "
            f"(config {state.config})",
        )
        start_serve(state, die_with_parent=die)
        progress.detail(
            4,
            f"berth serve at {state.server} (pid {state.processes[-1].pid}), log "
            f"{state.logs / 'serve.log'}",
        )
        start_shim(state, cluster, die_with_parent=die)
        progress.detail(
            4,
            f"berth shim ready (pid {state.processes[-1].pid}), health and metrics at "
            f"http://{state.metrics}, log {state.logs / 'shim.log'}",
        )

        progress.step(
            5,
            f"creating {len(PODS)} pods with schedulerName {PROFILE} and {len(SEED_PODS)} with "
            f"schedulerName {SEED_PROFILE}",
        )
        try:
            objects.create_pods(client, pod_objects() + seed_pod_objects())
        except LocalClusterError as exc:
            raise DemoError(f"could not create the demo's pods: {exc}") from exc

        progress.step(
            6, f"waiting for every pod to be bound or found unschedulable (up to {opts.timeout:g}s)"
        )
        outcomes, settled = wait_for_outcomes(client, progress, 6, opts.timeout)
        nodes = node_rows(client)

    pids = [*cluster.processes, *state.processes]
    print(
        "Processes: " + ", ".join(f"{p.name} pid {p.pid}" for p in pids),
        file=err,
        flush=True,
    )
    print(file=out)
    print(render(nodes, outcomes), file=out)
    print(file=out)
    print(usage_hints(state, detached=not opts.once, outcomes=outcomes), file=out, flush=True)
    logs = f"{state.logs / 'shim.log'} and {state.logs / 'serve.log'}"
    left = (
        ""
        if opts.once
        else "\nThe demo is left running for a look; stop it with: berth demo --down"
        + _state_dir_flag(state.state_dir)
    )
    if not settled:
        print(
            f"berth demo: error: not every pod was bound or found unschedulable within "
            f"{opts.timeout:g}s. Last lines of {state.logs / 'shim.log'}:\n"
            f"{log_tail(state.logs / 'shim.log')}\nSee {logs}; a slow machine may need "
            f"--timeout{left}",
            file=err,
        )
        return 1
    problems = unexpected(outcomes)
    if problems:
        print(
            "berth demo: error: the scheduling outcome is not the expected one (a bug in "
            f"berth; see {logs}):\n  " + "\n  ".join(problems) + left,
            file=err,
        )
        return 1
    return 0


def show_running(state: DemoState, out: TextIO, err: TextIO) -> int:
    print(
        f"berth demo: a demo is already running from {state.state_dir} (started "
        f"{state.started_at}); its pods now:",
        file=err,
    )
    try:
        with kube_client(Path(state.kubeconfig)) as client:
            outcomes = pod_outcomes(client)
            nodes = node_rows(client)
    except (LocalClusterError, ConfigurationError, ApiError) as exc:
        raise DemoError(
            f"the running demo's API server did not answer: {exc}; restart it: "
            f"berth demo --down{_state_dir_flag(state.state_dir)} && berth demo"
        ) from exc
    print(render(nodes, outcomes), file=out)
    print(file=out)
    print(usage_hints(state, detached=True, outcomes=outcomes), file=out)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    state_dir: Path = args.state_dir
    if args.down:
        try:
            if DemoState.load(state_dir) is None and read_state(state_dir / "cluster") is None:
                print(f"no demo recorded in {state_dir}; nothing to stop", file=sys.stderr)
                return 0
            for line in stop_demo(state_dir):
                print(line, file=sys.stderr)
        except LocalClusterError as exc:
            print(f"berth demo --down: error: {exc}", file=sys.stderr)
            return 1
        return 0
    if args.timeout <= 0:
        print(f"berth demo: error: --timeout must be > 0, got {args.timeout:g}", file=sys.stderr)
        return 2
    env_bin = os.environ.get("BERTH_K8S_BIN_DIR")
    opts = Options(
        state_dir=state_dir,
        once=args.once,
        timeout=args.timeout,
        build=not args.no_build,
        bin_dir=Path(env_bin) if env_bin else None,
    )
    try:
        return run_demo(opts, sys.stdout, sys.stderr)
    except (DemoError, LocalClusterError, ConfigurationError) as exc:
        print(f"berth demo: error: {exc}", file=sys.stderr)
        return 1
    except (OSError, ApiError) as exc:
        if isinstance(exc, ApiError) and exc.status != 0:
            print(f"berth demo: error: {exc}", file=sys.stderr)
            return 1
        print(
            f"berth demo: error: lost the demo's API server or a file ({exc}); what was "
            "started is stopped; run again, and if it recurs look at the logs in "
            f"{state_dir / 'logs'} and {state_dir / 'cluster' / 'logs'}",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        print("berth demo: interrupted; everything it started is stopped", file=sys.stderr)
        return 130


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "demo",
        help="Berth scheduling pods on a local cluster: start it all, show where pods went",
        description=(
            "Build what is missing, start a local etcd + kube-apiserver, a plugin server "
            "(berth serve) and the scheduler (berth shim), create four nodes and a few pods "
            f"with schedulerName {PROFILE} (upstream's default plugins) and {SEED_PROFILE} "
            "(the custom plugins AvoidNodePlugin, LowCpuScheduler, GPUCardFit, Coscheduling, with "
            f"the NodeMetrics and PodGroup they read) in namespace {NAMESPACE}, wait until each "
            "is bound or found unschedulable, and print where each went or why it could not. "
            "Everything keeps running afterwards for kubectl (the command prints how) until "
            "'berth demo --down'. Run again to see the running demo's pods."
        ),
        epilog=(
            "The demo has its own control plane on free loopback ports (state in the state "
            "dir's cluster/ folder), apart from 'berth cluster up'. Logs: <state dir>/logs/ "
            "(serve.log, shim.log) and <state dir>/cluster/logs/."
        ),
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--down", action="store_true", help="stop the shim, the plugin server and the cluster"
    )
    mode.add_argument(
        "--once",
        action="store_true",
        help="stop everything right after printing the result (exit 0 only if every pod "
        "ended where expected)",
    )
    p.add_argument(
        "--state-dir",
        type=Path,
        default=default_state_dir(),
        help="where the demo's state, cluster, config and logs live "
        "(default: $BERTH_DEMO_DIR or ${BERTH_CACHE:-~/.cache/berth}/demo: %(default)s)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help="how long to wait for the pods to be scheduled (default %(default)s)",
    )
    p.add_argument(
        "--no-build",
        action="store_true",
        help=f"fail instead of running {binaries.BUILD_SCRIPT.name} when binaries are missing",
    )
    p.set_defaults(func=cmd_demo)
