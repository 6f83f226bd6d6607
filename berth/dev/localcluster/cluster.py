"""A local control plane: etcd (data on tmpfs), kube-apiserver and kube-controller-manager on
loopback.

Authentication is client certificates (an admin kubeconfig is written to the state dir),
authorization is Node,RBAC, service-account tokens are signed by a generated key.
kube-controller-manager runs the controllers tests need (`controllers.DEFAULT_CONTROLLERS`:
claim templates, PV binding, ReplicaSets, garbage collection, ...; ``ClusterConfig.controllers``
picks others, or none). There is no kubelet, so two admission plugins that only make sense with
one are off, as in upstream's own scheduler integration tests (test/integration/framework):
ServiceAccount (would give every pod a projected token volume for a kubelet to mount, and refuse
pods until a controller made the "default" ServiceAccount) and TaintNodesByCondition (would
taint every new node not-ready, forever).

Everything about a running cluster is recorded in ``<state dir>/state.json``: the processes
(pid, binary, start time), ports, paths. `stop_cluster` stops only the processes recorded
there, and only after checking each pid is still the process that was started.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from berth.dev.localcluster import binaries, controllers, pki
from berth.dev.localcluster.errors import (
    LocalClusterError,
    NotReadyError,
    PortInUseError,
    ProcessExitedError,
    StateError,
)
from berth.dev.localcluster.ports import LOOPBACK, PortRequest, choose_ports, free_port
from berth.dev.localcluster.process import (
    ProcessRecord,
    cmdline,
    is_ours,
    log_tail,
    spawn,
    stop,
    wait_until,
)
from berth.kube.config import ConfigurationError, load_configuration
from berth.kube.errors import ApiError
from berth.kube.rest import KubeApi

USER_AGENT = "berth-localcluster"

log = logging.getLogger(__name__)

DEFAULT_APISERVER_PORT = 6443
DEFAULT_ETCD_CLIENT_PORT = 2379
DEFAULT_ETCD_PEER_PORT = 2380
DEFAULT_READY_TIMEOUT = 120.0
# kube-apiserver flags that serve Kubernetes v1.36's alpha Workload API
# (scheduling.k8s.io/v1alpha2 Workload and PodGroup, pod.spec.schedulingGroup):
# the group version, and the GenericWorkload feature gate (pkg/features/kube_features.go)
# that gates the API and the pod field. For the GangScheduling plugin.
WORKLOAD_API_ARGS: tuple[str, ...] = (
    "--runtime-config=scheduling.k8s.io/v1alpha2=true",
    "--feature-gates=GenericWorkload=true",
)
STATE_FILE = "state.json"
SERVICE_CIDR = "10.0.0.0/24"
SERVICE_IP = "10.0.0.1"
DISABLED_ADMISSION = ("ServiceAccount", "TaintNodesByCondition")

AUDIT_POLICY_FILE = "audit-policy.yaml"
AUDIT_LOG = "audit.log"  # under <state dir>/logs

# An audit policy (audit.k8s.io/v1) that records the writes a scheduler makes to pods, at
# Metadata level: who (user, userAgent), when (requestReceivedTimestamp, stageTimestamp),
# what (verb, objectRef) and the answer (responseStatus). Bindings (pods/binding create),
# pod deletions (preemption), pod status updates and events; nothing else.
SCHEDULER_WRITES_AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    verbs: [create]
    resources: [{group: "", resources: [pods/binding]}]
  - level: Metadata
    verbs: [delete, deletecollection]
    resources: [{group: "", resources: [pods]}]
  - level: Metadata
    verbs: [patch, update]
    resources: [{group: "", resources: [pods/status]}]
  - level: Metadata
    verbs: [create, patch, update]
    resources: [{group: "", resources: [events]}, {group: events.k8s.io, resources: [events]}]
  - level: None
"""


def default_state_dir() -> Path:
    override = os.environ.get("BERTH_CLUSTER_DIR")
    return Path(override) if override else binaries.cache_root() / "cluster"


