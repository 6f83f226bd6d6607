"""KubeSchedulerConfiguration ``extenders``: the validated records.

``berth.framework.config`` decodes the ``extenders`` list strictly (the
fields of k8s.io/kube-scheduler/config/v1 types.go ``Extender``) and hands
each entry here; ``validate_extenders`` applies upstream's
pkg/scheduler/apis/config/validation/validation.go ``validateExtenders`` plus
the checks upstream only makes when it builds the HTTP client
(pkg/scheduler/extender.go ``makeTransport``, client-go
``TLSConfigFor``), so a configuration the scheduler could not run is refused
at start with its field.

The shim runs them (shim/extenders.py); the plugin server only needs
``ignored_resources`` (NodeResourcesFit's args take the managed resources
marked ``ignoredByScheduler``, as scheduler.go ``buildExtenders`` does).

Berth refuses more than upstream, on purpose:

- ``urlPrefix`` must be an absolute ``http://`` or ``https://`` URL (upstream
  accepts anything and fails every call at run time);
- a negative ``httpTimeout`` (upstream's net/http then waits for ever).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from berth.framework.labels import label_key_errors

__all__ = [
    "DEFAULT_EXTENDER_TIMEOUT",
    "MAX_EXTENDER_PRIORITY",
    "ExtenderConfig",
    "ExtenderTLSConfig",
    "ManagedResource",
    "ignored_resources",
    "validate_extenders",
]

# pkg/scheduler/extender.go DefaultExtenderTimeout: an httpTimeout of 0 (or
# none) means 5 s. (The v1 API has no defaulting for extenders.)
DEFAULT_EXTENDER_TIMEOUT = 5.0
# k8s.io/kube-scheduler/extender/v1 MaxExtenderPriority: extender scores are
# 0..10, scaled by MaxNodeScore / MaxExtenderPriority (= 10) before weighing.
MAX_EXTENDER_PRIORITY = 10


@dataclass(frozen=True, slots=True)
class ManagedResource:
    """ExtenderManagedResource."""

    name: str
    ignored_by_scheduler: bool = False


@dataclass(frozen=True, slots=True)
class ExtenderTLSConfig:
    """ExtenderTLSConfig; ``*_data`` hold PEM bytes (the file carries them
    base64-encoded, as Go encodes []byte) and take precedence over the
    matching ``*_file``."""

    insecure: bool = False
    server_name: str = ""
    cert_file: str = ""
    key_file: str = ""
    ca_file: str = ""
    cert_data: bytes = b""
    key_data: bytes = b""
    ca_data: bytes = b""

    @property
    def has_ca(self) -> bool:
        return bool(self.ca_file or self.ca_data)

    @property
    def has_cert(self) -> bool:
        return bool(self.cert_file or self.cert_data)

    @property
    def has_key(self) -> bool:
        return bool(self.key_file or self.key_data)


@dataclass(frozen=True, slots=True)
class ExtenderConfig:
    """One entry of KubeSchedulerConfiguration.extenders, defaults applied."""

    url_prefix: str
    filter_verb: str = ""
    preempt_verb: str = ""
    prioritize_verb: str = ""
    weight: int = 0
    bind_verb: str = ""
    enable_https: bool = False
    tls_config: ExtenderTLSConfig | None = None
    # Seconds; DEFAULT_EXTENDER_TIMEOUT when the file says 0 or nothing.
    http_timeout: float = DEFAULT_EXTENDER_TIMEOUT
    node_cache_capable: bool = False
    managed_resources: tuple[ManagedResource, ...] = field(default_factory=tuple)
    ignorable: bool = False

    @property
    def name(self) -> str:
        """HTTPExtender.Name: the URL prefix identifies the extender."""
        return self.url_prefix


def _is_extended_resource_name(name: str) -> bool:
    """v1helper.IsExtendedResourceName: not a native resource (no '/', or in
    the kubernetes.io namespace), not a quota name (``requests.``), and
    ``requests.<name>`` a qualified name."""
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    return not label_key_errors("requests." + name)


def validate_extenders(extenders: Sequence[ExtenderConfig]) -> list[tuple[str, str]]:
    """(field, reason) for each problem, fields under ``extenders``
    (validation.go validateExtenders; extender.go makeTransport)."""
    errs: list[tuple[str, str]] = []
    binders = 0
    managed: set[str] = set()
    for i, ext in enumerate(extenders):
        path = f"extenders[{i}]"
        url = urlsplit(ext.url_prefix)
        if url.scheme not in ("http", "https") or not url.hostname:
            errs.append(
                (
                    f"{path}.urlPrefix",
                    f"invalid value {ext.url_prefix!r}: want an absolute http:// or https:// "
                    "URL such as http://127.0.0.1:8888/scheduler",
                )
            )
        if ext.prioritize_verb and ext.weight <= 0:
            errs.append(
                (
                    f"{path}.weight",
                    f"invalid value {ext.weight}: must have a positive weight applied to it",
                )
            )
        if ext.bind_verb:
            binders += 1
        if ext.http_timeout < 0:
            errs.append((f"{path}.httpTimeout", "must not be negative"))
        for j, res in enumerate(ext.managed_resources):
            rpath = f"{path}.managedResources[{j}].name"
            problems = label_key_errors(res.name)
            for msg in problems:
                errs.append((rpath, f"invalid value {res.name!r}: {msg}"))
            if not problems and not _is_extended_resource_name(res.name):
                errs.append(
                    (rpath, f"invalid value {res.name!r}: is an invalid extended resource name")
                )
            if res.name in managed:
                errs.append(
                    (rpath, f"invalid value {res.name!r}: duplicate extender managed resource name")
                )
            managed.add(res.name)
        tls = ext.tls_config
        if tls is not None:
            # client-go transport.TLSConfigFor / loadTLSFiles.
            if tls.insecure and tls.has_ca:
                errs.append(
                    (
                        f"{path}.tlsConfig.insecure",
                        "specifying a root certificates file with the insecure flag is not allowed",
                    )
                )
            if tls.has_cert != tls.has_key:
                have, lack = ("certificate", "key") if tls.has_cert else ("key", "certificate")
                errs.append(
                    (
                        f"{path}.tlsConfig",
                        f"a client {have} without a client {lack}: give both "
                        "(certFile/certData and keyFile/keyData)",
                    )
                )
    if binders > 1:
        errs.append(
            (
                "extenders",
                f"invalid value found {binders} extenders implementing bind: only one extender can implement bind",
            )
        )
    return errs


def ignored_resources(extenders: Sequence[ExtenderConfig]) -> list[str]:
    """The managed resources marked ignoredByScheduler, in order: scheduler.go
    buildExtenders puts them in every profile's NodeResourcesFitArgs
    .IgnoredResources (replacing what the file said there)."""
    return [r.name for ext in extenders for r in ext.managed_resources if r.ignored_by_scheduler]
