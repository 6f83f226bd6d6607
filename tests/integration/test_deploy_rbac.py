"""The shim's RBAC from deploy/ is enough, and no more.

The base's ServiceAccounts, ClusterRole/Binding and leader-election Role/Binding are applied
for real in the test cluster. A token for the shim's ServiceAccount comes from the
TokenRequest API; ``berth shim`` runs on the host with a kubeconfig holding only that token,
with the flags and the configuration of the shim Deployment (two replicas, leader election on
the Lease berth-system/berth-scheduler), next to a ``berth serve`` run with the plugin server
Deployment's flags (mTLS between them, with certificates from ``berth certs``). Pods get bound,
unschedulable ones get their status patched and events, and leadership passes to the standby
when the leader stops.

The shim's secure port (HTTPS, delegated authn/authz through the auth-delegator binding):
/metrics refused without a token (403, the anonymous user) and with a bad one (401), refused to
a ServiceAccount without access (403), served to one allowed ``get`` on the nonResourceURL
/metrics; /healthz, /readyz and /livez open.

Then SelfSubjectAccessReviews made with that token show what the role may not do: touch
nodes beyond list/watch, read secrets, update or patch pods beyond binding and status, or
touch any Lease but its own. The plugin server's ServiceAccount may do nothing at all. The
RBAC components under deploy/components/ grant their extra verbs only once applied.
"""

from __future__ import annotations

import http.client
import json
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from berth.dev.localcluster import Cluster, objects
from berth.dev.localcluster.ports import free_port
from berth.dev.localcluster.testing import TEST_LABEL, NodeFactory
from berth.kube.errors import ApiError
from berth.kube.rest import JSON, KubeApi
from tests.integration.deploytools import (
    BASE,
    LEASE,
    NAMESPACE,
    SERVER_SA,
    SHIM_SA,
    berth_system,
    component_dirs,
    delete_objects,
    kubectl,
    one,
    render,
    replace_flags,
    scheduler_config,
)
from tests.integration.shimtools import (
    BERTH,
    Server,
    Shim,
    kubeconfig_for,
    pods_of,
    running,
    wait_all_bound,
    wait_for,
)

pytestmark = pytest.mark.integration

RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{LEASE}"
PROFILE = "berth-scheduler"


@pytest.fixture(scope="module")
def base() -> list[JSON]:
    return render(BASE)


@pytest.fixture(scope="module")
def installed(kube: KubeApi, cluster: Cluster, base: list[JSON]) -> Iterator[list[JSON]]:
    """berth-system and the base's RBAC objects, applied for real."""
    rbac = [d for d in base if d["kind"] in RBAC_KINDS]
    with berth_system(kube, cluster.kubeconfig, one(base, "Namespace")):
        try:
            kubectl(
                ["apply", "-f", "-"], kubeconfig=cluster.kubeconfig, stdin=yaml.safe_dump_all(rbac)
            )
            yield rbac
        finally:
            try:
                kube.delete(LEASE_PATH)
            except ApiError as err:
                if err.status != 404:
                    raise
            delete_objects(kube, cluster.kubeconfig, rbac)


def token_for(kube: KubeApi, account: str) -> str:
    """A token for berth-system/<account> from the TokenRequest API."""
    token: str = kube.create(
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )["status"]["token"]
    return token


