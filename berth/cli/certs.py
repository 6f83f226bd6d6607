"""``berth certs``: the certificates of the base deployment's TLS between the
shim and the plugin servers, as the two Secrets it mounts.

It makes a CA of its own, the plugin servers' serving certificate (the
Service's DNS names) and the shim's client certificate, and prints the Secrets
``berth-plugin-server-tls`` and ``berth-scheduler-tls`` (each ``tls.crt``,
``tls.key`` and ``ca.crt``, the keys cert-manager writes) as YAML for
``kubectl apply -f -``. The CA's key is not kept: to renew, run it again and
restart both Deployments (deploy/README.md, "TLS").
"""

from __future__ import annotations

import argparse
import base64
import os
import sys
from pathlib import Path
from typing import Any

SERVER_SECRET = "berth-plugin-server-tls"
SHIM_SECRET = "berth-scheduler-tls"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "certs",
        help="make the TLS Secrets of the base deployment (shim <-> plugin servers)",
        description=(
            "Make a CA, the plugin servers' serving certificate and the shim's client "
            "certificate, and print them as the two Secrets deploy/base mounts "
            f"({SERVER_SECRET}, {SHIM_SECRET}). Apply with: berth certs | kubectl apply -f -. "
            "The CA's key is discarded: to renew, run it again, apply, and restart both "
            "Deployments. cert-manager can make the same Secrets instead "
            "(deploy/tls/cert-manager.yaml)."
        ),
    )
    p.add_argument(
        "--namespace",
        default="berth-system",
        help="namespace of the Secrets and of the plugin servers' Service (default %(default)s)",
    )
    p.add_argument(
        "--service",
        default="berth-plugin-server",
        help="the plugin servers' Service, whose DNS names the serving certificate carries "
        "(default %(default)s)",
    )
    p.add_argument(
        "--cluster-domain",
        default="cluster.local",
        help="the cluster's DNS domain (default %(default)s)",
    )
    p.add_argument(
        "--days",
        type=int,
        default=365,
        help="validity of the CA and both certificates in days (default %(default)s)",
    )
    p.add_argument(
        "--out-dir",
        metavar="DIR",
        help="also write the PEM files there (ca.crt, server.crt, server.key, client.crt, "
        "client.key), e.g. for 'berth serve' and 'berth shim' outside the cluster",
    )
    p.set_defaults(func=run)


def server_names(service: str, namespace: str, cluster_domain: str) -> tuple[str, ...]:
    """The serving certificate's DNS names: the shim verifies the first (the
    host of its --plugin-server dns:/// target) on every replica."""
    return (
        f"{service}.{namespace}.svc.{cluster_domain}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}",
        "localhost",
    )


def make(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, bytes]]:
    """(the two Secrets, the PEM files by name)."""
    from berth.tls.pki import new_authority

    ca = new_authority(f"berth-ca ({args.namespace})", days=args.days)
    server = ca.issue(
        args.service,
        days=args.days,
        dns=server_names(args.service, args.namespace, args.cluster_domain),
        ips=("127.0.0.1",),
    )
    client = ca.issue("berth-scheduler", days=args.days)

    def secret(name: str, cert: bytes, key: bytes) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": name,
                "namespace": args.namespace,
                "labels": {"app.kubernetes.io/part-of": "berth"},
            },
            "type": "kubernetes.io/tls",
            "data": {
                "tls.crt": base64.b64encode(cert).decode(),
                "tls.key": base64.b64encode(key).decode(),
                "ca.crt": base64.b64encode(ca.cert_pem).decode(),
            },
        }

    secrets = [
        secret(SERVER_SECRET, server.cert, server.key),
        secret(SHIM_SECRET, client.cert, client.key),
    ]
    files = {
        "ca.crt": ca.cert_pem,
        "server.crt": server.cert,
        "server.key": server.key,
        "client.crt": client.cert,
        "client.key": client.key,
    }
    return secrets, files


def run(args: argparse.Namespace) -> int:
    import yaml

    if args.days < 1:
        print(f"berth certs: --days must be at least 1, got {args.days}", file=sys.stderr)
        return 2
    secrets, files = make(args)
    if args.out_dir:
        out = Path(args.out_dir)
        try:
            out.mkdir(parents=True, exist_ok=True)
            for name, data in files.items():
                path = out / name
                mode = 0o600 if name.endswith(".key") else 0o644
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
        except OSError as exc:
            print(f"berth certs: --out-dir {out}: {exc}", file=sys.stderr)
            return 2
        print(f"berth certs: PEM files in {out}", file=sys.stderr)
    sys.stdout.write(yaml.safe_dump_all(secrets, sort_keys=False))
    return 0


__all__ = ["SERVER_SECRET", "SHIM_SECRET", "make", "register", "server_names"]
