"""The effective configuration as a ``kubescheduler.config.k8s.io/v1``
KubeSchedulerConfiguration, what kube-scheduler's ``/configz`` serves
(cmd/kube-scheduler/app/server.go ``Run``: the completed configuration
converted to v1 and registered under ``componentconfig``;
component-base configz/configz.go ``write``).

Every default is applied, as upstream's is. Each profile's plugins are the
expanded lists Berth runs, one per extension point (upstream shows the
defaults folded into ``multiPoint``; the plugins that run are the same), and
``pluginConfig`` holds the decoded args of every plugin that has args, with
``kind`` and ``apiVersion`` as upstream writes them.
"""

from __future__ import annotations

import base64
import dataclasses
import re
from typing import Any

import msgspec

from berth.framework.extenders import ExtenderConfig
from berth.framework.profile import ProfileConfig, SchedulerConfig

API_VERSION = "kubescheduler.config.k8s.io/v1"
KIND = "KubeSchedulerConfiguration"
# configz.New("componentconfig") in server.go Run.
CONFIGZ_NAME = "componentconfig"


def go_duration(seconds: float) -> str:
    """Go's ``time.Duration.String`` for the durations a configuration holds:
    ``15s``, ``1m30s``, ``1h0m0s``, ``500ms``."""
    if seconds == 0:
        return "0s"
    if 0 < abs(seconds) < 1:
        return f"{seconds * 1000:g}ms"
    whole = int(seconds)
    frac = seconds - whole
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    s = f"{secs + frac:g}s"
    if hours:
        return f"{hours}h{minutes}m{s}"
    if minutes:
        return f"{minutes}m{s}"
    return s


def _args(name: str, value: Any) -> dict[str, Any]:
    body = msgspec.to_builtins(value) if value is not None else {}
    if not isinstance(body, dict):
        body = {"value": body}
    return {"kind": f"{name}Args", "apiVersion": API_VERSION, **body}


def _profile(p: ProfileConfig) -> dict[str, Any]:
    out: dict[str, Any] = {
        "schedulerName": p.scheduler_name,
        "plugins": {
            point: {"enabled": [{"name": r.name, "weight": r.weight} for r in refs]}
            for point, refs in p.plugins.items()
        },
        "pluginConfig": [
            {"name": name, "args": _args(name, value)}
            for name, value in sorted(p.plugin_args.items())
        ],
    }
    if p.percentage_of_nodes_to_score is not None:
        out["percentageOfNodesToScore"] = p.percentage_of_nodes_to_score
    return out


def _camel(name: str) -> str:
    return re.sub(r"_([a-z])", lambda m: m.group(1).upper(), name)


def _camel_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {_camel(str(k)): _camel_keys(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_camel_keys(v) for v in value]
    return value


def _extender(e: ExtenderConfig) -> dict[str, Any]:
    """One extender as types.go's Extender spells it; httpTimeout a Go
    duration, tlsConfig's byte fields base64 as Go encodes []byte, except
    keyData, never shown (upstream marks it datapolicy:"security-key")."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(e):
        value = getattr(e, f.name)
        if f.name == "http_timeout":
            value = go_duration(value)
        elif f.name == "url_prefix":
            out["urlPrefix"] = value
            continue
        elif f.name == "enable_https":
            out["enableHTTPS"] = value
            continue
        elif f.name == "tls_config" and value is not None:
            tls = {}
            for tf in dataclasses.fields(value):
                v = getattr(value, tf.name)
                if tf.name == "key_data":
                    v = "<redacted>" if v else ""
                elif isinstance(v, bytes):
                    v = base64.b64encode(v).decode()
                tls[_camel(tf.name)] = v
            value = tls
        else:
            value = _camel_keys(msgspec.to_builtins(value))
        out[_camel(f.name)] = value
    return out


def effective_config(config: SchedulerConfig) -> dict[str, Any]:
    """The configuration as v1 JSON (field names and Go durations as
    upstream's types.go spells them)."""
    le = config.leader_election
    cc = config.client_connection
    return {
        "kind": KIND,
        "apiVersion": API_VERSION,
        "parallelism": config.parallelism,
        "leaderElection": {
            "leaderElect": le.leader_elect,
            "leaseDuration": go_duration(le.lease_duration_seconds),
            "renewDeadline": go_duration(le.renew_deadline_seconds),
            "retryPeriod": go_duration(le.retry_period_seconds),
            "resourceLock": le.resource_lock,
            "resourceName": le.resource_name,
            "resourceNamespace": le.resource_namespace,
        },
        "clientConnection": {
            "kubeconfig": cc.kubeconfig,
            "acceptContentTypes": cc.accept_content_types,
            "contentType": cc.content_type,
            "qps": cc.qps,
            "burst": cc.burst,
        },
        "enableProfiling": config.enable_profiling,
        "enableContentionProfiling": config.enable_contention_profiling,
        "percentageOfNodesToScore": config.percentage_of_nodes_to_score,
        "podInitialBackoffSeconds": config.pod_initial_backoff_seconds,
        "podMaxBackoffSeconds": config.pod_max_backoff_seconds,
        "profiles": [_profile(p) for p in config.profiles],
        "extenders": [_extender(e) for e in config.extenders] or None,
        "delayCacheUntilActive": config.delay_cache_until_active,
    }


def configz(config: SchedulerConfig) -> dict[str, Any]:
    """``/configz``'s body: ``{"componentconfig": <the configuration>}``."""
    return {CONFIGZ_NAME: effective_config(config)}


__all__ = ["CONFIGZ_NAME", "configz", "effective_config", "go_duration"]
