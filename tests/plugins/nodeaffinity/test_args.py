"""NodeAffinityArgs: decoding and upstream's checks (validation_pluginargs.go,
ValidateNodeAffinityArgs; cases after validation_pluginargs_test.go,
TestValidateNodeAffinityArgs), also through a configuration file."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from berth.framework.config import API_VERSION, KIND, ConfigError, parse_config
from berth.framework.interfaces import Plugin
from berth.plugins.defaultbinder import DefaultBinder
from berth.plugins.nodeaffinity import NodeAffinity, NodeAffinityArgs
from berth.plugins.queuesort import PrioritySort

REGISTRY: dict[str, type[Plugin]] = {
    "PrioritySort": PrioritySort,
    "NodeAffinity": NodeAffinity,
    "DefaultBinder": DefaultBinder,
}

REQ = "addedAffinity.requiredDuringSchedulingIgnoredDuringExecution"
PREF = "addedAffinity.preferredDuringSchedulingIgnoredDuringExecution"


def decode(raw: dict[str, Any]) -> NodeAffinityArgs:
    """Args as a pluginConfig entry's ``args`` mapping decodes."""
    return msgspec.convert(raw, NodeAffinityArgs)


def added(
    required: list[dict[str, Any]] | None = None, preferred: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    affinity: dict[str, Any] = {}
    if required is not None:
        affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": required}
    if preferred is not None:
        affinity["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    return {"addedAffinity": affinity}


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


def test_validate_empty() -> None:
    """TestValidateNodeAffinityArgs "empty"."""
    decode({}).validate()
    assert decode({}).added_affinity is None


def test_validate_valid_added_affinity() -> None:
    """TestValidateNodeAffinityArgs "valid added affinity"."""
    args = decode(
        added(
            required=[{"matchExpressions": [expr("label-1", "In", "label-1-val")]}],
            preferred=[
                {
                    "weight": 1,
                    "preference": {"matchFields": [expr("metadata.name", "In", "node-1")]},
                }
            ],
        )
    )
    args.validate()
    affinity = args.added_affinity
    assert affinity is not None
    required = affinity.required_during_scheduling_ignored_during_execution
    assert required is not None
    assert required.node_selector_terms[0].match_expressions[0].values == ["label-1-val"]
    preferred = affinity.preferred_during_scheduling_ignored_during_execution
    assert preferred[0].preference.match_fields[0].key == "metadata.name"


def test_validate_invalid_added_affinity() -> None:
    """TestValidateNodeAffinityArgs "invalid added affinity": both fields
    named, as upstream's paths."""
    args = decode(
        added(
            required=[{"matchExpressions": [expr("invalid/label/key", "In", "label-1-val")]}],
            preferred=[
                {
                    "weight": 1,
                    "preference": {
                        "matchFields": [expr("metadata.name", "In", "node-1", "node-2")]
                    },
                }
            ],
        )
    )
    with pytest.raises(ValueError) as info:
        args.validate()
    parts = str(info.value).split("; ")
    assert [p.split(": ", 1)[0] for p in parts] == [
        f"{REQ}.nodeSelectorTerms[0].matchExpressions[0].key",
        f"{PREF}[0].matchFields[0].values",
    ]
    assert parts[1].endswith('Invalid value: ["node-1","node-2"]: must have one element')


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        pytest.param(
            added(required=[{"matchExpressions": [expr("k", "Near", "x")]}]),
            f"{REQ}.nodeSelectorTerms[0].matchExpressions[0].operator",
            id="unknown operator",
        ),
        pytest.param(
            added(required=[{}, {"matchFields": [expr("metadata.name", "Exists")]}]),
            f"{REQ}.nodeSelectorTerms[1].matchFields[0].operator",
            id="an empty term is not checked, the next one is",
        ),
        pytest.param(
            added(
                preferred=[
                    {"weight": 5, "preference": {"matchExpressions": [expr("k", "Gt", "x")]}}
                ]
            ),
            f"{PREF}[0].matchExpressions[0].values[0]",
            id="Gt needs an integer",
        ),
    ],
)
def test_validate_names_the_bad_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError) as info:
        decode(raw).validate()
    assert str(info.value).startswith(f"{field}: ")


def test_preferred_term_of_weight_zero_is_not_checked() -> None:
    """NewPreferredSchedulingTerms skips weight 0 before parsing."""
    decode(
        added(
            preferred=[{"weight": 0, "preference": {"matchExpressions": [expr("bad key", "In")]}}]
        )
    ).validate()


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param({"addedAffinity": {"required": {}}}, id="unknown field"),
        pytest.param(
            {
                "addedAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 2**31}]
                }
            },
            id="weight beyond int32",
        ),
        pytest.param(
            {
                "addedAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [{"key": 1}]}]
                    }
                }
            },
            id="key not a string",
        ),
    ],
)
def test_decoding_refuses_malformed_args(raw: dict[str, Any]) -> None:
    with pytest.raises(msgspec.ValidationError):
        decode(raw)


def _config(args: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "profiles": [
            {
                "schedulerName": "berth",
                "plugins": {
                    "queueSort": {"enabled": [{"name": "PrioritySort"}]},
                    "filter": {"enabled": [{"name": "NodeAffinity"}]},
                    "bind": {"enabled": [{"name": "DefaultBinder"}]},
                },
                "pluginConfig": [{"name": "NodeAffinity", "args": args}],
            }
        ],
    }


def test_configuration_file_args_decode() -> None:
    config = parse_config(
        _config(added(required=[{"matchExpressions": [expr("zone", "In", "a")]}])),
        "<test>",
        REGISTRY,
    )
    args = config.profiles[0].plugin_args["NodeAffinity"]
    assert isinstance(args, NodeAffinityArgs)
    assert args.added_affinity is not None


def test_configuration_file_with_bad_args_names_the_field() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(
            _config(added(required=[{"matchExpressions": [expr("a/b/c", "In", "x")]}])),
            "<test>",
            REGISTRY,
        )
    assert info.value.field == (
        f"profiles[0].pluginConfig[0].args.{REQ}.nodeSelectorTerms[0].matchExpressions[0].key"
    )
    assert info.value.reason.startswith('Invalid value: "a/b/c": a valid label key must consist')
