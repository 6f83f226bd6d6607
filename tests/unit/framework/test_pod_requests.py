"""Pod requests as kube-scheduler v1.36.3 computes them, with pod-level
resources (PodLevelResources) and in-place resize (InPlacePodVerticalScaling,
InPlacePodLevelResourcesVerticalScaling): framework/model.py against
upstream's tables.

The cases are upstream's, in Berth's units (CPU in millicores, memory in
bytes): component-helpers resource/helpers_test.go (TestPodLevelResourceRequests,
TestIsPodLevelResourcesSet, TestIsSupportedPodLevelResource) and
pkg/scheduler/framework/types_test.go (TestPodInfoCalculateResources,
TestCalculatePodResourcesWithResize), plus cases for the rules those tables
leave out (checked against upstream's code by running it on the same pods).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.model import (
    CALCULATE_RESOURCE_OPTIONS,
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    NON_ZERO_DEFAULTS,
    NodeInfo,
    PodInfo,
    PodResource,
    PodResourcesOptions,
    Resource,
    calculate_resource,
    determine_effective_requests,
    is_pod_level_requests_set,
    is_supported_pod_level_resource,
    non_missing_container_requests,
    pod_request_list,
    pod_requests,
)
from berth.framework.testing import make_node, resources, snapshot_of
from berth.framework.units import parse_quantity

Quantities = dict[str, str]
HUGE_2M = "hugepages-2Mi"
HUGE_1G = "hugepages-1Gi"


def rl(**q: str) -> pb.Resources:
    return resources(**q)


@dataclass
class C:
    """A container: spec requests and, for in-place resize, its status
    (``actuated`` None: the status has no ``resources``)."""

    requests: Quantities | None = None
    restartable: bool = False
    allocated: Quantities | None = None
    actuated: Quantities | None = None
    name: str = ""

    def record(self, name: str) -> pb.Container:
        c = pb.Container(name=self.name or name, restartable=self.restartable)
        if self.requests is not None:
            c.requests.CopyFrom(rl(**self.requests))
        if self.allocated is not None:
            c.allocated_requests.CopyFrom(rl(**self.allocated))
        if self.actuated is not None:
            c.actuated_requests.CopyFrom(rl(**self.actuated))
        return c


@dataclass
class P:
    containers: list[C] = field(default_factory=lambda: [C()])
    init: list[C] = field(default_factory=list)
    pod_level: Quantities | None = None
    overhead: Quantities | None = None
    pod_allocated: Quantities | None = None
    pod_actuated: Quantities | None = None
    infeasible: bool = False

    def record(self) -> pb.Pod:
        p = pb.Pod(uid="u", name="p", namespace="ns", resize_infeasible=self.infeasible)
        p.containers.extend(c.record(f"c{i}") for i, c in enumerate(self.containers))
        p.init_containers.extend(c.record(f"i{i}") for i, c in enumerate(self.init))
        if self.pod_level is not None:
            p.pod_level_requests.CopyFrom(rl(**self.pod_level))
        if self.overhead is not None:
            p.overhead.CopyFrom(rl(**self.overhead))
        if self.pod_allocated is not None:
            p.pod_level_allocated_requests.CopyFrom(rl(**self.pod_allocated))
        if self.pod_actuated is not None:
            p.pod_level_actuated_requests.CopyFrom(rl(**self.pod_actuated))
        return p


def R(**q: str) -> Resource:
    """The Resource ``q`` decodes to (CPU in millicores)."""
    r = Resource()
    for name, value in q.items():
        parsed = parse_quantity(value)
        if name == "cpu":
            r.milli_cpu = parsed.milli()
        elif name == "memory":
            r.memory = parsed.value()
        elif name == "ephemeral-storage":
            r.ephemeral_storage = parsed.value()
        else:
            r.scalar[name] = parsed.value()
    return r


# -- resource.PodRequests with pod-level resources ----------------------------------

SKIP_POD_LEVEL = PodResourcesOptions(skip_pod_level_resources=True)
CM = {"cpu": "2m", "memory": "3Mi"}

POD_LEVEL_REQUESTS = {
    "nil": (P(containers=[]), PodResourcesOptions(), R()),
    "pod-level-memory-with-skip-pod-level-resources-true": (
        P(containers=[], pod_level={"memory": "2Mi"}),
        SKIP_POD_LEVEL,
        R(),
    ),
    "pod-level-memory-with-skip-pod-level-resources-false": (
        P(containers=[], pod_level={"memory": "2Mi"}),
        PodResourcesOptions(),
        R(memory="2Mi"),
    ),
    "pod-level-memory-and-container-level-cpu": (
        P(containers=[C({"cpu": "2m"})], pod_level={"memory": "2Mi"}),
        PodResourcesOptions(),
        R(memory="2Mi", cpu="2m"),
    ),
    "pod-level-unsupported-resource-only-is-ignored": (
        P(containers=[C({"memory": "3Mi"})], pod_level={"ephemeral-storage": "2Mi"}),
        PodResourcesOptions(),
        R(memory="3Mi"),
    ),
    "only-container-level-resources": (
        P(containers=[C(CM)]),
        PodResourcesOptions(),
        R(memory="3Mi", cpu="2m"),
    ),
    "both-container-level-and-pod-level": (
        P(containers=[C(CM)], pod_level={"memory": "6Mi", "cpu": "8m"}),
        PodResourcesOptions(),
        R(memory="6Mi", cpu="8m"),
    ),
    "container-level-and-init-container": (
        P(containers=[C(CM)], init=[C({"memory": "5Mi", "cpu": "4m"})]),
        PodResourcesOptions(),
        R(memory="5Mi", cpu="4m"),
    ),
    "container-level-and-sidecar": (
        P(containers=[C(CM)], init=[C({"memory": "5Mi", "cpu": "4m"}, restartable=True)]),
        PodResourcesOptions(),
        R(memory="8Mi", cpu="6m"),
    ),
    "container-level-init-and-sidecar": (
        P(
            containers=[C(CM)],
            init=[
                C({"memory": "5Mi", "cpu": "4m"}, restartable=True),
                C({"memory": "6Mi", "cpu": "8m"}),
            ],
        ),
        PodResourcesOptions(),
        R(memory="11Mi", cpu="12m"),
    ),
    "pod-level-container-level-init-and-sidecar": (
        P(
            containers=[C(CM)],
            init=[
                C({"memory": "5Mi", "cpu": "4m"}, restartable=True),
                C({"memory": "6Mi", "cpu": "8m"}),
            ],
            pod_level={"memory": "15Mi", "cpu": "18m"},
        ),
        PodResourcesOptions(),
        R(memory="15Mi", cpu="18m"),
    ),
    "pod-level-hugepages-single-page-size": (
        P(containers=[], pod_level={"memory": "10Mi", HUGE_2M: "2Mi"}),
        PodResourcesOptions(),
        R(memory="10Mi", **{HUGE_2M: "2Mi"}),
    ),
    "pod-level-hugepages-multiple-page-sizes": (
        P(containers=[], pod_level={"cpu": "1", HUGE_2M: "2Mi", HUGE_1G: "1Gi"}),
        PodResourcesOptions(),
        R(cpu="1", **{HUGE_2M: "2Mi", HUGE_1G: "1Gi"}),
    ),
    "pod-level-and-container-level-hugepages-between-levels": (
        P(
            containers=[C({"memory": "4Mi", HUGE_1G: "1Gi"})],
            pod_level={"cpu": "1", HUGE_2M: "10Mi"},
        ),
        PodResourcesOptions(),
        R(cpu="1", memory="4Mi", **{HUGE_2M: "10Mi", HUGE_1G: "1Gi"}),
    ),
    # Resources pod-level requests do not cover still come from the containers,
    # and overhead is added on top of the pod-level value.
    "pod-level-cpu-with-container-ephemeral-storage-and-extended": (
        P(
            containers=[C({"cpu": "100m", "ephemeral-storage": "1Gi", "example.com/gpu": "2"})],
            pod_level={"cpu": "2"},
        ),
        PodResourcesOptions(),
        R(cpu="2", **{"ephemeral-storage": "1Gi", "example.com/gpu": "2"}),
    ),
    "pod-level-plus-overhead": (
        P(
            containers=[C({"cpu": "1"})],
            pod_level={"cpu": "2", "memory": "1Gi"},
            overhead={"cpu": "250m", "memory": "64Mi"},
        ),
        PodResourcesOptions(),
        R(cpu="2250m", memory="1088Mi"),
    ),
    "pod-level-skipped-still-adds-overhead": (
        P(containers=[C({"cpu": "1"})], pod_level={"cpu": "2"}, overhead={"cpu": "250m"}),
        SKIP_POD_LEVEL,
        R(cpu="1250m"),
    ),
}


@pytest.mark.parametrize(
    ("pod", "opts", "want"), POD_LEVEL_REQUESTS.values(), ids=POD_LEVEL_REQUESTS.keys()
)
def test_pod_requests_pod_level_resources(
    pod: P, opts: PodResourcesOptions, want: Resource
) -> None:
    """resource.PodRequests (TestPodLevelResourceRequests)."""
    assert pod_requests(pod.record(), opts) == want


@pytest.mark.parametrize(
    ("pod_level", "want"),
    [
        (None, False),
        ({}, False),
        ({"ephemeral-storage": "1Mi"}, False),
        ({"ephemeral-storage": "1Mi", "cpu": "1m"}, True),
        ({"memory": "0"}, True),
        ({HUGE_2M: "2Mi"}, True),
        ({"example.com/gpu": "1"}, False),
    ],
    ids=[
        "nil",
        "empty",
        "only-unsupported",
        "unsupported-and-supported",
        "explicit-zero-is-set",
        "hugepages",
        "extended-is-unsupported",
    ],
)
def test_is_pod_level_requests_set(pod_level: Quantities | None, want: bool) -> None:
    """resource.IsPodLevelRequestsSet (TestIsPodLevelResourcesSet's request cases)."""
    assert is_pod_level_requests_set(P(pod_level=pod_level).record()) is want


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("cpu", True),
        ("memory", True),
        ("hugepages-2Mi", True),
        ("hugepages-1Gi", True),
        ("ephemeral-storage", False),
        ("storage", False),
        ("example.com/gpu", False),
    ],
)
def test_is_supported_pod_level_resource(name: str, want: bool) -> None:
    """resource.IsSupportedPodLevelResource (TestIsSupportedPodLevelResource)."""
    assert is_supported_pod_level_resource(name) is want


