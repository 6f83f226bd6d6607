"""Every class of configuration error is refused at start, and the message
names the file, the field and the reason (DESIGN.md, "Fail clearly").

Field paths follow upstream's field.Path spelling
(pkg/scheduler/apis/config/validation/validation.go)."""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path

import pytest

from berth.framework.config import ConfigError, load_config, parse_config
from tests.unit.config.fakes import REGISTRY
from tests.unit.config.helpers import load_error


@dataclass(frozen=True)
class Case:
    id: str
    body: str
    field: str
    reason: str
    header: bool = True


CASES = [
    # -- the document ----------------------------------------------------------
    Case("empty file", "", "", "the file is empty", header=False),
    Case("not a mapping", "- a\n- b\n", "", "expected a KubeSchedulerConfiguration mapping", False),
    Case(
        "apiVersion missing",
        "kind: KubeSchedulerConfiguration\n",
        "apiVersion",
        "required value",
        header=False,
    ),
    Case(
        "apiVersion of a removed version",
        "apiVersion: kubescheduler.config.k8s.io/v1beta3\nkind: KubeSchedulerConfiguration\n",
        "apiVersion",
        "'kubescheduler.config.k8s.io/v1beta3' (no longer served upstream)",
        header=False,
    ),
    Case(
        "kind wrong",
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeProxyConfiguration\n",
        "kind",
        "unsupported value 'KubeProxyConfiguration'",
        header=False,
    ),
    # -- strict decoding (configfile.go loadConfig, strict codec) ---------------
    Case(
        "unknown top-level field (v1 dropped healthzBindAddress)",
        "healthzBindAddress: 0.0.0.0:10251\n",
        "healthzBindAddress",
        'unknown field "healthzBindAddress"',
    ),
    Case(
        "unknown nested field",
        """
        profiles:
        - schedulerName: a
          plugins:
            filter:
              enable:
              - name: AvoidNodePlugin
        """,
        "profiles[0].plugins.filter.enable",
        'unknown field "enable"',
    ),
    Case(
        "wrong type",
        'percentageOfNodesToScore: "50"\n',
        "percentageOfNodesToScore",
        "expected int, got str",
    ),
    Case(
        "plugin entry is not a mapping",
        """
        profiles:
        - plugins:
            filter:
              enabled: [AvoidNodePlugin]
        """,
        "profiles[0].plugins.filter.enabled[0]",
        "expected mapping, got str",
    ),
    Case(
        "plugin entry without name",
        """
        profiles:
        - plugins:
            score:
              enabled:
              - weight: 2
        """,
        "profiles[0].plugins.score.enabled[0].name",
        "required value",
    ),
    Case(
        "weight beyond int32",
        """
        profiles:
        - plugins:
            score:
              enabled:
              - name: GpuScore
                weight: 3000000000
        """,
        "profiles[0].plugins.score.enabled[0].weight",
        "expected int <= 2147483647",
    ),
    # -- ValidateKubeSchedulerConfiguration -------------------------------------
    Case(
        "parallelism not positive",
        "parallelism: 0\n",
        "parallelism",
        "should be an integer value greater than zero",
    ),
    Case(
        "percentageOfNodesToScore above 100",
        "percentageOfNodesToScore: 101\n",
        "percentageOfNodesToScore",
        "not in valid range [0-100]",
    ),
    Case(
        "profile percentageOfNodesToScore below 0",
        "profiles:\n- percentageOfNodesToScore: -1\n",
        "profiles[0].percentageOfNodesToScore",
        "not in valid range [0-100]",
    ),
    Case(
        "podInitialBackoffSeconds zero",
        "podInitialBackoffSeconds: 0\n",
        "podInitialBackoffSeconds",
        "must be greater than 0",
    ),
    Case(
        "podMaxBackoffSeconds below initial",
        "podInitialBackoffSeconds: 5\npodMaxBackoffSeconds: 2\n",
        "podMaxBackoffSeconds",
        "must be greater than or equal to podInitialBackoffSeconds (5)",
    ),
    Case(
        "leaderElection duration not a Go duration",
        "leaderElection:\n  leaseDuration: 15 seconds\n",
        "leaderElection.leaseDuration",
        "invalid duration '15 seconds'",
    ),
    Case(
        "leaderElection lease not longer than renew deadline",
        "leaderElection:\n  leaseDuration: 10s\n  renewDeadline: 10s\n",
        "leaderElection.leaseDuration",
        "must be greater than renewDeadline",
    ),
    Case(
        "leaderElection resourceLock not leases",
        "leaderElection:\n  resourceLock: endpoints\n",
        "leaderElection.resourceLock",
        'resourceLock value must be "leases"',
    ),
    Case(
        "clientConnection burst negative",
        "clientConnection:\n  burst: -1\n",
        "clientConnection.burst",
        "must be non-negative",
    ),
    Case(
        "schedulerName missing when there are several profiles",
        "profiles:\n- schedulerName: a\n- percentageOfNodesToScore: 10\n",
        "profiles[1].schedulerName",
        "required value",
    ),
    Case(
        "schedulerName duplicated",
        "profiles:\n- schedulerName: a\n- schedulerName: a\n",
        "profiles[1].schedulerName",
        "duplicate value 'a' (also profiles[0].schedulerName)",
    ),
    # -- plugin names -----------------------------------------------------------
    Case(
        "unknown plugin enabled at an extension point",
        """
        profiles:
        - plugins:
            filter:
              enabled:
              - name: Foo
        """,
        "profiles[0].plugins.filter.enabled[0].name",
        'unknown plugin "Foo"; registered plugins: AvoidNodePlugin, DefaultBinder,',
    ),
    Case(
        "unknown plugin suggests a close name",
        """
        profiles:
        - plugins:
            multiPoint:
              enabled:
              - name: NodeResourceFit
        """,
        "profiles[0].plugins.multiPoint.enabled[0].name",
        'unknown plugin "NodeResourceFit" (did you mean "NodeResourcesFit"?)',
    ),
    Case(
        "upstream plugin Berth does not provide",
        """
        profiles:
        - plugins:
            filter:
              enabled:
              - name: VolumeBinding
        """,
        "profiles[0].plugins.filter.enabled[0].name",
        "an upstream kube-scheduler plugin Berth does not provide yet",
    ),
    Case(
        "plugin removed from v1 (validatePluginSetForInvalidPlugins)",
        """
        profiles:
        - plugins:
            filter:
              enabled:
              - name: EBSLimits
        """,
        "profiles[0].plugins.filter.enabled[0].name",
        'was invalid in version "kubescheduler.config.k8s.io/v1"',
    ),
    Case(
        "unknown plugin in pluginConfig",
        """
        profiles:
        - pluginConfig:
          - name: AvoidNode
            args: {}
        """,
        "profiles[0].pluginConfig[0].name",
        'unknown plugin "AvoidNode" (did you mean "AvoidNodePlugin"?)',
    ),
    # -- NewFramework checks (updatePluginList, expandMultiPointPlugins) --------
    Case(
        "plugin at an extension point it does not extend (updatePluginList)",
        """
        profiles:
        - plugins:
            score:
              enabled:
              - name: AvoidNodePlugin
        """,
        "profiles[0].plugins.score.enabled[0].name",
        'plugin "AvoidNodePlugin" does not extend score plugin (it extends: filter)',
    ),
    Case(
        "plugin twice at one extension point (updatePluginList)",
        """
        profiles:
        - plugins:
            filter:
              enabled:
              - name: AvoidNodePlugin
              - name: AvoidNodePlugin
        """,
        "profiles[0].plugins.filter.enabled[1]",
        'plugin "AvoidNodePlugin" already registered as filter plugin '
        "(at profiles[0].plugins.filter.enabled[0])",
    ),
    Case(
        "plugin twice under multiPoint (expandMultiPointPlugins)",
        """
        profiles:
        - plugins:
            multiPoint:
              enabled:
              - name: GpuScore
              - name: GpuScore
        """,
        "profiles[0].plugins.multiPoint.enabled[1]",
        'plugin "GpuScore" is already enabled under multiPoint '
        "(at profiles[0].plugins.multiPoint.enabled[0])",
    ),
    Case(
        "negative score weight",
        """
        profiles:
        - plugins:
            score:
              enabled:
              - name: GpuScore
                weight: -2
        """,
        "profiles[0].plugins.score.enabled[0].weight",
        "must not be negative, got -2",
    ),
    Case(
        "no queueSort plugin",
        """
        profiles:
        - plugins:
            queueSort:
              disabled:
              - name: "*"
        """,
        "profiles[0].plugins.queueSort",
        "exactly one queueSort plugin must be enabled, got 0",
    ),
    Case(
        "two queueSort plugins",
        """
        profiles:
        - plugins:
            queueSort:
              enabled:
              - name: OtherSort
        """,
        "profiles[0].plugins.queueSort",
        "exactly one queueSort plugin must be enabled, got 2 (PrioritySort, OtherSort)",
    ),
    Case(
        "no bind plugin",
        """
        profiles:
        - plugins:
            multiPoint:
              disabled:
              - name: DefaultBinder
        """,
        "profiles[0].plugins.bind",
        "at least one bind plugin is needed",
    ),
    Case(
        "extension point Berth does not run",
        """
        profiles:
        - plugins:
            placementGenerate:
              enabled:
              - name: Everywhere
        """,
        "profiles[0].plugins.placementGenerate",
        "not supported by Berth",
    ),
    # -- queueSort across profiles (validateCommonQueueSort, cfgValidator) ------
    Case(
        "queueSort set differs between profiles",
        """
        profiles:
        - schedulerName: a
        - schedulerName: b
          plugins:
            queueSort:
              enabled:
              - name: OtherSort
              disabled:
              - name: "*"
        """,
        "profiles[1].plugins.queueSort",
        "must be the same for all profiles",
    ),
    Case(
        "effective queueSort plugin differs between profiles",
        """
        profiles:
        - schedulerName: a
        - schedulerName: b
          plugins:
            multiPoint:
              enabled:
              - name: OtherSort
              disabled:
              - name: PrioritySort
        """,
        "profiles[1].plugins",
        'queueSort plugin "OtherSort" differs from "PrioritySort" of profiles[0]',
    ),
    Case(
        "queueSort args differ between profiles",
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
            args: {reverse: true}
        """,
        "profiles[1].pluginConfig[0].args",
        'args of queueSort plugin "OtherSort" must be the same for all profiles',
    ),
    # -- pluginConfig (validatePluginConfig, decodeNestedObjects) ---------------
    Case(
        "pluginConfig names a plugin twice",
        """
        profiles:
        - pluginConfig:
          - name: NodeResourcesFit
          - name: NodeResourcesFit
        """,
        "profiles[0].pluginConfig[1].name",
        'duplicate value "NodeResourcesFit" (also profiles[0].pluginConfig[0])',
    ),
    Case(
        "args of the wrong type",
        """
        profiles:
        - pluginConfig:
          - name: NodeResourcesFit
            args:
              scoringStrategy:
                resources:
                - name: cpu
                  weight: heavy
        """,
        "profiles[0].pluginConfig[0].args.scoringStrategy.resources[0].weight",
        "expected int, got str",
    ),
    Case(
        "args with an unknown field",
        """
        profiles:
        - pluginConfig:
          - name: NodeResourcesFit
            args:
              scoringStrategy:
                typ: MostAllocated
        """,
        "profiles[0].pluginConfig[0].args.scoringStrategy.typ",
        'unknown field "typ"',
    ),
    Case(
        "args refused by the Args validate method",
        """
        profiles:
        - pluginConfig:
          - name: NodeResourcesFit
            args:
              scoringStrategy:
                resources:
                - name: cpu
                  weight: 0
        """,
        "profiles[0].pluginConfig[0].args.scoringStrategy.resources[0].weight",
        "must be in the range [1, 100]",
    ),
    Case(
        "args for a plugin without args",
        """
        profiles:
        - pluginConfig:
          - name: AvoidNodePlugin
            args:
              label: avoid
        """,
        "profiles[0].pluginConfig[0].args",
        'plugin "AvoidNodePlugin" takes no args, got "label"',
    ),
    Case(
        "args of another plugin's kind",
        """
        profiles:
        - pluginConfig:
          - name: NodeResourcesFit
            args:
              kind: InterPodAffinityArgs
        """,
        "profiles[0].pluginConfig[0].args.kind",
        'must be "NodeResourcesFitArgs" for plugin "NodeResourcesFit"',
    ),
    Case(
        "args not a mapping",
        """
        profiles:
        - pluginConfig:
          - name: NodeResourcesFit
            args: [1, 2]
        """,
        "profiles[0].pluginConfig[0].args",
        "must be a mapping, got a list",
    ),
    Case(
        "enabled plugin whose args have no defaults and no pluginConfig",
        """
        profiles:
        - plugins:
            filter:
              enabled:
              - name: Tokenized
        """,
        "profiles[0].pluginConfig",
        'plugin "Tokenized" is enabled but has no entry here, and its args have no '
        "default for args.token: required value",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_error_names_file_field_and_reason(tmp_path: Path, case: Case) -> None:
    err = load_error(tmp_path, case.body, header=case.header)
    path = str(tmp_path / "scheduler-config.yaml")
    assert [(e.field, e.source) for e in err.errors] == [(case.field, path)], str(err)
    assert err.field == case.field
    assert case.reason in err.reason
    prefix = f"{path}: {case.field}: " if case.field else f"{path}: "
    assert str(err) == prefix + err.reason


def test_missing_file_says_it_does_not_exist(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(missing, REGISTRY)
    assert info.value.source == str(missing)
    assert str(info.value) == f"{missing}: file does not exist"


def test_directory_is_not_a_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path, REGISTRY)


@pytest.mark.parametrize(
    ("text", "where", "reason"),
    [
        pytest.param(
            "profiles:\n- schedulerName: a\n  plugins: [\n",
            "line 6, column 1",
            "expected the node content",
            id="unclosed flow sequence",
        ),
        pytest.param(
            "profiles:\n  - schedulerName: a\n bad: 1\n",
            "line 5, column 2",
            "expected <block end>",
            id="bad indentation",
        ),
        pytest.param(
            "parallelism: 4\nparallelism: 8\n",
            "line 4, column 1",
            "duplicate key 'parallelism'",
            id="duplicate key (strict decoding)",
        ),
    ],
)
def test_yaml_errors_name_line_and_column(
    tmp_path: Path, text: str, where: str, reason: str
) -> None:
    # Line numbers count the two header lines (apiVersion, kind) load_error adds.
    err = load_error(tmp_path, text)
    assert err.field == where
    assert reason in err.reason
    assert str(err).startswith(f"{tmp_path / 'scheduler-config.yaml'}: {where}: invalid YAML: ")


def test_several_problems_are_reported_together_first_line_alone(tmp_path: Path) -> None:
    err = load_error(
        tmp_path,
        """
        parallelism: -1
        profiles:
        - schedulerName: a
          plugins:
            filter:
              enabled:
              - name: Foo
            score:
              enabled:
              - name: GpuScore
                weight: -1
        """,
    )
    assert [e.field for e in err.errors] == [
        "parallelism",
        "profiles[0].plugins.filter.enabled[0].name",
        "profiles[0].plugins.score.enabled[0].weight",
    ]
    lines = str(err).splitlines()
    assert len(lines) == 3
    assert lines[0] == (
        f"{tmp_path / 'scheduler-config.yaml'}: parallelism: "
        "should be an integer value greater than zero"
    )
    assert (err.field, err.reason) == (err.errors[0].field, err.errors[0].reason)


def test_error_survives_pickling_with_all_problems() -> None:
    doc = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "parallelism": 0,
        "percentageOfNodesToScore": 200,
    }
    with pytest.raises(ConfigError) as info:
        parse_config(doc, "<string>", REGISTRY)
    copy = pickle.loads(pickle.dumps(info.value))
    assert str(copy) == str(info.value)
    assert len(copy.errors) == 2
    assert copy.source == "<string>"


def test_collect_needs_at_least_one_error() -> None:
    with pytest.raises(ValueError, match="at least one"):
        ConfigError.collect([])


def test_missing_upstream_queue_sort_and_binder_are_explained() -> None:
    """With PrioritySort and DefaultBinder not registered, upstream's default
    profile cannot run: say which upstream default is missing."""
    registry = {n: c for n, c in REGISTRY.items() if n not in ("PrioritySort", "DefaultBinder")}
    doc = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"}
    with pytest.raises(ConfigError) as info:
        parse_config(doc, "<string>", registry)
    assert [e.line() for e in info.value.errors] == [
        "<string>: profiles[0].plugins.queueSort: exactly one queueSort plugin must be "
        "enabled, got 0; upstream's default PrioritySort is not registered in Berth",
        "<string>: profiles[0].plugins.bind: at least one bind plugin is needed; "
        "upstream's default DefaultBinder is not registered in Berth",
    ]


def test_validate_reports_each_field_it_names(tmp_path: Path) -> None:
    """Args.validate may join several "<field>: <reason>" with "; "."""
    err = load_error(
        tmp_path,
        """
        profiles:
        - pluginConfig:
          - name: NodeResourcesFit
            args:
              ignoredResources: [""]
              scoringStrategy:
                resources:
                - name: cpu
                  weight: 101
        """,
    )
    assert [(e.field, e.reason) for e in err.errors] == [
        (
            "profiles[0].pluginConfig[0].args.scoringStrategy.resources[0].weight",
            "must be in the range [1, 100]",
        ),
        ("profiles[0].pluginConfig[0].args.ignoredResources[0]", "must not be empty"),
    ]


def test_validate_message_without_a_field_names_the_args(tmp_path: Path) -> None:
    err = load_error(
        tmp_path,
        """
        profiles:
        - pluginConfig:
          - name: OtherSort
            args:
              tie_breaker: age
        """,
    )
    assert (err.field, err.reason) == (
        "profiles[0].pluginConfig[0].args",
        "unsupported tie breaker 'age'",
    )


def test_unknown_disabled_plugin_is_ignored_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Upstream's mergePluginSet (pkg/scheduler/apis/config/v1/default_plugins.go)
    ignores a disabled name that matches nothing, so such configs load; Berth
    says so, naming the field and the closest registered name."""
    path = tmp_path / "config.yaml"
    path.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        "profiles:\n"
        "- plugins:\n"
        "    score:\n"
        "      disabled:\n"
        "      - name: TaintTolerations\n"
    )
    with caplog.at_level("WARNING"):
        config = load_config(path, REGISTRY)
    assert len(config.profiles) == 1
    warning = " ".join(r.getMessage() for r in caplog.records)
    assert "profiles[0].plugins.score.disabled[0].name" in warning
    assert 'unknown plugin "TaintTolerations" (did you mean "TaintToleration"?)' in warning
    assert str(path) in warning
