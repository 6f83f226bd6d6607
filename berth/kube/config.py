"""Where the API server is and how to authenticate to it, as client-go finds out.

The ``kubernetes`` package's loaders do the work (``kubernetes.config.load_kube_config``,
``load_incluster_config``): a kubeconfig (certificates and tokens inline or in files,
``tokenFile``, exec credential plugins, ``insecure-skip-tls-verify``, ``tls-server-name``)
or the in-cluster service account, whose token the package re-reads as it rotates. Callers
take what they need from the resulting ``kubernetes.client.Configuration``: ``host``, the
CA (``ssl_ca_cert``), the client certificate and key (``cert_file``, ``key_file``) and the
Authorization header (`authorization`). A plain kubeconfig file (a server, its CA, a client
certificate, a static token) and the in-cluster service account are read here without
importing the package, to a ``PlainConfiguration`` with the same attributes
(`load_plain_kubeconfig`, `load_plain_incluster`): the package's import is a fifth of the
shim's start-up CPU.
"""

from __future__ import annotations

import atexit
import base64
import binascii
import contextlib
import logging
import os
import ssl
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.request import getproxies

import yaml

from berth.kube.tlschain import client_context

log = logging.getLogger(__name__)

# What a caller that has no flags of its own tells the user to do.
DEFAULT_HINT = "pass a readable kubeconfig file"


class ConfigurationError(Exception):
    """API access cannot be configured; the message names where it looked and what to do."""


# -- the plain kubeconfig, read without the kubernetes package ----------------------------
#
# Importing the ``kubernetes`` package costs ~0.25 s of CPU and ~17 MiB (its __init__ loads
# the config loaders, which load oauthlib, requests and pydantic) before the shim can list a
# thing. A kubeconfig file that names only a server, its CA, a client certificate and a
# bearer token is read here instead, to the same attributes the package's loader sets
# (kubernetes/config/kube_config.py KubeConfigLoader ``_load_cluster_info``,
# ``_load_user_token``, ``_set_config``); anything else (exec and auth-provider
# credentials, tokenFile, basic auth, proxies, merged $KUBECONFIG lists, the in-cluster
# service account, a file the package would reject) goes to the package, unchanged.

# The keys a plain kubeconfig's cluster and user may hold.
_PLAIN_CLUSTER_KEYS = frozenset(
    {
        "server",
        "certificate-authority",
        "certificate-authority-data",
        "insecure-skip-tls-verify",
        "tls-server-name",
    }
)
_PLAIN_USER_KEYS = frozenset(
    {"client-certificate", "client-certificate-data", "client-key", "client-key-data", "token"}
)


@dataclass
class PlainConfiguration:
    """API access read from a plain kubeconfig: the attributes of a
    ``kubernetes.client.Configuration`` that Berth's callers read."""

    host: str
    connection_pool_maxsize: int | None = None
    ssl_ca_cert: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify_ssl: bool = True
    tls_server_name: str | None = None
    # "Bearer <token>" or None.
    token: str | None = None
    # The in-cluster service account's token file, re-read every TOKEN_REFRESH seconds
    # (its token rotates) and when the token was read (time.monotonic).
    token_file: str | None = None
    token_read_at: float = 0.0
    # Never set here (a kubeconfig with a proxy goes to the package); read by callers.
    ca_cert_data: str | None = None
    proxy: str | None = None
    assert_hostname: str | None = None


def _named(entries: Any, name: Any) -> dict[str, Any] | None:
    """The mapping under ``key`` of the one entry named ``name`` in a kubeconfig list."""
    if not isinstance(entries, list) or not isinstance(name, str):
        return None
    found = [e for e in entries if isinstance(e, dict) and e.get("name") == name]
    return found[0] if len(found) == 1 else None


def _private_file(data: bytes) -> str:
    """``data`` in a new file only this user can read, removed when the process exits
    (the package's ``_create_temp_file_with_content`` does the same)."""
    fd, name = tempfile.mkstemp()
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    atexit.register(_remove, name)
    return name