# -- PodInfo.CalculateResource with pod-level resources -----------------------------

DEF_CPU, DEF_MEM = DEFAULT_MILLI_CPU_REQUEST, DEFAULT_MEMORY_REQUEST
CM500 = {"cpu": "500m", "memory": "500M"}


def PR(r: Resource, non0_cpu: int | None = None, non0_mem: int | None = None) -> PodResource:
    return PodResource(
        r,
        r.milli_cpu if non0_cpu is None else non0_cpu,
        r.memory if non0_mem is None else non0_mem,
    )


CALCULATE_RESOURCES = {
    "requestless-container": (P(), PR(R(), DEF_CPU, DEF_MEM)),
    "1x-container-with-requests": (P([C(CM500)]), PR(R(**CM500))),
    "2x-container-with-requests": (
        P([C(CM500), C({"cpu": "700m", "memory": "800M"})]),
        PR(R(cpu="1200m", memory="1300M")),
    ),
    "1x-container-and-1x-init-container-with-pod-level-requests": (
        P([C(CM500)], init=[C(CM500)], pod_level={"cpu": "1200m", "memory": "1200M"}),
        PR(R(cpu="1200m", memory="1200M")),
    ),
    "1x-container-and-1x-sidecar-with-pod-level-requests": (
        P(
            [C(CM500)],
            init=[C(CM500, restartable=True)],
            pod_level={"cpu": "1200m", "memory": "1200M"},
        ),
        PR(R(cpu="1200m", memory="1200M")),
    ),
    "1x-container-with-pod-level-memory-requests": (
        P([C()], init=[C()], pod_level={"memory": "1200M"}),
        PR(R(memory="1200M"), non0_cpu=DEF_CPU),
    ),
    "1x-container-with-pod-level-cpu-requests": (
        P([C()], init=[C()], pod_level={"cpu": "500m"}),
        PR(R(cpu="500m"), non0_mem=DEF_MEM),
    ),
    "1x-container-unsupported-resources-and-pod-level-supported-resources": (
        P(
            [C({"ephemeral-storage": "800M"})],
            init=[C({"ephemeral-storage": "500M"})],
            pod_level={"cpu": "500m"},
        ),
        PR(R(cpu="500m", **{"ephemeral-storage": "800M"}), non0_mem=DEF_MEM),
    ),
    # getNonMissingContainerRequests with pod-level requests: a resource any
    # container sets, even to 0, gets no default, so the containers that leave
    # it out count 0 of it.
    "pod-level-cpu-and-one-container-sets-memory": (
        P([C(), C({"memory": "1Gi"})], pod_level={"cpu": "1"}),
        PR(R(cpu="1", memory="1Gi")),
    ),
    "pod-level-memory-and-a-container-cpu-of-zero": (
        P([C({"cpu": "0"}), C()], pod_level={"memory": "512Mi"}),
        PR(R(memory="512Mi"), non0_cpu=0),
    ),
    # ... and overhead counts as setting it.
    "pod-level-memory-and-overhead-cpu": (
        P([C()], pod_level={"memory": "1Gi"}, overhead={"cpu": "250m"}),
        PR(R(cpu="250m", memory="1Gi")),
    ),
    # Without pod-level requests every container missing CPU or memory takes
    # the default, as before.
    "no-pod-level-both-defaults-per-container": (
        P([C(), C({"memory": "1Gi"})]),
        PR(R(memory="1Gi"), non0_cpu=2 * DEF_CPU, non0_mem=DEF_MEM + 2**30),
    ),
}


