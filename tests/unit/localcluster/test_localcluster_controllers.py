"""kube-controller-manager's command line and the reading of its /healthz report."""

from __future__ import annotations

from pathlib import Path

from berth.dev.localcluster import controllers

# /healthz?verbose of kube-controller-manager v1.36.3 once its controllers are built, one of
# them failing its own check (controllermanager.go BuildControllers, NamedHealthChecker).
REPORT = """\
[+]leaderElection ok
[+]serviceaccount-token-controller ok
[+]replicaset-controller ok
[-]garbage-collector-controller failed: reason withheld
[+]resourceclaim-controller ok
healthz check failed
"""


def test_started_lists_the_controllers_whose_checks_pass() -> None:
    assert controllers.started(REPORT) == {
        "serviceaccount-token-controller",
        "replicaset-controller",
        "resourceclaim-controller",
    }


def test_a_report_before_the_controllers_are_built_lists_none() -> None:
    assert controllers.started("[+]leaderElection ok\nhealthz check passed\n") == set()


def test_not_started_names_only_controllers_missing_from_the_report() -> None:
    asked = ("replicaset-controller", "garbage-collector-controller", "*", "-ttl-controller")
    assert controllers.not_started(REPORT, asked) == ["garbage-collector-controller"]


def test_the_command_line_runs_as_a_cluster_does() -> None:
    argv = controllers.argv(
        Path("/bin-dir"),
        kubeconfig=Path("/state/kube-controller-manager.kubeconfig"),
        port=10257,
        service_account_key=Path("/state/pki/service-account.key"),
        root_ca=Path("/state/pki/ca.crt"),
        controllers=("replicaset-controller", "resourceclaim-controller"),
        extra_args=("--v=4",),
    )
    assert argv[0] == "/bin-dir/kube-controller-manager"
    assert "--controllers=replicaset-controller,resourceclaim-controller" in argv
    assert "--use-service-account-credentials=true" in argv
    assert "--service-account-private-key-file=/state/pki/service-account.key" in argv
    assert "--root-ca-file=/state/pki/ca.crt" in argv
    assert "--bind-address=127.0.0.1" in argv and "--secure-port=10257" in argv
    assert not any(a.startswith("--feature-gates") for a in argv)
    assert argv[-1] == "--v=4"
