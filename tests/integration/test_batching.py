"""Opportunistic batching through ``berth shim`` on a real kube-apiserver
(framework/batch.py, upstream's OpportunisticBatching): identical pods that go
one per node are placed on the next node of the previous cycle's ranking,
in-process and over gRPC, and every pod still lands on a node of its own with
no node over its capacity."""

from __future__ import annotations

import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from berth.dev.localcluster import Cluster, objects
from berth.dev.localcluster.ports import free_port
from berth.dev.localcluster.testing import TEST_LABEL, NodeFactory
from berth.kube.rest import KubeApi
from tests.integration.shimtools import (
    Server,
    Shim,
    pods_of,
    profile_for,
    running,
    wait_all_bound,
    write_config,
)

pytestmark = pytest.mark.integration

NODES = 12

# PodTopologySpread's system default constraints leave no pod signable
# (podtopologyspread/plugin.go SignPod): without them the default plugins batch.
BATCHING = """    pluginConfig:
      - name: PodTopologySpread
        args:
          defaultingType: List
"""


def sample(text: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        key, _, value = line.rpartition(" ")
        metric, _, rest = key.partition("{")
        if metric == name and ",".join(sorted(rest.rstrip("}").split(","))) == want:
            return float(value)
    return 0.0


@pytest.mark.parametrize("mode", ["in-process", "grpc"])
def test_pods_one_per_node_are_placed_from_the_last_ranking(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    tmp_path: Path,
    mode: str,
) -> None:
    profile = profile_for(namespace)
    config = write_config(tmp_path / "c.yaml", profile, extra=BATCHING)
    nodes = fake_nodes(NODES, cpu="1", memory="8Gi")
    names = {n["metadata"]["name"] for n in nodes}
    metrics_port = free_port()
    server = (
        Server(
            config,
            tmp_path / "server.log",
            extra=["--metrics-listen", f"127.0.0.1:{metrics_port}"],
        ).start()
        if mode == "grpc"
        else None
    )
    with running(*([server] if server is not None else [])):
        shim = Shim(
            config,
            cluster.kubeconfig,
            tmp_path / "shim.log",
            server=server.address if server is not None else None,
        )
        with running(shim.start()):
            # Each pod takes a whole node's CPU: the node chosen for one cannot
            # take the next, the condition for a hint (batch.go).
            objects.create_pods(
                kube,
                [
                    objects.pod(
                        f"p-{i:02d}",
                        namespace=namespace,
                        cpu="1",
                        scheduler_name=profile,
                        node_selector={TEST_LABEL: namespace},
                    )
                    for i in range(NODES)
                ],
            )
            wait_all_bound(kube, namespace, NODES, 90)
            if server is None:
                _, text = shim.get("/metrics")
            else:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{metrics_port}/metrics", timeout=10
                ) as resp:
                    text = resp.read().decode()
    placed = Counter(p["spec"]["nodeName"] for p in pods_of(kube, namespace))
    assert set(placed) == names
    assert set(placed.values()) == {1}
    used = sample(text, "scheduler_batch_attempts_total", profile=profile, result="hint_used")
    print(f"{mode}: {used:.0f} of {NODES} pods placed on a hint")
    assert used >= 1, text[-2000:]
