"""berth what-if and berth place on files: every kind a profile reads reaches its plugin.

Each test writes a cluster (nodes, pods, objects) and pods to place as files, runs the
command in-process with ``-o json`` and reads where the pods went. The kinds beyond nodes
and pods are the point: without them each plugin would answer differently (LowCpuScheduler
"node metrics missing", VolumeBinding with no PVC, Coscheduling with no PodGroup, ...).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from berth.cli import main
from berth.cli.snapshot import Limits, SnapshotError, load_files, parse_selector, read_documents


def now() -> str:
    """The current time as NodeMetrics spell it: taken when a test writes its metrics, not
    when the module is imported (a run of the whole suite imports it long before)."""
    return datetime.fromtimestamp(time.time(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node(name: str, cpu: str = "4", memory: str = "8Gi", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "status": {
            "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
            "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
        },
    }


def pod(
    name: str,
    cpu: str = "100m",
    *,
    namespace: str = "default",
    node_name: str = "",
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}],
        **spec,
    }
    if node_name:
        body["nodeName"] = node_name
    out: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": body,
    }
    if node_name:
        out["metadata"]["uid"] = f"uid-{namespace}-{name}"
        out["status"] = {"phase": "Running"}
    return out


def as_list(*items: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "items": list(items)}


def config(*plugins: str, extra: str = "") -> str:
    enabled = "".join(f"          - name: {p}\n" for p in plugins)
    # Coscheduling brings its own QueueSort, which replaces PrioritySort.
    sort = (
        "      queueSort:\n        enabled:\n          - name: Coscheduling\n"
        "        disabled:\n          - name: '*'\n"
        if "Coscheduling" in plugins
        else ""
    )
    return (
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        "profiles:\n"
        "  - schedulerName: default-scheduler\n"
        + (f"    plugins:\n{sort}      multiPoint:\n        enabled:\n{enabled}" if plugins else "")
        + extra
    )


class WhatIf:
    def __init__(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.dir = tmp_path
        self.capsys = capsys

    def write(self, name: str, *docs: Any, text: str | None = None) -> str:
        path = self.dir / name
        path.write_text(text if text is not None else yaml.safe_dump_all(docs))
        return str(path)

    def run(self, *argv: str) -> tuple[int, dict[str, Any], str]:
        code = main(["what-if", *argv, "-o", "json"])
        out = self.capsys.readouterr()
        return code, (json.loads(out.out) if out.out else {}), out.err


@pytest.fixture
def wi(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> WhatIf:
    return WhatIf(tmp_path, capsys)


def placements(doc: dict[str, Any], i: int = 0) -> dict[str, tuple[str | None, str]]:
    return {p["pod"]: (p["node"], p.get("reason", "")) for p in doc["configs"][i]["pods"]}


def node_metrics(name: str, cpu: str) -> dict[str, Any]:
    return {
        "apiVersion": "metrics.k8s.io/v1beta1",
        "kind": "NodeMetrics",
        "metadata": {"name": name},
        "timestamp": now(),
        "window": "30s",
        "usage": {"cpu": cpu, "memory": "1Gi"},
    }


def test_low_cpu_scheduler_reads_node_metrics_from_the_cluster_file(wi: WhatIf) -> None:
    cfg = wi.write("c.yaml", text=config("LowCpuScheduler", extra=_low_cpu_reject()))
    cluster = wi.write(
        "cluster.yaml",
        as_list(node("busy"), node("idle"), node_metrics("busy", "3900m")),
        node_metrics("idle", "200m"),
    )
    pods = wi.write("pods.yaml", pod("p1"))
    code, doc, err = wi.run("--cluster", cluster, "--pods", pods, "--config", cfg)
    assert code == 0, err
    assert placements(doc) == {"default/p1": ("idle", "")}
    assert "dropped" not in err
    # Without the NodeMetrics, the plugin (missingMetrics Reject) turns every node away:
    # the objects are what made the difference.
    bare = wi.write("bare.yaml", node("busy"), node("idle"))
    code, doc, _ = wi.run("--cluster", bare, "--pods", pods, "--config", cfg)
    assert code == 1
    node_name, reason = placements(doc)["default/p1"]
    assert node_name is None
    assert reason.startswith("0/2 nodes are available: 2 node metrics missing.")


def _low_cpu_reject() -> str:
    return (
        "    pluginConfig:\n      - name: LowCpuScheduler\n        args: {missingMetrics: Reject}\n"
    )


def test_busy_node_is_rejected_in_upstreams_words(wi: WhatIf) -> None:
    cfg = wi.write("c.yaml", text=config("LowCpuScheduler"))
    cluster = wi.write("cluster.yaml", node("n1"), node_metrics("n1", "3900m"))
    pods = wi.write("pods.yaml", pod("p1"))
    code, doc, _ = wi.run("--cluster", cluster, "--pods", pods, "--config", cfg)
    assert code == 1
    node_name, reason = placements(doc)["default/p1"]
    assert node_name is None
    assert reason.startswith("0/1 nodes are available: 1 cpu usage too high.")


def test_a_kind_no_plugin_reads_is_dropped_with_one_warning_line_per_kind(wi: WhatIf) -> None:
    cluster = wi.write(
        "cluster.yaml",
        as_list(
            node("n1"),
            node_metrics("n1", "100m"),
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}},
        ),
    )
    pods = wi.write("pods.yaml", pod("p1"))
    code, _, err = wi.run("--cluster", cluster, "--pods", pods)
    assert code == 0
    lines = [x for x in err.splitlines() if "dropped" in x]
    assert lines == [
        "berth what-if: warning: dropped 2 ConfigMap (v1) objects: no plugin of the "
        "profile(s) reads that kind",
        "berth what-if: warning: dropped 1 NodeMetrics (metrics.k8s.io/v1beta1) object: no "
        "plugin of the profile(s) reads that kind",
    ]


def test_place_feeds_node_metrics_to_low_cpu_scheduler(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = WhatIf(tmp_path, capsys)
    cfg = w.write("c.yaml", text=config("LowCpuScheduler", extra=_low_cpu_reject()))
    cluster = w.write("cluster.yaml", node("busy"), node("idle"), node_metrics("idle", "100m"))
    target = w.write("pod.yaml", pod("p1"))
    code = main(["place", "--cluster", cluster, "--pod", target, "--config", cfg])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "Placement: idle" in out.out
    assert "busy  Unschedulable by LowCpuScheduler: node metrics missing" in out.out


# -- VolumeBinding: PVC, PV, StorageClass; PreBind's claimRef lands in the snapshot ---------


def _storage(pvcs: int) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": "local"},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "WaitForFirstConsumer",
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": "pv-on-n2"},
            "spec": {
                "capacity": {"storage": "10Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "local",
                "local": {"path": "/mnt/disk"},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "kubernetes.io/hostname",
                                        "operator": "In",
                                        "values": ["n2"],
                                    }
                                ]
                            }
                        ]
                    }
                },
            },
            "status": {"phase": "Available"},
        },
    ]
    for i in range(pvcs):
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": f"data-{i}", "namespace": "default", "uid": f"pvc-{i}"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "local",
                    "resources": {"requests": {"storage": "1Gi"}},
                },
                "status": {"phase": "Pending"},
            }
        )
    return docs


def _with_claim(name: str, claim: str) -> dict[str, Any]:
    p = pod(name)
    p["spec"]["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": claim}}]
    return p


def test_volume_binding_reads_pvcs_pvs_and_storage_classes_and_prebind_takes_the_pv(
    wi: WhatIf,
) -> None:
    cluster = wi.write("cluster.yaml", node("n1"), node("n2"), *_storage(2))
    pods = wi.write("pods.yaml", _with_claim("first", "data-0"), _with_claim("second", "data-1"))
    code, doc, err = wi.run("--cluster", cluster, "--pods", pods)
    assert code == 1, err
    got = placements(doc)
    # The only PV is on n2: the first claim binds it there (PreBind's claimRef,
    # applied to the snapshot), so the second finds no volume left.
    assert got["default/first"] == ("n2", "")
    assert got["default/second"][0] is None
    assert "didn't find available persistent volumes to bind" in got["default/second"][1]
    assert "dropped" not in err


# -- Coscheduling: PodGroup, and the gang waits at Permit ------------------------------------


def _gang(name: str, members: int, min_member: int, cpu: str) -> list[dict[str, Any]]:
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": "default",
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"minMember": min_member},
    }
    pods = [
        pod(f"{name}-{i}", cpu, labels={"scheduling.x-k8s.io/pod-group": name})
        for i in range(members)
    ]
    return [group, *pods]


def test_coscheduling_places_a_complete_gang_and_holds_back_one_that_cannot_fit(
    wi: WhatIf,
) -> None:
    cfg = wi.write("c.yaml", text=config("Coscheduling"))
    whole = _gang("whole", 3, 3, "1")
    short = _gang("short", 3, 3, "3")
    cluster = wi.write("cluster.yaml", node("n1", cpu="4"), node("n2", cpu="4"), whole[0], short[0])
    pods = wi.write("pods.yaml", *whole[1:], *short[1:])
    code, doc, err = wi.run("--cluster", cluster, "--pods", pods, "--config", cfg)
    assert code == 1, err
    got = placements(doc)
    assert all(got[f"default/whole-{i}"][0] for i in range(3)), got
    # Two of "short" fit (3 cpu each on 4-cpu nodes with 1.5 cpu used), the third does
    # not: none of the gang is placed, and nothing of it stays on the nodes.
    assert [got[f"default/short-{i}"][0] for i in range(3)] == [None, None, None], got
    used = {n["node"]: n["cpu"]["requested"] for n in doc["configs"][0]["nodes"]}
    assert sum(used.values()) == 3000


def test_coscheduling_without_the_pod_group_object_is_not_a_gang(wi: WhatIf) -> None:
    cfg = wi.write("c.yaml", text=config("Coscheduling"))
    group, *members = _gang("g", 2, 3, "100m")
    with_group = wi.write("with.yaml", node("n1"), group)
    pods = wi.write("pods.yaml", *members)
    code, doc, _ = wi.run("--cluster", with_group, "--pods", pods, "--config", cfg)
    assert code == 1
    node_name, reason = placements(doc)["default/g-0"]
    assert node_name is None
    assert reason.startswith(
        "0/1 nodes are available: pre-filter pod g-0 cannot find enough sibling pods, "
        "current pods number: 2, minMember of group: 3."
    )
    without = wi.write("without.yaml", node("n1"))
    code, doc, _ = wi.run("--cluster", without, "--pods", pods, "--config", cfg)
    assert placements(doc)["default/g-0"][0] is None
    assert "PodGroup not found" in placements(doc)["default/g-0"][1]


# -- DynamicResources: ResourceClaims, ResourceSlices, DeviceClasses -------------------------


def _dra(claims: int) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "gpu.example.com"},
            "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]},
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "n2-gpus"},
            "spec": {
                "driver": "gpu.example.com",
                "nodeName": "n2",
                "pool": {"name": "n2", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "gpu-0"}],
            },
        },
    ]
    for i in range(claims):
        docs.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": f"gpu-{i}", "namespace": "default", "uid": f"claim-{i}"},
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpu",
                                # As the API server defaults them.
                                "exactly": {
                                    "deviceClassName": "gpu.example.com",
                                    "allocationMode": "ExactCount",
                                    "count": 1,
                                },
                            }
                        ]
                    }
                },
            }
        )
    return docs


def _with_device(name: str, claim: str) -> dict[str, Any]:
    p = pod(name)
    p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
    p["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    return p


def test_dynamic_resources_reads_claims_slices_and_classes_and_allocates_once(
    wi: WhatIf,
) -> None:
    cluster = wi.write("cluster.yaml", node("n1"), node("n2"), *_dra(2))
    pods = wi.write("pods.yaml", _with_device("a", "gpu-0"), _with_device("b", "gpu-1"))
    code, doc, err = wi.run("--cluster", cluster, "--pods", pods)
    assert code == 1, err
    got = placements(doc)
    assert got["default/a"] == ("n2", "")
    # n2's one device is allocated to gpu-0 (PreBind's write, in the snapshot).
    assert got["default/b"][0] is None
    assert "cannot allocate all claims" in got["default/b"][1]
    n2 = next(n for n in doc["configs"][0]["nodes"] if n["node"] == "n2")
    assert n2["devices"] == {"gpu.example.com": {"requested": 1, "allocatable": 1}}


# -- Namespaces: InterPodAffinity's namespaceSelector -----------------------------------------


def test_inter_pod_affinity_reads_namespace_labels(wi: WhatIf) -> None:
    ns = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "data", "labels": {"team": "x"}},
    }
    db = pod("db", namespace="data", node_name="n2", labels={"app": "db"})
    web = pod(
        "web",
        affinity={
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"app": "db"}},
                        "namespaceSelector": {"matchLabels": {"team": "x"}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        },
    )
    pods = wi.write("pods.yaml", web)
    cluster = wi.write("cluster.yaml", node("n1"), node("n2"), ns, db)
    code, doc, err = wi.run("--cluster", cluster, "--pods", pods)
    assert code == 0, err
    assert placements(doc)["default/web"] == ("n2", "")
    # Without the Namespace's labels no namespace matches the selector.
    bare = wi.write("bare.yaml", node("n1"), node("n2"), db)
    code, doc, _ = wi.run("--cluster", bare, "--pods", pods)
    assert code == 1
    assert placements(doc)["default/web"][0] is None


def test_node_affinity_and_taints_from_the_files(wi: WhatIf) -> None:
    tainted = node("n1", zone="a")
    tainted["spec"] = {"taints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"}]}
    cluster = wi.write("cluster.yaml", tainted, node("n2", zone="b"), node("n3", zone="a"))
    pods = wi.write("pods.yaml", pod("p", nodeSelector={"zone": "a"}))
    code, doc, _ = wi.run("--cluster", cluster, "--pods", pods)
    assert code == 0
    assert placements(doc)["default/p"] == ("n3", "")


# -- order, utilisation, two configurations ----------------------------------------------------


def test_each_placed_pod_counts_for_the_next_and_utilisation_adds_up(wi: WhatIf) -> None:
    cluster = wi.write("cluster.yaml", node("n1", cpu="2"), pod("old", "500m", node_name="n1"))
    pods = wi.write("pods.yaml", pod("a", "1"), pod("b", "1"))
    code, doc, _ = wi.run("--cluster", cluster, "--pods", pods)
    assert code == 1
    got = placements(doc)
    assert got["default/a"] == ("n1", "")
    assert got["default/b"][0] is None
    assert got["default/b"][1].startswith("0/1 nodes are available: 1 Insufficient cpu.")
    (n1,) = doc["configs"][0]["nodes"]
    assert n1["cpu"] == {"requested": 1500, "allocatable": 2000}
    assert n1["pods"] == {"requested": 2, "allocatable": 110}


def test_preemption_evicts_lower_priority_pods_and_places_the_pod(wi: WhatIf) -> None:
    cluster = wi.write("cluster.yaml", node("n1", cpu="2"), pod("low", "1500m", node_name="n1"))
    pods = wi.write("pods.yaml", pod("high", "1", priority=1000))
    code, doc, _ = wi.run("--cluster", cluster, "--pods", pods)
    assert code == 0
    (high,) = doc["configs"][0]["pods"]
    assert high["node"] == "n1"
    assert high["victims"] == ["default/low"]
    assert doc["configs"][0]["evicted"] == ["default/low"]


def test_two_configs_side_by_side_show_the_pods_that_move(wi: WhatIf) -> None:
    # n1 is emptier (LeastAllocated prefers it), n2 holds the image (ImageLocality).
    n2 = node("n2")
    n2["status"]["images"] = [{"names": ["big:1"], "sizeBytes": 300 * 2**20}]
    cluster = wi.write("cluster.yaml", node("n1"), n2, pod("busy", "2", node_name="n2"))
    p = pod("p")
    p["spec"]["containers"][0]["image"] = "big:1"
    pods = wi.write("pods.yaml", p)
    a = wi.write("a.yaml", text=config())
    b = wi.write(
        "b.yaml",
        text=config()
        + "    plugins:\n      score:\n        enabled:\n          - name: ImageLocality\n"
        "            weight: 50\n",
    )
    code, doc, err = wi.run("--cluster", cluster, "--pods", pods, "--config", a, "--config", b)
    assert code == 0, err
    assert placements(doc, 0)["default/p"][0] == "n1"
    assert placements(doc, 1)["default/p"][0] == "n2"
    assert doc["differences"] == [{"pod": "default/p", "A": "n1", "B": "n2"}]


def test_two_configs_table_names_the_differences(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = WhatIf(tmp_path, capsys)
    cluster = w.write("cluster.yaml", node("n1", cpu="1"), node("n2", cpu="1"))
    pods = w.write("pods.yaml", pod("p", "800m"), pod("q", "800m"), pod("r", "800m"))
    a = w.write("a.yaml", text=config())
    b = w.write("b.yaml", text=config("AvoidNodePlugin"))
    (tmp_path / "cluster.yaml").write_text(
        yaml.safe_dump_all([node("n1", cpu="1", avoid="true"), node("n2", cpu="1")])
    )
    code = main(["what-if", "--cluster", cluster, "--pods", pods, "--config", a, "--config", b])
    out = capsys.readouterr().out
    assert code == 1
    assert "pending: A 1, B 2" in out
    assert "<- differs" in out
    assert "Pending under B:" in out


# -- bounded input -------------------------------------------------------------------------------


def test_a_file_over_the_size_limit_is_refused_naming_the_flag(wi: WhatIf) -> None:
    cluster = wi.write("cluster.yaml", node("n1"))
    pods = wi.write("pods.yaml", pod("p"))
    code, _, err = wi.run("--cluster", cluster, "--pods", pods, "--max-bytes", "50")
    assert code == 2
    assert "more than the limit of 50 (raise it with --max-bytes)" in err


def test_too_many_objects_are_refused_naming_the_flag(wi: WhatIf) -> None:
    cluster = wi.write("cluster.yaml", as_list(*(node(f"n{i}") for i in range(5))))
    pods = wi.write("pods.yaml", pod("p"))
    code, _, err = wi.run("--cluster", cluster, "--pods", pods, "--max-objects", "3")
    assert code == 2
    assert "more than 3 objects (raise the limit with --max-objects)" in err


def test_yaml_aliases_that_expand_beyond_the_file_are_refused(tmp_path: Path) -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n"
    for i in range(1, 9):
        bomb += f"{chr(97 + i)}: &{chr(97 + i)} [" + ", ".join([f"*{chr(96 + i)}"] * 9) + "]\n"
    path = tmp_path / "bomb.yaml"
    path.write_text(bomb)
    with pytest.raises(SnapshotError, match="YAML aliases"):
        read_documents(path)


def test_bad_input_names_the_file_and_the_object(wi: WhatIf) -> None:
    cluster = wi.write("cluster.yaml", text="apiVersion: v1\nkind: List\nitems: [1]\n")
    pods = wi.write("pods.yaml", pod("p"))
    code, _, err = wi.run("--cluster", cluster, "--pods", pods)
    assert code == 2
    assert "cluster.yaml: document 1.items[0]: expected a Kubernetes object, got int" in err
    broken = wi.write("broken.yaml", text="kind: [\n")
    code, _, err = wi.run("--cluster", broken, "--pods", pods)
    assert code == 2 and "broken.yaml: not valid YAML or JSON" in err
    nodes = wi.write("nodes.yaml", node("n1"))
    not_pods = wi.write("notpods.yaml", node("n2"))
    code, _, err = wi.run("--cluster", nodes, "--pods", not_pods)
    assert code == 2 and "only Pods can be placed" in err


def test_json_and_several_files_load_together(tmp_path: Path) -> None:
    (tmp_path / "nodes.json").write_text(json.dumps(as_list(node("n1"), node("n2"))))
    (tmp_path / "more.yaml").write_text(yaml.safe_dump_all([node("n3"), pod("x", node_name="n3")]))
    snap = load_files([tmp_path / "nodes.json", tmp_path / "more.yaml"], [], limits=Limits())
    assert [n.name for n in snap.nodes] == ["n1", "n2", "n3"]
    assert [p.name for p in snap.pods] == ["x"]


@pytest.mark.parametrize(
    ("text", "labels", "matches"),
    [
        ("scheduling.x-k8s.io/pod-group", {"scheduling.x-k8s.io/pod-group": "g"}, True),
        ("scheduling.x-k8s.io/pod-group", {}, False),
        ("!a", {"a": "1"}, False),
        ("a=1,b!=2", {"a": "1", "b": "3"}, True),
        ("a==1", {"a": "2"}, False),
        ("a in (1, 2),b notin (3)", {"a": "2", "b": "4"}, True),
        ("a in (1, 2)", {"a": "3"}, False),
    ],
)
def test_label_selector_strings(text: str, labels: dict[str, str], matches: bool) -> None:
    assert parse_selector(text).matches(labels) is matches


def test_large_inputs_report_progress_on_stderr(
    wi: WhatIf, monkeypatch: pytest.MonkeyPatch
) -> None:
    import berth.cli.simulate
    import berth.cli.snapshot
    import berth.cli.whatif

    monkeypatch.setattr(berth.cli.snapshot, "PROGRESS_OBJECTS", 2)
    monkeypatch.setattr(berth.cli.simulate, "PROGRESS_PODS", 3)
    monkeypatch.setattr(berth.cli.whatif, "PROGRESS_PODS", 3)
    cluster = wi.write("cluster.yaml", node("n1"), node("n2"), node("n3"), node("n4"))
    pods = wi.write("pods.yaml", *(pod(f"p{i}", "10m") for i in range(7)))
    code, doc, err = wi.run("--cluster", cluster, "--pods", pods)
    assert code == 0
    assert len(doc["configs"][0]["pods"]) == 7
    assert "berth what-if: 2 objects read\nberth what-if: 4 objects read\n" in err
    assert "berth what-if: 4 objects read from 1 file(s)" in err
    assert "berth what-if: default: pass 1, 3/7 pods tried" in err
    assert "berth what-if: default: pass 1, 6/7 pods tried" in err


EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "cluster"


def test_the_documented_example_compares_the_two_policies(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/what-if.md's second run, on examples/cluster."""
    code = main(
        [
            "what-if",
            "--cluster",
            str(EXAMPLE / "cluster.yaml"),
            "--pods",
            str(EXAMPLE / "pods.yaml"),
            "--config",
            str(EXAMPLE / "default.yaml"),
            "--config",
            str(EXAMPLE / "bin-packing.yaml"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 1
    assert "Placements: 1 of 4 pods differ; pending: A 1, B 1" in out
    assert "  shop/checkout  node-a   node-e   <- differs" in out
    assert "  node-e  76% | 89%  25% | 32%   1 | 2" in out


def test_a_later_pod_of_higher_priority_preempts_an_earlier_one(wi: WhatIf) -> None:
    cluster = wi.write("cluster.yaml", node("n1", cpu="2"))
    pods = wi.write("pods.yaml", pod("low", "1500m"), pod("high", "1", priority=1000))
    code, doc, _ = wi.run("--cluster", cluster, "--pods", pods, "--passes", "1")
    assert code == 1
    low, high = doc["configs"][0]["pods"]
    assert (high["status"], high["node"], high["victims"]) == ("placed", "n1", ["default/low"])
    assert (low["status"], low["node"]) == ("preempted", None)
    assert low["reason"] == "preempted by default/high on n1"
    assert doc["configs"][0]["evicted"] == []
    (n1,) = doc["configs"][0]["nodes"]
    assert n1["cpu"]["requested"] == 1000
