"""``berth cluster up|down|status|env``: a local etcd, kube-apiserver and kube-controller-manager
for tests and benchmarks."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from berth.dev.localcluster import binaries, controllers
from berth.dev.localcluster.cluster import (
    DEFAULT_READY_TIMEOUT,
    WORKLOAD_API_ARGS,
    ClusterConfig,
    cluster_status,
    default_state_dir,
    start_cluster,
    stop_cluster,
)
from berth.dev.localcluster.errors import LocalClusterError


def _err(command: str, message: str) -> None:
    print(f"berth cluster {command}: error: {message}", file=sys.stderr)


def _kubeconfig_line(path: Path) -> str:
    return f"KUBECONFIG={path}"


def cmd_up(args: argparse.Namespace) -> int:
    state_dir: Path = args.state_dir
    try:
        status = cluster_status(state_dir)
        if status is not None and status.healthy:
            print(
                f"cluster already running at {status.state.server} (state {state_dir})",
                file=sys.stderr,
            )
            print(_kubeconfig_line(status.state.kubeconfig))
            return 0
        state = start_cluster(
            ClusterConfig(
                state_dir=state_dir,
                bin_dir=args.bin_dir,
                build_if_missing=not args.no_build,
                apiserver_port=args.apiserver_port,
                etcd_client_port=args.etcd_port,
                etcd_peer_port=args.etcd_peer_port,
                ready_timeout=args.timeout,
                controllers=args.controllers,
                apiserver_args=WORKLOAD_API_ARGS if args.workload_api else (),
            )
        )
    except LocalClusterError as err:
        _err("up", str(err))
        return 1
    pids = ", ".join(f"{p.name} pid {p.pid}" for p in state.processes)
    print(
        f"cluster up: Kubernetes {state.kubernetes_version} at {state.server} "
        f"(etcd {state.etcd_version} on 127.0.0.1:{state.etcd_client_port}, data in "
        f"{state.data_dir}; {pids}; logs in {state_dir / 'logs'})",
        file=sys.stderr,
    )
    print(f"controllers: {_controllers_text(state.controllers)}", file=sys.stderr)
    print("stop it with: berth cluster down", file=sys.stderr)
    print(_kubeconfig_line(state.kubeconfig))
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    try:
        if cluster_status(args.state_dir) is None:
            print(f"no cluster recorded in {args.state_dir}; nothing to stop", file=sys.stderr)
            return 0
        for line in stop_cluster(args.state_dir):
            print(line, file=sys.stderr)
    except LocalClusterError as err:
        _err("down", str(err))
        return 1
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    try:
        status = cluster_status(args.state_dir)
    except LocalClusterError as err:
        _err("status", str(err))
        return 1
    if status is None:
        print(f"not running (no cluster recorded in {args.state_dir}); start: berth cluster up")
        return 1
    state = status.state
    print(f"server:     {state.server} ({'ready' if status.ready else 'NOT ready'})")
    print(f"kubernetes: {state.kubernetes_version}, etcd {state.etcd_version}")
    for comp in status.components:
        state_text = "running" if comp.running else "NOT running"
        print(f"{comp.name}: pid {comp.pid} {state_text}")
    health = {None: "", True: " (healthy)", False: " (NOT healthy)"}[status.controllers_healthy]
    print(f"controllers: {_controllers_text(state.controllers)}{health}")
    print(f"etcd data:  {state.data_dir}")
    print(f"started:    {state.started_at}")
    print(_kubeconfig_line(state.kubeconfig))
    if not status.healthy:
        print(
            "cluster is degraded; restart it: berth cluster down && berth cluster up",
            file=sys.stderr,
        )
        return 1
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    try:
        status = cluster_status(args.state_dir)
    except LocalClusterError as err:
        _err("env", str(err))
        return 1
    if status is None:
        _err("env", f"no cluster recorded in {args.state_dir}; start one: berth cluster up")
        return 1
    print(_kubeconfig_line(status.state.kubeconfig))
    return 0


def _controllers_text(names: tuple[str, ...]) -> str:
    return ", ".join(names) if names else "none (no kube-controller-manager)"


def _controller_list(text: str) -> tuple[str, ...]:
    """``a,b,c``; empty for none."""
    return tuple(name.strip() for name in text.split(",") if name.strip())


def _port(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port (1-65535)")
    return value


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "cluster",
        help="local etcd + kube-apiserver + kube-controller-manager for tests and benchmarks",
        description=(
            "A local control plane built from upstream Go modules (hack/build-k8s.sh): etcd "
            "with its data on tmpfs, kube-apiserver on 127.0.0.1 with client-certificate "
            "authentication and RBAC, kube-controller-manager with the controllers tests need "
            "(no kubelet). State, certificates, kubeconfigs and logs live in the state dir "
            "(default $BERTH_CLUSTER_DIR or ${BERTH_CACHE:-~/.cache/berth}/cluster)."
        ),
    )

    def usage(_args: argparse.Namespace) -> int:
        parser.print_help()
        return 2

    parser.set_defaults(func=usage)
    actions = parser.add_subparsers(dest="cluster_command", metavar="ACTION")

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        p = actions.add_parser(name, help=help_text, description=help_text)
        p.add_argument(
            "--state-dir",
            type=Path,
            default=default_state_dir(),
            help="where the cluster's state, certificates, kubeconfig and logs live "
            "(default: %(default)s)",
        )
        return p

    up = add(
        "up",
        "start etcd, kube-apiserver and kube-controller-manager, wait until they are ready, "
        "print KUBECONFIG=<path>",
    )
    up.add_argument(
        "--bin-dir",
        type=Path,
        default=Path(os.environ["BERTH_K8S_BIN_DIR"])
        if os.environ.get("BERTH_K8S_BIN_DIR")
        else None,
        help="directory with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, "
        "kubectl "
        "(default: the hack/build-k8s.sh cache for the pinned version)",
    )
    up.add_argument(
        "--no-build",
        action="store_true",
        help=f"fail instead of running {binaries.BUILD_SCRIPT.name} when binaries are missing",
    )
    up.add_argument(
        "--apiserver-port",
        type=_port,
        help="kube-apiserver port; must be free (default: 6443, or any free port if taken)",
    )
    up.add_argument(
        "--etcd-port",
        type=_port,
        help="etcd client port; must be free (default: 2379, or any free port if taken)",
    )
    up.add_argument(
        "--etcd-peer-port",
        type=_port,
        help="etcd peer port; must be free (default: 2380, or any free port if taken)",
    )
    up.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_READY_TIMEOUT,
        help="seconds to wait for each component to be ready (default: %(default)s)",
    )
    up.add_argument(
        "--controllers",
        type=_controller_list,
        default=controllers.DEFAULT_CONTROLLERS,
        metavar="NAME,...",
        help="kube-controller-manager's controllers, named as its --help lists them; '' runs "
        f"no kube-controller-manager (default: {','.join(controllers.DEFAULT_CONTROLLERS)})",
    )
    up.add_argument(
        "--workload-api",
        action="store_true",
        help="serve Kubernetes' alpha Workload API (scheduling.k8s.io/v1alpha2 PodGroups, "
        "pod spec.schedulingGroup) for the GangScheduling plugin: kube-apiserver "
        + " ".join(WORKLOAD_API_ARGS),
    )
    up.set_defaults(func=cmd_up)
    add("down", "stop the processes 'up' started and delete etcd's data").set_defaults(
        func=cmd_down
    )
    add(
        "status",
        "show processes, the API server's /readyz and kube-controller-manager's /healthz; "
        "exit 0 only if healthy",
    ).set_defaults(func=cmd_status)
    add("env", "print KUBECONFIG=<path> for the running cluster").set_defaults(func=cmd_env)


def main(argv: list[str] | None = None) -> int:
    """Run ``cluster`` commands without the rest of the berth CLI (tests, debugging)."""
    parser = argparse.ArgumentParser(prog="berth")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