@pytest.fixture(scope="module")
def shim_kubeconfig(
    kube: KubeApi,
    cluster: Cluster,
    installed: list[JSON],
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    token = token_for(kube, SHIM_SA)
    path = tmp_path_factory.mktemp("shim-sa") / "kubeconfig"
    return kubeconfig_for(cluster, path, f"{{token: '{token}'}}")


@pytest.fixture(scope="module")
def server_kubeconfig(
    kube: KubeApi,
    cluster: Cluster,
    installed: list[JSON],
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    token = token_for(kube, SERVER_SA)
    path = tmp_path_factory.mktemp("server-sa") / "kubeconfig"
    return kubeconfig_for(cluster, path, f"{{token: '{token}'}}")


# -- the shim schedules with the ServiceAccount's token -----------------------------------


def container_args(docs: list[JSON], deployment: str) -> list[str]:
    spec = one(docs, "Deployment", deployment)["spec"]["template"]["spec"]
    args: list[str] = spec["containers"][0]["args"]
    return args


def leader_identity(shim: Shim) -> str | None:
    m = re.search(rf"became leader of lease {NAMESPACE}/{LEASE} as (\S+)", shim.text())
    return m.group(1) if m else None


def lease_holder(kube: KubeApi) -> str:
    try:
        lease = kube.get(LEASE_PATH)
    except ApiError as err:
        if err.status == 404:
            return ""
        raise
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


def berth_certs(directory: Path) -> Path:
    """``berth certs --out-dir``: the PEM files of the Secrets the base mounts."""
    subprocess.run(
        [*BERTH, "certs", "--out-dir", str(directory)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return directory


def base_server(base: list[JSON], config: Path, pki: Path, log: Path) -> Server:
    """``berth serve`` with the plugin server Deployment's flags, on loopback, the Secret's
    files from ``pki``."""
    server = Server(config, log)
    server.argv = [
        *BERTH,
        *replace_flags(
            container_args(base, "berth-plugin-server"),
            {
                "--config": str(config),
                "--listen": server.address,
                "--metrics-listen": f"127.0.0.1:{free_port()}",
                "--health-listen": f"127.0.0.1:{free_port()}",
                "--tls-cert": str(pki / "server.crt"),
                "--tls-key": str(pki / "server.key"),
                "--tls-client-ca": str(pki / "ca.crt"),
            },
        ),
    ]
    return server


def base_shim(
    base: list[JSON], config: Path, kubeconfig: Path, pki: Path, server: Server, log: Path
) -> Shim:
    """``berth shim`` with the shim Deployment's flags (leader election on, mTLS to
    ``server``, the secure metrics port), with a ServiceAccount's token instead of the
    in-cluster one."""
    shim_args = container_args(base, "berth-scheduler")
    assert "--leader-elect" in shim_args and not any(
        a.startswith("--kubeconfig") for a in shim_args
    )
    s = Shim(config, kubeconfig, log)
    s.argv = [
        *BERTH,
        *replace_flags(
            shim_args,
            {
                "--config": str(config),
                "--plugin-server": server.address,
                "--metrics-listen": f"127.0.0.1:{s.metrics_port}",
                "--plugin-server-ca": str(pki / "ca.crt"),
                "--plugin-server-cert": str(pki / "client.crt"),
                "--plugin-server-key": str(pki / "client.key"),
            },
        ),
        "--kubeconfig",
        str(kubeconfig),
    ]
    return s


def test_shim_schedules_with_its_service_account_and_leader_election(
    kube: KubeApi,
    base: list[JSON],
    shim_kubeconfig: Path,
    namespace: str,
    fake_nodes: NodeFactory,
    tmp_path: Path,
) -> None:
    fake_nodes(2, cpu="4")
    config = tmp_path / "scheduler-config.yaml"
    config.write_text(scheduler_config(base))
    pki = berth_certs(tmp_path / "pki")
    server = base_server(base, config, pki, tmp_path / "serve.log")

    def shim(name: str) -> Shim:
        return base_shim(base, config, shim_kubeconfig, pki, server, tmp_path / f"{name}.log")

    first, second = shim("shim-a"), shim("shim-b")

    def pod(name: str, cpu: str = "100m") -> JSON:
        return objects.pod(
            name,
            namespace=namespace,
            cpu=cpu,
            scheduler_name=PROFILE,
            node_selector={TEST_LABEL: namespace},
        )

    with running(server.start()), running(first.start()):
        wait_for(lambda: leader_identity(first) is not None, 30, "first shim leads", first.log)
        assert lease_holder(kube) == leader_identity(first)
        with running(second.start()):
            status, body = second.get("/readyz")
            assert status == 200 and "standing by" in body, body

            objects.create_pods(kube, [pod(f"p-{i}") for i in range(3)] + [pod("huge", "64")])
            wait_all_bound(kube, namespace, 3, timeout=60)

            # pods/status patch: the unschedulable pod carries PodScheduled=False.
            def huge_marked() -> bool:
                (huge,) = [p for p in pods_of(kube, namespace) if p["metadata"]["name"] == "huge"]
                conds = huge["status"].get("conditions") or []
                return any(c["type"] == "PodScheduled" and c["status"] == "False" for c in conds)

            wait_for(huge_marked, 30, "PodScheduled=False on the unschedulable pod", first.log)

            # events.k8s.io create: Scheduled and FailedScheduling.
            def reasons() -> set[str]:
                events = kube.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
                return {e["reason"] for e in events["items"]}

            wait_for(
                lambda: {"Scheduled", "FailedScheduling"} <= reasons(),
                30,
                "Scheduled and FailedScheduling events",
                first.log,
            )

            # A clean stop releases the Lease; the standby takes it (get, update) and
            # schedules.
            assert first.stop() == 0, first.text()[-3000:]
            wait_for(lambda: leader_identity(second) is not None, 30, "standby leads", second.log)
            assert lease_holder(kube) == leader_identity(second) != leader_identity(first)
            objects.create_pods(kube, [pod(f"q-{i}") for i in range(2)])
            bound = wait_all_bound(kube, namespace, 5, timeout=60)
            assert sorted(p["metadata"]["name"] for p in bound if p["spec"].get("nodeName")) == [
                "p-0",
                "p-1",
                "p-2",
                "q-0",
                "q-1",
            ]

    for s in (first, second):
        text = s.text().lower()
        assert "forbidden" not in text and " 403" not in text, s.text()[-3000:]
        # Both sides said TLS.
        assert "over tls (ca " in text and "client certificate" in text, s.text()[-3000:]
    assert "plaintext gRPC" not in server.text() and ", mTLS with " in server.text()


# -- the secure port: /metrics for whom the API server allows --------------------------------

METRICS_READER = "berth-test-metrics-reader"
STRANGER = "berth-test-stranger"


@pytest.fixture
def metrics_accounts(kube: KubeApi, cluster: Cluster, installed: list[JSON]) -> Iterator[None]:
    """Two ServiceAccounts: one allowed get on the nonResourceURL /metrics (as a Prometheus
    would be), one allowed nothing."""
    docs: list[JSON] = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": NAMESPACE},
        }
        for name in (METRICS_READER, STRANGER)
    ]
    docs += [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": METRICS_READER},
            "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": METRICS_READER},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": METRICS_READER,
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": METRICS_READER, "namespace": NAMESPACE}
            ],
        },
    ]
    kubectl(["apply", "-f", "-"], kubeconfig=cluster.kubeconfig, stdin=yaml.safe_dump_all(docs))
    try:
        yield
    finally:
        delete_objects(kube, cluster.kubeconfig, docs)


