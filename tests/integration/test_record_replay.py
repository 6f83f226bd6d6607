"""``berth shim --record`` on a real kube-apiserver, then ``berth replay``: 1000
pods of several shapes (requests, zone spreading, one that fits nowhere) are
recorded as the shim schedules them; the replay under the same configuration
reproduces every decision, under MostAllocated instead of LeastAllocated it
reports pods that move, and it runs at least 10x faster than the recorded
decisions took."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from berth.dev.localcluster import Cluster, objects
from berth.dev.localcluster.testing import TEST_LABEL, NodeFactory
from berth.kube.rest import JSON, KubeApi
from tests.integration.shimtools import (
    BERTH,
    Shim,
    profile_for,
    running,
    wait_all_decided,
    write_config,
)

pytestmark = pytest.mark.integration

PODS = 1000
# 1000 pods over 120 s.
BURST = 50
BURST_SECONDS = 6.0
ZONE = "topology.kubernetes.io/zone"
MOST_ALLOCATED = """\
    pluginConfig:
      - name: NodeResourcesFit
        args:
          scoringStrategy:
            type: MostAllocated
"""


def _pods(namespace: str, profile: str) -> list[JSON]:
    shapes = [("50m", "64Mi"), ("100m", "128Mi"), ("200m", "256Mi"), ("100m", None)]
    mine = {TEST_LABEL: namespace}
    out: list[JSON] = []
    for i in range(PODS - 1):
        cpu, memory = shapes[i % len(shapes)]
        spread = i % 5 == 0
        p = objects.pod(
            f"p-{i:04d}",
            namespace=namespace,
            cpu=cpu,
            memory=memory,
            scheduler_name=profile,
            node_selector=mine,
            labels={"app": "spread"} if spread else {"app": f"a{i % 7}"},
        )
        if spread:
            p["spec"]["topologySpreadConstraints"] = [
                {
                    "maxSkew": 1,
                    "topologyKey": ZONE,
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "spread"}},
                }
            ]
        out.append(p)
    # Fits on no node: its FailedScheduling message is a decision too.
    out.append(
        objects.pod(
            "too-big", namespace=namespace, cpu="64", scheduler_name=profile, node_selector=mine
        )
    )
    return out


def _replay(directory: Path, *extra: str) -> tuple[int, dict[str, Any], float, str]:
    began = time.monotonic()
    proc = subprocess.run(
        [*BERTH, "replay", str(directory), "-o", "json", *extra],
        capture_output=True,
        text=True,
        timeout=600,
    )
    wall = time.monotonic() - began
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout), wall, proc.stderr


def test_recorded_run_replays_identically_and_shows_a_changed_weight(
    cluster: Cluster, kube: KubeApi, namespace: str, fake_nodes: NodeFactory, tmp_path: Path
) -> None:
    profile = profile_for(namespace)
    for zone in ("a", "b", "c"):
        fake_nodes(6, prefix=f"z{zone}", cpu="8", memory="16Gi", labels={ZONE: zone})
    config = write_config(tmp_path / "c.yaml", profile)
    record = tmp_path / "rec"
    shim = Shim(config, cluster.kubeconfig, tmp_path / "shim.log", extra=["--record", str(record)])
    with running(shim.start()):
        # Traffic as a cluster sees it: pods arrive over 120 s, in bursts,
        # not all at once. The replay skips the waits between them; each
        # cycle costs it what it cost the shim.
        pods = _pods(namespace, profile)
        began = time.monotonic()
        for n, k in enumerate(range(0, len(pods), BURST), start=1):
            objects.create_pods(kube, pods[k : k + BURST])
            time.sleep(max(0.0, began + n * BURST_SECONDS - time.monotonic()))
        bound, unschedulable = wait_all_decided(kube, namespace, PODS, shim, timeout=300)
    assert len(bound) == PODS - 1 and unschedulable == ["too-big"]
    assert "recording to" in shim.text() and "closed" in shim.text()

    code, same, wall, _ = _replay(record)
    print(
        f"recorded {same['decisions']} decisions over {same['recorded_seconds']:.2f} s; "
        f"replayed in {same['replay_seconds']:.2f} s ({same['speedup']}x) after "
        f"{same['setup_seconds']:.2f} s of set-up; {wall:.2f} s with the process's start"
    )
    assert same["differences"] == [], same["differences"][:5]
    assert code == 0 and same["different"] == 0
    # Every pod decided at least once (the one that fits nowhere maybe again).
    assert same["decisions"] >= PODS
    assert same["identical"] == same["decisions"]
    assert same["results"]["scheduled"] == PODS - 1
    assert same["results"]["unschedulable"] >= 1
    assert same["later_state"] == 0
    assert not same["truncated"]
    assert same["ended"] == "the shim stopped"
    # Replay does not sleep: at least ten times faster than the recorded
    # decisions took (its set-up, the same for any length, apart).
    assert same["replay_seconds"] * 10 <= same["recorded_seconds"], same

    most = write_config(tmp_path / "most.yaml", profile, extra=MOST_ALLOCATED)
    code, changed, _, _ = _replay(record, "--config", str(most))
    assert code == 1
    assert changed["decisions"] == same["decisions"]
    moved = [
        d
        for d in changed["differences"]
        if d["recorded"]["result"] == d["replayed"]["result"] == "scheduled"
        and d["recorded"]["node"] != d["replayed"]["node"]
    ]
    print(f"MostAllocated: {changed['different']} of {changed['decisions']} decisions differ")
    assert len(moved) >= PODS // 10, changed["differences"][:5]
    assert changed["different"] + changed["identical"] == changed["decisions"]
