"""The pod's side of the resource scores: ResourceAllocationScorer's
pod_requests takes a plain pod's requests from the sums its PodInfo already
holds; for every kind of pod it must equal PodRequests under the scorer's
options (calculatePodResourceRequest), as NodeResourcesFit (non-zero
defaults, no pod-level requests, no resize status) and BalancedAllocation
(plain requests, pod-level and status counted) set them."""

from __future__ import annotations

import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.model import PodInfo, pod_requests
from berth.framework.testing import make_pod, resources
from berth.plugins.noderesources import (
    BalancedAllocation,
    Fit,
    NodeResourcesBalancedAllocationArgs,
    NodeResourcesFitArgs,
)
from berth.plugins.noderesources.args import LEAST_ALLOCATED, ResourceSpec, ScoringStrategy
from berth.plugins.noderesources.resource_allocation import ResourceAllocationScorer

GPU = "nvidia.com/gpu"
SPECS = [
    ResourceSpec("cpu", 1),
    ResourceSpec("memory", 1),
    ResourceSpec("ephemeral-storage", 1),
    ResourceSpec(GPU, 1),
]


def _pods() -> list[tuple[str, pb.Pod]]:
    plain = make_pod("plain").req(cpu="300m", memory=1000).req(**{GPU: 2}).obj()
    no_requests = make_pod("none").container().obj()
    with_init = make_pod("init").req(cpu="100m").init_req(cpu="2", memory=5).obj()
    with_overhead = make_pod("overhead").req(memory=10).overhead(cpu="50m", memory=7).obj()
    pod_level = make_pod("pod-level").req(cpu="100m").obj()
    pod_level.pod_level_requests.CopyFrom(resources(cpu="1", memory=400))
    resized = make_pod("resized").req(cpu="100m", memory=20).obj()
    resized.containers[0].actuated_requests.CopyFrom(resources(cpu="700m", memory=30))
    return [
        ("plain", plain),
        ("no-requests", no_requests),
        ("init", with_init),
        ("overhead", with_overhead),
        ("pod-level", pod_level),
        ("resized", resized),
    ]


def _scorers() -> list[ResourceAllocationScorer]:
    fit = Fit(NodeResourcesFitArgs(scoring_strategy=ScoringStrategy(LEAST_ALLOCATED, SPECS)))
    balanced = BalancedAllocation(NodeResourcesBalancedAllocationArgs(SPECS))
    return [fit.scorer, balanced.scorer]


@pytest.mark.parametrize(("kind", "pod"), _pods(), ids=[k for k, _ in _pods()])
def test_pod_requests_equal_pod_requests_under_the_scorers_options(kind: str, pod: pb.Pod) -> None:
    for scorer in _scorers():
        want = pod_requests(pod, scorer.request_options)
        expected = [want.milli_cpu, want.memory, want.ephemeral_storage, want.scalar.get(GPU, 0)]
        info = PodInfo(pod)
        assert scorer.pod_requests(info) == expected, (kind, scorer.use_requested)
        # The same once the pod's sums are cached.
        assert scorer.pod_requests(info) == expected
        assert [scorer.pod_request(info, s.name) for s in SPECS] == expected


def test_fit_counts_defaults_for_a_plain_pods_missing_requests() -> None:
    pod = PodInfo(make_pod("p").req(cpu="250m").req(memory=64).obj())
    fit = Fit()
    assert pod.resource.plain
    # 250m + 100m (default for the second container), 200Mi + 64.
    assert fit.scorer.pod_requests(pod) == [350, 200 * 1024 * 1024 + 64]