def test_metrics_are_served_over_https_to_whom_the_api_server_allows(
    kube: KubeApi,
    base: list[JSON],
    shim_kubeconfig: Path,
    metrics_accounts: None,
    tmp_path: Path,
) -> None:
    """kube-scheduler's secure port: delegated authentication (TokenReview) and
    authorization (SubjectAccessReview), through the base's auth-delegator binding."""
    config = tmp_path / "scheduler-config.yaml"
    config.write_text(scheduler_config(base))
    pki = berth_certs(tmp_path / "pki")
    server = base_server(base, config, pki, tmp_path / "serve.log")
    shim = base_shim(base, config, shim_kubeconfig, pki, server, tmp_path / "shim.log")
    reader, stranger = token_for(kube, METRICS_READER), token_for(kube, STRANGER)
    with running(server.start()), running(shim.start()):
        # Open to all, as upstream's --authorization-always-allow-paths.
        for path in ("/healthz", "/readyz", "/livez"):
            status, _ = shim.get(path)
            assert status == 200, path
        # No token: the anonymous user, whom RBAC does not allow /metrics.
        status, body = shim.get("/metrics")
        assert status == 403, body
        assert json.loads(body)["message"].startswith(
            'forbidden: User "system:anonymous" cannot get path "/metrics"'
        ), body
        # A token the API server does not know.
        status, body = shim.get("/metrics", token="not-a-token")
        assert status == 401, body
        # A ServiceAccount without access.
        status, body = shim.get("/metrics", token=stranger)
        assert status == 403, body
        assert f"system:serviceaccount:{NAMESPACE}:{STRANGER}" in body, body
        # Allowed: served.
        status, body = shim.get("/metrics", token=reader)
        assert status == 200, body
        assert "scheduler_schedule_attempts_total" in body or "scheduler_pending_pods" in body
        # Not plain HTTP.
        with pytest.raises((OSError, http.client.HTTPException)):
            urllib.request.urlopen(f"http://127.0.0.1:{shim.metrics_port}/healthz", timeout=5)
    assert "forbidden" not in shim.text().lower(), shim.text()[-3000:]


