"""KubeSchedulerConfiguration ``extenders``: decoded strictly, defaulted as
pkg/scheduler/extender.go NewHTTPExtender defaults them, validated as
pkg/scheduler/apis/config/validation/validation.go validateExtenders (and
client-go's TLSConfigFor) does; a malformed entry names the file, field and
reason."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from berth.framework.config import load_config
from berth.framework.extenders import (
    DEFAULT_EXTENDER_TIMEOUT,
    ExtenderConfig,
    ExtenderTLSConfig,
    ManagedResource,
)
from berth.plugins.registry import load_registry
from tests.unit.config.helpers import load, load_error, write


def test_extender_fields_decode_with_upstream_defaults(tmp_path: Path) -> None:
    pem = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    cfg = load(
        tmp_path,
        f"""
        extenders:
        - urlPrefix: https://gpu-extender.kube-system:8443/scheduler
          filterVerb: filter
          prioritizeVerb: prioritize
          preemptVerb: preempt
          bindVerb: bind
          weight: 5
          enableHTTPS: true
          nodeCacheCapable: true
          ignorable: true
          httpTimeout: 1m30s
          managedResources:
          - name: nvidia.com/gpu
            ignoredByScheduler: true
          tlsConfig:
            serverName: gpu-extender
            caData: {base64.b64encode(pem).decode()}
        - urlPrefix: http://127.0.0.1:8888/
        """,
    )
    first, second = cfg.extenders
    assert first == ExtenderConfig(
        url_prefix="https://gpu-extender.kube-system:8443/scheduler",
        filter_verb="filter",
        preempt_verb="preempt",
        prioritize_verb="prioritize",
        weight=5,
        bind_verb="bind",
        enable_https=True,
        tls_config=ExtenderTLSConfig(server_name="gpu-extender", ca_data=pem),
        http_timeout=90.0,
        node_cache_capable=True,
        managed_resources=(ManagedResource("nvidia.com/gpu", True),),
        ignorable=True,
    )
    # extender.go NewHTTPExtender: no httpTimeout (or 0) is DefaultExtenderTimeout, 5 s.
    assert second.http_timeout == DEFAULT_EXTENDER_TIMEOUT == 5.0
    assert second.weight == 0 and not second.ignorable


def test_zero_http_timeout_is_the_default(tmp_path: Path) -> None:
    cfg = load(tmp_path, "extenders:\n- urlPrefix: http://e:80\n  httpTimeout: 0s\n")
    assert cfg.extenders[0].http_timeout == DEFAULT_EXTENDER_TIMEOUT


def test_ignored_by_scheduler_resources_go_to_node_resources_fit(tmp_path: Path) -> None:
    """scheduler.go buildExtenders: NodeResourcesFitArgs.IgnoredResources of
    every profile becomes the managed resources marked ignoredByScheduler."""
    path = write(
        tmp_path,
        """
        profiles:
        - schedulerName: a
        - schedulerName: b
          pluginConfig:
          - name: NodeResourcesFit
            args:
              ignoredResources: [example.com/other]
        extenders:
        - urlPrefix: http://e:80
          managedResources:
          - name: example.com/gpu
            ignoredByScheduler: true
          - name: example.com/fpga
        """,
    )
    cfg = load_config(path, load_registry())
    for profile in cfg.profiles:
        assert profile.plugin_args["NodeResourcesFit"].ignored_resources == ["example.com/gpu"]


CASES = [
    (
        "urlPrefix missing",
        "extenders:\n- filterVerb: filter\n",
        "extenders[0].urlPrefix",
        "required value",
    ),
    (
        "urlPrefix not http",
        "extenders:\n- urlPrefix: 127.0.0.1:8888\n",
        "extenders[0].urlPrefix",
        "want an absolute http:// or https:// URL",
    ),
    (
        "unknown field",
        "extenders:\n- urlPrefix: http://e\n  filterverb: filter\n",
        "extenders[0].filterverb",
        'unknown field "filterverb"',
    ),
    (
        "prioritizer without weight (validateExtenders)",
        "extenders:\n- urlPrefix: http://e\n  prioritizeVerb: prioritize\n",
        "extenders[0].weight",
        "must have a positive weight applied to it",
    ),
    (
        "negative weight",
        "extenders:\n- urlPrefix: http://e\n  prioritizeVerb: p\n  weight: -2\n",
        "extenders[0].weight",
        "invalid value -2: must have a positive weight applied to it",
    ),
    (
        "two binders (validateExtenders)",
        "extenders:\n- urlPrefix: http://a\n  bindVerb: bind\n- urlPrefix: http://b\n  bindVerb: bind\n",
        "extenders",
        "found 2 extenders implementing bind: only one extender can implement bind",
    ),
    (
        "managed resource not extended (validateExtendedResourceName)",
        "extenders:\n- urlPrefix: http://e\n  managedResources:\n  - name: cpu\n",
        "extenders[0].managedResources[0].name",
        "is an invalid extended resource name",
    ),
    (
        "managed resource in kubernetes.io",
        "extenders:\n- urlPrefix: http://e\n  managedResources:\n  - name: kubernetes.io/gpu\n",
        "extenders[0].managedResources[0].name",
        "is an invalid extended resource name",
    ),
    (
        "managed resource not a qualified name",
        "extenders:\n- urlPrefix: http://e\n  managedResources:\n  - name: Example.com/gpu\n",
        "extenders[0].managedResources[0].name",
        "prefix part",
    ),
    (
        "managed resource twice, across extenders",
        "extenders:\n- urlPrefix: http://a\n  managedResources:\n  - name: example.com/gpu\n"
        "- urlPrefix: http://b\n  managedResources:\n  - name: example.com/gpu\n",
        "extenders[1].managedResources[0].name",
        "duplicate extender managed resource name",
    ),
    (
        "httpTimeout not a duration",
        "extenders:\n- urlPrefix: http://e\n  httpTimeout: 5 seconds\n",
        "extenders[0].httpTimeout",
        "invalid duration '5 seconds'",
    ),
    (
        "httpTimeout negative",
        "extenders:\n- urlPrefix: http://e\n  httpTimeout: -1s\n",
        "extenders[0].httpTimeout",
        "must not be negative",
    ),
    (
        "caData not base64",
        "extenders:\n- urlPrefix: https://e\n  tlsConfig:\n    caData: '%%%'\n",
        "extenders[0].tlsConfig.caData",
        "invalid base64",
    ),
    (
        "insecure with a CA (TLSConfigFor)",
        "extenders:\n- urlPrefix: https://e\n  tlsConfig:\n    insecure: true\n    caFile: /ca.crt\n",
        "extenders[0].tlsConfig.insecure",
        "specifying a root certificates file with the insecure flag is not allowed",
    ),
    (
        "client certificate without key",
        "extenders:\n- urlPrefix: https://e\n  tlsConfig:\n    certFile: /tls.crt\n",
        "extenders[0].tlsConfig",
        "a client certificate without a client key",
    ),
]


@pytest.mark.parametrize(
    ("body", "field", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_malformed_extenders_are_refused_with_file_field_and_reason(
    tmp_path: Path, body: str, field: str, reason: str
) -> None:
    err = load_error(tmp_path, body)
    fields = {e.field: e.reason for e in err.errors}
    assert field in fields, str(err)
    assert reason.lower() in fields[field].lower(), str(err)
    assert str(tmp_path / "scheduler-config.yaml") in str(err)
