"""Loading KubeSchedulerConfiguration files that are right: defaults
(pkg/scheduler/apis/config/v1/defaults.go, SetDefaults_KubeSchedulerConfiguration),
pluginConfig args, the seeds' configs, a realistic multi-profile file."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from berth.framework.config import (
    API_VERSION,
    KIND,
    UPSTREAM_DEFAULT_PLUGINS,
    ConfigError,
    default_config,
    load_config,
    parse_config,
    parse_go_duration,
)
from berth.framework.profile import ClientConnectionConfig, LeaderElectionConfig
from berth.framework.runtime import Framework
from berth.plugins.registry import REGISTRY as IN_TREE
from tests.unit.config.fakes import REGISTRY, FitArgs, ResourceSpec, ScoringStrategy, SortArgs
from tests.unit.config.helpers import load, names, profile_of, weights, write

TESTDATA = Path(__file__).parent / "testdata"


def test_default_config_is_one_default_scheduler_profile() -> None:
    cfg = default_config(REGISTRY)
    assert [p.scheduler_name for p in cfg.profiles] == ["default-scheduler"]
    profile = cfg.profiles[0]
    assert names(profile, "queueSort") == ["PrioritySort"]
    assert names(profile, "bind") == ["DefaultBinder"]
    assert weights(profile) == {"TaintToleration": 3, "NodeResourcesFit": 1, "ImageLocality": 1}
    assert cfg.source == "<defaults>"


def test_upstream_default_weights_match_get_default_plugins() -> None:
    """default_plugins.go, getDefaultPlugins (v1.36, default feature gates)."""
    weighted = {name: w for name, w in UPSTREAM_DEFAULT_PLUGINS if w is not None}
    assert weighted == {
        "TaintToleration": 3,
        "NodeAffinity": 2,
        "NodeResourcesFit": 1,
        "PodTopologySpread": 2,
        "InterPodAffinity": 2,
        "DynamicResources": 2,
        "NodeResourcesBalancedAllocation": 1,
        "ImageLocality": 1,
    }
    order = [name for name, _ in UPSTREAM_DEFAULT_PLUGINS]
    assert order[:2] == ["SchedulingGates", "PrioritySort"]
    assert order.index("DynamicResources") + 1 == order.index("DefaultPreemption")
    assert order[-2:] == ["DefaultBinder", "NodeDeclaredFeatures"]


def test_one_warning_lists_the_upstream_defaults_not_available(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="berth.framework.config"):
        default_config(REGISTRY)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    message = warnings[0].getMessage()
    assert "NodeAffinity" in message and "VolumeBinding" in message
    assert "TaintToleration" not in message


def test_the_in_tree_default_set_is_upstreams_whole_default_set(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """default_plugins.go, getDefaultPlugins (v1.36): every upstream default is
    in the in-tree registry, so nothing is left out and nothing is logged;
    DynamicResources serves each point it implements at upstream's place
    (PostFilter before DefaultPreemption) and scores with weight 2."""
    with caplog.at_level(logging.WARNING, logger="berth.framework.config"):
        cfg = default_config(IN_TREE)
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == []
    (profile,) = cfg.profiles
    assert names(profile, "preEnqueue") == ["SchedulingGates", "DynamicResources"]
    assert names(profile, "postFilter") == ["DynamicResources", "DefaultPreemption"]
    for point in ("preFilter", "filter", "reserve", "preBind"):
        assert "DynamicResources" in names(profile, point), point
    assert names(profile, "reserve") == ["VolumeBinding", "DynamicResources"]
    assert weights(profile)["DynamicResources"] == 2


def test_no_warning_when_multi_point_defaults_are_all_disabled(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="berth.framework.config"):
        load(
            tmp_path,
            """
            profiles:
            - plugins:
                multiPoint:
                  enabled: [{name: PrioritySort}, {name: DefaultBinder}]
                  disabled: [{name: "*"}]
            """,
        )
    assert caplog.records == []


def test_top_level_defaults(tmp_path: Path) -> None:
    """SetDefaults_KubeSchedulerConfiguration: parallelism 16, backoff 1s..10s,
    adaptive percentageOfNodesToScore (0), leases leader election, QPS 50."""
    cfg = load(tmp_path, "")
    assert cfg.parallelism == 16
    assert (cfg.pod_initial_backoff_seconds, cfg.pod_max_backoff_seconds) == (1, 10)
    assert cfg.percentage_of_nodes_to_score == 0
    assert cfg.leader_election == LeaderElectionConfig()
    assert cfg.leader_election.resource_lock == "leases"
    assert cfg.client_connection == ClientConnectionConfig(qps=50.0, burst=100)
    assert (cfg.enable_profiling, cfg.enable_contention_profiling) == (True, False)
    assert cfg.delay_cache_until_active is False
    assert [p.scheduler_name for p in cfg.profiles] == ["default-scheduler"]


def test_contention_profiling_is_off_and_refused_when_asked_for(tmp_path: Path) -> None:
    """Upstream defaults it to enableProfiling; it turns on Go's blocking profile, which
    has no Python counterpart: off, an explicit false accepted, true refused."""
    cfg = load(tmp_path, "enableProfiling: false\n")
    assert (cfg.enable_profiling, cfg.enable_contention_profiling) == (False, False)
    cfg = load(tmp_path, "enableContentionProfiling: false\n")
    assert (cfg.enable_profiling, cfg.enable_contention_profiling) == (True, False)
    with pytest.raises(ConfigError) as exc:
        load(tmp_path, "enableContentionProfiling: true\n")
    assert "enableContentionProfiling: not supported: it turns on Go's blocking profile" in str(
        exc.value
    )


def test_null_sections_mean_absent(tmp_path: Path) -> None:
    """Go's JSON decoding leaves a field unset on null; so do we."""
    profile = profile_of(
        tmp_path,
        """
        profiles:
        - schedulerName: p
          plugins:
            filter:
            score:
              enabled:
          pluginConfig:
        """,
    )
    assert weights(profile) == {"TaintToleration": 3, "NodeResourcesFit": 1, "ImageLocality": 1}


