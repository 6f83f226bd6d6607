"""``berth cluster up|status|env|down`` for real, and kubectl against the result."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from berth.dev.localcluster import cli, controllers
from berth.dev.localcluster.testing import processes_mentioning

pytestmark = pytest.mark.integration


def test_up_status_env_down_cycle(
    tmp_path: Path, k8s_bin_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    common = ["--state-dir", str(state)]
    try:
        assert (
            cli.main(["cluster", "up", "--no-build", "--bin-dir", str(k8s_bin_dir), *common]) == 0
        )
        out = capsys.readouterr().out.strip().splitlines()
        assert out[-1] == f"KUBECONFIG={state / 'kubeconfig'}"
        kubeconfig = out[-1].removeprefix("KUBECONFIG=")

        kubectl = [str(k8s_bin_dir / "kubectl"), f"--kubeconfig={kubeconfig}"]
        readyz = subprocess.run(
            [*kubectl, "get", "--raw", "/readyz"], capture_output=True, text=True, check=False
        )
        assert (readyz.returncode, readyz.stdout) == (0, "ok")
        # RBAC is on: the scheduler's identity may list nodes but not delete them.
        can_i = subprocess.run(
            [*kubectl, "auth", "can-i", "delete", "nodes", "--as=system:kube-scheduler"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert can_i.stdout.strip() == "no"

        assert cli.main(["cluster", "status", *common]) == 0
        status = capsys.readouterr().out
        assert "(ready)" in status
        assert "kube-apiserver: pid" in status
        assert "kube-controller-manager: pid" in status
        assert f"controllers: {', '.join(controllers.DEFAULT_CONTROLLERS)} (healthy)" in status

        assert cli.main(["cluster", "env", *common]) == 0
        assert capsys.readouterr().out.strip() == f"KUBECONFIG={kubeconfig}"

        # `up` again is idempotent: same cluster, same line.
        assert cli.main(["cluster", "up", "--no-build", *common]) == 0
        captured = capsys.readouterr()
        assert "already running" in captured.err
        assert captured.out.strip() == f"KUBECONFIG={kubeconfig}"
    finally:
        down = cli.main(["cluster", "down", *common])
    assert down == 0
    stopped = capsys.readouterr().err
    assert "stopped kube-apiserver" in stopped
    assert "stopped kube-controller-manager" in stopped
    assert processes_mentioning(str(state)) == []
    assert cli.main(["cluster", "status", *common]) == 1


def test_up_with_no_controllers_runs_no_kube_controller_manager(
    tmp_path: Path, k8s_bin_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["--state-dir", str(tmp_path / "state")]
    try:
        assert (
            cli.main(
                [
                    "cluster",
                    "up",
                    "--no-build",
                    "--bin-dir",
                    str(k8s_bin_dir),
                    "--controllers=",
                    *common,
                ]
            )
            == 0
        )
        assert "controllers: none (no kube-controller-manager)" in capsys.readouterr().err
        assert cli.main(["cluster", "status", *common]) == 0
        status = capsys.readouterr().out
        assert "kube-apiserver: " in status
        assert "kube-controller-manager: " not in status
    finally:
        assert cli.main(["cluster", "down", *common]) == 0