@pytest.mark.parametrize(
    ("pod", "want"), CALCULATE_RESOURCES.values(), ids=CALCULATE_RESOURCES.keys()
)
def test_pod_info_calculate_resources(pod: P, want: PodResource) -> None:
    """types.go, PodInfo.CalculateResource (TestPodInfoCalculateResources with
    PodLevelResources on, as at v1.36)."""
    record = pod.record()
    assert calculate_resource(record) == want
    info = PodInfo(record)
    assert info.requests == want.resource
    assert info.non_zero_requests == (want.non0_cpu, want.non0_mem)


def test_get_non_missing_container_requests() -> None:
    """types.go, getNonMissingContainerRequests."""
    assert non_missing_container_requests({}, False) == NON_ZERO_DEFAULTS
    assert non_missing_container_requests({"cpu": 1, "memory": 2}, False) == NON_ZERO_DEFAULTS
    assert non_missing_container_requests({}, True) == NON_ZERO_DEFAULTS
    assert non_missing_container_requests({"cpu": 0}, True) == (("memory", DEF_MEM),)
    assert non_missing_container_requests({"memory": 5}, True) == (("cpu", DEF_CPU),)
    assert non_missing_container_requests({"cpu": 1, "memory": 0}, True) == ()


# -- in-place resize ------------------------------------------------------------------

