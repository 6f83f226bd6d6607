"""The client side of the gRPC API's transport security: the
``--plugin-server-ca/-cert/-key/-tls-name`` flags of ``berth shim`` and
``berth place``, and the channel credentials they make.

TLS is on when any of the flags is given. Without ``--plugin-server-ca`` the
server is verified against the system's trust roots. ``--plugin-server-cert``
and ``--plugin-server-key`` present a client certificate (for a server run
with ``--tls-client-ca``). The files are read once, when the client starts:
after a rotation, restart the client (a Deployment rollout).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import grpc

# The PEM readers (berth.tls.serving, and with them cryptography) are imported
# when TLS is configured, not when a command's flags are registered
# (``berth --help`` stays quick).

CA_FLAG = "--plugin-server-ca"
CERT_FLAG = "--plugin-server-cert"
KEY_FLAG = "--plugin-server-key"
NAME_FLAG = "--plugin-server-tls-name"


@dataclass(frozen=True, slots=True)
class ClientTLS:
    credentials: grpc.ChannelCredentials
    # The name the server's certificate must carry, when it is not the host
    # of the address dialled (e.g. a replica dialled by IP).
    server_name: str | None = None
    # What was configured, for logs.
    description: str = ""


def add_client_tls_flags(parser: argparse.ArgumentParser, server_flag: str) -> None:
    group = parser.add_argument_group(
        "transport security",
        f"TLS to the plugin servers of {server_flag} (on when any of these is given); "
        "files are read at start",
    )
    group.add_argument(
        CA_FLAG,
        dest="plugin_server_ca",
        metavar="FILE",
        help="verify the plugin servers' certificates with this PEM CA (bundle); default with "
        "TLS: the system's trust roots",
    )
    group.add_argument(
        CERT_FLAG,
        dest="plugin_server_cert",
        metavar="FILE",
        help=f"PEM client certificate to present (servers run with --tls-client-ca require "
        f"one); needs {KEY_FLAG}",
    )
    group.add_argument(
        KEY_FLAG, dest="plugin_server_key", metavar="FILE", help=f"PEM private key of {CERT_FLAG}"
    )
    group.add_argument(
        NAME_FLAG,
        dest="plugin_server_tls_name",
        metavar="NAME",
        help="name the servers' certificates must carry (and SNI), for servers dialled by IP; "
        "default: the host of the target (for dns:///NAME:PORT, NAME, also for the replicas "
        "it resolves to)",
    )


def client_tls_from_args(args: argparse.Namespace) -> ClientTLS | None:
    """The TLS settings of the flags added by ``add_client_tls_flags``; None
    for plaintext. TLSFileError (a ValueError) names the flag and file at
    fault."""
    from berth.tls.serving import TLSFileError

    ca_path: str | None = args.plugin_server_ca
    cert_path: str | None = args.plugin_server_cert
    key_path: str | None = args.plugin_server_key
    name: str | None = args.plugin_server_tls_name
    if ca_path is None and cert_path is None and key_path is None and name is None:
        return None
    if (cert_path is None) != (key_path is None):
        have, missing = (CERT_FLAG, KEY_FLAG) if key_path is None else (KEY_FLAG, CERT_FLAG)
        raise TLSFileError(f"{have} needs {missing}")
    if name is not None and not name.strip():
        raise TLSFileError(f"{NAME_FLAG}: must not be empty")
    return client_tls(
        Path(ca_path) if ca_path else None,
        Path(cert_path) if cert_path else None,
        Path(key_path) if key_path else None,
        name,
    )


def client_tls(
    ca: Path | None = None,
    cert: Path | None = None,
    key: Path | None = None,
    server_name: str | None = None,
) -> ClientTLS:
    """Channel credentials from PEM files (each checked; the error names its
    flag and file)."""
    from berth.tls.serving import TLSFileError, read_key_pair, read_pem_certificates

    root = read_pem_certificates(ca, CA_FLAG) if ca is not None else None
    key_pem = chain = None
    if cert is not None or key is not None:
        if cert is None or key is None:
            raise TLSFileError(f"{CERT_FLAG} and {KEY_FLAG} go together")
        key_pem, chain = read_key_pair(cert, key, CERT_FLAG, KEY_FLAG)
    parts = [f"CA {ca}" if ca else "system trust roots"]
    if cert is not None:
        parts.append(f"client certificate {cert}")
    if server_name:
        parts.append(f"server name {server_name}")
    return ClientTLS(
        grpc.ssl_channel_credentials(root, key_pem, chain),
        server_name,
        "TLS (" + ", ".join(parts) + ")",
    )


__all__ = ["ClientTLS", "add_client_tls_flags", "client_tls", "client_tls_from_args"]
