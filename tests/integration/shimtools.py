"""Running ``berth shim`` and ``berth serve`` as real processes in integration tests.

Each test gives its shim a profile of its own (``berth-<namespace>``), so only that
shim binds the test's pods, and reads the truth back from the API server.
"""

from __future__ import annotations

import functools
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import yaml

from berth.dev.localcluster import Cluster
from berth.dev.localcluster.ports import free_port
from berth.framework.units import parse_quantity
from berth.kube.errors import ApiError
from berth.kube.rest import JSON, KubeApi, segment

BERTH = [sys.executable, "-m", "berth"]


def write_config(path: Path, profile: str, *, extra: str = "") -> Path:
    """A KubeSchedulerConfiguration with one profile, the default plugins."""
    path.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        "profiles:\n"
        f"  - schedulerName: {profile}\n" + extra
    )
    return path


def wait_for(check: Callable[[], bool], timeout: float, what: str, log: Path | None = None) -> None:
    """Polls ``check`` until it holds; TimeoutError naming ``what`` (and the log's tail)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    tail = log.read_text()[-3000:] if log is not None and log.exists() else ""
    raise TimeoutError(f"{what} within {timeout:g}s\n{tail}")


def service_account(kube: KubeApi, namespace: str, name: str, cluster_role: str) -> str:
    """A ServiceAccount bound to ``cluster_role`` (binding ``<namespace>-<name>``, which the
    caller deletes); returns a token for it from the TokenRequest API."""
    kube.create(f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": name}})
    kube.create(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "metadata": {"name": f"{namespace}-{name}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": cluster_role,
            },
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    )
    token: str = kube.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )["status"]["token"]
    return token


def kubeconfig_for(cluster: Cluster, path: Path, user: str) -> Path:
    """A kubeconfig for the local cluster with ``user`` as the user entry's YAML body
    (e.g. ``{token: ...}`` or an ``exec`` block), trusting the cluster's CA."""
    ca = cluster.kubeconfig.parent / "pki" / "ca.crt"
    assert ca.exists(), list(ca.parent.iterdir())
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: c, cluster: {{server: '{cluster.server}', certificate-authority: '{ca}'}}}}]\n"
        f"users:\n- name: u\n  user: {user}\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
    )
    return path