M500 = {"cpu": "500m", "memory": "500M"}
M700 = {"cpu": "700m", "memory": "800M"}

RESIZE = {
    "pod-with-no-pending-resize": (P([C(M500, actuated=M500)]), R(**M500)),
    "pod-with-pod-level-resources-no-pending-resize": (
        P(
            [C(M500, actuated={"cpu": "700m", "memory": "500M"})],
            pod_level={"cpu": "700m", "memory": "500M"},
            pod_actuated=M500,
        ),
        R(cpu="700m", memory="500M"),
    ),
    # PodResizeInProgress is not read: the same as no pending resize.
    "pod-with-resize-in-progress": (P([C(M500, actuated=M500)]), R(**M500)),
    "pod-with-deferred-resize": (P([C(M700, actuated=M500)]), R(**M700)),
    "pod-with-pod-level-resources-and-deferred-resize": (
        P([C(M500, actuated=M500)], pod_level=M700, pod_actuated=M500),
        R(**M700),
    ),
    "pod-with-infeasible-resize": (
        P([C(M700, actuated=M500)], infeasible=True),
        R(**M500),
    ),
    "pod-with-init-container-and-no-pending-resize": (
        P([C(M500, actuated=M500)], init=[C(M700, actuated=M700)]),
        R(**M700),
    ),
    "pod-with-sidecar-and-no-pending-resize": (
        P(
            [C(M500, actuated=M500)],
            init=[C(M700, actuated=M700), C(M700, restartable=True, actuated=M700)],
        ),
        R(cpu="1200m", memory="1300M"),
    ),
    # The rules the table above leaves out:
    # allocatedResources counts too: the largest of spec, applied and allocated.
    "allocated-above-spec-and-applied": (
        P([C({"cpu": "500m"}, allocated={"cpu": "2"}, actuated={"cpu": "1"})]),
        R(cpu="2"),
    ),
    "applied-above-spec-and-allocated": (
        P([C({"cpu": "500m"}, allocated={"cpu": "1"}, actuated={"cpu": "1500m"})]),
        R(cpu="1500m"),
    ),
    # ... but only when the status has `resources` at all.
    "allocated-without-status-resources-is-ignored": (
        P([C({"cpu": "500m"}, allocated={"cpu": "2"})]),
        R(cpu="500m"),
    ),
    "empty-status-resources-still-counts-allocated": (
        P([C({"cpu": "500m"}, allocated={"cpu": "2"}, actuated={})]),
        R(cpu="2"),
    ),
    # Infeasible: the spec is left out, so a resource the status lacks counts 0.
    "infeasible-drops-spec-only-resources": (
        P([C({"cpu": "3", "memory": "1Gi"}, actuated={"cpu": "1"})], infeasible=True),
        R(cpu="1"),
    ),
    # A plain init container's status never counts (6 applied, spec 1); a
    # sidecar's does (2 allocated): 100m + 2.
    "init-container-status-ignored-sidecar-status-counted": (
        P(
            [C({"cpu": "100m"})],
            init=[
                C({"cpu": "1"}, actuated={"cpu": "6"}),
                C({"cpu": "100m"}, restartable=True, allocated={"cpu": "2"}, actuated={}),
            ],
        ),
        R(cpu="2100m"),
    ),
    # Pod-level: status.resources gates status.allocatedResources the same way.
    "pod-level-allocated-and-applied": (
        P(
            [C({"cpu": "500m"})],
            pod_level={"cpu": "700m", "memory": "500Mi"},
            pod_allocated={"memory": "900Mi"},
            pod_actuated={"cpu": "1200m"},
        ),
        R(cpu="1200m", memory="900Mi"),
    ),
    "pod-level-allocated-without-status-resources-is-ignored": (
        P([C({"cpu": "500m"})], pod_level={"cpu": "900m"}, pod_allocated={"cpu": "3"}),
        R(cpu="900m"),
    ),
    "pod-level-infeasible-resource-missing-from-status-counts-zero": (
        P(
            [C({"cpu": "500m"})],
            pod_level={"cpu": "900m", "memory": "1Gi"},
            pod_actuated={"cpu": "400m"},
            infeasible=True,
        ),
        R(cpu="400m"),
    ),
}


