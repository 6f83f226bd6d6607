"""What a command loads to start: the ``berth`` root imports the one command it runs
(berth/cli/__init__.py), and the shim and server import what only some flags or profiles
need when those are given (OpenTelemetry with an OTLP endpoint, the ``kubernetes`` package
with a kubeconfig to load). Checked in a fresh interpreter by the modules it holds, not by
time (hack/startup-time.sh gives the figures)."""

from __future__ import annotations

import argparse
import json
import os
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


# What ``berth shim`` leaves to the flags and configurations that need it: recording
# (--record), leader election, the secure port's delegated authn/authz (not with
# --insecure-metrics), tracing's set-up (no OTLP endpoint), and the in-process plugin
# service (not with --plugin-server).
SHIM_DEFERRED = (
    "berth.shim.record",
    "berth.shim.leader",
    "berth.shim.delegation",
    "berth.server.telemetry",
    "berth.server.app",
    "berth.server.service",
)


def _shim_start_loads(tmp_path: Path, *flags: str) -> list[str]:
    """The modules of SHIM_DEFERRED and NOT_AT_IMPORT that ``berth shim --plugin-server``
    holds once its start-up reaches the scheduler's first network step (the informers'
    LISTs, or the cache's start before a leader election): run in a fresh interpreter
    with that step replaced by a report of sys.modules, so nothing connects."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
    )
    config = tmp_path / "config.yaml"
    config.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        "profiles:\n- schedulerName: berth-startup-test\n"
    )
    argv = [
        "shim",
        "--config",
        str(config),
        "--kubeconfig",
        str(kubeconfig),
        "--plugin-server",
        "127.0.0.1:1",
        "--insecure-plaintext",
        *flags,
    ]
    watched = (*SHIM_DEFERRED, *NOT_AT_IMPORT)
    script = (
        "import json, os, sys\n"
        "for env in ('KUBERNETES_SERVICE_HOST', 'OTEL_EXPORTER_OTLP_ENDPOINT', 'http_proxy',\n"
        "            'https_proxy', 'all_proxy'):\n"
        "    os.environ.pop(env, None); os.environ.pop(env.upper(), None)\n"
        "from berth.cli import main\n"
        "from berth.shim.scheduler import Scheduler\n"
        f"watched = {watched!r}\n"
        "async def report(self):\n"
        "    loaded = sorted(m for m in sys.modules\n"
        "                    if any(m == w or m.startswith(w + '.') for w in watched))\n"
        "    print('LOADED ' + json.dumps(loaded), flush=True)\n"
        "    os._exit(0)\n"
        "Scheduler.run = report\n"
        "Scheduler.start_cache = report\n"
        f"sys.exit(main({argv!r}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], check=True, capture_output=True, text=True, timeout=120
    ).stdout
    lines = [line for line in out.splitlines() if line.startswith("LOADED ")]
    assert lines, f"the shim's start-up did not reach its informers: {out}"
    loaded: list[str] = json.loads(lines[-1].removeprefix("LOADED "))
    return loaded


def test_shim_over_grpc_starts_without_what_its_flags_leave_off(tmp_path: Path) -> None:
    # The drain benchmark's start (berth/dev/bench_perf.py start_berth_run).
    assert _shim_start_loads(tmp_path, "--no-leader-elect", "--insecure-metrics") == []


def test_shim_start_loads_what_its_flags_ask_for(tmp_path: Path) -> None:
    """The check above can fail: with leader election, --record and the secure port's
    options, the same start loads their modules."""
    loaded = _shim_start_loads(
        tmp_path,
        "--leader-elect",
        "--record",
        str(tmp_path / "record"),
        "--metrics-listen",
        "127.0.0.1:0",
    )
    assert {"berth.shim.record", "berth.shim.leader", "berth.shim.delegation"} <= set(loaded)


def test_shim_help_answers() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "berth", "shim", "--help"],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert out.startswith("usage: berth shim")
    assert "--plugin-server" in out and "--authorization-always-allow-paths" in out


def _threads_after_numpy(env_value: str | None) -> tuple[str, int]:
    """OPENBLAS_NUM_THREADS and the process's thread count after ``berth.cli.main``
    ran a command and numpy was then imported, in a fresh interpreter."""
    script = (
        "import os\n"
        "from berth.cli import main\n"
        "try:\n"
        "    main(['--version'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "import numpy\n"
        "print(os.environ.get('OPENBLAS_NUM_THREADS', ''), len(os.listdir('/proc/self/task')))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if env_value is not None:
        env["OPENBLAS_NUM_THREADS"] = env_value
    out = subprocess.run(
        [sys.executable, "-c", script],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    ).stdout.split()
    return out[-2], int(out[-1])


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
def test_berth_runs_numpy_with_one_blas_thread_unless_the_environment_says() -> None:
    # berth/cli/__init__.py single_threaded_blas: OpenBLAS would start a thread per
    # core at numpy's import; berth's commands ask for one (the main thread).
    assert _threads_after_numpy(None) == ("1", 1)
    value, _ = _threads_after_numpy("2")
    assert value == "2"


# What ``berth shim --plugin-server`` does before its informers start (shim/cli.py _run,
# shim/app.py run): the registry, the configuration checked against it, the writes its
# plugins declare, the shim's own modules and the plugins it runs itself at PreEnqueue
# and QueueSort (shim/service.py).
_SHIM_OVER_GRPC = """
from berth.framework.config import default_config
from berth.framework.writes import config_writes
from berth.plugins.registry import load_registry
import berth.shim.app, berth.shim.cli, berth.shim.scheduler, berth.shim.serving
from berth.shim.service import LOCAL_PRE_ENQUEUE, LOCAL_QUEUE_SORT
registry = load_registry()
config = default_config(registry)
config_writes(config, registry)
local = [cls() for cls in (*LOCAL_PRE_ENQUEUE.values(), *LOCAL_QUEUE_SORT.values())]
"""


def test_the_shim_over_a_plugin_server_loads_neither_numpy_nor_plugin_code() -> None:
    """The plugin server runs the plugins; the shim reads what it checks from the
    registry's specs (plugins/registry.py), so its start imports no plugin
    implementation but the two it runs itself, and not numpy (~0.1 s of CPU)."""
    script = (
        "import sys, json\n"
        f"{_SHIM_OVER_GRPC}\n"
        "from berth.plugins.registry import REGISTRY\n"
        "modules = {REGISTRY.spec(n).target.partition(':')[0] for n in REGISTRY}\n"
        "print(json.dumps(sorted(m for m in sys.modules if m in modules or m == 'numpy')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], check=True, capture_output=True, text=True, timeout=120
    ).stdout
    assert json.loads(out.splitlines()[-1]) == [
        "berth.plugins.queuesort.priority_sort",
        "berth.plugins.schedulinggates.scheduling_gates",
    ]