# -- and cannot do more ------------------------------------------------------------------------


@dataclass(frozen=True)
class Access:
    verb: str
    resource: str
    group: str = ""
    namespace: str = ""
    name: str = ""
    subresource: str = ""

    def __str__(self) -> str:
        res = f"{self.resource}.{self.group}" if self.group else self.resource
        res += f"/{self.subresource}" if self.subresource else ""
        res += f" {self.name}" if self.name else ""
        return f"{self.verb} {res} in {self.namespace or '(all namespaces)'}"


def allowed(client: KubeApi, a: Access) -> bool:
    """A SelfSubjectAccessReview with the client's own token."""
    review = client.create(
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {
                "resourceAttributes": {
                    "verb": a.verb,
                    "group": a.group,
                    "resource": a.resource,
                    "subresource": a.subresource,
                    "namespace": a.namespace,
                    "name": a.name,
                }
            },
        },
    )
    return bool(review["status"]["allowed"])


# What the shim calls (shim/scheduler.py, binding.py, preemption.py, podstatus.py, events.py,
# leader.py).
SHIM_MAY = [
    Access("list", "nodes"),
    Access("watch", "nodes"),
    Access("list", "pods"),
    Access("watch", "pods"),
    Access("get", "pods", namespace="default", name="p"),
    Access("create", "pods", namespace="default", name="p", subresource="binding"),
    Access("patch", "pods", namespace="default", name="p", subresource="status"),
    # Preemption deletes its victims (executor.go PreemptPod).
    Access("delete", "pods", namespace="default", name="p"),
    # DefaultPreemption reads the PodDisruptionBudgets.
    Access("list", "poddisruptionbudgets", "policy"),
    Access("watch", "poddisruptionbudgets", "policy"),
    Access("create", "events", "events.k8s.io", namespace="default"),
    Access("patch", "events", "events.k8s.io", namespace="default", name="e"),
    Access("get", "leases", "coordination.k8s.io", NAMESPACE, LEASE),
    Access("update", "leases", "coordination.k8s.io", NAMESPACE, LEASE),
    # RBAC cannot restrict create by name: any Lease, but only in berth-system.
    Access("create", "leases", "coordination.k8s.io", NAMESPACE),
    # What the default profile's cross-pod plugins read (Plugin.reads).
    Access("list", "namespaces"),
    Access("watch", "namespaces"),
    Access("list", "services"),
    Access("watch", "services"),
    Access("list", "replicationcontrollers"),
    Access("list", "replicasets", "apps"),
    Access("watch", "statefulsets", "apps"),
    # VolumeBinding: its reads, and the merge patches its PreBind asks for.
    Access("list", "persistentvolumes"),
    Access("watch", "persistentvolumeclaims"),
    Access("list", "storageclasses", "storage.k8s.io"),
    Access("watch", "csinodes", "storage.k8s.io"),
    Access("list", "csidrivers", "storage.k8s.io"),
    Access("watch", "csistoragecapacities", "storage.k8s.io"),
    # NodeVolumeLimits: the VolumeAttachments to each node.
    Access("list", "volumeattachments", "storage.k8s.io"),
    Access("watch", "volumeattachments", "storage.k8s.io"),
    Access("patch", "persistentvolumes", name="pv"),
    Access("patch", "persistentvolumeclaims", namespace="default", name="pvc"),
    # DynamicResources: its reads, and the merge patches its PreBind asks for
    # (the claim's allocation and reservedFor, and the allocation's finalizer).
    Access("list", "resourceclaims", "resource.k8s.io"),
    Access("watch", "resourceclaims", "resource.k8s.io"),
    Access("list", "deviceclasses", "resource.k8s.io"),
    Access("watch", "resourceslices", "resource.k8s.io"),
    Access("patch", "resourceclaims", "resource.k8s.io", namespace="default", name="c"),
    Access(
        "patch",
        "resourceclaims",
        "resource.k8s.io",
        namespace="default",
        name="c",
        subresource="status",
    ),
    # The claim for a pod's DRA-backed extended resources: created at PreBind, and one an
    # earlier cycle made deleted at PostFilter (ObjectWrite create and delete).
    Access("create", "resourceclaims", "resource.k8s.io", namespace="default"),
    Access("delete", "resourceclaims", "resource.k8s.io", namespace="default", name="c"),
    # The secure port's delegated authentication and authorization (system:auth-delegator).
    Access("create", "tokenreviews", "authentication.k8s.io"),
    Access("create", "subjectaccessreviews", "authorization.k8s.io"),
]