class Proc:
    """A berth subprocess with its log in a file."""

    def __init__(self, argv: Sequence[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.argv = list(argv)
        self.log = log
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        out = open(self.log, "ab")  # noqa: SIM115 - closed when the process is stopped
        self.proc = subprocess.Popen(
            self.argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(self.env or {})},
        )
        out.close()
        return self

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: a crash, nothing cleaned up."""
        if self.running:
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait(10)

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM and wait; SIGKILL if it does not stop."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


class Server(Proc):
    """``berth serve`` on a fixed loopback port (so a restart comes back at the same address),
    in plaintext (``--insecure-plaintext``) unless ``extra`` gives it TLS files."""

    def __init__(
        self,
        config: Path,
        log: Path,
        port: int | None = None,
        extra: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.port = port or free_port()
        tls = any(a.startswith("--tls-cert") for a in extra)
        super().__init__(
            [
                *BERTH,
                "serve",
                "--config",
                str(config),
                "--listen",
                f"127.0.0.1:{self.port}",
                *([] if tls else ["--insecure-plaintext"]),
                *extra,
            ],
            log,
            env,
        )

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> Server:
        super().start()
        wait_for(
            lambda: "listening on port" in self.text() or not self.running,
            60,
            "berth serve up",
            self.log,
        )
        if not self.running:
            raise RuntimeError(f"berth serve exited:\n{self.text()[-3000:]}")
        return self


class Shim(Proc):
    """``berth shim`` with its health and metrics in plain HTTP on a loopback port
    (``--insecure-metrics``), calling ``server`` in plaintext (``--insecure-plaintext``)
    unless ``extra`` gives it TLS files."""

    def __init__(
        self,
        config: Path,
        kubeconfig: Path,
        log: Path,
        *,
        server: str | None = None,
        leader_elect: bool = False,
        extra: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.metrics_port = free_port()
        argv = [
            *BERTH,
            "shim",
            "--config",
            str(config),
            "--kubeconfig",
            str(kubeconfig),
            "--metrics-listen",
            f"127.0.0.1:{self.metrics_port}",
            "--insecure-metrics",
            "--leader-elect" if leader_elect else "--no-leader-elect",
            *extra,
        ]
        if server:
            argv += ["--plugin-server", server]
            if not any(a.startswith("--plugin-server-") for a in extra):
                argv.append("--insecure-plaintext")
        super().__init__(argv, log, env)

    def get(self, path: str, token: str | None = None) -> tuple[int, str]:
        """GET on the metrics port: plain HTTP, or HTTPS (the certificate unchecked, as the
        kubelet's probes do) when argv has no --insecure-metrics; ``token`` as a bearer
        token. (status, body); status 0 when nothing answered."""
        secure = "--insecure-metrics" not in self.argv
        context = None
        if secure:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        scheme = "https" if secure else "http"
        request = urllib.request.Request(f"{scheme}://127.0.0.1:{self.metrics_port}{path}")
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=5, context=context) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError:
            return 0, ""

    def start(self) -> Shim:
        super().start()
        wait_for(
            lambda: self.get("/readyz")[0] == 200 or not self.running,
            60,
            "berth shim ready",
            self.log,
        )
        if not self.running:
            raise RuntimeError(f"berth shim exited:\n{self.text()[-3000:]}")
        return self

    def metric(self, name: str, **labels: str) -> float:
        """A sample from /metrics (0 when absent)."""
        _, text = self.get("/metrics")
        want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            key, _, value = line.rpartition(" ")
            metric, _, rest = key.partition("{")
            if metric != name:
                continue
            got = ",".join(sorted(rest.rstrip("}").split(","))) if rest else ""
            if got == want:
                return float(value)
        return 0.0


@contextmanager
def running(*procs: Proc) -> Iterator[None]:
    try:
        yield
    finally:
        for p in procs:
            p.stop()


def pods_of(kube: KubeApi, namespace: str) -> list[JSON]:
    items: list[JSON] = kube.get(f"/api/v1/namespaces/{segment(namespace)}/pods")["items"]
    return items


def scheduled_events(kube: KubeApi, namespace: str) -> Counter[str]:
    """Scheduled events per pod name, series counts included: a pod bound twice
    would show a count of 2."""
    events = kube.get(f"/apis/events.k8s.io/v1/namespaces/{segment(namespace)}/events")
    out: Counter[str] = Counter()
    for e in events["items"]:
        if e.get("reason") == "Scheduled":
            series = e.get("series") or {}
            out[e["regarding"]["name"]] += int(series.get("count") or 1)
    return out


def wait_scheduled_events(
    kube: KubeApi, namespace: str, count: int, timeout: float = 60.0
) -> Counter[str]:
    """Scheduled events are written after the bind, asynchronously: wait for ``count``
    pods to have one."""
    deadline = time.monotonic() + timeout
    counts = scheduled_events(kube, namespace)
    while len(counts) < count and time.monotonic() < deadline:
        time.sleep(0.25)
        counts = scheduled_events(kube, namespace)
    return counts


def pod_requests(pod: JSON) -> dict[str, int]:
    """What a pod takes from its node, as NodeResourcesFit counts it
    (component-helpers resource.PodRequests): CPU (millicores) and memory (bytes)
    are the larger of the containers' sum and each init container's request, plus
    the pod's overhead; every pod takes one of the node's ``pods``."""

    def of(containers: Sequence[JSON], res: str, unit: str) -> list[int]:
        out = []
        for c in containers:
            q = ((c.get("resources") or {}).get("requests") or {}).get(res)
            out.append(getattr(parse_quantity(str(q)), unit)() if q else 0)
        return out

    spec = pod["spec"]
    out = {"pods": 1}
    for res, unit in (("cpu", "milli"), ("memory", "value")):
        main = sum(of(spec.get("containers") or [], res, unit))
        init = max(of(spec.get("initContainers") or [], res, unit), default=0)
        over = (spec.get("overhead") or {}).get(res)
        extra = getattr(parse_quantity(str(over)), unit)() if over else 0
        out[res] = max(main, init) + extra
    return out


def assert_no_overcommit(
    kube: KubeApi, node_names: Sequence[str], *, filled: float | None = None
) -> dict[str, float]:
    """No node's pods request more CPU, memory or pods than it has allocatable, counting
    every pod bound to it (any namespace, any scheduler). With ``filled``, every node
    must also be at least that full (the largest of its CPU, memory and pods fractions):
    an overcommit check of half-empty nodes could not fail. Returns each node's fill."""
    pods = kube.get("/api/v1/pods")["items"]
    used: dict[str, Counter[str]] = {name: Counter() for name in node_names}
    for p in pods:
        node = p["spec"].get("nodeName")
        if node in used and p.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
            used[node].update(pod_requests(p))
    fill: dict[str, float] = {}
    problems: list[str] = []
    for name in node_names:
        alloc = kube.get(f"/api/v1/nodes/{segment(name)}")["status"]["allocatable"]
        fractions = []
        for res, unit in (("cpu", "milli"), ("memory", "value"), ("pods", "value")):
            cap = getattr(parse_quantity(str(alloc.get(res, "0"))), unit)()
            have = used[name][res]
            if have > cap:
                problems.append(f"node {name} overcommitted: {res} requests {have} > {cap}")
            if cap:
                fractions.append(have / cap)
        fill[name] = max(fractions, default=0.0)
    assert not problems, problems
    if filled is not None:
        low = {n: round(f, 3) for n, f in fill.items() if f < filled}
        assert not low, f"nodes filled below {filled:.0%}, so no overcommit could show: {low}"
    return fill


def wait_all_decided(
    kube: KubeApi, namespace: str, count: int, proc: Proc, timeout: float = 120.0
) -> tuple[list[str], list[str]]:
    """Waits until ``count`` pods of the namespace are each bound or visibly
    unschedulable (PodScheduled=False, reason Unschedulable); returns (bound,
    unschedulable) names. TimeoutError with ``proc``'s log if they are not."""
    result: tuple[list[str], list[str]] = ([], [])

    def decided() -> bool:
        nonlocal result
        bound, unschedulable = [], []
        for p in pods_of(kube, namespace):
            cond = pod_scheduled_condition(p) or {}
            if p["spec"].get("nodeName"):
                bound.append(p["metadata"]["name"])
            elif cond.get("status") == "False" and cond.get("reason") == "Unschedulable":
                unschedulable.append(p["metadata"]["name"])
        result = (sorted(bound), sorted(unschedulable))
        return len(bound) + len(unschedulable) >= count

    wait_for(decided, timeout, f"{count} pods in {namespace} bound or unschedulable", proc.log)
    return result


def wait_all_bound(kube: KubeApi, namespace: str, count: int, timeout: float = 120.0) -> list[JSON]:
    deadline = time.monotonic() + timeout
    pods: list[JSON] = []
    while time.monotonic() < deadline:
        pods = pods_of(kube, namespace)
        if sum(1 for p in pods if p["spec"].get("nodeName")) >= count:
            return pods
        time.sleep(0.25)
    bound = sum(1 for p in pods if p["spec"].get("nodeName"))
    raise TimeoutError(f"only {bound}/{count} pods in {namespace} bound within {timeout:g}s")


def profile_for(namespace: str) -> str:
    return f"berth-{namespace}"[:63].rstrip("-")


EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"


def example_config_as(folder: str, seed_profile: str, profile: str, path: Path) -> Path:
    """deploy/examples/<folder>/scheduler-config.yaml, unchanged but for its one profile's
    name (``seed_profile`` becomes ``profile``), written to ``path``."""
    text = (EXAMPLES / folder / "scheduler-config.yaml").read_text()
    field = f"- schedulerName: {seed_profile}"
    assert text.count(field) == 1, text
    path.write_text(text.replace(field, f"- schedulerName: {profile}"))
    assert [p["schedulerName"] for p in yaml.safe_load(path.read_text())["profiles"]] == [profile]
    return path


def ensure_crds(kube: KubeApi, manifest: Path, timeout: float = 30.0) -> list[JSON]:
    """Creates the CustomResourceDefinitions of a YAML manifest unless they exist, and
    waits until each is Established and its resource is served. Returns the CRDs as
    written. They are left in place (cluster-wide, idempotent)."""
    crds = [d for d in yaml.safe_load_all(manifest.read_text()) if d]
    ensure_crd_objects(kube, crds, timeout)
    return crds


def ensure_crd_objects(kube: KubeApi, crds: Sequence[JSON], timeout: float = 30.0) -> None:
    """``ensure_crds`` for CustomResourceDefinitions given as objects."""
    base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    for crd in crds:
        try:
            kube.create(base, crd)
        except ApiError as exc:
            if exc.status != 409:
                raise

    def established(name: str) -> bool:
        conds = (kube.get(f"{base}/{name}").get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conds)

    def served(path: str) -> bool:
        try:
            kube.get(path)
        except ApiError:
            return False
        return True

    for crd in crds:
        spec = crd["spec"]
        name = crd["metadata"]["name"]
        wait_for(functools.partial(established, name), timeout, f"CRD {name}")
        version = next(v["name"] for v in spec["versions"] if v.get("served"))
        path = f"/apis/{spec['group']}/{version}/{spec['names']['plural']}"
        wait_for(functools.partial(served, path), timeout, f"{path} served")


def failed_scheduling_notes(kube: KubeApi, namespace: str, pod: str) -> list[str]:
    """The notes of the FailedScheduling events about ``pod``. The event recorder keeps
    an event's first note and counts later occurrences in its series, as client-go does:
    a later, different message shows in the pod's PodScheduled condition instead."""
    events = kube.get(f"/apis/events.k8s.io/v1/namespaces/{segment(namespace)}/events")
    return [
        str(e.get("note", ""))
        for e in events["items"]
        if e.get("reason") == "FailedScheduling" and e["regarding"].get("name") == pod
    ]


def pod_scheduled_condition(pod: JSON) -> JSON | None:
    """The pod's PodScheduled condition, None when it has none."""
    conds = pod.get("status", {}).get("conditions", [])
    return next((c for c in conds if c.get("type") == "PodScheduled"), None)


def pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{segment(namespace)}/pods/{segment(name)}"


def node_names(nodes: Sequence[JSON]) -> list[str]:
    return [n["metadata"]["name"] for n in nodes]


def wait_node_of(kube: KubeApi, namespace: str, name: str, proc: Proc, timeout: float = 60) -> str:
    """The node the pod is bound to, once it is (TimeoutError with ``proc``'s log)."""
    path = pod_path(namespace, name)
    wait_for(
        lambda: bool(kube.get(path)["spec"].get("nodeName")), timeout, f"{name} bound", proc.log
    )
    node: str = kube.get(path)["spec"]["nodeName"]
    return node


def wait_unschedulable(
    kube: KubeApi, namespace: str, name: str, proc: Proc, timeout: float = 60
) -> JSON:
    """The pod's PodScheduled=False (Unschedulable) condition, once the shim has written
    it; the pod is not bound."""
    path = pod_path(namespace, name)
    wait_for(
        lambda: pod_scheduled_condition(kube.get(path)) is not None,
        timeout,
        f"{name} got a PodScheduled condition",
        proc.log,
    )
    pod = kube.get(path)
    cond = pod_scheduled_condition(pod)
    assert cond is not None and cond["status"] == "False", cond
    assert cond["reason"] == "Unschedulable", cond
    assert not pod["spec"].get("nodeName"), pod["spec"]
    return cond


def kubectl(cluster: Cluster, bin_dir: Path, *args: str) -> str:
    """``kubectl --kubeconfig <cluster's> <args>``'s output; fails the test on an error."""
    out = subprocess.run(
        [str(bin_dir / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert out.returncode == 0, f"kubectl {' '.join(args)}: {out.stderr}"
    return out.stdout


def described_failed_scheduling(
    cluster: Cluster, bin_dir: Path, namespace: str, pod: str
) -> list[str]:
    """The FailedScheduling lines of ``kubectl describe pod``'s Events, as a user reads
    them (see ``failed_scheduling_notes`` for the events' notes from the API)."""
    out = kubectl(cluster, bin_dir, "describe", "pod", pod, "-n", namespace)
    events = out[out.index("Events:") :] if "Events:" in out else ""
    return [line for line in events.splitlines() if "FailedScheduling" in line]


__all__ = [
    "Cluster",
    "Proc",
    "Server",
    "Shim",
    "assert_no_overcommit",
    "described_failed_scheduling",
    "ensure_crd_objects",
    "ensure_crds",
    "example_config_as",
    "failed_scheduling_notes",
    "kubeconfig_for",
    "kubectl",
    "node_names",
    "pod_path",
    "pod_requests",
    "pod_scheduled_condition",
    "pods_of",
    "profile_for",
    "running",
    "scheduled_events",
    "service_account",
    "wait_all_bound",
    "wait_all_decided",
    "wait_for",
    "wait_node_of",
    "wait_scheduled_events",
    "wait_unschedulable",
    "write_config",
]
