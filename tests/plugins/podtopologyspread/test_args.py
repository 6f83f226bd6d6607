"""PodTopologySpreadArgs: decoding, defaults and upstream's checks
(validation_pluginargs.go, ValidatePodTopologySpreadArgs; cases after
validation_pluginargs_test.go, TestValidatePodTopologySpreadArgs), also
through a configuration file; and what the plugin reads."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from berth.framework.config import API_VERSION, KIND, ConfigError, parse_config
from berth.plugins.podtopologyspread import PodTopologySpread, PodTopologySpreadArgs
from berth.plugins.podtopologyspread.common import (
    REPLICASETS,
    REPLICATIONCONTROLLERS,
    SERVICES,
    STATEFULSETS,
)
from berth.plugins.registry import REGISTRY


def decode(raw: dict[str, Any]) -> PodTopologySpreadArgs:
    return msgspec.convert(raw, PodTopologySpreadArgs)


def c(max_skew: int, key: str, when: str, **more: Any) -> dict[str, Any]:
    return {"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": when, **more}


def listed(*constraints: dict[str, Any]) -> dict[str, Any]:
    return {"defaultConstraints": list(constraints), "defaultingType": "List"}


def test_defaulting_type_defaults_to_system() -> None:
    # v1 SetDefaults_PodTopologySpreadArgs.
    assert decode({}).defaulting_type == "System"
    decode({}).validate()


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        (
            "valid config",
            listed(
                c(1, "node", "DoNotSchedule"),
                c(2, "zone", "ScheduleAnyway"),
            ),
        ),
        ("list default constraints, no constraints", {"defaultingType": "List"}),
        ("system default constraints", {"defaultingType": "System"}),
    ],
)
def test_valid(name: str, raw: dict[str, Any]) -> None:
    decode(raw).validate()


@pytest.mark.parametrize(
    ("name", "raw", "want"),
    [
        (
            "maxSkew less than zero",
            listed(c(-1, "node", "DoNotSchedule")),
            "defaultConstraints[0].maxSkew: Invalid value: -1: not in valid range (0, inf)",
        ),
        (
            "empty topology key",
            listed(c(1, "", "DoNotSchedule")),
            "defaultConstraints[0].topologyKey: Required value: can not be empty",
        ),
        (
            "whenUnsatisfiable is empty",
            listed(c(1, "node", "")),
            "defaultConstraints[0].whenUnsatisfiable: Required value: can not be empty",
        ),
        (
            "whenUnSatisfiable contains unsupported action",
            listed(c(1, "node", "unknown action")),
            'defaultConstraints[0].whenUnsatisfiable: Unsupported value: "unknown action": '
            'supported values: "DoNotSchedule", "ScheduleAnyway"',
        ),
        (
            "duplicated constraints",
            listed(c(1, "node", "DoNotSchedule"), c(2, "node", "DoNotSchedule")),
            'defaultConstraints[1]: Duplicate value: "{node, DoNotSchedule}"',
        ),
        (
            "label selector present",
            listed(c(1, "key", "DoNotSchedule", labelSelector={"matchLabels": {"foo": "bar"}})),
            "defaultConstraints[0].labelSelector: Forbidden: constraint must not define a "
            "selector, as they deduced for each pod",
        ),
        (
            "wrong defaulting type",
            {"defaultingType": "unknown"},
            'defaultingType: Unsupported value: "unknown": supported values: "System", "List"',
        ),
        (
            "system defaulting with constraints",
            {"defaultConstraints": [c(1, "node", "DoNotSchedule")], "defaultingType": "System"},
            'defaultingType: Invalid value: "System": when .defaultConstraints are not empty',
        ),
        (
            "bad topology key",
            listed(c(1, "a/b/c", "DoNotSchedule")),
            'defaultConstraints[0].topologyKey: Invalid value: "a/b/c": a valid label key',
        ),
    ],
)
def test_invalid(name: str, raw: dict[str, Any], want: str) -> None:
    with pytest.raises(ValueError) as err:
        decode(raw).validate()
    assert want in str(err.value)
    # New validates too.
    with pytest.raises(ValueError):
        PodTopologySpread(decode(raw))


def test_several_errors_are_all_named() -> None:
    with pytest.raises(ValueError) as err:
        decode(listed(c(0, "", "DoNotSchedule"))).validate()
    assert str(err.value) == (
        "defaultConstraints[0].maxSkew: Invalid value: 0: not in valid range (0, inf); "
        "defaultConstraints[0].topologyKey: Required value: can not be empty"
    )


def config(args: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "profiles": [
            {
                "schedulerName": "s",
                "pluginConfig": [{"name": "PodTopologySpread", "args": args}],
            }
        ],
    }


def test_bad_args_in_a_config_file_name_the_field() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(config(listed(c(0, "zone", "DoNotSchedule"))), "cfg.yaml", REGISTRY)
    text = str(err.value)
    assert "cfg.yaml" in text
    assert "defaultConstraints[0].maxSkew" in text


def test_unknown_args_field_is_refused() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(config({"defaultConstraint": []}), "cfg.yaml", REGISTRY)
    assert "defaultConstraint" in str(err.value)


def test_the_default_profile_holds_it_with_weight_2() -> None:
    cfg = parse_config({"apiVersion": API_VERSION, "kind": KIND}, "cfg.yaml", REGISTRY)
    profile = cfg.profiles[0]
    for point in ("preFilter", "filter", "preScore", "score"):
        assert "PodTopologySpread" in [r.name for r in profile.plugins[point]], point
    assert {r.name: r.weight for r in profile.plugins["score"]}["PodTopologySpread"] == 2


def test_reads_the_default_selector_sources_only_with_default_constraints() -> None:
    kinds = (SERVICES, REPLICATIONCONTROLLERS, REPLICASETS, STATEFULSETS)
    assert PodTopologySpread.reads(None) == kinds
    assert PodTopologySpread.reads(decode({})) == kinds
    assert PodTopologySpread.reads(decode(listed(c(1, "zone", "ScheduleAnyway")))) == kinds
    assert PodTopologySpread.reads(decode({"defaultingType": "List"})) == ()
