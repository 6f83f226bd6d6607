"""A real local control plane for integration tests and benchmarks.

- `start_cluster` / `stop_cluster` / `LocalCluster`: etcd (data on tmpfs) and kube-apiserver
  on loopback, client-certificate authentication and RBAC, built from upstream Go modules by
  ``hack/build-k8s.sh``. ``berth cluster up|down|status|env`` drives the same code.
- `start_kube_scheduler`: upstream kube-scheduler against a cluster, the performance baseline.
- `objects`: fake nodes and pods at volume, with no kubelet (`objects.node`, `objects.pod`,
  `objects.create_nodes`, `objects.create_pods`, `objects.delete_pods`, ...).
- `kube_client`: a cluster's API client, `berth.kube.rest.KubeApi` without a rate limit.
"""

from berth.dev.localcluster import objects
from berth.dev.localcluster.binaries import (
    Versions,
    default_bin_dir,
    ensure_binaries,
    pinned_versions,
)
from berth.dev.localcluster.cluster import (
    Cluster,
    ClusterConfig,
    ClusterState,
    ClusterStatus,
    LocalCluster,
    cluster_status,
    default_state_dir,
    kube_client,
    read_state,
    start_cluster,
    stop_cluster,
)
from berth.dev.localcluster.errors import (
    BinaryMissingError,
    LocalClusterError,
    NotReadyError,
    PortInUseError,
    ProcessExitedError,
    StateError,
)
from berth.dev.localcluster.scheduler import KubeScheduler, start_kube_scheduler

__all__ = [
    "BinaryMissingError",
    "Cluster",
    "ClusterConfig",
    "ClusterState",
    "ClusterStatus",
    "KubeScheduler",
    "LocalCluster",
    "LocalClusterError",
    "NotReadyError",
    "PortInUseError",
    "ProcessExitedError",
    "StateError",
    "Versions",
    "cluster_status",
    "default_bin_dir",
    "default_state_dir",
    "ensure_binaries",
    "kube_client",
    "objects",
    "pinned_versions",
    "read_state",
    "start_cluster",
    "start_kube_scheduler",
    "stop_cluster",
]
