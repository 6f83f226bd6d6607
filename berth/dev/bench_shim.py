"""``berth bench decode`` and ``berth bench shim``: the shim's own figures.

- ``decode``: watch events per second through the shim's decoder (orjson, then the
  slim ``berth.v1.Pod`` record), beside the ``kubernetes`` client's model
  deserialisation of the same events, the cost the shim avoids.
- ``shim``: end-to-end pods/s on a local API server: a private etcd and
  kube-apiserver, N fake nodes, ``berth shim`` (in-process plugins, or over gRPC to a
  ``berth serve``), P pods created at once; scheduled pods/s from a watch, sampled
  each second (the side-by-side run against kube-scheduler is its own benchmark).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from berth.kube.records import pod_record


def register(bsub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    d = bsub.add_parser(
        "decode",
        help="watch events/s through the shim's decoder (and the kubernetes client's, for scale)",
        description="Decodes N realistic pod watch events (MODIFIED, ~3 KiB each) as the "
        "shim's informer does and prints events/s.",
    )
    d.add_argument("--events", type=int, default=20000, help="events (default %(default)s)")
    d.set_defaults(func=run_decode)
    s = bsub.add_parser(
        "shim",
        help="end-to-end pods/s of berth shim on a private local API server",
        description="Starts etcd and kube-apiserver (private, temporary), creates --nodes "
        "fake nodes, starts berth shim (plugins in-process, or --grpc with a berth serve), "
        "creates --pods pods at once and measures scheduled pods/s from a watch.",
    )
    s.add_argument("--nodes", type=int, default=500)
    s.add_argument("--pods", type=int, default=2000)
    s.add_argument("--grpc", action="store_true", help="plugins in a berth serve process")
    s.add_argument("--batch-size", type=int, default=16)
    s.add_argument(
        "--qps", type=float, default=5000.0, help="client QPS and burst (default %(default)s)"
    )
    s.add_argument(
        "--pod-kind",
        choices=("plain", "spreading", "anti-affinity"),
        default="plain",
        help="the pods: plain (the default), or scheduler_perf's pod-with-topology-spreading "
        "(maxSkew 5 over zones; the nodes then in zones moon-1..3) or pod-with-pod-anti-affinity "
        "(one color=green pod per hostname), as `berth bench TopologySpreading|PodAntiAffinity` "
        "creates them; at most one anti-affinity pod fits a node",
    )
    s.add_argument(
        "--drain",
        action="store_true",
        help="create the pods before the scheduler starts (drain mode), not while it runs",
    )
    s.set_defaults(func=run_shim)


def sample_pod_event(i: int) -> bytes:
    """A pod as the API server sends it in a watch event, server-set fields included."""
    obj: dict[str, Any] = {
        "type": "MODIFIED",
        "object": {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {
                "name": f"web-7d4b9c6f8-{i:05d}",
                "generateName": "web-7d4b9c6f8-",
                "namespace": "shop",
                "uid": f"6f1c2f7e-5b0a-4c69-9a1e-{i:012d}",
                "resourceVersion": str(100000 + i),
                "creationTimestamp": "2026-11-23T09:00:00Z",
                "labels": {"app": "web", "pod-template-hash": "7d4b9c6f8", "tier": "frontend"},
                "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-20T10:00:00Z"},
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "ReplicaSet",
                        "name": "web-7d4b9c6f8",
                        "uid": "0b4e3f4c-2a55-4f0e-8d55-5d7cfe9d3a10",
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
                "managedFields": [
                    {
                        "manager": "kube-controller-manager",
                        "operation": "Update",
                        "apiVersion": "v1",
                        "time": "2026-11-23T09:00:00Z",
                        "fieldsType": "FieldsV1",
                        "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}},
                    }
                ],
            },
            "spec": {
                "containers": [
                    {
                        "name": "web",
                        "image": "registry.example/web:1.4.2",
                        "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                        "resources": {
                            "requests": {"cpu": "250m", "memory": "256Mi"},
                            "limits": {"cpu": "1", "memory": "512Mi"},
                        },
                        "terminationMessagePath": "/dev/termination-log",
                        "imagePullPolicy": "IfNotPresent",
                    }
                ],
                "restartPolicy": "Always",
                "terminationGracePeriodSeconds": 30,
                "dnsPolicy": "ClusterFirst",
                "serviceAccountName": "default",
                "nodeName": f"node-{i % 500:04d}",
                "schedulerName": "default-scheduler",
                "tolerations": [
                    {
                        "key": "node.kubernetes.io/not-ready",
                        "operator": "Exists",
                        "effect": "NoExecute",
                        "tolerationSeconds": 300,
                    },
                    {
                        "key": "node.kubernetes.io/unreachable",
                        "operator": "Exists",
                        "effect": "NoExecute",
                        "tolerationSeconds": 300,
                    },
                ],
                "priority": 0,
                "enableServiceLinks": True,
                "preemptionPolicy": "PreemptLowerPriority",
            },
            "status": {
                "phase": "Running",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "True",
                        "lastTransitionTime": "2026-11-23T09:00:00Z",
                    },
                    {
                        "type": "Ready",
                        "status": "True",
                        "lastTransitionTime": "2026-11-23T09:00:05Z",
                    },
                ],
                "hostIP": "10.0.0.5",
                "podIP": "10.244.1.17",
                "startTime": "2026-11-23T09:00:01Z",
                "qosClass": "Burstable",
            },
        },
    }
    return orjson.dumps(obj)


def run_decode(args: argparse.Namespace) -> int:
    n = args.events
    lines = [sample_pod_event(i) for i in range(n)]
    size = statistics.mean(len(x) for x in lines)
    print(f"{n} pod watch events, {size:.0f} bytes each on average")

    def timed(label: str, fn: Any, count: int) -> float:
        t0 = time.perf_counter()
        fn(count)
        dt = time.perf_counter() - t0
        rate = count / dt
        print(f"  {label:<52} {rate:>10,.0f} events/s  ({dt / count * 1e6:6.1f} µs each)")
        return rate

    def parse_only(count: int) -> None:
        for line in lines[:count]:
            orjson.loads(line)

    def shim_path(count: int) -> None:
        for line in lines[:count]:
            pod_record(orjson.loads(line)["object"])

    def kubernetes_models(count: int) -> None:
        from kubernetes import client

        api = client.ApiClient()
        for line in lines[:count]:
            obj = json.loads(line)["object"]
            api.deserialize(json.dumps(obj), "V1Pod", "application/json")

    timed("orjson.loads only", parse_only, n)
    timed("shim: orjson.loads + berth.v1.Pod record", shim_path, n)
    timed("kubernetes client: V1Pod model (for scale)", kubernetes_models, min(n, 2000))
    return 0


def _bench_pod(kind: str, name: str, scheduler: str) -> dict[str, Any]:
    """One pod of ``--pod-kind``, in namespace bench."""
    from berth.dev import bench_perf
    from berth.dev.localcluster import objects

    if kind == "plain":
        return objects.pod(name, namespace="bench", scheduler_name=scheduler)
    return bench_perf.perf_pod(
        kind,
        name,
        "bench",
        scheduler=scheduler,
        run="bench-shim",
        anti_affinity_namespaces=["bench"],
    )


def run_shim(args: argparse.Namespace) -> int:
    from berth.dev import bench_perf
    from berth.dev.bench import cpu_seconds
    from berth.dev.localcluster import LocalCluster, objects
    from berth.dev.localcluster.binaries import default_bin_dir
    from berth.dev.localcluster.cluster import ClusterConfig
    from berth.dev.localcluster.ports import free_port
    from berth.dev.localcluster.process import local_serve_command

    profile = "berth-bench"
    with tempfile.TemporaryDirectory(prefix="berth-bench-") as tmp:
        root = Path(tmp)
        config = root / "config.yaml"
        config.write_text(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
            f"profiles:\n  - schedulerName: {profile}\n"
        )
        print(f"[bench shim] starting etcd and kube-apiserver in {root}", flush=True)
        with LocalCluster(
            ClusterConfig(
                state_dir=root / "cluster",
                bin_dir=default_bin_dir(),
                die_with_parent=True,
                # As scheduler_perf: no controllers beside the scheduler under test.
                controllers=(),
            )
        ) as local:
            kube = local.cluster.client(pool_size=64)
            objects.create_namespace(kube, "bench")
            print(f"[bench shim] creating {args.nodes} nodes", flush=True)
            if args.pod_kind == "plain":
                nodes = [objects.node(f"node-{i:05d}") for i in range(args.nodes)]
            else:
                zones = args.pod_kind == "spreading"
                nodes = [bench_perf.perf_node(i, zones) for i in range(args.nodes)]
            objects.create_nodes(kube, nodes)
            pods = [_bench_pod(args.pod_kind, f"p-{i:05d}", profile) for i in range(args.pods)]
            rv = kube.get("/api/v1/namespaces/bench/pods")["metadata"]["resourceVersion"]
            if args.drain:
                print(f"[bench shim] creating {args.pods} pods before the scheduler", flush=True)
                objects.create_pods(kube, pods)
            procs: list[subprocess.Popen[bytes]] = []
            berth = [sys.executable, "-m", "berth"]
            extra: list[str] = []
            try:
                if args.grpc:
                    port = free_port()
                    serve = subprocess.Popen(
                        local_serve_command(config, port),
                        stdout=open(root / "serve.log", "wb"),  # noqa: SIM115
                        stderr=subprocess.STDOUT,
                    )
                    procs.append(serve)
                    while b"listening on port" not in (root / "serve.log").read_bytes():
                        time.sleep(0.1)
                    extra = ["--plugin-server", f"127.0.0.1:{port}", "--insecure-plaintext"]
                mport = free_port()
                shim = subprocess.Popen(
                    [
                        *berth,
                        "shim",
                        "--config",
                        str(config),
                        "--kubeconfig",
                        str(local.cluster.kubeconfig),
                        "--no-leader-elect",
                        "--batch-size",
                        str(args.batch_size),
                        "--kube-api-qps",
                        str(args.qps),
                        "--kube-api-burst",
                        str(int(args.qps)),
                        "--metrics-listen",
                        f"127.0.0.1:{mport}",
                        "--insecure-metrics",
                        *extra,
                    ],
                    stdout=open(root / "shim.log", "wb"),  # noqa: SIM115
                    stderr=subprocess.STDOUT,
                )
                procs.append(shim)
                while b"caches synced" not in (root / "shim.log").read_bytes():
                    if shim.poll() is not None:
                        print((root / "shim.log").read_text()[-2000:], file=sys.stderr)
                        return 1
                    time.sleep(0.1)
                mode = "gRPC (berth serve)" if args.grpc else "in-process plugins"
                if args.drain:
                    mode += ", drain"
                    print(f"[bench shim] berth shim ready ({mode})", flush=True)
                else:
                    print(
                        f"[bench shim] berth shim ready ({mode}); creating {args.pods} pods",
                        flush=True,
                    )
                start = time.monotonic()
                cpu_at_start = [cpu_seconds(p.pid) for p in procs]
                if not args.drain:
                    import threading

                    threading.Thread(
                        target=objects.create_pods, args=(kube, pods), daemon=True
                    ).start()
                bound_at: list[float] = []
                seen: set[str] = set()
                deadline = time.monotonic() + 600
                while len(seen) < args.pods and time.monotonic() < deadline:
                    # A watch may end early (server timeout, connection): resume it.
                    for ev in kube.watch(
                        "/api/v1/namespaces/bench/pods", timeout_seconds=300, resourceVersion=rv
                    ):
                        obj = ev["object"]
                        rv = obj["metadata"].get("resourceVersion", rv)
                        name = obj["metadata"].get("name", "")
                        if (
                            ev["type"] != "ERROR"
                            and obj["spec"].get("nodeName")
                            and name not in seen
                        ):
                            seen.add(name)
                            bound_at.append(time.monotonic() - start)
                            if len(seen) % 500 == 0:
                                print(f"[bench shim]   {len(seen)}/{args.pods} bound", flush=True)
                        if len(seen) >= args.pods:
                            break
                if len(seen) < args.pods:
                    print(f"[bench shim] only {len(seen)}/{args.pods} pods bound", file=sys.stderr)
                    return 1
                total = bound_at[-1] if bound_at else float("nan")
                per_second = [0] * (int(total) + 1)
                for t in bound_at:
                    per_second[int(t)] += 1
                samples = per_second[1:-1] or per_second
                print(
                    f"\nberth shim, {mode}, {args.nodes} nodes, {args.pods} pods, client QPS/burst "
                    f"{args.qps:g}:\n  all bound in {total:.1f}s: {args.pods / total:.0f} pods/s overall; "
                    f"per-second samples (first and last dropped): avg {statistics.mean(samples):.0f}, "
                    f"p50 {statistics.median(samples):.0f}, max {max(samples)}"
                )
                # CPU from the shim's readiness to the last bind (the informers'
                # decoding of the pods' events included), per pod.
                names = ["shim"] if len(procs) == 1 else ["serve", "shim"]
                per_pod = [
                    f"{name} {(cpu_seconds(p.pid) - c0) * 1000 / args.pods:.2f}"
                    for name, p, c0 in zip(names, procs, cpu_at_start, strict=True)
                ]
                print(
                    f"  CPU ms per pod: {', '.join(per_pod)}; before that, from its start to "
                    f"its caches synced, the shim used {cpu_at_start[-1]:.2f} s of CPU"
                )
            finally:
                for p in reversed(procs):
                    p.terminate()
                    try:
                        p.wait(20)
                    except subprocess.TimeoutExpired:
                        p.kill()
    return 0
