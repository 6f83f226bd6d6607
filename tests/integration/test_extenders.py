"""HTTP scheduler extenders end to end on a real kube-apiserver, as kube-scheduler
v1.36.3 runs them (pkg/scheduler/extender.go; schedule_one.go
findNodesThatPassExtenders, prioritizeNodes, extendersBinding).

The extender is a small HTTP server in this test process: its filter rejects the nodes
labelled ``ext/reject`` (and every node for a pod labelled ``ext/reject-all``), its
prioritize gives 10 to the nodes labelled ``ext/favour``, and its bind POSTs the Binding
itself through the API and records it. It reads the labels from the full Node objects the
shim sends (nodeCacheCapable false). ``berth shim`` runs as a process with the default
profile in-process.
"""

from __future__ import annotations

import contextlib
import functools
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from berth.dev.localcluster import Cluster, objects, start_kube_scheduler
from berth.dev.localcluster.ports import free_port
from berth.dev.localcluster.testing import TEST_LABEL, NodeFactory
from berth.kube.errors import ApiError
from berth.kube.rest import KubeApi
from tests.integration.shimtools import (
    Proc,
    Shim,
    failed_scheduling_notes,
    pod_path,
    pod_scheduled_condition,
    profile_for,
    running,
    wait_for,
    wait_node_of,
    write_config,
)

pytestmark = pytest.mark.integration

REJECTED = "rejected by the test extender"


class SmallExtender:
    """The extender: records every call as (verb, decoded body)."""

    def __init__(self, kube: KubeApi, port: int = 0) -> None:
        self.kube = kube
        self.calls: list[tuple[str, Any]] = []
        ext = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                verb = self.path.rsplit("/", 1)[-1]
                ext.calls.append((verb, body))
                answer = getattr(ext, verb)(body)
                payload = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/scheduler"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def verbs(self, pod: str) -> list[str]:
        """The verbs called for ``pod``, in order."""
        out = []
        for verb, body in self.calls:
            name = body["Pod"]["metadata"]["name"] if "Pod" in body else body.get("PodName")
            if name == pod:
                out.append(verb)
        return out

    # ExtenderFilterResult: kept nodes as a NodeList, FailedNodes with a message.
    def filter(self, args: Any) -> Any:
        labels = args["Pod"]["metadata"].get("labels") or {}
        kept, failed = [], {}
        for node in args["Nodes"]["items"]:
            if "ext/reject-all" in labels or "ext/reject" in node["metadata"]["labels"]:
                failed[node["metadata"]["name"]] = REJECTED
            else:
                kept.append(node)
        return {"Nodes": {"items": kept}, "FailedNodes": failed}

    # HostPriorityList: 10 (MaxExtenderPriority) for the favoured nodes.
    def prioritize(self, args: Any) -> Any:
        return [
            {
                "Host": node["metadata"]["name"],
                "Score": 10 if "ext/favour" in node["metadata"]["labels"] else 0,
            }
            for node in args["Nodes"]["items"]
        ]

    # ExtenderPreemptionResult: on each candidate node, evict the pods labelled
    # ext/victim there instead of the victims proposed.
    def preempt(self, args: Any) -> Any:
        namespace = args["Pod"]["metadata"]["namespace"]
        pods = self.kube.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector="ext/victim")[
            "items"
        ]
        out = {}
        for node in args["NodeNameToVictims"]:
            chosen = [p for p in pods if p["spec"].get("nodeName") == node]
            out[node] = {
                "Pods": [{"UID": p["metadata"]["uid"]} for p in chosen],
                "NumPDBViolations": 0,
            }
        return {"NodeNameToMetaVictims": out}

    # ExtenderBindingResult: the extender binds through the API itself.
    def bind(self, args: Any) -> Any:
        try:
            self.kube.create(
                f"/api/v1/namespaces/{args['PodNamespace']}/pods/{args['PodName']}/binding",
                {
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": args["PodName"], "uid": args["PodUID"]},
                    "target": {"kind": "Node", "name": args["Node"]},
                },
            )
        except ApiError as exc:
            return {"Error": str(exc)}
        return {}


@pytest.fixture
def extender(kube: KubeApi) -> Iterator[Callable[..., SmallExtender]]:
    made: list[SmallExtender] = []

    def start(port: int = 0) -> SmallExtender:
        ext = SmallExtender(kube, port)
        made.append(ext)
        return ext

    yield start
    for ext in made:
        ext.close()


