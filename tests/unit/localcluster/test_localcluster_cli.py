"""``berth cluster`` commands that need no running cluster."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from berth.dev.localcluster import cli


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="berth")
    cli.register(parser.add_subparsers(dest="command"))
    return parser


@pytest.mark.parametrize("action", ["up", "down", "status", "env"])
def test_every_action_is_registered_with_a_handler(action: str, tmp_path: Path) -> None:
    args = _parser().parse_args(["cluster", action, "--state-dir", str(tmp_path)])
    assert callable(args.func)
    assert args.state_dir == tmp_path


def test_cluster_without_action_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["cluster"]) == 2
    assert "up" in capsys.readouterr().out


def test_env_and_status_without_a_cluster_fail_and_say_how_to_start_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["cluster", "env", "--state-dir", str(tmp_path)]) == 1
    assert "berth cluster up" in capsys.readouterr().err
    assert cli.main(["cluster", "status", "--state-dir", str(tmp_path)]) == 1
    assert "not running" in capsys.readouterr().out


def test_down_without_a_cluster_is_a_no_op(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["cluster", "down", "--state-dir", str(tmp_path)]) == 0
    assert "nothing to stop" in capsys.readouterr().err


def test_up_with_missing_binaries_and_no_build_fails_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    state = tmp_path / "state"
    code = cli.main(
        ["cluster", "up", "--no-build", "--bin-dir", str(empty), "--state-dir", str(state)]
    )
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith("berth cluster up: error: missing upstream binaries")
    assert "hack/build-k8s.sh" in err
    assert not (state / "state.json").exists()


def test_port_option_rejects_non_ports() -> None:
    with pytest.raises(SystemExit):
        _parser().parse_args(["cluster", "up", "--apiserver-port", "70000"])


def test_up_workload_api_asks_for_the_alpha_api_and_its_gate() -> None:
    from berth.dev.localcluster.cluster import WORKLOAD_API_ARGS

    assert not _parser().parse_args(["cluster", "up"]).workload_api
    assert _parser().parse_args(["cluster", "up", "--workload-api"]).workload_api
    assert WORKLOAD_API_ARGS == (
        "--runtime-config=scheduling.k8s.io/v1alpha2=true",
        "--feature-gates=GenericWorkload=true",
    )
