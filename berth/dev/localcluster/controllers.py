"""kube-controller-manager for the local control plane: which controllers, its flags, its health.

The controllers are named as ``kube-controller-manager --help`` lists them (``--controllers``).
`DEFAULT_CONTROLLERS` are the ones a cluster's tests and demos need from a control plane with no
kubelet; the others are left out on purpose (see the comments below). A caller that wants a
control plane without some controller (a test that sets PV phases by hand, say) passes its own
list in ``ClusterConfig.controllers``; an empty list runs no kube-controller-manager at all.

The process runs as a cluster's does (kubeadm's static pod): its own client certificate
(``system:kube-controller-manager``, bound by the API server's bootstrap RBAC policy), one
service account per controller with tokens from the TokenRequest API
(``--use-service-account-credentials``, so each controller has only its bootstrap role), the
service-account signing key and the cluster CA (``--service-account-private-key-file``,
``--root-ca-file``), and no feature gate beyond v1.36's defaults. Leader election is off: there
is one instance.
"""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from berth.dev.localcluster.ports import LOOPBACK

BINARY = "kube-controller-manager"

# What each default controller is for (pkg/controller/... of k8s.io/kubernetes v1.36.3):
DEFAULT_CONTROLLERS: tuple[str, ...] = (
    # ResourceClaimTemplates in a pod's spec.resourceClaims become generated claims, named in
    # pod.status.resourceClaimStatuses; a claim's reservedFor loses pods that are gone, and a
    # claim nobody uses is deallocated (pkg/controller/resourceclaim).
    "resourceclaim-controller",
    # PersistentVolumeClaims bind to volumes (Immediate claims at once, WaitForFirstConsumer
    # ones once the scheduler picked a volume or a node) and volumes get their phase.
    "persistentvolume-binder-controller",
    # The StorageObjectInUseProtection admission plugin (on by default) puts the
    # kubernetes.io/pvc-protection and pv-protection finalizers on every claim and volume;
    # these remove them once nothing uses the object, so deletions complete.
    "persistentvolumeclaim-protection-controller",
    "persistentvolume-protection-controller",
    # Generic ephemeral volumes (pod.spec.volumes[].ephemeral) get their claim.
    "ephemeral-volume-controller",
    # Deployments make ReplicaSets, ReplicaSets make pods.
    "deployment-controller",
    "replicaset-controller",
    # Dependents go with their owner: a ReplicaSet's pods, a pod's generated ResourceClaims.
    "garbage-collector-controller",
    # A deleted namespace's objects are deleted, then the namespace.
    "namespace-controller",
)
# Left out, on purpose:
# - node-lifecycle-controller: no kubelet posts node status, so it would mark every node
#   NotReady after --node-monitor-grace-period, taint it unreachable and evict its pods;
#   taint-eviction-controller and device-taint-eviction-controller: they would delete the
#   bound pods tests put on NoExecute-tainted nodes or devices on purpose; pod-garbage-
#   collector-controller: it deletes pods of nodes a test removed; ttl-controller: it
#   annotates every node, and each update is a node event for the schedulers under test.
# - serviceaccount-controller: the ServiceAccount admission plugin is off
#   (cluster.DISABLED_ADMISSION), so pods need no "default" service account, and the
#   controllers' own credentials come from the TokenRequest API. serviceaccount-token-
#   controller (legacy token Secrets) is not asked for either, but kube-controller-manager
#   starts it whenever it has the signing key (controllermanager.go, Run), as in a cluster.
# - everything that needs a cloud, a kubelet, a network or a certificate signer (node-ipam,
#   route, service-lb, endpoints, attach-detach, csr-*, ...), and the workload controllers
#   no test uses (job, cronjob, statefulset, daemonset, disruption, hpa, ...).


def argv(
    bin_dir: Path,
    *,
    kubeconfig: Path,
    port: int,
    service_account_key: Path,
    root_ca: Path,
    controllers: Sequence[str],
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The command line of kube-controller-manager for a local cluster."""
    return [
        str(bin_dir / BINARY),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={port}",
        f"--controllers={','.join(controllers)}",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={service_account_key}",
        f"--root-ca-file={root_ca}",
        "--leader-elect=false",
        "--profiling=false",
        *extra_args,
    ]


def healthz_url(port: int) -> str:
    return f"https://{LOOPBACK}:{port}/healthz?verbose"


def healthz(url: str, timeout: float = 2.0) -> str | None:
    """The verbose /healthz report when it answers 200, else None. /healthz is open to
    anyone (--authorization-always-allow-paths' default); the serving certificate is
    self-signed."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=timeout) as resp:
            if resp.status != 200:
                return None
            return str(resp.read(1 << 20).decode(errors="replace"))
    except (urllib.error.URLError, OSError):
        return None


def started(report: str) -> set[str]:
    """Controllers the report lists: one named check per controller, added together once all
    of them are built (cmd/kube-controller-manager/app/controllermanager.go BuildControllers),
    so an empty set means "not yet"."""
    out: set[str] = set()
    for line in report.splitlines():
        name = line.removeprefix("[+]").removesuffix(" ok")
        if line.startswith("[+]") and name.endswith("-controller"):
            out.add(name)
    return out


def not_started(report: str, controllers: Sequence[str]) -> list[str]:
    """Named controllers (not ``*`` or ``-name``) the report does not list."""
    running = started(report)
    return [c for c in controllers if c[:1] not in ("*", "-") and c not in running]