@pytest.mark.parametrize(("pod", "want"), RESIZE.values(), ids=RESIZE.keys())
def test_calculate_pod_resources_with_resize(pod: P, want: Resource) -> None:
    """types.go, PodInfo.CalculateResource with InPlacePodVerticalScaling and
    InPlacePodLevelResourcesVerticalScaling on (TestCalculatePodResourcesWithResize):
    resource.PodRequests with UseStatusResources, determineEffectiveRequests."""
    info = PodInfo(pod.record())
    assert info.requests == want
    assert pod_requests(pod.record(), CALCULATE_RESOURCE_OPTIONS) == want


def test_calculate_pod_resources_with_resize_non_zero_follows_effective_requests() -> None:
    """Non0CPU/Non0Mem come from the same effective requests: an explicit 0 in
    the applied resources counts as set."""
    pod = P([C(None, actuated={"cpu": "0"})], infeasible=True).record()
    assert PodInfo(pod).non_zero_requests == (0, DEF_MEM)


def test_determine_effective_requests() -> None:
    """resource.determineEffectiveRequests: per resource the max; without the
    spec when the resize is infeasible."""
    spec, actuated, allocated = {"cpu": 700, "memory": 5}, {"cpu": 500}, {"memory": 3, "x": 1}
    feasible = P().record()
    assert determine_effective_requests(feasible, spec, actuated, allocated) == {
        "cpu": 700,
        "memory": 5,
        "x": 1,
    }
    infeasible = P(infeasible=True).record()
    assert determine_effective_requests(infeasible, spec, actuated, allocated) == {
        "cpu": 500,
        "memory": 3,
        "x": 1,
    }


