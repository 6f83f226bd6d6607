"""What a command loads to start: the ``berth`` root imports the one command it runs
(berth/cli/__init__.py), and the shim and server import what only some flags or profiles
need when those are given (OpenTelemetry with an OTLP endpoint, the ``kubernetes`` package
with a kubeconfig to load). Checked in a fresh interpreter by the modules it holds, not by
time (hack/startup-time.sh gives the figures)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from berth.cli import COMMAND_MODULES, COMMAND_NAMES, DEV_COMMANDS, build_parser, command_of

# Modules none of these start-ups may load: other commands' (what-if's snapshot and
# simulation, the developer tools), OpenTelemetry's SDK, exporters and instrumentation
# (tracing is off without --otlp-endpoint), cryptography (read with TLS files only), and
# libraries of optional features.
NOT_AT_IMPORT = (
    "berth.cli.snapshot",
    "berth.cli.simulate",
    "berth.dev",
    "opentelemetry.sdk",
    "opentelemetry.exporter",
    "opentelemetry.instrumentation",
    "kubernetes",
    "yappi",
    "cel_expr_python",
    "cryptography",
)


def _loaded(code: str) -> list[str]:
    """The modules of NOT_AT_IMPORT (or below them) a fresh interpreter holds after ``code``."""
    script = (
        "import sys, json\n"
        f"{code}\n"
        f"heavy = {NOT_AT_IMPORT!r}\n"
        "print(json.dumps(sorted(m for m in sys.modules "
        "if any(m == h or m.startswith(h + '.') for h in heavy))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], check=True, capture_output=True, text=True, timeout=120
    ).stdout
    loaded: list[str] = json.loads(out.splitlines()[-1])
    return loaded


@pytest.mark.parametrize(
    "modules",
    [
        "berth.shim.app, berth.shim.cli, berth.shim.scheduler",
        "berth.server.app, berth.server.cli, berth.server.telemetry",
    ],
)
def test_shim_and_server_modules_leave_optional_libraries_unloaded(modules: str) -> None:
    assert _loaded(f"import {modules}") == []


@pytest.mark.parametrize("command", ["shim", "serve"])
def test_command_help_loads_only_its_own_command(command: str) -> None:
    code = (
        "import contextlib, io\n"
        "from berth.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        f"    main([{command!r}, '--help'])"
    )
    assert _loaded(code) == []


def test_full_parser_still_loads_every_command() -> None:
    """``berth --help`` lists every command, so it imports them all: the check above
    fails for a reason, not because nothing can load these modules."""
    loaded = _loaded(
        "import contextlib, io\n"
        "from berth.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main(['--help'])"
    )
    assert "berth.cli.snapshot" in loaded


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("no subcommands")


def test_command_names_are_what_the_modules_register() -> None:
    assert len(COMMAND_NAMES) == len(COMMAND_MODULES)
    names = list(_commands(build_parser()))
    assert names == [*COMMAND_NAMES, *(command for _, command, _ in DEV_COMMANDS)]


@pytest.mark.parametrize("command", [*COMMAND_NAMES, *(c for _, c, _ in DEV_COMMANDS)])
def test_one_command_parser_matches_the_full_one(command: str) -> None:
    full = _commands(build_parser())[command]
    alone = _commands(build_parser(command))
    assert list(alone) == [command]
    assert alone[command].format_help() == full.format_help()


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["shim", "--config", "x.yaml"], "shim"),
        (["-v", "4", "serve"], "serve"),
        (["--v", "2", "--logging-format", "json", "what-if", "-h"], "what-if"),
        (["--logging-format=json", "-v2", "bench", "cycle"], "bench"),
        (["--help"], None),
        ([], None),
        (["no-such-command"], None),
        # -v takes "shim" as its value: no command, the full parser reports the error.
        (["-v", "shim"], None),
        (["--", "shim"], None),
    ],
)
def test_command_of(argv: list[str], command: str | None) -> None:
    assert command_of(argv) == command


def test_main_with_one_command_parses_as_the_full_parser() -> None:
    argv = ["-v", "3", "shim", "--config", "c.yaml", "--no-leader-elect"]
    one = build_parser(command_of(argv)).parse_args(argv)
    full = build_parser().parse_args(argv)
    assert {k: v for k, v in vars(one).items() if k != "func"} == {
        k: v for k, v in vars(full).items() if k != "func"
    }
    assert one.func is full.func


def test_a_plain_kubeconfig_connects_without_the_kubernetes_package(tmp_path: Path) -> None:
    # berth/kube/config.py load_plain_kubeconfig: a server and a token (or a CA and a
    # client certificate) need no import of the package, the largest the shim had.
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
    )
    code = (
        "import os\n"
        "for env in ('KUBERNETES_SERVICE_HOST', 'http_proxy', 'https_proxy', 'all_proxy'):\n"
        "    os.environ.pop(env, None); os.environ.pop(env.upper(), None)\n"
        "import berth.shim.app\n"
        "from berth.kube.rest import KubeApi\n"
        f"api = KubeApi.from_kubeconfig({str(path)!r})\n"
        "assert api.host == 'http://127.0.0.1:1', api.host\n"
    )
    assert _loaded(code) == []
    # The same start with an exec credential plugin does load it: the check above can fail.
    path.write_text(
        path.read_text().replace("{token: t}", "{exec: {apiVersion: v1, command: 'true'}}")
    )
    assert "kubernetes" in _loaded(code)
