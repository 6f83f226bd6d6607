"""PodTopologySpread inside whole scheduling cycles of the default profile
(the runtime's PreFilter/Filter/PreScore/Score/NormalizeScore, weights and
upstream's FitError text)."""

from __future__ import annotations

import random

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.config import API_VERSION, KIND, parse_config
from berth.framework.cycle_state import CycleState
from berth.framework.runtime import Framework
from berth.framework.schedule_one import schedule_pod
from berth.framework.status import Code
from berth.framework.testing import make_node, make_object, snapshot_of
from berth.plugins.podtopologyspread.common import SERVICES
from berth.plugins.registry import REGISTRY
from tests.plugins.podtopologyspread.testutil import DNS, C, pod, spread_pod

ZONE = "topology.kubernetes.io/zone"


def default_framework() -> Framework:
    cfg = parse_config({"apiVersion": API_VERSION, "kind": KIND}, "test", REGISTRY)
    return Framework(cfg.profiles[0], REGISTRY)


def nodes() -> list[pb.Node]:
    return [
        make_node("a1").capacity(cpu="8", memory="16Gi", pods="110").labels(**{ZONE: "a"}).obj(),
        make_node("b1").capacity(cpu="2", memory="16Gi", pods="110").labels(**{ZONE: "b"}).obj(),
        make_node("nozone").capacity(cpu="16", memory="16Gi", pods="110").obj(),
    ]


def test_hard_spread_sends_the_pod_to_the_emptier_zone() -> None:
    snap = snapshot_of(nodes(), [pod("e1@a1 app=web"), pod("e2@a1 app=web")])
    incoming = spread_pod("app=web", C(1, ZONE, DNS, {"app": "web"}))
    result = schedule_pod(default_framework(), snap, CycleState(), incoming, rng=random.Random(1))
    assert result.status.is_success, result.message
    assert result.node == "b1"


def test_no_node_fits_reads_like_upstream() -> None:
    # Two zones with a pod each, minDomains 3: the global minimum is 0.
    snap = snapshot_of(nodes(), [pod("e1@a1 app=web"), pod("e2@b1 app=web")])
    incoming = spread_pod("app=web", C(1, ZONE, DNS, {"app": "web"}, min_domains=3))
    result = schedule_pod(default_framework(), snap, CycleState(), incoming)
    assert result.status.code is Code.UNSCHEDULABLE
    assert result.message == (
        # FitError sorts the "<count> <reason>" strings.
        "0/3 nodes are available: 1 node(s) didn't match pod topology spread constraints "
        "(missing required label), 2 node(s) didn't match pod topology spread constraints. "
        # DefaultPreemption: the node missing the label is not tried.
        "no new claims to deallocate, preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, "
        "2 No preemption victims found for incoming pod."
    )


def test_system_defaults_spread_the_pods_a_service_selects() -> None:
    hosts = [
        make_node(n)
        .capacity(cpu="4", memory="16Gi", pods="110")
        .labels(**{"kubernetes.io/hostname": n})
        .obj()
        for n in ("h1", "h2")
    ]
    existing = [pod(f"e{i}@h1 app=web") for i in range(3)]
    svc = make_object(SERVICES, "web", spec={"selector": {"app": "web"}})
    # h2 is busier, so resource scores prefer h1; the Service's hostname
    # spreading (System defaults) outweighs them.
    busy = pod("busy@h2 app=other")
    busy.containers.add(name="c").requests.milli_cpu = 2000
    existing.append(busy)
    fw = default_framework()
    with_svc = snapshot_of(hosts, existing, [svc])
    got = schedule_pod(fw, with_svc, CycleState(), spread_pod("app=web"), rng=random.Random(1))
    assert got.status.is_success, got.message
    assert got.node == "h2"
    without = snapshot_of(hosts, existing)
    got = schedule_pod(fw, without, CycleState(), spread_pod("app=web"), rng=random.Random(1))
    assert got.node == "h1"
