"""KubeSchedulerConfiguration (``kubescheduler.config.k8s.io/v1``) to SchedulerConfig.

A file goes through the stages kube-scheduler puts it through, and each
function here names the upstream function it follows:

1. Strict decoding (cmd/kube-scheduler/app/options/configfile.go, loadConfig,
   with the strict codec of pkg/scheduler/apis/config/scheme): an unknown,
   duplicated or mistyped field is refused. This stage stops at the first
   problem, since nothing after it can be trusted.
2. Defaulting (pkg/scheduler/apis/config/v1/defaults.go,
   SetDefaults_KubeSchedulerConfiguration; default_plugins.go,
   getDefaultPlugins and mergePlugins/mergePluginSet).
3. Validation (pkg/scheduler/apis/config/validation/validation.go,
   ValidateKubeSchedulerConfiguration) together with the checks upstream only
   makes when it builds the frameworks (framework/runtime/framework.go,
   NewFramework: updatePluginList, expandMultiPointPlugins,
   getValidScoreWeights; profile/profile.go, cfgValidator.validate), so that a
   profile the runtime would refuse is refused here, at start, with its field.

Stages 2 and 3 collect every problem and raise them together as one
``ConfigError``; its first line reads on its own.

Where Berth differs from upstream, on purpose:

- Upstream's default plugins that Berth does not provide yet are left out of
  the default set (one warning lists them); naming one explicitly in an
  ``enabled`` list is an error, since Berth could not run it.
- An unknown plugin name in ``pluginConfig`` is an error (upstream ignores
  it, which hides typos). Names of upstream in-tree plugins are accepted
  there, so a config written for kube-scheduler loads.
- An unknown name in a ``disabled`` list is ignored as upstream ignores it
  (pkg/scheduler/apis/config/v1/default_plugins.go, mergePluginSet: disabling
  a plugin nobody enabled changes nothing), but logged as a warning naming the
  file and field with the closest registered name, so a typo is visible.
  Configs in the wild carry such names (e.g. a disabled "NodeResourceFit",
  a misspelling of NodeResourcesFit).
- A negative Score weight is refused (upstream accepts it and subtracts).
- ``extenders``: see berth.framework.extenders for what Berth refuses
  beyond upstream's validateExtenders.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
import yaml

from berth.framework.extenders import (
    DEFAULT_EXTENDER_TIMEOUT,
    ExtenderConfig,
    ExtenderTLSConfig,
    ManagedResource,
    ignored_resources,
    validate_extenders,
)
from berth.framework.interfaces import (
    EXTENSION_POINTS,
    BindPlugin,
    Plugin,
    QueueSortPlugin,
)
from berth.framework.profile import (
    ClientConnectionConfig,
    LeaderElectionConfig,
    PluginRef,
    ProfileConfig,
    SchedulerConfig,
)
from berth.framework.registry import RegistryLike, args_type_of, implements, points_of

if TYPE_CHECKING:
    from typing import NoReturn

__all__ = [
    "API_VERSION",
    "DEFAULT_SCHEDULER_NAME",
    "KIND",
    "UPSTREAM_DEFAULT_PLUGINS",
    "UPSTREAM_PLUGIN_NAMES",
    "ConfigError",
    "default_config",
    "load_config",
    "parse_config",
    "parse_go_duration",
]

log = logging.getLogger(__name__)

API_VERSION = "kubescheduler.config.k8s.io/v1"
KIND = "KubeSchedulerConfiguration"
# k8s.io/api/core/v1, DefaultSchedulerName.
DEFAULT_SCHEDULER_NAME = "default-scheduler"
MULTI_POINT = "multiPoint"

# default_plugins.go, getDefaultPlugins, as of the pinned Kubernetes release
# (hack/k8s-versions.env, v1.36) with its default feature gates:
# DynamicResourceAllocation (GA) puts DynamicResources before
# DefaultPreemption; NodeDeclaredFeatures (beta, on) is appended. All of them
# are enabled under multiPoint; the number is the Score weight.
UPSTREAM_DEFAULT_PLUGINS: tuple[tuple[str, int | None], ...] = (
    ("SchedulingGates", None),
    ("PrioritySort", None),
    ("NodeUnschedulable", None),
    ("NodeName", None),
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodePorts", None),
    ("NodeResourcesFit", 1),
    ("VolumeRestrictions", None),
    ("NodeVolumeLimits", None),
    ("VolumeBinding", None),
    ("VolumeZone", None),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    ("DynamicResources", 2),
    ("DefaultPreemption", None),
    ("NodeResourcesBalancedAllocation", 1),
    ("ImageLocality", 1),
    ("DefaultBinder", None),
    ("NodeDeclaredFeatures", None),
)

# pkg/scheduler/framework/plugins/names/names.go: every in-tree plugin.
UPSTREAM_PLUGIN_NAMES: frozenset[str] = frozenset(
    {
        "PrioritySort",
        "DefaultBinder",
        "DefaultPreemption",
        "DynamicResources",
        "GangScheduling",
        "ImageLocality",
        "InterPodAffinity",
        "NodeAffinity",
        "NodeDeclaredFeatures",
        "NodeName",
        "NodePorts",
        "NodeResourcesBalancedAllocation",
        "NodeResourcesFit",
        "NodeUnschedulable",
        "NodeVolumeLimits",
        "PodTopologySpread",
        "SchedulingGates",
        "TaintToleration",
        "VolumeBinding",
        "VolumeRestrictions",
        "VolumeZone",
        "TopologyPlacementGenerator",
        "PodGroupPodsCount",
    }
)

# validation.go, invalidPluginsByVersion: plugins removed by v1.
_REMOVED_PLUGINS = frozenset({"AzureDiskLimits", "CinderLimits", "EBSLimits", "GCEPDLimits"})

# Served by older releases only; named so the message can say so.
_OLD_API_VERSIONS = frozenset(
    {
        "kubescheduler.config.k8s.io/v1alpha1",
        "kubescheduler.config.k8s.io/v1alpha2",
        "kubescheduler.config.k8s.io/v1beta1",
        "kubescheduler.config.k8s.io/v1beta2",
        "kubescheduler.config.k8s.io/v1beta3",
    }
)

# Extension points of v1 that Berth has no runtime for (alpha upstream).
_UNSUPPORTED_POINTS = ("placementGenerate", "placementScore")


# -- errors -------------------------------------------------------------------


class ConfigError(ValueError):
    """A configuration the scheduler refuses to start with.

    ``source`` is the file (or ``<string>``, ``<defaults>``), ``field`` an
    upstream-style path such as ``profiles[0].plugins.score.enabled[1].weight``
    (a line and column for YAML syntax errors; empty when the problem is the
    file itself), ``reason`` what is wrong. When several problems are found
    together, ``errors`` holds all of them and ``field``/``reason`` are the
    first one's; ``str()`` gives one line per problem.
    """

    def __init__(
        self, source: str, field: str, reason: str, *, errors: Sequence[ConfigError] = ()
    ) -> None:
        self.source = source
        self.field = field
        self.reason = reason
        self.errors: tuple[ConfigError, ...] = tuple(errors) if errors else (self,)
        super().__init__(str(self))

    @classmethod
    def collect(cls, errors: Sequence[ConfigError]) -> ConfigError:
        """One error carrying ``errors`` (at least one), the first one first."""
        if not errors:
            raise ValueError("ConfigError.collect needs at least one error")
        if len(errors) == 1:
            return errors[0]
        first = errors[0]
        return cls(first.source, first.field, first.reason, errors=errors)

    def line(self) -> str:
        """This problem alone, as ``source: field: reason``."""
        if not self.field:
            return f"{self.source}: {self.reason}"
        return f"{self.source}: {self.field}: {self.reason}"

    def __str__(self) -> str:
        return "\n".join(e.line() for e in self.errors)

    def __reduce__(self) -> tuple[Any, ...]:
        more = self.errors if len(self.errors) > 1 else ()
        return (_rebuild_error, (self.source, self.field, self.reason, more))


def _rebuild_error(
    source: str, field: str, reason: str, errors: Sequence[ConfigError]
) -> ConfigError:
    return ConfigError(source, field, reason, errors=errors)


# -- public entry points ------------------------------------------------------


def load_config(path: str | os.PathLike[str], registry: RegistryLike) -> SchedulerConfig:
    """Reads, decodes, defaults and validates a KubeSchedulerConfiguration
    file against ``registry``, the plugins the scheduler can build
    (berth.plugins.registry.load_registry() in a scheduler or server). Raises
    ConfigError naming the file, the field and the reason."""
    source = os.fspath(path)
    try:
        with open(source, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise ConfigError(source, "", "file does not exist") from None
    except IsADirectoryError:
        raise ConfigError(source, "", "is a directory, not a file") from None
    except OSError as exc:
        raise ConfigError(source, "", f"cannot read file: {exc.strerror or exc}") from None
    return parse_config_text(data, source, registry)


def parse_config_text(text: str | bytes, source: str, registry: RegistryLike) -> SchedulerConfig:
    """Like load_config, for YAML or JSON text already in memory (``source``
    names it in errors); decoded as strictly as a file (a repeated key is refused)."""
    data = text.encode() if isinstance(text, str) else text
    return parse_config(_load_yaml(data, source), source, registry)


def parse_config(doc: object, source: str, registry: RegistryLike) -> SchedulerConfig:
    """Like load_config, for a document already loaded from YAML or JSON."""
    return _Parser(source, registry).parse(doc)


def default_config(registry: RegistryLike) -> SchedulerConfig:
    """What an empty KubeSchedulerConfiguration means: one profile,
    ``default-scheduler``, with upstream's default plugins that are in
    ``registry``."""
    return parse_config({"apiVersion": API_VERSION, "kind": KIND}, "<defaults>", registry)


# -- YAML ---------------------------------------------------------------------


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key repeated in one mapping, as upstream's
    strict YAML decoding does."""