def test_compute_pod_resource_request_reads_the_spec_only() -> None:
    """fit.go, computePodResourceRequest: PodRequests without UseStatusResources
    (spec_requests), while the node counts the pod with them (requests)."""
    pod = PodInfo(P([C({"cpu": "500m"}, actuated={"cpu": "2"})]).record())
    assert pod.spec_requests == R(cpu="500m")
    assert pod.requests == R(cpu="2")
    plain = PodInfo(P([C({"cpu": "500m"})], pod_level={"cpu": "1"}).record())
    assert plain.spec_requests is plain.requests


def test_pod_request_list_keeps_presence() -> None:
    """A ResourceList keeps which resources are set: an explicit 0 is set,
    an unset one is missing."""
    pod = P([C({"cpu": "0"})], pod_level={"memory": "0"}).record()
    assert pod_request_list(pod, PodResourcesOptions()) == {"cpu": 0, "memory": 0}


# -- NodeInfo.update ----------------------------------------------------------------


def test_node_info_update_counts_pod_level_and_resized_pods_and_removes_them() -> None:
    """types.go, NodeInfo.update: Requested and NonZeroRequested grow by
    CalculateResource on add and shrink by the same on remove."""
    node = NodeInfo(make_node("n").capacity(cpu="8", memory="16Gi").obj())
    level = P([C(), C({"memory": "1Gi"})], pod_level={"cpu": "4"}).record()
    level.uid = "level"
    resized = P([C({"cpu": "500m"}, allocated={"cpu": "1"}, actuated={"cpu": "1500m"})]).record()
    resized.uid = "resized"
    node.add_pod(PodInfo(level))
    node.add_pod(PodInfo(resized))
    assert (node.requested.milli_cpu, node.requested.memory) == (5500, 2**30)
    # The resized container sets no memory: 200Mi for it, none for the pod-level pod.
    assert node.non_zero_requested == [5500, 2**30 + DEF_MEM]
    node.remove_pod("level")
    assert (node.requested.milli_cpu, node.requested.memory) == (1500, 0)
    assert node.non_zero_requested == [1500, DEF_MEM]
    node.remove_pod("resized")
    assert (node.requested.milli_cpu, node.requested.memory) == (0, 0)
    assert node.non_zero_requested == [0, 0]


def test_snapshot_columns_sum_calculate_resource() -> None:
    """The numpy columns hot plugins read hold the same sums as NodeInfo."""
    level = P([C()], pod_level={"cpu": "4", HUGE_2M: "4Mi"}).record()
    level.uid, level.node_name = "level", "n"
    snap = snapshot_of([make_node("n").capacity(cpu="8", memory="16Gi").obj()], [level])
    i = snap.nodes["n"].index
    cols = snap.columns
    assert (int(cols.req_cpu[i]), int(cols.nz_cpu[i]), int(cols.nz_mem[i])) == (4000, 4000, DEF_MEM)
    assert cols.scalar.get(HUGE_2M) is not None