def default_data_root() -> Path:
    """tmpfs for etcd's data: fast, and gone with the machine; falls back to the temp dir."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


@dataclass(frozen=True)
class Cluster:
    """What a client of a running cluster needs."""

    kubeconfig: Path
    server: str
    # A kubeconfig for user system:kube-scheduler, when we hold the CA (local clusters).
    scheduler_kubeconfig: Path | None = None

    def client(self, **kwargs: Any) -> KubeApi:
        return kube_client(self.kubeconfig, **kwargs)

    @classmethod
    def from_kubeconfig(cls, kubeconfig: Path) -> Cluster:
        """An existing cluster (e.g. BERTH_KUBECONFIG); its admin identity is used for all.
        Raises ConfigurationError naming the file when it is missing or invalid."""
        return cls(kubeconfig=kubeconfig, server=load_configuration(kubeconfig).host)


def kube_client(kubeconfig: Path, **kwargs: Any) -> KubeApi:
    """An API client for the identity of ``kubeconfig``, its writes not rate-limited (a test
    or a benchmark creates objects as fast as the API server takes them); ``kwargs``: more
    `KubeApi.from_kubeconfig` arguments (``pool_size``)."""
    return KubeApi.from_kubeconfig(kubeconfig, qps=0, user_agent=USER_AGENT, **kwargs)


@dataclass(frozen=True)
class ClusterConfig:
    state_dir: Path = field(default_factory=default_state_dir)
    bin_dir: Path | None = None  # None: the build cache for the pinned version
    build_if_missing: bool = False
    # Explicit ports must be free; None means "the default if free, else any free port".
    apiserver_port: int | None = None
    etcd_client_port: int | None = None
    etcd_peer_port: int | None = None
    default_apiserver_port: int = DEFAULT_APISERVER_PORT
    default_etcd_client_port: int = DEFAULT_ETCD_CLIENT_PORT
    default_etcd_peer_port: int = DEFAULT_ETCD_PEER_PORT
    data_root: Path = field(default_factory=default_data_root)
    ready_timeout: float = DEFAULT_READY_TIMEOUT  # per component
    apiserver_ready_timeout: float | None = None  # None: ready_timeout
    # Processes get SIGKILL if the Python process that started them dies (tests, benchmarks).
    die_with_parent: bool = False
    apiserver_args: tuple[str, ...] = ()
    etcd_args: tuple[str, ...] = ()
    # An audit policy (YAML); kube-apiserver then writes its audit events as JSON lines to
    # <state dir>/logs/audit.log (``audit_log_path``). "" (the default): no audit log.
    audit_policy: str = ""
    # kube-controller-manager's --controllers (names as its --help lists them); () runs no
    # kube-controller-manager. A test that plays a controller's part itself (sets PV phases,
    # finalizes namespaces) leaves that controller out here.
    controllers: tuple[str, ...] = controllers.DEFAULT_CONTROLLERS
    controller_manager_args: tuple[str, ...] = ()


def audit_log_path(state_dir: Path) -> Path:
    """Where kube-apiserver writes its audit events when ``audit_policy`` is set."""
    return state_dir / "logs" / AUDIT_LOG


def read_audit_log(state_dir: Path) -> list[dict[str, Any]]:
    """The audit events written so far, oldest first."""
    path = audit_log_path(state_dir)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass(frozen=True)
class ClusterState:
    """Contents of state.json."""

    state_dir: Path
    kubeconfig: Path
    scheduler_kubeconfig: Path
    server: str
    apiserver_port: int
    etcd_client_port: int
    etcd_peer_port: int
    data_dir: Path
    bin_dir: Path
    kubernetes_version: str
    etcd_version: str
    started_at: str
    processes: tuple[ProcessRecord, ...]
    controllers: tuple[str, ...] = ()  # what kube-controller-manager runs; () none
    controller_manager_port: int | None = None

    @property
    def cluster(self) -> Cluster:
        return Cluster(self.kubeconfig, self.server, self.scheduler_kubeconfig)

    def to_json(self) -> dict[str, Any]:
        return {
            "state_dir": str(self.state_dir),
            "kubeconfig": str(self.kubeconfig),
            "scheduler_kubeconfig": str(self.scheduler_kubeconfig),
            "server": self.server,
            "apiserver_port": self.apiserver_port,
            "etcd_client_port": self.etcd_client_port,
            "etcd_peer_port": self.etcd_peer_port,
            "data_dir": str(self.data_dir),
            "bin_dir": str(self.bin_dir),
            "kubernetes_version": self.kubernetes_version,
            "etcd_version": self.etcd_version,
            "started_at": self.started_at,
            "processes": [p.to_json() for p in self.processes],
            "controllers": list(self.controllers),
            "controller_manager_port": self.controller_manager_port,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClusterState:
        try:
            return cls(
                state_dir=Path(data["state_dir"]),
                kubeconfig=Path(data["kubeconfig"]),
                scheduler_kubeconfig=Path(data["scheduler_kubeconfig"]),
                server=str(data["server"]),
                apiserver_port=int(data["apiserver_port"]),
                etcd_client_port=int(data["etcd_client_port"]),
                etcd_peer_port=int(data["etcd_peer_port"]),
                data_dir=Path(data["data_dir"]),
                bin_dir=Path(data["bin_dir"]),
                kubernetes_version=str(data["kubernetes_version"]),
                etcd_version=str(data["etcd_version"]),
                started_at=str(data["started_at"]),
                processes=tuple(ProcessRecord.from_json(p) for p in data["processes"]),
                controllers=tuple(str(c) for c in data.get("controllers") or ()),
                controller_manager_port=(
                    int(data["controller_manager_port"])
                    if data.get("controller_manager_port") is not None
                    else None
                ),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise StateError(f"malformed cluster state: {err}") from err


def read_state(state_dir: Path) -> ClusterState | None:
    path = state_dir / STATE_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as err:
        raise StateError(
            f"cannot read {path}: {err}; if no cluster is running, delete that file"
        ) from err
    return ClusterState.from_json(data)


def _write_state(state: ClusterState) -> None:
    path = state.state_dir / STATE_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state.to_json(), indent=2) + "\n")
    tmp.replace(path)


def _api_ready(api: KubeApi, timeout: float = 2.0) -> bool:
    try:
        api.probe("/readyz", timeout=timeout)
    except ApiError:
        return False
    return True


def _http_ok(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


ETCD_DATA_PREFIX = "berth-etcd-"


def remove_orphaned_data_dirs(data_root: Path, *, min_age: float = 60.0) -> list[Path]:
    """Delete ``berth-etcd-*`` dirs in ``data_root`` that no running process names.

    They are left behind when a cluster's owner died without stopping it (its processes were
    killed with it, see ClusterConfig.die_with_parent) and would otherwise hold tmpfs memory.
    Dirs younger than ``min_age`` seconds are spared: another cluster may be starting.
    """
    if not data_root.is_dir():
        return []
    in_use = "".join(" ".join(cmdline(pid)) + " " for pid in _all_pids())
    now = time.time()
    removed = []
    for candidate in data_root.glob(f"{ETCD_DATA_PREFIX}*"):
        try:
            age = now - candidate.stat().st_mtime
        except FileNotFoundError:
            continue
        if candidate.is_dir() and age >= min_age and f"--data-dir={candidate} " not in in_use:
            shutil.rmtree(candidate, ignore_errors=True)
            removed.append(candidate)
    return removed


def _all_pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


class _Starter:
    """One start attempt: remembers what it spawned so a failure can undo all of it."""

    def __init__(self, config: ClusterConfig) -> None:
        self.config = config
        self.spawned: list[tuple[subprocess.Popen[bytes], ProcessRecord]] = []
        self.data_dir: Path | None = None

    def spawn(self, name: str, argv: list[str], log_path: Path) -> ProcessRecord:
        proc, record = spawn(name, argv, log_path, die_with_parent=self.config.die_with_parent)
        self.spawned.append((proc, record))
        return record

    def exited(self, name: str) -> str | None:
        for proc, record in self.spawned:
            if record.name == name and proc.poll() is not None:
                return f"{name} exited with code {proc.returncode}"
        return None

    def wait_ready(
        self,
        name: str,
        check: Callable[[], bool],
        endpoint: str,
        record: ProcessRecord,
        timeout: float,
    ) -> None:
        ready, why = wait_until(check, timeout=timeout, abort=lambda: self.exited(name))
        if ready:
            log.info("%s ready at %s", name, endpoint)
            return
        tail = log_tail(record.log_path)
        if why is not None:
            if "address already in use" in tail:
                raise PortInUseError(
                    f"{name} could not listen (a port was taken after berth checked it): "
                    f"{why}. Last lines of {record.log_path}:\n{tail}\nRun the command again; "
                    "berth will pick other free ports"
                )
            raise ProcessExitedError(
                f"{why} while starting. Last lines of {record.log_path}:\n{tail}"
            )
        raise NotReadyError(
            f"{name} was not ready at {endpoint} within {timeout:g}s "
            f"(pid {record.pid}, stopped now). Last lines of {record.log_path}:\n{tail}\n"
            "If the machine is just slow, raise the timeout (--timeout / ready_timeout)"
        )

    def wait_controllers(
        self, record: ProcessRecord, port: int, names: tuple[str, ...], timeout: float
    ) -> None:
        """Wait until kube-controller-manager's /healthz passes with every controller built;
        a controller it did not start (a misspelt name, one its feature gate turns off) is
        an error naming it."""
        url = controllers.healthz_url(port)
        report: list[str] = []

        def check() -> bool:
            text = controllers.healthz(url)
            if text is None or not controllers.started(text):
                return False
            report.append(text)
            return True

        self.wait_ready(controllers.BINARY, check, url, record, timeout)
        missing = controllers.not_started(report[-1], names)
        if missing:
            raise NotReadyError(
                f"kube-controller-manager did not start {', '.join(missing)} (stopped now); "
                f"controller names are those `{controllers.BINARY} --help` lists under "
                f"--controllers. Last lines of {record.log_path}:\n{log_tail(record.log_path)}"
            )

    def undo(self) -> None:
        for proc, record in reversed(self.spawned):
            log.info("%s", stop(record))
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1)  # reap, so no zombie stays behind
        if self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)


def start_cluster(config: ClusterConfig) -> ClusterState:
    """Start etcd, kube-apiserver (waiting for /readyz) and, unless ``config.controllers`` is
    empty, kube-controller-manager (waiting for /healthz with every controller built); on
    failure leave nothing running.

    Raises BinaryMissingError, PortInUseError, ProcessExitedError, NotReadyError, StateError.
    """
    state_dir = config.state_dir
    existing = read_state(state_dir)
    if existing is not None:
        if all(is_ours(p) for p in existing.processes):
            raise StateError(
                f"a cluster is already running from {state_dir} ({existing.server}); "
                "use it (berth cluster env) or stop it first (berth cluster down)"
            )
        log.warning("cluster state in %s is stale; cleaning up before starting", state_dir)
        stop_cluster(state_dir)

    bin_dir = binaries.ensure_binaries(config.bin_dir, build=config.build_if_missing)
    versions = binaries.pinned_versions()
    api_port, etcd_client, etcd_peer = choose_ports(
        [
            PortRequest(
                "kube-apiserver secure port", config.default_apiserver_port, config.apiserver_port
            ),
            PortRequest(
                "etcd client port", config.default_etcd_client_port, config.etcd_client_port
            ),
            PortRequest("etcd peer port", config.default_etcd_peer_port, config.etcd_peer_port),
        ]
    )
    state_dir.mkdir(parents=True, exist_ok=True)
    logs = state_dir / "logs"
    logs.mkdir(exist_ok=True)
    server = f"https://{LOOPBACK}:{api_port}"
    certs = pki.generate_pki(state_dir / "pki", service_ip=SERVICE_IP)
    kubeconfig = pki.write_kubeconfig(
        state_dir / "kubeconfig",
        server=server,
        ca=certs.ca.cert,
        client=certs.admin,
        user=pki.ADMIN_USER,
    )
    scheduler_kubeconfig = pki.write_kubeconfig(
        state_dir / "kube-scheduler.kubeconfig",
        server=server,
        ca=certs.ca.cert,
        client=certs.scheduler,
        user=pki.SCHEDULER_USER,
    )
    controller_manager_kubeconfig = pki.write_kubeconfig(
        state_dir / "kube-controller-manager.kubeconfig",
        server=server,
        ca=certs.ca.cert,
        client=certs.controller_manager,
        user=pki.CONTROLLER_MANAGER_USER,
    )

    audit_args: list[str] = []
    if config.audit_policy:
        policy = state_dir / AUDIT_POLICY_FILE
        policy.write_text(config.audit_policy)
        audit_args = [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={audit_log_path(state_dir)}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",
        ]

    starter = _Starter(config)
    try:
        config.data_root.mkdir(parents=True, exist_ok=True)
        for orphan in remove_orphaned_data_dirs(config.data_root):
            log.warning("removed %s, left behind by a cluster whose owner died", orphan)
        starter.data_dir = Path(tempfile.mkdtemp(prefix=ETCD_DATA_PREFIX, dir=config.data_root))
        etcd_url = f"http://{LOOPBACK}:{etcd_client}"
        peer_url = f"http://{LOOPBACK}:{etcd_peer}"
        etcd = starter.spawn(
            "etcd",
            [
                str(bin_dir / "etcd"),
                "--name=berth",
                f"--data-dir={starter.data_dir}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=berth={peer_url}",
                "--initial-cluster-state=new",
                "--unsafe-no-fsync",  # the data is on tmpfs anyway
                "--quota-backend-bytes=8589934592",
                "--log-level=warn",
                *config.etcd_args,
            ],
            logs / "etcd.log",
        )
        starter.wait_ready(
            "etcd",
            lambda: _http_ok(f"{etcd_url}/health"),
            f"{etcd_url}/health",
            etcd,
            config.ready_timeout,
        )

        apiserver = starter.spawn(
            "kube-apiserver",
            [
                str(bin_dir / "kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                f"--bind-address={LOOPBACK}",
                f"--advertise-address={LOOPBACK}",
                f"--secure-port={api_port}",
                f"--tls-cert-file={certs.apiserver.cert}",
                f"--tls-private-key-file={certs.apiserver.key}",
                f"--client-ca-file={certs.ca.cert}",
                "--authorization-mode=Node,RBAC",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={certs.service_account_pub}",
                f"--service-account-signing-key-file={certs.service_account_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--disable-admission-plugins={','.join(DISABLED_ADMISSION)}",
                "--allow-privileged=true",
                "--profiling=false",
                # The "kubernetes" Service cannot point at a loopback address; skip it.
                "--endpoint-reconciler-type=none",
                *audit_args,
                *config.apiserver_args,
            ],
            logs / "kube-apiserver.log",
        )
        with kube_client(kubeconfig, pool_size=1) as admin:
            starter.wait_ready(
                "kube-apiserver",
                lambda: _api_ready(admin),
                f"{server}/readyz",
                apiserver,
                config.apiserver_ready_timeout or config.ready_timeout,
            )
        kcm_port: int | None = None
        if config.controllers:
            kcm_port = free_port(avoid=frozenset((api_port, etcd_client, etcd_peer)))
            kcm = starter.spawn(
                controllers.BINARY,
                controllers.argv(
                    bin_dir,
                    kubeconfig=controller_manager_kubeconfig,
                    port=kcm_port,
                    service_account_key=certs.service_account_key,
                    root_ca=certs.ca.cert,
                    controllers=config.controllers,
                    extra_args=config.controller_manager_args,
                ),
                logs / "kube-controller-manager.log",
            )
            starter.wait_controllers(kcm, kcm_port, config.controllers, config.ready_timeout)
        state = ClusterState(
            state_dir=state_dir,
            kubeconfig=kubeconfig,
            scheduler_kubeconfig=scheduler_kubeconfig,
            server=server,
            apiserver_port=api_port,
            etcd_client_port=etcd_client,
            etcd_peer_port=etcd_peer,
            data_dir=starter.data_dir,
            bin_dir=bin_dir,
            kubernetes_version=versions.kubernetes,
            etcd_version=versions.etcd,
            started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            processes=tuple(record for _, record in starter.spawned),
            controllers=config.controllers,
            controller_manager_port=kcm_port,
        )
        _write_state(state)
        return state
    except BaseException:
        starter.undo()
        raise


def stop_cluster(state_dir: Path) -> list[str]:
    """Stop what state.json records (only pids that are still ours); remove etcd's data.

    Returns one line per action, for the user. Raises StateError if nothing is recorded.
    """
    state = read_state(state_dir)
    if state is None:
        raise StateError(f"no cluster recorded in {state_dir} (nothing to stop)")
    done = [stop(p) for p in reversed(state.processes)]
    if state.data_dir.exists():
        shutil.rmtree(state.data_dir, ignore_errors=True)
        done.append(f"removed etcd data {state.data_dir}")
    (state_dir / STATE_FILE).unlink(missing_ok=True)
    return done


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    pid: int
    running: bool


@dataclass(frozen=True)
class ClusterStatus:
    state: ClusterState
    components: tuple[ComponentStatus, ...]
    ready: bool  # /readyz answered 200
    # kube-controller-manager's /healthz answered 200; None when it does not run.
    controllers_healthy: bool | None = None

    @property
    def healthy(self) -> bool:
        return (
            self.ready
            and all(c.running for c in self.components)
            and self.controllers_healthy is not False
        )


def cluster_status(state_dir: Path) -> ClusterStatus | None:
    """None if no cluster is recorded; otherwise each process's liveness, the API server's
    /readyz and kube-controller-manager's /healthz."""
    state = read_state(state_dir)
    if state is None:
        return None
    components = tuple(ComponentStatus(p.name, p.pid, is_ours(p)) for p in state.processes)
    ready = False
    with contextlib.suppress(ConfigurationError), kube_client(state.kubeconfig, pool_size=1) as api:
        ready = _api_ready(api)
    controllers_healthy = None
    if state.controller_manager_port is not None:
        url = controllers.healthz_url(state.controller_manager_port)
        controllers_healthy = controllers.healthz(url) is not None
    return ClusterStatus(
        state=state,
        components=components,
        ready=ready,
        controllers_healthy=controllers_healthy,
    )