def _construct_mapping_once(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[object] = set()
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"duplicate key {key!r}",
                key_node.start_mark,
            )
        seen.add(key)
    return loader.construct_mapping(node)


_StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping_once,
)


def _load_yaml(data: bytes, source: str) -> object:
    try:
        return yaml.load(data, Loader=_StrictLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        reason = exc.problem or "invalid YAML"
        if exc.context:
            ctx_mark = exc.context_mark
            ctx_where = ""
            if ctx_mark is not None and ctx_mark is not mark:
                ctx_where = f" at line {ctx_mark.line + 1}, column {ctx_mark.column + 1}"
            reason = f"{reason} ({exc.context}{ctx_where})"
        raise ConfigError(source, where, f"invalid YAML: {reason}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(source, "", f"invalid YAML: {exc}") from None


# -- strict schema (k8s.io/kube-scheduler/config/v1, types.go) ---------------

Int32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]
Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class _PluginV1(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    weight: Int32 | None = None


class _PluginSetV1(msgspec.Struct, forbid_unknown_fields=True):
    enabled: list[_PluginV1] | None = None
    disabled: list[_PluginV1] | None = None


class _PluginsV1(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    pre_enqueue: _PluginSetV1 | None = None
    queue_sort: _PluginSetV1 | None = None
    pre_filter: _PluginSetV1 | None = None
    filter: _PluginSetV1 | None = None
    post_filter: _PluginSetV1 | None = None
    pre_score: _PluginSetV1 | None = None
    score: _PluginSetV1 | None = None
    reserve: _PluginSetV1 | None = None
    permit: _PluginSetV1 | None = None
    pre_bind: _PluginSetV1 | None = None
    bind: _PluginSetV1 | None = None
    post_bind: _PluginSetV1 | None = None
    multi_point: _PluginSetV1 | None = None
    placement_generate: _PluginSetV1 | None = None
    placement_score: _PluginSetV1 | None = None

    def point(self, name: str) -> _PluginSetV1 | None:
        value = getattr(self, _SNAKE[name])
        assert value is None or isinstance(value, _PluginSetV1)
        return value


_SNAKE = {
    camel: re.sub(r"[A-Z]", lambda m: "_" + m.group(0).lower(), camel)
    for camel in (*EXTENSION_POINTS, MULTI_POINT, *_UNSUPPORTED_POINTS)
}


class _PluginConfigV1(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    args: Any = None


class _ProfileV1(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    scheduler_name: str | None = None
    percentage_of_nodes_to_score: Int32 | None = None
    plugins: _PluginsV1 | None = None
    plugin_config: list[_PluginConfigV1] | None = None


class _LeaderElectionV1(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    leader_elect: bool | None = None
    lease_duration: str | None = None
    renew_deadline: str | None = None
    retry_period: str | None = None
    resource_lock: str | None = None
    resource_name: str | None = None
    resource_namespace: str | None = None


class _ClientConnectionV1(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    kubeconfig: str | None = None
    accept_content_types: str | None = None
    content_type: str | None = None
    qps: float | None = None
    burst: Int32 | None = None


class _ExtenderTLSConfigV1(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    insecure: bool = False
    server_name: str = ""
    cert_file: str = ""
    key_file: str = ""
    ca_file: str = ""
    # []byte in Go: base64 in the file.
    cert_data: bytes | None = None
    key_data: bytes | None = None
    ca_data: bytes | None = None


class _ExtenderManagedResourceV1(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    name: str
    ignored_by_scheduler: bool = False


class _ExtenderV1(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    url_prefix: str
    filter_verb: str = ""
    preempt_verb: str = ""
    prioritize_verb: str = ""
    weight: Int64 = 0
    bind_verb: str = ""
    enable_https: bool = msgspec.field(default=False, name="enableHTTPS")
    tls_config: _ExtenderTLSConfigV1 | None = None
    http_timeout: str | None = None
    node_cache_capable: bool = False
    managed_resources: list[_ExtenderManagedResourceV1] | None = None
    ignorable: bool = False


class _ConfigV1(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    api_version: str | None = None
    kind: str | None = None
    parallelism: Int32 | None = None
    leader_election: _LeaderElectionV1 | None = None
    client_connection: _ClientConnectionV1 | None = None
    enable_profiling: bool | None = None
    enable_contention_profiling: bool | None = None
    percentage_of_nodes_to_score: Int32 | None = None
    pod_initial_backoff_seconds: Int64 | None = None
    pod_max_backoff_seconds: Int64 | None = None
    profiles: list[_ProfileV1] | None = None
    extenders: list[_ExtenderV1] | None = None
    delay_cache_until_active: bool | None = None


_MSGSPEC_AT = re.compile(r"^(?P<what>.*?)(?: - at `(?P<path>[^`]*)`(?P<key> in `[^`]*`)?)?$", re.S)


def _msgspec_issue(message: str, base: str) -> tuple[str, str]:
    """Turns a msgspec validation message (``... - at `$.a[0].b```) into a
    field path under ``base`` and a reason."""
    m = _MSGSPEC_AT.match(message)
    what, path = (m.group("what"), m.group("path") or "$") if m else (message, "$")
    if m and m.group("key"):
        # "Expected `str` - at `key` in `$.x`": a mapping key of the wrong type.
        path = m.group("key")[len(" in `") : -1]
        what = "keys must be strings"
    where = _join_path(base, path[1:] if path.startswith("$") else path)
    unknown = re.fullmatch(r"Object contains unknown field `(.*)`", what)
    if unknown:
        return _join_path(where, "." + unknown.group(1)), f'unknown field "{unknown.group(1)}"'
    missing = re.fullmatch(r"Object missing required field `(.*)`", what)
    if missing:
        return _join_path(where, "." + missing.group(1)), "required value"
    reason = what.replace(" | null", "").replace("`object`", "`mapping`")
    reason = reason.replace("`array`", "`list`").replace("`", "")
    return where, reason[:1].lower() + reason[1:]


def _join_path(base: str, sub: str) -> str:
    if not sub:
        return base
    if not base:
        return sub.lstrip(".")
    if sub[0] not in ".[":
        sub = "." + sub
    return base + sub


# -- durations ----------------------------------------------------------------

_DURATION_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_DURATION_UNIT = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


def parse_go_duration(text: str) -> float:
    """Seconds in a Go duration string (``15s``, ``1m30s``, ``250ms``), the
    format of metav1.Duration (Go's time.ParseDuration)."""
    s = text
    sign = 1.0
    if s[:1] in ("+", "-"):
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise ValueError(f"invalid duration {text!r}")
    total = 0.0
    pos = 0
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if m is None:
            raise ValueError(f"invalid duration {text!r}: want e.g. 15s, 1m30s, 250ms")
        total += float(m.group(1)) * _DURATION_UNIT[m.group(2)]
        pos = m.end()
    return sign * total


# -- defaulting and validation --------------------------------------------------


@dataclass(slots=True)
class _Entry:
    """One plugin in a plugin set, remembering where the file named it."""

    name: str
    weight: int | None
    # Path of this entry in the file; None for upstream's default plugins.
    field: str | None


@dataclass(slots=True)
class _Set:
    enabled: list[_Entry] = field(default_factory=list)
    disabled: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _ProfileOutcome:
    name: str | None
    config: ProfileConfig | None
    # Cross-profile checks (validateCommonQueueSort, cfgValidator.validate).
    literal_queue_sort: tuple[tuple[tuple[str, int], ...], tuple[str, ...]]
    queue_sort: str | None
    queue_sort_args: Any
    queue_sort_args_field: str


class _Parser:
    def __init__(self, source: str, registry: RegistryLike) -> None:
        self.source = source
        self.registry = registry
        self.errors: list[ConfigError] = []
        self._missing_defaults: dict[str, None] = {}

    # -- error helpers --------------------------------------------------------

    def fail(self, field: str, reason: str) -> NoReturn:
        raise ConfigError(self.source, field, reason)

    def error(self, field: str, reason: str) -> None:
        self.errors.append(ConfigError(self.source, field, reason))

    # -- stage 1: apiVersion, kind, strict decoding -----------------------------

    def parse(self, doc: object) -> SchedulerConfig:
        if doc is None:
            self.fail("", f"the file is empty; expected a {KIND} ({API_VERSION})")
        if not isinstance(doc, Mapping):
            self.fail("", f"expected a {KIND} mapping, got {_kind_of(doc)}")
        api_version = doc.get("apiVersion")
        kind = doc.get("kind")
        if api_version is None:
            self.fail("apiVersion", f'required value; want "{API_VERSION}"')
        if api_version != API_VERSION:
            hint = " (no longer served upstream)" if api_version in _OLD_API_VERSIONS else ""
            self.fail(
                "apiVersion", f'unsupported value {api_version!r}{hint}; want "{API_VERSION}"'
            )
        if kind is None:
            self.fail("kind", f'required value; want "{KIND}"')
        if kind != KIND:
            self.fail("kind", f'unsupported value {kind!r}; want "{KIND}"')
        try:
            raw = msgspec.convert(doc, _ConfigV1)
        except msgspec.ValidationError as exc:
            self.fail(*_msgspec_issue(str(exc), ""))
        result = self._config(raw)
        if self.errors:
            raise ConfigError.collect(_unique(self.errors))
        assert result is not None
        if self._missing_defaults:
            log.warning(
                "%s: upstream default plugins not available in Berth yet, left out of the "
                "default set: %s",
                self.source,
                ", ".join(self._missing_defaults),
            )
        return result

    # -- stages 2 and 3 -------------------------------------------------------

    def _config(self, raw: _ConfigV1) -> SchedulerConfig | None:
        """SetDefaults_KubeSchedulerConfiguration, then
        ValidateKubeSchedulerConfiguration (in its order)."""
        client = self._client_connection(raw.client_connection)
        leader = self._leader_election(raw.leader_election)

        parallelism = 16 if raw.parallelism is None else raw.parallelism
        if parallelism <= 0:
            self.error("parallelism", "should be an integer value greater than zero")

        raw_profiles = raw.profiles or [_ProfileV1()]
        outcomes = [self._profile(i, p, len(raw_profiles)) for i, p in enumerate(raw_profiles)]
        seen_names: dict[str, int] = {}
        for i, outcome in enumerate(outcomes):
            name = outcome.name
            if not name:
                continue
            if name in seen_names:
                self.error(
                    f"profiles[{i}].schedulerName",
                    f"duplicate value {name!r} (also profiles[{seen_names[name]}].schedulerName)",
                )
            else:
                seen_names[name] = i
        self._common_queue_sort(outcomes)

        pct = 0 if raw.percentage_of_nodes_to_score is None else raw.percentage_of_nodes_to_score
        self._percentage("percentageOfNodesToScore", pct)

        initial = 1 if raw.pod_initial_backoff_seconds is None else raw.pod_initial_backoff_seconds
        maximum = 10 if raw.pod_max_backoff_seconds is None else raw.pod_max_backoff_seconds
        if initial <= 0:
            self.error("podInitialBackoffSeconds", f"must be greater than 0, got {initial}")
        if maximum < initial:
            self.error(
                "podMaxBackoffSeconds",
                f"must be greater than or equal to podInitialBackoffSeconds ({initial}), "
                f"got {maximum}",
            )

        extenders = self._extenders(raw.extenders or [])

        if raw.enable_contention_profiling:
            self.error(
                "enableContentionProfiling",
                "not supported: it turns on Go's blocking profile (runtime.SetBlockProfileRate), "
                "which a Python process has no counterpart of; remove it or set it to false "
                "(enableProfiling's stacks and CPU profile do not need it)",
            )

        profiles = [o.config for o in outcomes]
        if self.errors:
            return None
        profiles = _ignore_extender_resources(profiles, extenders)
        enable_profiling = True if raw.enable_profiling is None else raw.enable_profiling
        contention = raw.enable_contention_profiling
        return SchedulerConfig(
            profiles=tuple(p for p in profiles if p is not None),
            percentage_of_nodes_to_score=pct,
            pod_initial_backoff_seconds=initial,
            pod_max_backoff_seconds=maximum,
            source=self.source,
            parallelism=parallelism,
            leader_election=leader,
            client_connection=client,
            enable_profiling=enable_profiling,
            # Go's blocking profile has no Python counterpart: never on here.
            enable_contention_profiling=False if contention is None else contention,
            delay_cache_until_active=bool(raw.delay_cache_until_active),
            extenders=tuple(extenders),
        )

    def _extenders(self, raw: Sequence[_ExtenderV1]) -> list[ExtenderConfig]:
        """KubeSchedulerConfiguration.extenders: httpTimeout 0 or unset is
        extender.go's DefaultExtenderTimeout; then validateExtenders
        (berth.framework.extenders)."""
        out: list[ExtenderConfig] = []
        for i, e in enumerate(raw):
            timeout = DEFAULT_EXTENDER_TIMEOUT
            if e.http_timeout is not None:
                try:
                    timeout = parse_go_duration(e.http_timeout) or DEFAULT_EXTENDER_TIMEOUT
                except ValueError as exc:
                    self.error(f"extenders[{i}].httpTimeout", str(exc))
            tls = None
            if e.tls_config is not None:
                t = e.tls_config
                tls = ExtenderTLSConfig(
                    insecure=t.insecure,
                    server_name=t.server_name,
                    cert_file=t.cert_file,
                    key_file=t.key_file,
                    ca_file=t.ca_file,
                    cert_data=t.cert_data or b"",
                    key_data=t.key_data or b"",
                    ca_data=t.ca_data or b"",
                )
            out.append(
                ExtenderConfig(
                    url_prefix=e.url_prefix,
                    filter_verb=e.filter_verb,
                    preempt_verb=e.preempt_verb,
                    prioritize_verb=e.prioritize_verb,
                    weight=e.weight,
                    bind_verb=e.bind_verb,
                    enable_https=e.enable_https,
                    tls_config=tls,
                    http_timeout=timeout,
                    node_cache_capable=e.node_cache_capable,
                    managed_resources=tuple(
                        ManagedResource(r.name, r.ignored_by_scheduler)
                        for r in e.managed_resources or ()
                    ),
                    ignorable=e.ignorable,
                )
            )
        for where, reason in validate_extenders(out):
            self.error(where, reason)
        return out

    def _percentage(self, field: str, value: int) -> None:
        # validation.go, validatePercentageOfNodesToScore.
        if not 0 <= value <= 100:
            self.error(field, f"not in valid range [0-100], got {value}")

    def _client_connection(self, raw: _ClientConnectionV1 | None) -> ClientConnectionConfig:
        """SetDefaults_KubeSchedulerConfiguration (QPS 50, burst 100) and
        component-base ValidateClientConnectionConfiguration."""
        raw = raw or _ClientConnectionV1()
        burst = raw.burst or 100
        if burst < 0:
            self.error("clientConnection.burst", f"must be non-negative, got {burst}")
        return ClientConnectionConfig(
            kubeconfig=raw.kubeconfig or "",
            accept_content_types=raw.accept_content_types or "",
            content_type=raw.content_type or "application/vnd.kubernetes.protobuf",
            qps=raw.qps or 50.0,
            burst=burst,
        )

    def _leader_election(self, raw: _LeaderElectionV1 | None) -> LeaderElectionConfig:
        """SetDefaults_KubeSchedulerConfiguration,
        RecommendedDefaultLeaderElectionConfiguration, then component-base
        ValidateLeaderElectionConfiguration and the scheduler's leases-only
        rule."""
        raw = raw or _LeaderElectionV1()
        base = "leaderElection"

        def seconds(name: str, text: str | None, default: float) -> float:
            if not text:
                return default
            try:
                value = parse_go_duration(text)
            except ValueError as exc:
                self.error(f"{base}.{name}", str(exc))
                return default
            return value or default

        le = LeaderElectionConfig(
            leader_elect=True if raw.leader_elect is None else raw.leader_elect,
            lease_duration_seconds=seconds("leaseDuration", raw.lease_duration, 15.0),
            renew_deadline_seconds=seconds("renewDeadline", raw.renew_deadline, 10.0),
            retry_period_seconds=seconds("retryPeriod", raw.retry_period, 2.0),
            resource_lock=raw.resource_lock or "leases",
            resource_name=raw.resource_name or "kube-scheduler",
            resource_namespace=raw.resource_namespace or "kube-system",
        )
        if not le.leader_elect:
            return le
        for name, value in (
            ("leaseDuration", le.lease_duration_seconds),
            ("renewDeadline", le.renew_deadline_seconds),
            ("retryPeriod", le.retry_period_seconds),
        ):
            if value <= 0:
                self.error(f"{base}.{name}", "must be greater than zero")
        if le.lease_duration_seconds <= le.renew_deadline_seconds:
            self.error(f"{base}.leaseDuration", "must be greater than renewDeadline")
        if le.resource_lock != "leases":
            self.error(f"{base}.resourceLock", 'resourceLock value must be "leases"')
        return le

    # -- profiles -------------------------------------------------------------

    def _profile(self, i: int, raw: _ProfileV1, count: int) -> _ProfileOutcome:
        path = f"profiles[{i}]"
        n_errors = len(self.errors)

        # SetDefaults_KubeSchedulerConfiguration names a lone profile;
        # validateKubeSchedulerProfile requires a name otherwise.
        name = raw.scheduler_name
        if name is None and count == 1:
            name = DEFAULT_SCHEDULER_NAME
        if not name:
            self.error(f"{path}.schedulerName", "required value")
        pct = raw.percentage_of_nodes_to_score
        if pct is not None:
            self._percentage(f"{path}.percentageOfNodesToScore", pct)

        plugins = raw.plugins or _PluginsV1()
        n_before_names = len(self.errors)
        custom = self._custom_sets(path, plugins)
        qs = custom.get("queueSort", _Set())
        literal_qs = (tuple((e.name, e.weight or 0) for e in qs.enabled), tuple(qs.disabled))

        names_ok = len(self.errors) == n_before_names
        merged = _merge_plugins(_default_plugin_sets(self.registry), custom)
        if names_ok and "*" not in merged[MULTI_POINT].disabled:
            disabled = set(merged[MULTI_POINT].disabled)
            for n, _ in UPSTREAM_DEFAULT_PLUGINS:
                if n not in self.registry and n not in disabled:
                    self._missing_defaults[n] = None

        # Unknown names were reported and left out: expand what is left, to
        # report every other problem of the profile too.
        self._check_multi_point_duplicates(merged[MULTI_POINT])
        enabled = {
            point: self._expand(point, merged[point], merged[MULTI_POINT])
            for point in EXTENSION_POINTS
        }

        plugin_args, args_fields = self._plugin_config(path, raw.plugin_config or [])
        all_enabled = [e.name for point in enabled.values() for e in point]
        for plugin in dict.fromkeys(all_enabled):
            self._default_args(path, plugin, plugin_args)

        weights = self._score_weights(merged)
        refs: dict[str, tuple[PluginRef, ...]] = {}
        for point, entries in enabled.items():
            if point == "score":
                refs[point] = tuple(PluginRef(e.name, weights[e.name]) for e in entries)
            else:
                refs[point] = tuple(PluginRef(e.name) for e in entries)
        queue_sort = self._check_required_points(path, refs) if names_ok else None

        config = None
        if len(self.errors) == n_errors and name:
            config = ProfileConfig(
                scheduler_name=name,
                plugins=refs,
                plugin_args=plugin_args,
                percentage_of_nodes_to_score=pct,
            )
        return _ProfileOutcome(
            name=name,
            config=config,
            literal_queue_sort=literal_qs,
            queue_sort=queue_sort,
            queue_sort_args=plugin_args.get(queue_sort) if queue_sort else None,
            queue_sort_args_field=args_fields.get(queue_sort or "", f"{path}.pluginConfig"),
        )

    def _check_required_points(
        self, path: str, refs: Mapping[str, tuple[PluginRef, ...]]
    ) -> str | None:
        """NewFramework: exactly one QueueSort, at least one Bind. Returns the
        queueSort plugin."""
        names = [r.name for r in refs["queueSort"]]
        if len(names) != 1:
            if names:
                detail = (
                    f" ({', '.join(names)}); keep one, e.g. with queueSort.disabled "
                    '[{name: "*"}] next to the one you enable'
                )
            else:
                detail = self._hint(QueueSortPlugin)
            self.error(
                f"{path}.plugins.queueSort",
                f"exactly one queueSort plugin must be enabled, got {len(names)}{detail}",
            )
        if not refs["bind"]:
            self.error(
                f"{path}.plugins.bind",
                "at least one bind plugin is needed" + self._hint(BindPlugin),
            )
        return names[0] if len(names) == 1 else None

    def _hint(self, iface: type[Plugin]) -> str:
        """Why a required extension point is empty: usually upstream's default
        plugin for it is not registered."""
        upstream = [
            n for n, _ in UPSTREAM_DEFAULT_PLUGINS if n not in self.registry and n in _DEFAULT_FOR
        ]
        wanted = [n for n in upstream if _DEFAULT_FOR[n] is iface]
        if wanted:
            return f"; upstream's default {', '.join(wanted)} is not registered in Berth"
        return ""

    def _custom_sets(self, path: str, plugins: _PluginsV1) -> dict[str, _Set]:
        """The profile's plugin sets as written, with every name checked."""
        sets: dict[str, _Set] = {}
        for point in _UNSUPPORTED_POINTS:
            ps = plugins.point(point)
            if ps is not None and (ps.enabled or ps.disabled):
                self.error(
                    f"{path}.plugins.{point}",
                    f"the {point} extension point (alpha upstream) is not supported by Berth",
                )
        for point in (MULTI_POINT, *EXTENSION_POINTS):
            ps = plugins.point(point)
            out = _Set()
            sets[point] = out
            if ps is None:
                continue
            base = f"{path}.plugins.{point}"
            for k, p in enumerate(ps.enabled or []):
                where = f"{base}.enabled[{k}]"
                known = self._check_enabled_name(p.name, f"{where}.name")
                if p.weight is not None and p.weight < 0:
                    self.error(
                        f"{where}.weight",
                        f"must not be negative, got {p.weight} (0 or absent means 1)",
                    )
                if known:
                    out.enabled.append(_Entry(p.name, p.weight, where))
            for k, p in enumerate(ps.disabled or []):
                where = f"{base}.disabled[{k}].name"
                if not p.name:
                    self.error(where, "required value")
                elif not self._known_for_disable(p.name):
                    log.warning("%s: %s: %s; ignored", self.source, where, self._unknown(p.name))
                out.disabled.append(p.name)
        return sets

    def _known_for_disable(self, name: str) -> bool:
        # Disabling an upstream plugin Berth lacks is harmless: configs
        # written for kube-scheduler do it.
        return (
            name == "*"
            or name in self.registry
            or name in UPSTREAM_PLUGIN_NAMES
            or name in _REMOVED_PLUGINS
        )

    def _check_enabled_name(self, name: str, where: str) -> bool:
        if not name:
            self.error(where, "required value")
        elif name in _REMOVED_PLUGINS:
            # validation.go, validatePluginSetForInvalidPlugins.
            self.error(
                where,
                f'"{name}" was invalid in version "{API_VERSION}" '
                f'(KubeSchedulerConfiguration is version "{API_VERSION}")',
            )
        elif name not in self.registry:
            self.error(where, self._unknown(name))
        else:
            return True
        return False

    def _unknown(self, name: str) -> str:
        message = self._unknown_message(name)
        # A registry from plugins.registry.load_registry says where it looked
        # (in-tree, the berth.plugins entry points) or why that entry point
        # failed to load.
        explain = getattr(self.registry, "explain_unknown", None)
        return str(explain(name, message)) if callable(explain) else message

    def _unknown_message(self, name: str) -> str:
        registered = ", ".join(sorted(self.registry)) or "(none)"
        if name in UPSTREAM_PLUGIN_NAMES:
            return (
                f'unknown plugin "{name}": an upstream kube-scheduler plugin Berth does not '
                f"provide yet; registered plugins: {registered}"
            )
        close = difflib.get_close_matches(name, list(self.registry), n=1)
        hint = f' (did you mean "{close[0]}"?)' if close else ""
        return f'unknown plugin "{name}"{hint}; registered plugins: {registered}'

    def _check_multi_point_duplicates(self, multi: _Set) -> None:
        # expandMultiPointPlugins: a second multiPoint entry for a plugin is a
        # double registration. Reported once here rather than once per
        # extension point the plugin serves.
        first: dict[str, _Entry] = {}
        for e in multi.enabled:
            if e.name in first:
                prior = first[e.name].field or "upstream's default plugins"
                self.error(
                    e.field or "plugins.multiPoint",
                    f'plugin "{e.name}" is already enabled under multiPoint (at {prior})',
                )
            else:
                first[e.name] = e

    def _expand(self, point: str, specific: _Set, multi: _Set) -> list[_Entry]:
        """framework.go, updatePluginList then expandMultiPointPlugins for one
        extension point."""
        chosen: list[_Entry] = []
        seen: dict[str, _Entry] = {}
        for e in specific.enabled:
            if not implements(self.registry, e.name, point):
                self.error(
                    f"{e.field}.name",
                    f'plugin "{e.name}" does not extend {point} plugin '
                    f"(it extends: {', '.join(points_of(self.registry, e.name)) or 'none'})",
                )
                continue
            if e.name in seen:
                self.error(
                    e.field or "",
                    f'plugin "{e.name}" already registered as {point} plugin (at {seen[e.name].field})',
                )
                continue
            seen[e.name] = e
            chosen.append(e)
        if "*" in specific.disabled:
            return chosen
        disabled = set(specific.disabled)
        overrides: set[str] = set()
        from_multi: dict[str, _Entry] = {}
        for e in multi.enabled:
            if not implements(self.registry, e.name, point) or e.name in disabled:
                continue
            if e.name in seen:
                # Set explicitly at this point: the user's entry wins.
                overrides.add(e.name)
                continue
            from_multi.setdefault(e.name, e)
        # Order: overridden plugins as the point lists them, then multiPoint
        # plugins, then the point's other plugins.
        return (
            [e for e in chosen if e.name in overrides]
            + list(from_multi.values())
            + [e for e in chosen if e.name not in overrides]
        )

    def _score_weights(self, merged: Mapping[str, _Set]) -> dict[str, int]:
        """framework.go, getValidScoreWeights: the score point's entry wins
        over multiPoint's; 0 or absent means 1."""
        weights: dict[str, int] = {}
        for e in [*merged["score"].enabled, *merged[MULTI_POINT].enabled]:
            if e.name in weights or not implements(self.registry, e.name, "score"):
                continue
            weights[e.name] = e.weight or 1
        return weights

    # -- pluginConfig ---------------------------------------------------------

    def _plugin_config(
        self, path: str, entries: Sequence[_PluginConfigV1]
    ) -> tuple[dict[str, Any], dict[str, str]]:
        """validation.go, validatePluginConfig, with each plugin's args
        decoded into its Args type (upstream's decodeNestedObjects) and
        checked by its ``validate``."""
        args: dict[str, Any] = {}
        fields: dict[str, str] = {}
        first: dict[str, int] = {}
        for j, pc in enumerate(entries):
            where = f"{path}.pluginConfig[{j}]"
            name = pc.name
            if not name:
                self.error(f"{where}.name", "required value")
                continue
            if name in first:
                self.error(
                    f"{where}.name",
                    f'duplicate value "{name}" (also {path}.pluginConfig[{first[name]}])',
                )
                continue
            first[name] = j
            if name in _REMOVED_PLUGINS:
                self._check_enabled_name(name, f"{where}.name")
                continue
            if name not in self.registry:
                if name in UPSTREAM_PLUGIN_NAMES:
                    log.warning(
                        "%s: %s: args for upstream plugin %s ignored: Berth does not provide it",
                        self.source,
                        where,
                        name,
                    )
                else:
                    self.error(f"{where}.name", self._unknown(name))
                continue
            ok, value = self._decode_args(name, pc.args, f"{where}.args")
            if ok and value is not None:
                args[name] = value
                fields[name] = f"{where}.args"
        return args, fields

    def _decode_args(self, name: str, raw: object, where: str) -> tuple[bool, Any]:
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            self.error(where, f"must be a mapping, got {_kind_of(raw)}")
            return False, None
        body = dict(raw)
        # Upstream accepts typed args (decodeNestedObjects): the kind, when
        # given, must be <Name>Args.
        kind = body.pop("kind", None)
        api_version = body.pop("apiVersion", None)
        if kind is not None and kind != f"{name}Args":
            self.error(f"{where}.kind", f'must be "{name}Args" for plugin "{name}", got {kind!r}')
            return False, None
        if api_version is not None and api_version != API_VERSION:
            self.error(f"{where}.apiVersion", f'must be "{API_VERSION}", got {api_version!r}')
            return False, None
        args_type = args_type_of(self.registry, name)
        if args_type is None:
            if body:
                keys = ", ".join(f'"{k}"' for k in body)
                self.error(where, f'plugin "{name}" takes no args, got {keys}')
                return False, None
            return True, None
        try:
            value = msgspec.convert(body, args_type)
        except msgspec.ValidationError as exc:
            self.error(*_msgspec_issue(str(exc), where))
            return False, None
        return self._validate_args(value, where)

    def _validate_args(self, value: Any, where: str) -> tuple[bool, Any]:
        validate = getattr(value, "validate", None)
        if not callable(validate):
            return True, value
        try:
            validate()
        except ValueError as exc:
            for sub, reason in _split_validate_message(str(exc)):
                self.error(_join_path(where, sub), reason)
            return False, None
        return True, value

    def _default_args(self, path: str, name: str, args: dict[str, Any]) -> None:
        """setDefaults_KubeSchedulerProfile: a plugin with an Args type and no
        pluginConfig entry gets its default args."""
        if name in args:
            return
        args_type = args_type_of(self.registry, name)
        if args_type is None:
            return
        where = f"{path}.pluginConfig"
        try:
            value = msgspec.convert({}, args_type)
        except msgspec.ValidationError as exc:
            field_path, reason = _msgspec_issue(str(exc), "args")
            self.error(
                where,
                f'plugin "{name}" is enabled but has no entry here, and its args have no '
                f"default for {field_path}: {reason}",
            )
            return
        ok, value = self._validate_args(value, f"{where}[{name}].args")
        if ok:
            args[name] = value

    # -- across profiles ------------------------------------------------------

    def _common_queue_sort(self, outcomes: Sequence[_ProfileOutcome]) -> None:
        """validation.go, validateCommonQueueSort (the queueSort sets as
        written must be equal) and profile.go, cfgValidator.validate (the
        effective queueSort plugin and its args must be equal)."""
        if not outcomes:
            return
        canon = outcomes[0]
        for i, o in enumerate(outcomes[1:], start=1):
            if o.literal_queue_sort != canon.literal_queue_sort:
                self.error(
                    f"profiles[{i}].plugins.queueSort",
                    "must be the same for all profiles (as profiles[0].plugins.queueSort)",
                )
                continue
            if canon.queue_sort is None or o.queue_sort is None:
                continue
            if o.queue_sort != canon.queue_sort:
                self.error(
                    f"profiles[{i}].plugins",
                    f'queueSort plugin "{o.queue_sort}" differs from "{canon.queue_sort}" of '
                    "profiles[0]; all profiles must use the same queueSort plugin",
                )
            elif o.queue_sort_args != canon.queue_sort_args:
                self.error(
                    o.queue_sort_args_field,
                    f'args of queueSort plugin "{o.queue_sort}" must be the same for all '
                    "profiles (differ from profiles[0])",
                )


# The interface upstream's default plugin serves for the points a profile
# cannot do without; used to explain an empty queueSort or bind.
_DEFAULT_FOR: dict[str, type[Plugin]] = {
    "PrioritySort": QueueSortPlugin,
    "DefaultBinder": BindPlugin,
}


def _default_plugin_sets(registry: RegistryLike) -> dict[str, _Set]:
    """getDefaultPlugins restricted to the registered plugins, in upstream's
    order and with its weights."""
    sets = {point: _Set() for point in (MULTI_POINT, *EXTENSION_POINTS)}
    sets[MULTI_POINT].enabled = [
        _Entry(name, weight, None) for name, weight in UPSTREAM_DEFAULT_PLUGINS if name in registry
    ]
    return sets


def _merge_plugins(defaults: Mapping[str, _Set], custom: Mapping[str, _Set]) -> dict[str, _Set]:
    """default_plugins.go, mergePlugins: every extension point merged on its
    own."""
    return {point: _merge_plugin_set(defaults[point], custom[point]) for point in defaults}


def _merge_plugin_set(default: _Set, custom: _Set) -> _Set:
    """default_plugins.go, mergePluginSet: ``*`` drops every default, a name
    drops that default; a re-configured default keeps its place and takes the
    custom entry (weight included); other custom plugins follow in order."""
    disabled = [*custom.disabled, *default.disabled]
    off = set(disabled)
    custom_at = {e.name: k for k, e in enumerate(custom.enabled)}
    replaced: set[int] = set()
    enabled: list[_Entry] = []
    if "*" not in off:
        for e in default.enabled:
            if e.name in off:
                continue
            k = custom_at.get(e.name)
            if k is not None:
                log.debug("default plugin %s is explicitly re-configured", e.name)
                e = custom.enabled[k]
                replaced.add(k)
            enabled.append(e)
    enabled += [e for k, e in enumerate(custom.enabled) if k not in replaced]
    return _Set(enabled, disabled)


_FIELD_PREFIX = re.compile(r"^([A-Za-z_][\w.\[\]]*): (.+)$", re.S)


def _split_validate_message(text: str) -> list[tuple[str, str]]:
    """An Args.validate message, ``"<field>: <reason>"``, possibly several
    joined by ``"; "``, as (field, reason) pairs; ("", text) when it does
    not name a field."""
    parts = [_FIELD_PREFIX.match(part) for part in text.split("; ")]
    if all(parts):
        return [(m.group(1), m.group(2)) for m in parts if m]
    whole = _FIELD_PREFIX.match(text)
    return [(whole.group(1), whole.group(2))] if whole else [("", text)]


def _kind_of(value: object) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


def _unique(errors: Iterable[ConfigError]) -> list[ConfigError]:
    seen: set[tuple[str, str]] = set()
    out: list[ConfigError] = []
    for e in errors:
        if (e.field, e.reason) not in seen:
            seen.add((e.field, e.reason))
            out.append(e)
    return out


def _ignore_extender_resources(
    profiles: list[ProfileConfig | None], extenders: Sequence[ExtenderConfig]
) -> list[ProfileConfig | None]:
    """scheduler.go buildExtenders: the managed resources marked
    ignoredByScheduler replace NodeResourcesFit's ignoredResources in every
    profile that configures it, so Filter does not check what the extender
    manages."""
    names = ignored_resources(extenders)
    if not names:
        return profiles
    out: list[ProfileConfig | None] = []
    for p in profiles:
        args = None if p is None else p.plugin_args.get("NodeResourcesFit")
        if p is None or args is None or not hasattr(args, "ignored_resources"):
            out.append(p)
            continue
        new_args = msgspec.structs.replace(args, ignored_resources=list(names))
        out.append(
            dataclasses.replace(p, plugin_args={**p.plugin_args, "NodeResourcesFit": new_args})
        )
    return out
