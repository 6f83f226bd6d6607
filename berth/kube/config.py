"""Where the API server is and how to authenticate to it, as client-go finds out.

The ``kubernetes`` package's loaders do the work (``kubernetes.config.load_kube_config``,
``load_incluster_config``): a kubeconfig (certificates and tokens inline or in files,
``tokenFile``, exec credential plugins, ``insecure-skip-tls-verify``, ``tls-server-name``)
or the in-cluster service account, whose token the package re-reads as it rotates. Callers
take what they need from the resulting ``kubernetes.client.Configuration``: ``host``, the
CA (``ssl_ca_cert``), the client certificate and key (``cert_file``, ``key_file``) and the
Authorization header (`authorization`).
"""

from __future__ import annotations

import logging
import os
import ssl
from pathlib import Path
from typing import Any

import yaml

from berth.kube.tlschain import client_context

log = logging.getLogger(__name__)

# What a caller that has no flags of its own tells the user to do.
DEFAULT_HINT = "pass a readable kubeconfig file"


class ConfigurationError(Exception):
    """API access cannot be configured; the message names where it looked and what to do."""


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
    ``ConfigurationError`` naming the file and ending with ``hint``."""
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
    "authorization",
    "load_configuration",
    "tls_context",
]