def test_realistic_multi_profile_file(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="berth.framework.config"):
        cfg = load_config(TESTDATA / "multi-profile.yaml", REGISTRY)
    assert cfg.source == str(TESTDATA / "multi-profile.yaml")
    assert (cfg.parallelism, cfg.percentage_of_nodes_to_score) == (8, 40)
    assert (cfg.pod_initial_backoff_seconds, cfg.pod_max_backoff_seconds) == (2, 20)
    assert (cfg.enable_profiling, cfg.enable_contention_profiling) == (False, False)
    assert cfg.client_connection == ClientConnectionConfig(
        kubeconfig="/etc/kubernetes/scheduler.conf", qps=100.0, burst=200
    )
    assert cfg.leader_election == LeaderElectionConfig(
        lease_duration_seconds=30.0,
        renew_deadline_seconds=20.0,
        retry_period_seconds=4.0,
        resource_name="berth-scheduler",
        resource_namespace="berth-system",
    )
    assert [p.scheduler_name for p in cfg.profiles] == [
        "default-scheduler",
        "custom-scheduler",
        "lowcpu-scheduler",
        "gpu-scheduler",
    ]
    default, custom, lowcpu, gpu = cfg.profiles

    assert weights(default) == {"TaintToleration": 5, "NodeResourcesFit": 1, "ImageLocality": 1}
    assert default.plugin_args["NodeResourcesFit"] == FitArgs(
        scoring_strategy=ScoringStrategy(
            type="MostAllocated", resources=[ResourceSpec("cpu", 2), ResourceSpec("memory", 1)]
        )
    )
    assert "VolumeBinding" not in default.plugin_args

    assert names(custom, "filter")[-1] == "AvoidNodePlugin"
    assert "AvoidNodePlugin" not in custom.plugin_args
    assert custom.plugin_args["NodeResourcesFit"] == FitArgs()

    assert lowcpu.percentage_of_nodes_to_score == 100
    assert custom.percentage_of_nodes_to_score is None
    assert names(lowcpu, "filter")[-1] == "LowCpuScheduler"
    assert weights(lowcpu)["LowCpuScheduler"] == 1

    assert weights(gpu) == {"GpuScore": 10, "NodeResourcesFit": 1}
    assert names(gpu, "filter") == names(default, "filter")

    assert cfg.profile("gpu-scheduler") is gpu
    assert cfg.profile("nope") is None
    for profile in cfg.profiles:
        Framework(profile, REGISTRY, cfg.percentage_of_nodes_to_score)

    ignored = [r.getMessage() for r in caplog.records if "VolumeBinding ignored" in r.getMessage()]
    assert len(ignored) == 1 and "profiles[0].pluginConfig[1]" in ignored[0]


SEED_AVOID_NODE = """
profiles:
- schedulerName: custom-scheduler
  plugins:
    filter:
      enabled:
      - name: AvoidNodePlugin
  pluginConfig:
  - name: AvoidNodePlugin
    args: {}
"""

SEED_LOWCPU = """
profiles:
- schedulerName: lowcpu-scheduler
  plugins:
    filter:
      enabled:
      - name: LowCpuScheduler
    score:
      enabled:
      - name: LowCpuScheduler
"""


@pytest.mark.parametrize(
    ("body", "scheduler", "plugin"),
    [
        pytest.param(SEED_AVOID_NODE, "custom-scheduler", "AvoidNodePlugin", id="AvoidNodePlugin"),
        pytest.param(SEED_LOWCPU, "lowcpu-scheduler", "LowCpuScheduler", id="LowCpuScheduler"),
    ],
)
def test_seed_configs_load_as_written(
    tmp_path: Path, body: str, scheduler: str, plugin: str
) -> None:
    cfg = load(tmp_path, body)
    profile = cfg.profiles[0]
    assert profile.scheduler_name == scheduler
    assert plugin in names(profile, "filter")
    # Defaults still apply around the custom plugin (mergePlugins).
    assert names(profile, "queueSort") == ["PrioritySort"]
    assert names(profile, "bind") == ["DefaultBinder"]


