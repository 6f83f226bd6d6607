"""NodeResourcesFitArgs: upstream's defaults (defaults.go,
SetDefaults_NodeResourcesFitArgs) and checks (validation_pluginargs.go,
ValidateNodeResourcesFitArgs; cases after validation_pluginargs_test.go,
TestValidateFitArgs)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from berth.plugins.noderesources import Fit, NodeResourcesFitArgs
from berth.plugins.noderesources.args import ResourceSpec, ScoringStrategy


def decode(raw: dict[str, Any]) -> NodeResourcesFitArgs:
    """Args as a pluginConfig entry's ``args`` mapping decodes."""
    return msgspec.convert(raw, NodeResourcesFitArgs)


def test_defaults_are_least_allocated_over_cpu_and_memory() -> None:
    args = decode({})
    assert args.strategy == ScoringStrategy(
        "LeastAllocated", [ResourceSpec("cpu", 1), ResourceSpec("memory", 1)]
    )
    assert args.ignored_resources == [] and args.ignored_resource_groups == []


def test_defaults_fill_missing_resources_and_zero_weights() -> None:
    args = decode({"scoringStrategy": {"type": "MostAllocated"}})
    assert args.strategy.resources == [ResourceSpec("cpu", 1), ResourceSpec("memory", 1)]
    args = decode(
        {"scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "nvidia.com/gpu"}]}}
    )
    assert args.strategy.resources == [ResourceSpec("nvidia.com/gpu", 1)]


def test_camel_case_fields_decode() -> None:
    args = decode(
        {
            "ignoredResources": ["example.com/foo"],
            "ignoredResourceGroups": ["example.org"],
            "scoringStrategy": {
                "type": "RequestedToCapacityRatio",
                "resources": [{"name": "cpu", "weight": 3}],
                "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 10}]},
            },
        }
    )
    args.validate()
    assert args.ignored_resources == ["example.com/foo"]
    assert args.ignored_resource_groups == ["example.org"]
    ratio = args.strategy.requested_to_capacity_ratio
    assert ratio is not None and ratio.shape[0].score == 10


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param({"ignoredResource": ["x"]}, id="misspelled top-level field"),
        pytest.param(
            {"scoringStrategy": {"typ": "LeastAllocated"}}, id="misspelled strategy field"
        ),
        pytest.param(
            {"scoringStrategy": {"resources": [{"name": "cpu", "weigth": 1}]}},
            id="misspelled resource field",
        ),
    ],
)
def test_unknown_fields_are_refused(raw: dict[str, Any]) -> None:
    with pytest.raises(msgspec.ValidationError, match="unknown field"):
        decode(raw)


VALID = {
    "IgnoredResources: valid args": {"ignoredResources": ["example.com"]},
    "IgnoredResourceGroup: valid args ": {"ignoredResourceGroups": ["example.com"]},
    "weights at the edges of (0, 100]": {
        "scoringStrategy": {
            "type": "MostAllocated",
            "resources": [{"name": "cpu", "weight": 100}, {"name": "memory", "weight": 1}],
        }
    },
}


@pytest.mark.parametrize("raw", list(VALID.values()), ids=list(VALID))
def test_valid_args_pass(raw: dict[str, Any]) -> None:
    decode(raw).validate()