def _remove(name: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(name)


class _NotPlain(Exception):
    """The kubeconfig is not one `load_plain_kubeconfig` reads: the package judges it."""


def _file_or_data(section: dict[str, Any], key: str, base: str) -> str | None:
    """The file of ``key`` (relative to ``base``, as ``FileOrData.as_file``) or of
    ``key-data`` (base64, written to a private file); None when neither is given."""
    if f"{key}-data" in section:
        data = section[f"{key}-data"]
        if not isinstance(data, str) or not data:
            raise _NotPlain
        try:
            return _private_file(base64.b64decode(data, validate=True))
        except (binascii.Error, ValueError):
            raise _NotPlain from None
    if key not in section:
        return None
    path = section[key]
    if not isinstance(path, str) or not path:
        raise _NotPlain
    path = os.path.normpath(os.path.join(base, path))
    if not os.path.isfile(path):
        raise _NotPlain
    return path


def load_plain_kubeconfig(
    path: str, context: str | None, pool_size: int | None
) -> PlainConfiguration | None:
    """The API access a plain kubeconfig file gives, as the package's loader would set it;
    None when the file is not plain (or not readable, or malformed: the package then
    says what is wrong with it)."""
    if os.pathsep in path or getproxies():
        return None
    path = os.path.expanduser(path)
    try:
        with open(path, "rb") as f:
            # libyaml's parser when PyYAML has it: a kubeconfig's embedded
            # certificates take the pure-Python scanner some milliseconds.
            doc = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (OSError, yaml.YAMLError):
        return None
    if not isinstance(doc, dict):
        return None
    name = context if context is not None else doc.get("current-context")
    ctx = _named(doc.get("contexts"), name)
    if ctx is None or not isinstance(ctx.get("context"), dict):
        return None
    cluster_entry = _named(doc.get("clusters"), ctx["context"].get("cluster"))
    user_name = ctx["context"].get("user")
    user_entry = _named(doc.get("users"), user_name) if user_name else None
    if cluster_entry is None or (user_name and user_entry is None):
        return None
    cluster = cluster_entry.get("cluster")
    user = user_entry.get("user") if user_entry is not None else {}
    if not isinstance(cluster, dict) or not isinstance(user, dict):
        return None
    if not cluster.keys() <= _PLAIN_CLUSTER_KEYS or not user.keys() <= _PLAIN_USER_KEYS:
        return None
    server = cluster.get("server")
    skip_verify = cluster.get("insecure-skip-tls-verify", False)
    server_name = cluster.get("tls-server-name")
    token = user.get("token")
    if (
        not isinstance(server, str)
        or not server.startswith(("http://", "https://"))
        or not isinstance(skip_verify, bool)
        or (server_name is not None and not isinstance(server_name, str))
        or (token is not None and not isinstance(token, str))
    ):
        return None
    cfg = PlainConfiguration(
        host=server.rstrip("/"),
        connection_pool_maxsize=pool_size,
        verify_ssl=not skip_verify,
        tls_server_name=server_name or None,
        token=f"Bearer {token}" if token else None,
    )
    if cfg.host.startswith("https"):
        # As _load_cluster_info: the CA and the client key pair for https only, files
        # relative to the kubeconfig's folder.
        base = os.path.abspath(os.path.dirname(path))
        try:
            cfg.ssl_ca_cert = _file_or_data(cluster, "certificate-authority", base)
            cfg.cert_file = _file_or_data(user, "client-certificate", base)
            cfg.key_file = _file_or_data(user, "client-key", base)
        except _NotPlain:
            return None
    return cfg


# The in-cluster service account (client-go rest.InClusterConfig; the package's
# kubernetes/config/incluster_config.py reads the same environment and files).
_SERVICE_ENV = ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")
SERVICE_TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token"
SERVICE_CA_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
# How long a service account token is used before its file is read again (the package's
# InClusterConfigLoader ``_token_refresh_period``).
TOKEN_REFRESH = 60.0


def _read_service_token(cfg: PlainConfiguration) -> None:
    """The service account token, as the package's ``_read_token_file`` (its lowercase
    "bearer" included); ConfigurationError when the file is empty."""
    assert cfg.token_file is not None
    with open(cfg.token_file) as f:
        content = f.read()
    if not content:
        raise ConfigurationError(f"the service account token file {cfg.token_file} is empty")
    cfg.token = "bearer " + content
    cfg.token_read_at = time.monotonic()


def load_plain_incluster(pool_size: int | None) -> PlainConfiguration | None:
    """The in-cluster service account's API access, as the package's
    ``load_incluster_config`` sets it; None when anything it would refuse or question
    is there (no or empty environment, a missing or empty file, a proxy): then the
    package's loader runs and says why."""
    host, port = (os.environ.get(env) for env in _SERVICE_ENV)
    if not host or not port or getproxies():
        return None
    try:
        with open(SERVICE_CA_FILE, "rb") as f:
            if not f.read():
                return None
        cfg = PlainConfiguration(
            # incluster_config.py _join_host_port (net.JoinHostPort).
            host=f"https://[{host}]:{port}"
            if ":" in host or "%" in host
            else f"https://{host}:{port}",
            connection_pool_maxsize=pool_size,
            ssl_ca_cert=SERVICE_CA_FILE,
            token_file=SERVICE_TOKEN_FILE,
        )
        _read_service_token(cfg)
    except (OSError, ConfigurationError):
        return None
    return cfg


def load_configuration(
    kubeconfig: str | Path | None = None,
    *,
    context: str | None = None,
    pool_size: int | None = None,
    hint: str = DEFAULT_HINT,
) -> Any:
    """A ``kubernetes.client.Configuration`` configured like client-go
    (k8s.io/client-go/tools/clientcmd, ``BuildConfigFromFlags``): the given kubeconfig;
    else the in-cluster service account; else $KUBECONFIG or ~/.kube/config.
    ``pool_size``: the connections its urllib3 pool keeps per host. Raises
    ``ConfigurationError`` naming the file and ending with ``hint``. A plain kubeconfig
    file gives a ``PlainConfiguration`` instead, read without the package."""
    if kubeconfig:
        plain = load_plain_kubeconfig(str(kubeconfig), context, pool_size)
    elif not all(env in os.environ for env in _SERVICE_ENV):
        plain = load_plain_kubeconfig(
            os.environ.get("KUBECONFIG") or "~/.kube/config", context, pool_size
        )
    else:
        plain = load_plain_incluster(pool_size)
        if plain is not None:
            log.info("API access: in-cluster service account")
    if plain is not None:
        return plain
    from kubernetes import client as kclient
    from kubernetes import config as kconfig
    from kubernetes.config.config_exception import ConfigException

    cfg = kclient.Configuration()
    if pool_size is not None:
        cfg.connection_pool_maxsize = pool_size
    try:
        if kubeconfig:
            kconfig.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=str(kubeconfig), context=context, client_configuration=cfg
            )
        else:
            try:
                kconfig.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
                log.info("API access: in-cluster service account")
            except ConfigException:
                # Read now, not when the package was imported.
                kconfig.load_kube_config(  # type: ignore[no-untyped-call]
                    config_file=os.environ.get("KUBECONFIG") or "~/.kube/config",
                    context=context,
                    client_configuration=cfg,
                )
    except (ConfigException, OSError, TypeError, ValueError, yaml.YAMLError) as exc:
        where = (
            str(kubeconfig) if kubeconfig else "in-cluster config, $KUBECONFIG or ~/.kube/config"
        )
        raise ConfigurationError(
            f"cannot configure API access from {where}: {exc}; {hint}"
        ) from exc
    return cfg


def authorization(cfg: Any) -> str | None:
    """The Authorization header value of ``cfg`` (None: none), current: the package
    re-reads a rotating token (service account, exec plugin) inside this call."""
    if isinstance(cfg, PlainConfiguration):
        if cfg.token_file is not None and time.monotonic() - cfg.token_read_at >= TOKEN_REFRESH:
            _read_service_token(cfg)
        return cfg.token
    settings = cfg.auth_settings().get("BearerToken")
    return str(settings["value"]) if settings and settings.get("value") else None


def tls_context(cfg: Any) -> ssl.SSLContext:
    """The client TLS context of ``cfg``: its CA (or the system's), verification on or
    off, its client certificate sent alone (`tlschain`)."""
    return client_context(
        verify=bool(cfg.verify_ssl),
        ca_file=cfg.ssl_ca_cert or None,
        ca_data=getattr(cfg, "ca_cert_data", None) or None,
        cert_file=cfg.cert_file or None,
        key_file=cfg.key_file or None,
    )


__all__ = [
    "DEFAULT_HINT",
    "ConfigurationError",
    "PlainConfiguration",
    "authorization",
    "load_configuration",
    "load_plain_kubeconfig",
    "tls_context",
]