@pytest.mark.parametrize(
    ("body", "plugin", "points"),
    [
        pytest.param(SEED_AVOID_NODE, "AvoidNodePlugin", ["filter"], id="AvoidNodePlugin"),
        pytest.param(SEED_LOWCPU, "LowCpuScheduler", ["filter", "score"], id="LowCpuScheduler"),
    ],
)
def test_seed_configs_build_with_the_real_plugins(
    tmp_path: Path, body: str, plugin: str, points: list[str]
) -> None:
    """The same snippets against the in-tree registry: the seed's plugin is built
    with its default args and serves where the seed enables it."""
    cfg = load_config(write(tmp_path, body), IN_TREE)
    profile = cfg.profiles[0]
    fw = Framework(profile, IN_TREE, cfg.percentage_of_nodes_to_score)
    args_type = IN_TREE[plugin].Args
    assert args_type is not None
    assert profile.plugin_args[plugin] == args_type()
    for point in points:
        assert plugin in names(profile, point)
    assert isinstance(fw.instances[plugin], IN_TREE[plugin])


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(None, id="args absent"),
        pytest.param({}, id="empty args"),
        pytest.param({"kind": "NodeResourcesFitArgs"}, id="only kind"),
        pytest.param({"apiVersion": API_VERSION, "kind": "NodeResourcesFitArgs"}, id="typed"),
    ],
)
def test_empty_args_decode_to_the_args_defaults(args: dict[str, str] | None) -> None:
    entry: dict[str, object] = {"name": "NodeResourcesFit"}
    if args is not None:
        entry["args"] = args
    doc = {"apiVersion": API_VERSION, "kind": KIND, "profiles": [{"pluginConfig": [entry]}]}
    cfg = parse_config(doc, "<string>", REGISTRY)
    assert cfg.profiles[0].plugin_args["NodeResourcesFit"] == FitArgs()
    assert cfg.source == "<string>"


def test_enabled_plugin_without_plugin_config_gets_default_args(tmp_path: Path) -> None:
    """setDefaults_KubeSchedulerProfile appends default args for enabled plugins."""
    profile = profile_of(tmp_path, "profiles:\n- schedulerName: p\n")
    assert profile.plugin_args == {"NodeResourcesFit": FitArgs()}


def test_plugin_config_for_a_plugin_not_enabled_is_accepted(tmp_path: Path) -> None:
    """Upstream validates such args but builds no plugin for them."""
    profile = profile_of(
        tmp_path,
        """
        profiles:
        - schedulerName: p
          pluginConfig:
          - name: OtherSort
            args: {reverse: true}
        """,
    )
    assert "OtherSort" not in names(profile, "queueSort")
    assert profile.plugin_args["OtherSort"] == SortArgs(reverse=True)


def test_disabling_upstream_plugins_berth_lacks_is_accepted(tmp_path: Path) -> None:
    profile = profile_of(
        tmp_path,
        """
        profiles:
        - schedulerName: p
          plugins:
            multiPoint:
              disabled:
              - name: VolumeBinding
              - name: EBSLimits
        """,
    )
    assert names(profile, "filter") == ["NodeUnschedulable", "TaintToleration", "NodeResourcesFit"]


def test_same_queue_sort_args_in_every_profile_is_accepted(tmp_path: Path) -> None:
    """validateCommonQueueSort / cfgValidator: equal args, written or defaulted."""
    cfg = load(
        tmp_path,
        """
        profiles:
        - schedulerName: a
          plugins:
            multiPoint:
              enabled: [{name: OtherSort}]
              disabled: [{name: PrioritySort}]
        - schedulerName: b
          plugins:
            multiPoint:
              enabled: [{name: OtherSort}]
              disabled: [{name: PrioritySort}]
          pluginConfig:
          - name: OtherSort
            args: {reverse: false}
        """,
    )
    assert [names(p, "queueSort") for p in cfg.profiles] == [["OtherSort"], ["OtherSort"]]


def test_registry_defaults_to_plugins_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """load_config without a registry calls plugins.registry.load_registry
    (in-tree and installed plugins) lazily."""
    import sys
    import types

    module = types.ModuleType("berth.plugins.registry")
    module.load_registry = lambda: REGISTRY  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "berth.plugins.registry", module)
    assert default_config(REGISTRY).profiles[0].scheduler_name == "default-scheduler"


def test_parse_config_refuses_a_non_mapping_document() -> None:
    with pytest.raises(ConfigError, match="<string>: expected a KubeSchedulerConfiguration"):
        parse_config("profiles: []", "<string>", REGISTRY)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("15s", 15.0),
        ("1m30s", 90.0),
        ("250ms", 0.25),
        ("1.5h", 5400.0),
        ("0", 0.0),
        ("-2s", -2.0),
        ("100us", 1e-4),
    ],
)
def test_parse_go_duration(text: str, seconds: float) -> None:
    """metav1.Duration uses Go's time.ParseDuration."""
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "15", "s", "1d", "15 s", " 15s", "1m-3s", "--5s", "-"])
def test_parse_go_duration_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_go_duration(text)
