"""A validated scheduler configuration, as the runtime consumes it.

``berth.framework.config`` turns a KubeSchedulerConfiguration file into
these records: defaults applied, multiPoint expanded, args decoded, every
check of upstream's validation done. The runtime trusts them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from berth.framework.extenders import ExtenderConfig


@dataclass(frozen=True, slots=True)
class PluginRef:
    name: str
    # Score weight; 0 elsewhere.
    weight: int = 0


@dataclass(frozen=True, slots=True)
class ProfileConfig:
    scheduler_name: str
    # Extension point name (as the config spells it: "filter", "score", ...)
    # to the enabled plugins in the order they run.
    plugins: Mapping[str, tuple[PluginRef, ...]]
    # Plugin name to its decoded args (an instance of the plugin's Args).
    plugin_args: Mapping[str, Any] = field(default_factory=dict)
    # None: inherit the scheduler-wide value.
    percentage_of_nodes_to_score: int | None = None

    def enabled(self, extension_point: str) -> tuple[PluginRef, ...]:
        return self.plugins.get(extension_point, ())


@dataclass(frozen=True, slots=True)
class LeaderElectionConfig:
    """KubeSchedulerConfiguration.leaderElection with upstream's defaults
    (component-base RecommendedDefaultLeaderElectionConfiguration and
    SetDefaults_KubeSchedulerConfiguration)."""

    leader_elect: bool = True
    lease_duration_seconds: float = 15.0
    renew_deadline_seconds: float = 10.0
    retry_period_seconds: float = 2.0
    resource_lock: str = "leases"
    resource_name: str = "kube-scheduler"
    resource_namespace: str = "kube-system"


@dataclass(frozen=True, slots=True)
class ClientConnectionConfig:
    """KubeSchedulerConfiguration.clientConnection with the scheduler's
    defaults (QPS 50, burst 100)."""

    kubeconfig: str = ""
    accept_content_types: str = ""
    content_type: str = "application/vnd.kubernetes.protobuf"
    qps: float = 50.0
    burst: int = 100


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    profiles: tuple[ProfileConfig, ...]
    # 0 means upstream's adaptive default.
    percentage_of_nodes_to_score: int = 0
    pod_initial_backoff_seconds: int = 1
    pod_max_backoff_seconds: int = 10
    # Where the configuration came from, for messages.
    source: str = "<defaults>"
    parallelism: int = 16
    leader_election: LeaderElectionConfig = field(default_factory=LeaderElectionConfig)
    client_connection: ClientConnectionConfig = field(default_factory=ClientConnectionConfig)
    enable_profiling: bool = True
    # Go's blocking profile; no Python counterpart, so never on (framework/config.py).
    enable_contention_profiling: bool = False
    delay_cache_until_active: bool = False
    # KubeSchedulerConfiguration.extenders, in the file's order.
    extenders: tuple[ExtenderConfig, ...] = ()

    def profile(self, scheduler_name: str) -> ProfileConfig | None:
        for p in self.profiles:
            if p.scheduler_name == scheduler_name:
                return p
        return None
