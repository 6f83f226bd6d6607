"""Certificates and kubeconfigs for the local control plane.

One CA signs the API server's serving certificate and the client certificates: an admin
(group ``system:masters``), ``system:kube-scheduler`` and ``system:kube-controller-manager``
(bound by the API server's bootstrap RBAC policy to their components' ClusterRoles). A separate key signs service-account tokens.
The certificates come from Berth's own CA helpers (berth.tls.pki); this module writes them
where etcd, kube-apiserver and the kubeconfigs read them.
"""

from __future__ import annotations

import base64
import datetime as dt
import os
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from berth.tls.pki import Authority, Issued, new_authority

VALIDITY = dt.timedelta(days=365)

ADMIN_USER = "berth-admin"
ADMIN_GROUP = "system:masters"
SCHEDULER_USER = "system:kube-scheduler"
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    """Paths of everything the control plane needs; see `generate_pki`."""

    directory: Path
    ca: KeyPair
    apiserver: KeyPair
    admin: KeyPair
    scheduler: KeyPair
    controller_manager: KeyPair
    service_account_key: Path  # private: signs tokens
    service_account_pub: Path  # public: verifies them


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def write_pair(directory: Path, stem: str, issued: Issued) -> KeyPair:
    """``<directory>/<stem>.crt`` and ``.key`` (the key readable only by its owner)."""
    pair = KeyPair(cert=directory / f"{stem}.crt", key=directory / f"{stem}.key")
    pair.cert.write_bytes(issued.cert)
    _write_private(pair.key, issued.key)
    return pair


def load_authority(pki_dir: Path) -> Authority:
    """The CA ``generate_pki`` wrote into ``pki_dir`` (ca.crt and ca.key)."""
    cert = x509.load_pem_x509_certificate((pki_dir / "ca.crt").read_bytes())
    key = serialization.load_pem_private_key((pki_dir / "ca.key").read_bytes(), None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{pki_dir / 'ca.key'}: expected an EC key, got {type(key).__name__}")
    return Authority(cert, key)


def generate_pki(directory: Path, *, service_ip: str = "10.0.0.1") -> Pki:
    """Write a fresh CA, serving and client certificates and the service-account key pair."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    days = VALIDITY.days
    authority = new_authority("berth-local-ca", days=days)
    ca = write_pair(directory, "ca", Issued(authority.cert_pem, authority.key_pem))
    apiserver = write_pair(
        directory,
        "apiserver",
        authority.issue(
            "kube-apiserver",
            days=days,
            dns=(
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ),
            ips=("127.0.0.1", service_ip),
        ),
    )
    admin = write_pair(
        directory, "admin", authority.issue(ADMIN_USER, days=days, organization=ADMIN_GROUP)
    )
    scheduler = write_pair(directory, "kube-scheduler", authority.issue(SCHEDULER_USER, days=days))
    controller_manager = write_pair(
        directory,
        "kube-controller-manager",
        authority.issue(CONTROLLER_MANAGER_USER, days=days),
    )

    sa_key = ec.generate_private_key(ec.SECP256R1())
    sa_private = directory / "service-account.key"
    sa_public = directory / "service-account.pub"
    _write_private(
        sa_private,
        sa_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )
    sa_public.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return Pki(
        directory=directory,
        ca=ca,
        apiserver=apiserver,
        admin=admin,
        scheduler=scheduler,
        controller_manager=controller_manager,
        service_account_key=sa_private,
        service_account_pub=sa_public,
    )


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode("ascii")


def write_kubeconfig(path: Path, *, server: str, ca: Path, client: KeyPair, user: str) -> Path:
    """A self-contained kubeconfig (certificates embedded), readable only by its owner."""
    name = "berth-local"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": {"server": server, "certificate-authority-data": _b64(ca)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": _b64(client.cert),
                    "client-key-data": _b64(client.key),
                },
            }
        ],
        "contexts": [{"name": name, "context": {"cluster": name, "user": user}}],
        "current-context": name,
        "preferences": {},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_private(path, yaml.safe_dump(config, sort_keys=False).encode())
    return path


def user_kubeconfig(
    pki_dir: Path, path: Path, *, server: str, user: str, group: str | None = None
) -> Path:
    """A kubeconfig for another user of a cluster whose PKI is in ``pki_dir``
    (``generate_pki``'s ca.crt and ca.key): a client certificate with common name
    ``user`` (and organization ``group``), so the API server, and its audit log, tell
    this client from the others."""
    issued = load_authority(pki_dir).issue(user, days=VALIDITY.days, organization=group)
    client = write_pair(path.parent, f"user-{user}".replace(":", "-"), issued)
    return write_kubeconfig(path, server=server, ca=pki_dir / "ca.crt", client=client, user=user)
