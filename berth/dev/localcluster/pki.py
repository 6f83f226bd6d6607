"""Certificates and kubeconfigs for the local control plane.

One CA signs the API server's serving certificate and the client certificates: an admin
(group ``system:masters``) and ``system:kube-scheduler`` (bound by the API server's bootstrap
RBAC policy to the scheduler's ClusterRole). A separate key signs service-account tokens.
ECDSA P-256 keys: fast to generate and accepted by every component.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=365)

ADMIN_USER = "berth-admin"
ADMIN_GROUP = "system:masters"
SCHEDULER_USER = "system:kube-scheduler"


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
    service_account_key: Path  # private: signs tokens
    service_account_pub: Path  # public: verifies them


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def certificate_name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _builder(
    subject: x509.Name, issuer: x509.Name, public: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
    )


def issue_certificate(
    directory: Path,
    stem: str,
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    subject: x509.Name,
    *,
    server_names: tuple[str, ...] = (),
    server_ips: tuple[str, ...] = (),
) -> KeyPair:
    """A key and a certificate for ``subject`` signed by the CA, written to
    ``<directory>/<stem>.crt`` and ``.key``: a serving certificate (serverAuth, these
    SANs) when names or IPs are given, else a client certificate (clientAuth)."""
    key = _new_key()
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server_names or server_ips else None
    builder = (
        _builder(subject, ca_cert.subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage([usage or ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if usage is not None:
        sans: list[x509.GeneralName] = [x509.DNSName(n) for n in server_names]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in server_ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    pair = KeyPair(cert=directory / f"{stem}.crt", key=directory / f"{stem}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_private(pair.key, _key_pem(key))
    return pair


def new_ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A self-signed CA certificate (no intermediates below it) and its key."""
    ca_key = _new_key()
    ca_subject = certificate_name(common_name)
    ca_cert = (
        _builder(ca_subject, ca_subject, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    return ca_cert, ca_key


def generate_pki(directory: Path, *, service_ip: str = "10.0.0.1") -> Pki:
    """Write a fresh CA, serving and client certificates and the service-account key pair."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    ca_cert, ca_key = new_ca("berth-local-ca")
    ca = KeyPair(cert=directory / "ca.crt", key=directory / "ca.key")
    ca.cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_private(ca.key, _key_pem(ca_key))

    apiserver = issue_certificate(
        directory,
        "apiserver",
        ca_cert,
        ca_key,
        certificate_name("kube-apiserver"),
        server_names=(
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ),
        server_ips=("127.0.0.1", service_ip),
    )
    admin = issue_certificate(
        directory, "admin", ca_cert, ca_key, certificate_name(ADMIN_USER, ADMIN_GROUP)
    )
    scheduler = issue_certificate(
        directory, "kube-scheduler", ca_cert, ca_key, certificate_name(SCHEDULER_USER)
    )

    sa_key = _new_key()
    sa_private = directory / "service-account.key"
    sa_public = directory / "service-account.pub"
    _write_private(sa_private, _key_pem(sa_key))
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
    ca_cert = x509.load_pem_x509_certificate((pki_dir / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((pki_dir / "ca.key").read_bytes(), None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{pki_dir / 'ca.key'}: expected an EC key, got {type(ca_key).__name__}")
    stem = f"user-{user}".replace(":", "-")
    client = issue_certificate(path.parent, stem, ca_cert, ca_key, certificate_name(user, group))
    return write_kubeconfig(path, server=server, ca=pki_dir / "ca.crt", client=client, user=user)
