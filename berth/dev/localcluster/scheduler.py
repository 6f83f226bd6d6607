"""Upstream kube-scheduler (built by hack/build-k8s.sh) against a cluster: the baseline.

`start_kube_scheduler` takes a KubeSchedulerConfiguration (a file, a dict, or nothing for one
default profile), points its clientConnection at the cluster with the ``system:kube-scheduler``
identity (the admin one for an existing cluster), turns leader election off unless asked, and
waits for the scheduler's /readyz (informers synced) before returning.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from berth.dev.localcluster import binaries
from berth.dev.localcluster.cluster import Cluster
from berth.dev.localcluster.errors import LocalClusterError, NotReadyError, ProcessExitedError
from berth.dev.localcluster.ports import LOOPBACK, free_port
from berth.dev.localcluster.process import ProcessRecord, log_tail, spawn, stop, wait_until

log = logging.getLogger(__name__)

CONFIG_API_VERSION = "kubescheduler.config.k8s.io/v1"


@dataclass
class KubeScheduler:
    """A running kube-scheduler; stop it with `stop()` or use it as a context manager."""

    record: ProcessRecord
    process: subprocess.Popen[bytes]
    port: int
    config_path: Path
    log_path: Path

    @property
    def pid(self) -> int:
        return self.record.pid

    def stop(self) -> str:
        message = stop(self.record)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=1)
        return message

    def __enter__(self) -> KubeScheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        log.info("%s", self.stop())


def scheduler_config(
    config: Path | Mapping[str, Any] | None,
    *,
    kubeconfig: Path,
    scheduler_name: str,
    qps: float | None,
    burst: int | None,
    leader_elect: bool,
) -> dict[str, Any]:
    """The KubeSchedulerConfiguration to run: ``config`` with our connection settings."""
    if config is None:
        result: dict[str, Any] = {
            "apiVersion": CONFIG_API_VERSION,
            "kind": "KubeSchedulerConfiguration",
            "profiles": [{"schedulerName": scheduler_name}],
        }
    elif isinstance(config, Path):
        try:
            loaded = yaml.safe_load(config.read_text())
        except (OSError, yaml.YAMLError) as err:
            raise LocalClusterError(f"cannot read scheduler config {config}: {err}") from err
        if not isinstance(loaded, dict) or loaded.get("kind") != "KubeSchedulerConfiguration":
            raise LocalClusterError(
                f"{config} is not a KubeSchedulerConfiguration (kind must be "
                "KubeSchedulerConfiguration, apiVersion kubescheduler.config.k8s.io/v1)"
            )
        result = loaded
    else:
        result = copy.deepcopy(dict(config))
    connection = dict(result.get("clientConnection") or {})
    connection["kubeconfig"] = str(kubeconfig)
    if qps is not None:
        connection["qps"] = qps
    if burst is not None:
        connection["burst"] = burst
    result["clientConnection"] = connection
    election = dict(result.get("leaderElection") or {})
    election.setdefault("leaderElect", leader_elect)
    result["leaderElection"] = election
    return result


def _ready(url: str) -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # kube-scheduler serves a self-signed certificate
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=2.0) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def start_kube_scheduler(
    cluster: Cluster,
    work_dir: Path,
    *,
    config: Path | Mapping[str, Any] | None = None,
    scheduler_name: str = "default-scheduler",
    qps: float | None = None,
    burst: int | None = None,
    leader_elect: bool = False,
    bin_dir: Path | None = None,
    ready_timeout: float = 60.0,
    extra_args: Sequence[str] = (),
) -> KubeScheduler:
    """Start kube-scheduler against ``cluster``; files (config, log) go to ``work_dir``.

    ``scheduler_name`` names the single default profile when ``config`` is None. Raises
    BinaryMissingError, ProcessExitedError or NotReadyError (the process is stopped then).
    The scheduler is killed if the calling process dies without stopping it.
    """
    directory = bin_dir or binaries.default_bin_dir()
    binaries.require_binaries(directory, ("kube-scheduler",))
    kubeconfig = cluster.scheduler_kubeconfig or cluster.kubeconfig
    work_dir.mkdir(parents=True, exist_ok=True)
    config_path = work_dir / "kube-scheduler-config.yaml"
    config_path.write_text(
        yaml.safe_dump(
            scheduler_config(
                config,
                kubeconfig=kubeconfig,
                scheduler_name=scheduler_name,
                qps=qps,
                burst=burst,
                leader_elect=leader_elect,
            ),
            sort_keys=False,
        )
    )
    port = free_port()
    log_path = work_dir / "kube-scheduler.log"
    proc, record = spawn(
        "kube-scheduler",
        [
            str(directory / "kube-scheduler"),
            f"--config={config_path}",
            f"--bind-address={LOOPBACK}",
            f"--secure-port={port}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            *extra_args,
        ],
        log_path,
        die_with_parent=True,
    )
    url = f"https://{LOOPBACK}:{port}/readyz"
    ready, why = wait_until(
        lambda: _ready(url),
        timeout=ready_timeout,
        abort=lambda: None if proc.poll() is None else f"exited with code {proc.returncode}",
    )
    if not ready:
        stop(record)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=1)
        tail = log_tail(log_path)
        if why is not None:
            raise ProcessExitedError(
                f"kube-scheduler {why} while starting. Last lines of {log_path}:\n{tail}"
            )
        raise NotReadyError(
            f"kube-scheduler was not ready at {url} within {ready_timeout:g}s (stopped now). "
            f"Last lines of {log_path}:\n{tail}"
        )
    log.info("kube-scheduler ready (pid %d, %s)", proc.pid, url)
    return KubeScheduler(
        record=record, process=proc, port=port, config_path=config_path, log_path=log_path
    )
