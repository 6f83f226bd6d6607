"""How long NodeResourcesFit's batch Filter and Score take over a large
cluster: ``python -m berth.dev.bench_fit [nodes]``.

Builds a random cluster (two pods per node, some nodes with GPUs), then times
``filter_nodes`` + ``score_nodes`` over every node for a pod asking for CPU,
memory and, in a second run, one GPU. Not a test: it only prints.
"""

from __future__ import annotations

import random
import sys
import timeit

from berth.framework.testing import fresh_state, make_node, make_pod, snapshot_of
from berth.plugins.noderesources import Fit

GPU = "nvidia.com/gpu"


def main(n_nodes: int = 5000, repeat: int = 7, number: int = 200) -> None:
    rng = random.Random(0)
    nodes = []
    for i in range(n_nodes):
        extra = {GPU: 8} if i % 4 == 0 else {}
        nodes.append(
            make_node(f"node-{i}")
            .capacity(cpu=rng.choice(["4", "8", "16"]), memory="64Gi", **extra)
            .obj()
        )
    pods = [
        make_pod(f"bound-{i}")
        .node(f"node-{i % n_nodes}")
        .req(cpu=f"{rng.randrange(100, 3000)}m", memory=f"{rng.randrange(1, 16)}Gi")
        .obj()
        for i in range(2 * n_nodes)
    ]
    snap = snapshot_of(nodes, pods)
    batch = snap.all_nodes()
    plugin = Fit()
    for label, wrapper in (
        ("cpu+memory", make_pod("p").req(cpu="2", memory="8Gi")),
        ("cpu+memory+gpu", make_pod("g").req(cpu="2", memory="8Gi", **{GPU: 1})),
    ):
        pod = wrapper.info()
        state = fresh_state()
        plugin.pre_filter(state, pod, batch)
        plugin.pre_score(state, pod, batch)

        def both() -> None:
            plugin.filter_nodes(state, pod, batch)  # noqa: B023
            plugin.score_nodes(state, pod, batch)  # noqa: B023

        for name, fn in (
            ("filter_nodes", lambda: plugin.filter_nodes(state, pod, batch)),  # noqa: B023
            ("score_nodes", lambda: plugin.score_nodes(state, pod, batch)),  # noqa: B023
            ("filter+score", both),
        ):
            best = min(timeit.repeat(fn, repeat=repeat, number=number)) / number
            print(f"{label:15} {name:13} {n_nodes} nodes: {best * 1e6:8.1f} us")
        rejected = int((~plugin.filter_nodes(state, pod, batch).passed()).sum())
        print(f"{label:15} rejected {rejected}/{n_nodes}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5000)