INVALID = {
    "IgnoredResources: too long value": (
        {"ignoredResources": ["a" * 64]},
        "ignoredResources[0]: invalid value 'aaaa",
    ),
    "IgnoredResources: name is empty": (
        {"ignoredResources": ["example.com/"]},
        "ignoredResources[0]: invalid value 'example.com/': name part must be non-empty",
    ),
    "IgnoredResources: name has too many slash": (
        {"ignoredResources": ["example.com/aaa/bbb"]},
        "ignoredResources[0]: invalid value 'example.com/aaa/bbb': a qualified name",
    ),
    "IgnoredResourceGroup: illegal args": (
        {"ignoredResourceGroups": ["example.com/"]},
        "ignoredResourceGroups[0]: invalid value 'example.com/': resource group name can't contain '/'",
    ),
    "IgnoredResourceGroup: name is too long": (
        {"ignoredResourceGroups": ["a" * 64]},
        "ignoredResourceGroups[0]: invalid value 'aaaa",
    ),
    "IgnoredResourceGroup: name cannot be empty": (
        {"ignoredResourceGroups": [""]},
        "ignoredResourceGroups[0]: invalid value '': name part must be non-empty",
    ),
    "ScoringStrategy: type is unsupported": (
        {"scoringStrategy": {"type": "Invalid"}},
        'scoringStrategy.type: unsupported value "Invalid": supported values: '
        '"LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"',
    ),
    "ScoringStrategy: type is required": (
        {"scoringStrategy": {"resources": [{"name": "cpu"}]}},
        'scoringStrategy.type: unsupported value ""',
    ),
    "ScoringStrategy: resources weight is negative": (
        {
            "scoringStrategy": {
                "type": "MostAllocated",
                "resources": [{"name": "cpu", "weight": -1}],
            }
        },
        "scoringStrategy.resources[0].weight: invalid value -1: resource weight of cpu not in valid range (0, 100]",
    ),
    "ScoringStrategy: resources weight is larger than MaxNodeScore": (
        {
            "scoringStrategy": {
                "type": "LeastAllocated",
                "resources": [{"name": "cpu"}, {"name": "memory", "weight": 101}],
            }
        },
        "scoringStrategy.resources[1].weight: invalid value 101: resource weight of memory",
    ),
    "ScoringStrategy: RequestedToCapacityRatio needs its shape": (
        {"scoringStrategy": {"type": "RequestedToCapacityRatio"}},
        "scoringStrategy.requestedToCapacityRatio: required when type is RequestedToCapacityRatio",
    ),
    "ScoringStrategy: shape must have a point": (
        {"scoringStrategy": {"type": "RequestedToCapacityRatio", "requestedToCapacityRatio": {}}},
        "scoringStrategy.requestedToCapacityRatio.shape: at least one point must be specified",
    ),
    "ScoringStrategy: shape utilization values must be increasing": (
        {
            "scoringStrategy": {
                "type": "RequestedToCapacityRatio",
                "requestedToCapacityRatio": {
                    "shape": [{"utilization": 50, "score": 1}, {"utilization": 50, "score": 2}]
                },
            }
        },
        "scoringStrategy.requestedToCapacityRatio.shape[1].utilization: invalid value 50: "
        "values must be sorted in increasing order",
    ),
    "ScoringStrategy: shape points out of range": (
        {
            "scoringStrategy": {
                "type": "RequestedToCapacityRatio",
                "requestedToCapacityRatio": {"shape": [{"utilization": 101, "score": 11}]},
            }
        },
        "scoringStrategy.requestedToCapacityRatio.shape[0].utilization: invalid value 101: "
        "not in valid range [0, 100]; scoringStrategy.requestedToCapacityRatio.shape[0].score: "
        "invalid value 11: not in valid range [0, 10]",
    ),
}


@pytest.mark.parametrize(("raw", "message"), list(INVALID.values()), ids=list(INVALID))
def test_invalid_args_name_the_field_and_reason(raw: dict[str, Any], message: str) -> None:
    args = decode(raw)
    with pytest.raises(ValueError) as info:
        args.validate()
    assert str(info.value).startswith(message)
    # Building the plugin checks the args as upstream's NewFit does.
    with pytest.raises(ValueError):
        Fit(args)


def test_every_error_is_reported_at_once() -> None:
    args = decode(
        {
            "ignoredResources": ["a/b/c"],
            "scoringStrategy": {"type": "Nope", "resources": [{"name": "cpu", "weight": -3}]},
        }
    )
    with pytest.raises(ValueError) as info:
        args.validate()
    fields = [part.split(":")[0] for part in str(info.value).split("; ")]
    assert fields == [
        "ignoredResources[0]",
        "scoringStrategy.type",
        "scoringStrategy.resources[0].weight",
    ]