SHIM_MAY_NOT = [
    # Nodes: read through list/watch only.
    Access("delete", "nodes", name="n"),
    Access("deletecollection", "nodes"),
    Access("create", "nodes"),
    Access("update", "nodes", name="n"),
    Access("patch", "nodes", name="n"),
    Access("patch", "nodes", name="n", subresource="status"),
    Access("get", "nodes", name="n", subresource="proxy"),
    # Secrets and other configuration.
    Access("get", "secrets", namespace=NAMESPACE, name="s"),
    Access("list", "secrets", namespace=NAMESPACE),
    Access("list", "secrets"),
    Access("get", "secrets", namespace="kube-system", name="s"),
    Access("watch", "secrets"),
    Access("get", "configmaps", namespace="kube-system", name="c"),
    Access("list", "configmaps"),
    # Pods: nothing beyond binding, status and a victim's deletion.
    Access("create", "pods", namespace="default"),
    Access("update", "pods", namespace="default", name="p"),
    Access("patch", "pods", namespace="default", name="p"),
    Access("deletecollection", "pods", namespace="default"),
    Access("update", "pods", namespace="default", name="p", subresource="status"),
    Access("create", "pods", namespace="default", name="p", subresource="eviction"),
    Access("create", "pods", namespace="default", name="p", subresource="exec"),
    Access("get", "pods", namespace="default", name="p", subresource="log"),
    Access("update", "pods", namespace="default", name="p", subresource="ephemeralcontainers"),
    # Leases: only its own, only get and update.
    Access("get", "leases", "coordination.k8s.io", "kube-system", "kube-scheduler"),
    Access("update", "leases", "coordination.k8s.io", "kube-system", "kube-scheduler"),
    Access("get", "leases", "coordination.k8s.io", NAMESPACE, "someone-else"),
    Access("update", "leases", "coordination.k8s.io", NAMESPACE, "someone-else"),
    Access("delete", "leases", "coordination.k8s.io", NAMESPACE, LEASE),
    Access("patch", "leases", "coordination.k8s.io", NAMESPACE, LEASE),
    Access("list", "leases", "coordination.k8s.io", NAMESPACE),
    Access("watch", "leases", "coordination.k8s.io", NAMESPACE),
    Access("create", "leases", "coordination.k8s.io", "kube-system"),
    Access("get", "leases", "coordination.k8s.io", "kube-system", LEASE),
    # Events: the events.k8s.io writes it makes, nothing else.
    Access("create", "events", namespace="default"),
    Access("update", "events", "events.k8s.io", namespace="default", name="e"),
    Access("delete", "events", "events.k8s.io", namespace="default", name="e"),
    # No escalation paths.
    Access("create", "clusterrolebindings", "rbac.authorization.k8s.io"),
    Access("bind", "clusterroles", "rbac.authorization.k8s.io", name="cluster-admin"),
    Access("escalate", "clusterroles", "rbac.authorization.k8s.io", name="berth-scheduler"),
    Access("impersonate", "serviceaccounts", namespace=NAMESPACE, name=SHIM_SA),
    Access("create", "serviceaccounts", namespace=NAMESPACE, name=SHIM_SA, subresource="token"),
    Access("create", "deployments", "apps", namespace=NAMESPACE),
    Access("update", "deployments", "apps", namespace=NAMESPACE, name="berth-scheduler"),
    # Volumes: read and patched, never updated, created or deleted.
    Access("update", "persistentvolumes", name="pv"),
    Access("delete", "persistentvolumes", name="pv"),
    Access("create", "persistentvolumes"),
    Access("update", "persistentvolumeclaims", namespace="default", name="pvc"),
    Access("delete", "persistentvolumeclaims", namespace="default", name="pvc"),
    Access(
        "patch", "persistentvolumeclaims", namespace="default", name="pvc", subresource="status"
    ),
    Access("patch", "storageclasses", "storage.k8s.io", name="sc"),
    Access("patch", "volumeattachments", "storage.k8s.io", name="va"),
    Access("get", "csinodes", "storage.k8s.io", name="n"),
    Access("get", "persistentvolumes", name="pv"),
    # DRA objects: claims read, patched, created and deleted (above), never
    # updated; classes and slices only read.
    Access("update", "resourceclaims", "resource.k8s.io", namespace="default", name="c"),
    Access(
        "update",
        "resourceclaims",
        "resource.k8s.io",
        namespace="default",
        name="c",
        subresource="status",
    ),
    Access("patch", "deviceclasses", "resource.k8s.io", name="d"),
    Access("patch", "resourceslices", "resource.k8s.io", name="s"),
    Access("list", "resourceclaimtemplates", "resource.k8s.io"),
    # PDBs are read, never written (preemption only checks them).
    Access("get", "poddisruptionbudgets", "policy", namespace="default", name="b"),
    Access("patch", "poddisruptionbudgets", "policy", namespace="default", name="b"),
    # The cross-pod plugins' reads are list/watch only.
    Access("get", "services", namespace="default", name="s"),
    Access("update", "namespaces", name="default"),
    # What the plugin components add, absent from the base.
    Access("list", "nodes", "metrics.k8s.io"),
    Access("list", "podgroups", "scheduling.x-k8s.io"),
    Access("list", "podgroups", "scheduling.k8s.io"),
]