class LocalCluster:
    """Context manager around start_cluster/stop_cluster, for tests and benchmarks."""

    def __init__(self, config: ClusterConfig) -> None:
        self.config = config
        self._state: ClusterState | None = None

    @property
    def state(self) -> ClusterState:
        if self._state is None:
            raise LocalClusterError("the local cluster is not started")
        return self._state

    @property
    def cluster(self) -> Cluster:
        return self.state.cluster

    def start(self) -> ClusterState:
        self._state = start_cluster(self.config)
        return self._state

    def stop(self) -> list[str]:
        if self._state is None:
            return []
        self._state = None
        return stop_cluster(self.config.state_dir)

    def restart_apiserver(
        self,
        down_for: float = 0.0,
        timeout: float = 60.0,
        while_down: Callable[[], None] | None = None,
        crash: bool = False,
    ) -> None:
        """Stop kube-apiserver (SIGTERM, as an upgrade would; SIGKILL with ``crash``), keep it down
        for ``down_for`` seconds (running ``while_down`` meanwhile, e.g. to touch etcd),
        start it again with the same arguments and wait until it serves. etcd and its data
        stay: clients see an API server restart, watches break."""
        import dataclasses
        import signal

        state = self.state
        index, record = next(
            (i, p) for i, p in enumerate(state.processes) if p.name == "kube-apiserver"
        )
        argv = [
            a.decode() for a in Path(f"/proc/{record.pid}/cmdline").read_bytes().split(b"\0") if a
        ]
        os.kill(record.pid, signal.SIGKILL if crash else signal.SIGTERM)
        deadline = time.monotonic() + 60
        while Path(f"/proc/{record.pid}").exists() and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(record.pid, os.WNOHANG)
            time.sleep(0.05)
        if Path(f"/proc/{record.pid}").exists():
            os.kill(record.pid, signal.SIGKILL)
        if while_down is not None:
            while_down()
        time.sleep(down_for)
        _, new = spawn(
            "kube-apiserver",
            argv,
            Path(record.log_path),
            die_with_parent=self.config.die_with_parent,
        )
        processes = list(state.processes)
        processes[index] = new
        self._state = dataclasses.replace(state, processes=tuple(processes))
        _write_state(self._state)
        client = self.cluster.client()
        deadline = time.monotonic() + timeout
        while True:
            try:
                client.get("/api/v1/namespaces/default")
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise NotReadyError(
                        f"kube-apiserver did not come back within {timeout:g}s; see {record.log_path}"
                    ) from None
                time.sleep(0.2)

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