@pytest.fixture
def priorities(kube: KubeApi, namespace: str) -> Iterator[None]:
    """PriorityClasses ``<namespace>-low`` (10), ``-mid`` (20) and ``-high``
    (1000), deleted afterwards."""
    made = []
    try:
        for name, value in (("low", 10), ("mid", 20), ("high", 1000)):
            kube.create(
                "/apis/scheduling.k8s.io/v1/priorityclasses",
                {
                    "apiVersion": "scheduling.k8s.io/v1",
                    "kind": "PriorityClass",
                    "metadata": {"name": f"{namespace}-{name}"},
                    "value": value,
                },
            )
            made.append(f"{namespace}-{name}")
        yield
    finally:
        for name in made:
            with contextlib.suppress(ApiError):
                kube.delete(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")


def has_failed_scheduling(kube: KubeApi, namespace: str, pod: str) -> bool:
    return bool(failed_scheduling_notes(kube, namespace, pod))


def extenders_config(path: Path, profile: str, entries: str) -> Path:
    return write_config(path, profile, extra="extenders:\n" + entries)


def test_filter_prioritize_and_bind_change_the_placement(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    tmp_path: Path,
    extender: Callable[..., SmallExtender],
) -> None:
    """Without the extender the pod goes to the emptiest node (big); the extender's filter
    takes big out, its prioritize lifts small over the roomier mid (score 10 * weight 2
    * 10 = 200 beats NodeResourcesFit's and BalancedAllocation's difference), and it binds
    the pod itself. A pod the filter rejects everywhere fails with upstream's FitError."""
    profile = profile_for(namespace)
    big = fake_nodes(1, prefix="big", cpu="16", labels={"ext/reject": "true"})[0]
    mid = fake_nodes(1, prefix="mid", cpu="8")[0]
    small = fake_nodes(1, prefix="small", cpu="4", labels={"ext/favour": "true"})[0]
    big_n, mid_n, small_n = (n["metadata"]["name"] for n in (big, mid, small))
    selector = {TEST_LABEL: namespace}

    def pod(name: str, **labels: str) -> Any:
        p = objects.pod(
            name, namespace=namespace, cpu="1", scheduler_name=profile, node_selector=selector
        )
        p["metadata"]["labels"] = labels
        return p

    plain = Shim(
        write_config(tmp_path / "plain.yaml", profile), cluster.kubeconfig, tmp_path / "plain.log"
    )
    with running(plain.start()):
        objects.create_pods(kube, [pod("without-extender")])
        assert wait_node_of(kube, namespace, "without-extender", plain) == big_n

    ext = extender()
    config = extenders_config(
        tmp_path / "ext.yaml",
        profile,
        f"- urlPrefix: {ext.url}\n"
        "  filterVerb: filter\n  prioritizeVerb: prioritize\n  weight: 2\n  bindVerb: bind\n",
    )
    shim = Shim(config, cluster.kubeconfig, tmp_path / "shim.log")
    with running(shim.start()):
        objects.create_pods(kube, [pod("with-extender")])
        assert wait_node_of(kube, namespace, "with-extender", shim) == small_n
        assert ext.verbs("with-extender") == ["filter", "prioritize", "bind"]
        filter_args = next(b for v, b in ext.calls if v == "filter")
        assert filter_args["NodeNames"] is None
        assert {n["metadata"]["name"] for n in filter_args["Nodes"]["items"]} == {
            big_n,
            mid_n,
            small_n,
        }
        prioritize_args = next(b for v, b in ext.calls if v == "prioritize")
        assert {n["metadata"]["name"] for n in prioritize_args["Nodes"]["items"]} == {
            mid_n,
            small_n,
        }
        bind_args = next(b for v, b in ext.calls if v == "bind")
        assert bind_args == {
            "PodName": "with-extender",
            "PodNamespace": namespace,
            "PodUID": kube.get(pod_path(namespace, "with-extender"))["metadata"]["uid"],
            "Node": small_n,
        }

        objects.create_pods(kube, [pod("rejected", **{"ext/reject-all": "true"})])
        wait_for(
            lambda: bool(failed_scheduling_notes(kube, namespace, "rejected")),
            60,
            "FailedScheduling for the pod the extender rejects everywhere",
            shim.log,
        )
        note = failed_scheduling_notes(kube, namespace, "rejected")[0]
        assert note.startswith("0/"), note
        assert f"3 {REJECTED}" in note, note
        cond = pod_scheduled_condition(kube.get(pod_path(namespace, "rejected")))
        assert cond is not None and cond["reason"] == "Unschedulable", cond
        assert "bind" not in ext.verbs("rejected")


def test_an_ignorable_extender_that_is_down_does_not_stop_scheduling(
    cluster: Cluster, kube: KubeApi, namespace: str, fake_nodes: NodeFactory, tmp_path: Path
) -> None:
    """An ignorable extender's filter and bind errors are skipped (findNodesThatPassExtenders,
    extendersBinding): the pod binds through the default binder."""
    profile = profile_for(namespace)
    nodes = {n["metadata"]["name"] for n in fake_nodes(2)}
    down = f"http://127.0.0.1:{free_port()}/scheduler"
    config = extenders_config(
        tmp_path / "c.yaml",
        profile,
        f"- urlPrefix: {down}\n  filterVerb: filter\n  bindVerb: bind\n  ignorable: true\n"
        "  httpTimeout: 2s\n",
    )
    shim = Shim(config, cluster.kubeconfig, tmp_path / "shim.log")
    with running(shim.start()):
        objects.create_pods(
            kube,
            [
                objects.pod(
                    "p",
                    namespace=namespace,
                    scheduler_name=profile,
                    node_selector={TEST_LABEL: namespace},
                )
            ],
        )
        assert wait_node_of(kube, namespace, "p", shim) in nodes
    assert "Skipping extender as it returned error and has ignorable flag set" in shim.text()


def test_a_non_ignorable_extender_that_is_down_fails_the_cycle_until_it_is_back(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    tmp_path: Path,
    extender: Callable[..., SmallExtender],
) -> None:
    """findNodesThatFitPod returns the extender's error: the attempt is an error
    (SchedulerError, FailedScheduling with net/http's words), retried with backoff; once
    the extender answers the pod binds."""
    profile = profile_for(namespace)
    fake_nodes(2)
    port = free_port()
    url = f"http://127.0.0.1:{port}/scheduler"
    config = extenders_config(
        tmp_path / "c.yaml", profile, f"- urlPrefix: {url}\n  filterVerb: filter\n"
    )
    shim = Shim(config, cluster.kubeconfig, tmp_path / "shim.log")
    with running(shim.start()):
        objects.create_pods(
            kube,
            [
                objects.pod(
                    "p",
                    namespace=namespace,
                    scheduler_name=profile,
                    node_selector={TEST_LABEL: namespace},
                )
            ],
        )
        wait_for(
            lambda: bool(failed_scheduling_notes(kube, namespace, "p")),
            60,
            "FailedScheduling while the extender is down",
            shim.log,
        )
        want = f'Post "{url}/filter": dial tcp 127.0.0.1:{port}: connect: connection refused'
        assert failed_scheduling_notes(kube, namespace, "p")[0] == want
        cond = pod_scheduled_condition(kube.get(pod_path(namespace, "p")))
        assert cond is not None and cond["reason"] == "SchedulerError", cond
        assert not kube.get(pod_path(namespace, "p"))["spec"].get("nodeName")
        ext = extender(port)
        wait_node_of(kube, namespace, "p", shim, timeout=60)
        assert ext.verbs("p") == ["filter"]


def test_process_preemption_changes_the_victims(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    tmp_path: Path,
    extender: Callable[..., SmallExtender],
    priorities: None,
) -> None:
    """preemption.go callExtenders: DefaultPreemption proposes the lowest-priority pod;
    the extender's preempt verb, sent the candidate with its victims as full objects,
    names another pod on that node, which is the one evicted; the preemptor binds."""
    profile = profile_for(namespace)
    (node,) = [n["metadata"]["name"] for n in fake_nodes(1, cpu="2")]

    def pod(name: str, priority: str, node_name: str | None = None, **labels: str) -> Any:
        p = objects.pod(
            name,
            namespace=namespace,
            cpu="1",
            memory=None,
            scheduler_name=profile,
            node_selector={TEST_LABEL: namespace},
            node_name=node_name,
            priority_class_name=f"{namespace}-{priority}",
            labels=labels,
        )
        return p

    objects.create_pods(
        kube,
        [
            pod("low", "low", node),
            pod("mid", "mid", node, **{"ext/victim": "true"}),
        ],
    )
    ext = extender()
    config = extenders_config(
        tmp_path / "c.yaml", profile, f"- urlPrefix: {ext.url}\n  preemptVerb: preempt\n"
    )
    shim = Shim(config, cluster.kubeconfig, tmp_path / "shim.log")
    with running(shim.start()):
        objects.create_pods(kube, [pod("high", "high")])
        assert wait_node_of(kube, namespace, "high", shim) == node
        args = next(b for v, b in ext.calls if v == "preempt")
        assert args["Pod"]["metadata"]["name"] == "high"
        assert args["NodeNameToMetaVictims"] is None
        proposed = args["NodeNameToVictims"][node]
        assert [p["metadata"]["name"] for p in proposed["Pods"]] == ["low"]
        assert proposed["NumPDBViolations"] == 0
        names = {
            p["metadata"]["name"] for p in kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
        }
        assert names == {"low", "high"}


def test_kube_scheduler_with_the_same_extender_agrees(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    tmp_path: Path,
    k8s_bin_dir: Path,
    extender: Callable[..., SmallExtender],
) -> None:
    """Differential: kube-scheduler v1.36.3 and berth shim, each with the same extender
    (filter, prioritize, bind), place the same pod on the same node, call the same verbs,
    and explain the pod the extender rejects everywhere with the same FailedScheduling
    text."""
    big = fake_nodes(1, prefix="big", cpu="16", labels={"ext/reject": "true"})[0]
    fake_nodes(1, prefix="mid", cpu="8")
    small = fake_nodes(1, prefix="small", cpu="4", labels={"ext/favour": "true"})[0]
    assert big
    ext = extender()
    entry = (
        f"- urlPrefix: {ext.url}\n"
        "  filterVerb: filter\n  prioritizeVerb: prioritize\n  weight: 2\n  bindVerb: bind\n"
    )
    berth_profile = profile_for(namespace)
    upstream_profile = f"upstream-{namespace}"[:63]
    upstream_config = extenders_config(tmp_path / "upstream.yaml", upstream_profile, entry)

    def pod(name: str, scheduler: str, **labels: str) -> Any:
        p = objects.pod(
            name,
            namespace=namespace,
            cpu="1",
            scheduler_name=scheduler,
            node_selector={TEST_LABEL: namespace},
        )
        p["metadata"]["labels"] = labels
        return p

    shim = Shim(
        extenders_config(tmp_path / "berth.yaml", berth_profile, entry),
        cluster.kubeconfig,
        tmp_path / "shim.log",
    )
    with (
        start_kube_scheduler(
            cluster, tmp_path / "kube-scheduler", config=upstream_config, bin_dir=k8s_bin_dir
        ),
        running(shim.start()),
    ):
        objects.create_pods(
            kube,
            [
                pod("berth", berth_profile),
                pod("upstream", upstream_profile),
                pod("berth-rejected", berth_profile, **{"ext/reject-all": "true"}),
                pod("upstream-rejected", upstream_profile, **{"ext/reject-all": "true"}),
            ],
        )
        assert wait_node_of(kube, namespace, "berth", shim) == small["metadata"]["name"]
        assert wait_node_of(kube, namespace, "upstream", shim) == small["metadata"]["name"]
        assert ext.verbs("berth") == ext.verbs("upstream") == ["filter", "prioritize", "bind"]
        for name in ("berth-rejected", "upstream-rejected"):
            wait_for(
                functools.partial(has_failed_scheduling, kube, namespace, name),
                60,
                f"FailedScheduling for {name}",
                shim.log,
            )
        ours = failed_scheduling_notes(kube, namespace, "berth-rejected")[0]
        theirs = failed_scheduling_notes(kube, namespace, "upstream-rejected")[0]
        assert ours == theirs, (ours, theirs)
        assert f"3 {REJECTED}" in ours


def test_unusable_extender_tls_stops_the_shim_at_start(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    """scheduler.go New fails on an extender it cannot build: the shim exits with status 2
    naming the file, the extender and what is wrong."""
    config = extenders_config(
        tmp_path / "c.yaml",
        profile_for(namespace),
        "- urlPrefix: https://127.0.0.1:8443/scheduler\n  filterVerb: filter\n"
        f"  tlsConfig:\n    caFile: {tmp_path / 'missing-ca.crt'}\n",
    )
    shim = Shim(config, cluster.kubeconfig, tmp_path / "shim.log")
    Proc.start(shim)
    try:
        assert shim.proc is not None
        assert shim.proc.wait(60) == 2
    finally:
        shim.stop()
    text = shim.text()
    assert f"berth shim: {config}: couldn't build extenders: extenders[0] " in text, text
    assert "tlsConfig:" in text and "missing-ca.crt" in text, text


class KeepingExtender(SmallExtender):
    """An extender whose preempt verb keeps only the candidate nodes labelled
    ``ext/preemptible``, each with the victims proposed for it."""

    def preempt(self, args: Any) -> Any:
        out = {}
        for node, victims in (args["NodeNameToVictims"] or {}).items():
            labels = self.kube.get(f"/api/v1/nodes/{node}")["metadata"]["labels"]
            if "ext/preemptible" in labels:
                out[node] = {
                    "Pods": [{"UID": p["metadata"]["uid"]} for p in victims["Pods"]],
                    "NumPDBViolations": victims["NumPDBViolations"],
                }
        return {"NodeNameToMetaVictims": out}


@pytest.mark.parametrize(
    "verbs", ["preemptVerb: preempt", "filterVerb: filter, preemptVerb: preempt"]
)
def test_extenders_see_every_preemption_candidate_and_the_best_they_keep_wins(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    tmp_path: Path,
    k8s_bin_dir: Path,
    verbs: str,
    priorities: None,
) -> None:
    """Differential, preemption.go Preempt: DefaultPreemption finds two candidates, node a
    (a victim of priority 10) and node b (priority 20); by itself it would choose a. The
    extender's preempt verb is sent both (callExtenders) and keeps only b, so the preemptor
    evicts b's pod and lands there, the other victim staying. kube-scheduler v1.36.3 and
    berth shim, each on its own two nodes with the same extender, do the same; with a
    filter verb too, the shim's cycle is the one split around the extenders."""
    berth_profile = profile_for(namespace)
    upstream_profile = f"upstream-{namespace}"[:63]
    nodes: dict[str, tuple[str, str]] = {}
    for who in ("berth", "upstream"):
        group = {"ext/group": who}
        (first,) = fake_nodes(1, prefix=f"{who}-a", cpu="1", labels=group)
        (second,) = fake_nodes(
            1, prefix=f"{who}-b", cpu="1", labels={**group, "ext/preemptible": "1"}
        )
        nodes[who] = (first["metadata"]["name"], second["metadata"]["name"])

    def pod(name: str, who: str, priority: str, node_name: str | None = None) -> Any:
        return objects.pod(
            name,
            namespace=namespace,
            cpu="1",
            memory=None,
            scheduler_name=berth_profile if who == "berth" else upstream_profile,
            node_selector={TEST_LABEL: namespace, "ext/group": who},
            node_name=node_name,
            priority_class_name=f"{namespace}-{priority}",
        )

    ext = KeepingExtender(kube)
    entry = f"- urlPrefix: {ext.url}\n" + "".join(
        f"  {verb.strip()}\n" for verb in verbs.split(",")
    )
    try:
        for who, (a, b) in nodes.items():
            objects.create_pods(
                kube, [pod(f"{who}-low", who, "low", a), pod(f"{who}-mid", who, "mid", b)]
            )
        shim = Shim(
            extenders_config(tmp_path / "berth.yaml", berth_profile, entry),
            cluster.kubeconfig,
            tmp_path / "shim.log",
        )
        upstream_config = extenders_config(tmp_path / "upstream.yaml", upstream_profile, entry)
        with (
            start_kube_scheduler(
                cluster, tmp_path / "kube-scheduler", config=upstream_config, bin_dir=k8s_bin_dir
            ),
            running(shim.start()),
        ):
            objects.create_pods(
                kube, [pod("berth-high", "berth", "high"), pod("upstream-high", "upstream", "high")]
            )
            for who, (a, b) in nodes.items():
                assert wait_node_of(kube, namespace, f"{who}-high", shim, timeout=90) == b
                sent = [
                    sorted(body["NodeNameToVictims"])
                    for verb, body in ext.calls
                    if verb == "preempt" and body["Pod"]["metadata"]["name"] == f"{who}-high"
                ]
                assert sent and sent[0] == sorted([a, b]), (who, sent)
                assert ("filter" in ext.verbs(f"{who}-high")) == ("filter" in verbs)
            names = {
                p["metadata"]["name"]
                for p in kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
            }
            assert names == {"berth-low", "berth-high", "upstream-low", "upstream-high"}
    finally:
        ext.close()
