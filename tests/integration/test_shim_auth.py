"""API access the way users configure it: a kubeconfig whose credentials come from an exec
credential plugin (client.authentication.k8s.io/v1 ExecCredential), for an identity that
holds only what upstream grants kube-scheduler: the ``system:kube-scheduler`` and
``system:volume-scheduler`` ClusterRoles (bootstrappolicy/policy.go binds both to the user
system:kube-scheduler; a second scheduler's service account needs both too). The shim
schedules with them: what kube-scheduler may do is enough for Berth."""

from __future__ import annotations

import contextlib
import json
import stat
import sys
from pathlib import Path

import pytest

from berth.dev.localcluster import Cluster, objects
from berth.dev.localcluster.testing import NodeFactory
from berth.kube.errors import ApiError
from berth.kube.rest import KubeApi
from tests.integration.shimtools import (
    Shim,
    kubeconfig_for,
    profile_for,
    running,
    service_account,
    wait_all_bound,
    write_config,
)

pytestmark = pytest.mark.integration


def test_exec_credential_kubeconfig_with_kube_schedulers_role(
    cluster: Cluster, kube: KubeApi, namespace: str, fake_nodes: NodeFactory, tmp_path: Path
) -> None:
    profile = profile_for(namespace)
    fake_nodes(2, cpu="4")
    binding = f"{namespace}-shim"
    try:
        token = service_account(kube, namespace, "shim", "system:kube-scheduler")
        # VolumeBinding's reads and writes (PVs, PVCs, StorageClasses), as upstream's
        # ClusterRoleBinding system:volume-scheduler grants kube-scheduler.
        kube.create(
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            {
                "metadata": {"name": f"{binding}-volume"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "system:volume-scheduler",
                },
                "subjects": [{"kind": "ServiceAccount", "name": "shim", "namespace": namespace}],
            },
        )
        calls = tmp_path / "calls"
        plugin = tmp_path / "credential-plugin"
        credential = {
            "apiVersion": "client.authentication.k8s.io/v1",
            "kind": "ExecCredential",
            "status": {"token": token},
        }
        plugin.write_text(
            f"#!{sys.executable}\n"
            "import sys\n"
            f"open({str(calls)!r}, 'a').write('called\\n')\n"
            f"sys.stdout.write({json.dumps(json.dumps(credential))})\n"
        )
        plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
        kubeconfig = kubeconfig_for(
            cluster,
            tmp_path / "exec.kubeconfig",
            "\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n"
            f"      command: '{plugin}'\n      interactiveMode: Never",
        )
        shim = Shim(write_config(tmp_path / "c.yaml", profile), kubeconfig, tmp_path / "shim.log")
        with running(shim.start()):
            objects.create_pods(
                kube,
                [
                    objects.pod(f"p-{i}", namespace=namespace, scheduler_name=profile)
                    for i in range(3)
                ]
                + [objects.pod("huge", namespace=namespace, cpu="64", scheduler_name=profile)],
            )
            wait_all_bound(kube, namespace, 3, timeout=60)
            assert calls.read_text().count("called") >= 1
            # Events and the status patch are allowed to kube-scheduler's role too.
            events = kube.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
            reasons = {e["reason"] for e in events}
            assert "FailedScheduling" in reasons or "Scheduled" in reasons
            assert "forbidden" not in shim.text().lower(), shim.text()[-2000:]
    finally:
        for name in (binding, f"{binding}-volume"):
            with contextlib.suppress(ApiError):  # not created when the test failed early
                kube.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{name}")