def check(client: KubeApi, cases: list[Access], want: bool) -> list[str]:
    return [f"{a}: {'denied' if want else 'allowed'}" for a in cases if allowed(client, a) != want]


def test_shim_role_allows_what_it_calls_and_nothing_else(shim_kubeconfig: Path) -> None:
    with KubeApi.from_kubeconfig(shim_kubeconfig) as client:
        who = client.create(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
        assert who["status"]["userInfo"]["username"] == (
            f"system:serviceaccount:{NAMESPACE}:{SHIM_SA}"
        )
        wrong = check(client, SHIM_MAY, True) + check(client, SHIM_MAY_NOT, False)
    assert not wrong, "\n".join(wrong)


def test_kubectl_auth_can_i_agrees(cluster: Cluster, installed: list[JSON]) -> None:
    """The same questions as an operator asks them, by impersonation."""
    who = f"system:serviceaccount:{NAMESPACE}:{SHIM_SA}"

    def can_i(*args: str) -> str:
        out = kubectl(
            ["auth", "can-i", f"--as={who}", *args], kubeconfig=cluster.kubeconfig, check=False
        )
        return out.stdout.strip()

    assert can_i("create", "pods", "--subresource=binding", "-n", "default") == "yes"
    assert can_i("patch", "pods", "--subresource=status", "-n", "default") == "yes"
    assert can_i("update", f"leases.coordination.k8s.io/{LEASE}", "-n", NAMESPACE) == "yes"
    assert can_i("delete", "nodes") == "no"
    assert can_i("get", "secrets", "-n", "kube-system") == "no"
    assert can_i("patch", "pods", "-n", "default") == "no"
    assert can_i("delete", "pods", "-n", "default") == "yes"
    assert can_i("deletecollection", "pods", "-n", "default") == "no"
    assert can_i("update", "leases.coordination.k8s.io/kube-scheduler", "-n", "kube-system") == "no"


def test_plugin_server_account_may_do_nothing(server_kubeconfig: Path) -> None:
    with KubeApi.from_kubeconfig(server_kubeconfig) as client:
        wrong = check(client, SHIM_MAY, False) + check(client, SHIM_MAY_NOT, False)
    assert not wrong, "\n".join(wrong)


def test_components_grant_their_verbs_only_once_applied(
    kube: KubeApi, cluster: Cluster, shim_kubeconfig: Path
) -> None:
    extra = {
        "rbac-node-metrics": [Access("list", "nodes", "metrics.k8s.io")],
        "rbac-podgroups": [
            Access("list", "podgroups", "scheduling.x-k8s.io"),
            Access("watch", "podgroups", "scheduling.x-k8s.io"),
        ],
        "rbac-pod-patch": [Access("patch", "pods", namespace="default", name="p")],
        "rbac-workload-podgroups": [
            Access("list", "podgroups", "scheduling.k8s.io"),
            Access("watch", "podgroups", "scheduling.k8s.io"),
        ],
        "rbac-kubevirt-owners": [
            Access("list", "virtualmachineinstances", "kubevirt.io"),
            Access("watch", "virtualmachines", "kubevirt.io"),
            Access("patch", "virtualmachines", "kubevirt.io", namespace="default", name="vm"),
        ],
    }
    comps = {c.name: c for c in component_dirs()}
    assert set(extra) == set(comps), f"components: {sorted(comps)}; add the new one here"
    docs = [d for name in extra for d in render(comps[name])]
    with KubeApi.from_kubeconfig(shim_kubeconfig) as client:
        grants = [a for cases in extra.values() for a in cases]
        assert check(client, grants, False) == []
        kubectl(["apply", "-f", "-"], kubeconfig=cluster.kubeconfig, stdin=yaml.safe_dump_all(docs))
        try:
            # The authorizer sees RBAC changes through its informers: a moment's delay.
            deadline = time.monotonic() + 20
            while (wrong := check(client, grants, True)) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert not wrong, "\n".join(wrong)
            # Still nothing beyond what each component names.
            assert (
                check(client, [Access("deletecollection", "pods", namespace="default")], False)
                == []
            )
            assert check(client, [Access("watch", "nodes", "metrics.k8s.io")], False) == []
            assert (
                # PodGroups of the Workload API are read, never written (the plugin writes
                # nothing; upstream's scheduler writes their status, Berth does not).
                check(
                    client,
                    [
                        Access("patch", "podgroups", "scheduling.k8s.io", "default", "g"),
                        Access("update", "workloads", "scheduling.k8s.io", "default", "w"),
                        Access("list", "workloads", "scheduling.k8s.io"),
                    ],
                    False,
                )
                == []
            )
            assert (
                # The base role patches claims (DynamicResources); it never updates them.
                check(client, [Access("update", "resourceclaims", "resource.k8s.io")], False) == []
            )
            assert (
                check(
                    client,
                    [Access("patch", "virtualmachineinstances", "kubevirt.io", "default", "v")],
                    False,
                )
                == []
            )
        finally:
            delete_objects(kube, cluster.kubeconfig, docs)
