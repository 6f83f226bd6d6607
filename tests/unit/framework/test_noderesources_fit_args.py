"""NodeResourcesFitArgs against upstream v1.36: ValidateNodeResourcesFitArgs
(pkg/scheduler/apis/config/validation/validation_pluginargs.go) and the
decoding of UtilizationShapePoint (staging/src/k8s.io/kube-scheduler/config/v1,
non-pointer int32 fields). Kept here, beside the runtime's tests, because this
change's owner does not edit tests/plugins/noderesources/test_args.py."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from berth.plugins.noderesources import NodeResourcesFitArgs
from berth.plugins.noderesources.args import UtilizationShapePoint

SHAPE = {"shape": [{"utilization": 0, "score": 10}, {"utilization": 100, "score": 0}]}


def decode(raw: dict[str, Any]) -> NodeResourcesFitArgs:
    return msgspec.convert(raw, NodeResourcesFitArgs)


@pytest.mark.parametrize("kind", ["LeastAllocated", "MostAllocated"])
def test_validate_node_resources_fit_args_refuses_the_ratio_param_for_other_types(
    kind: str,
) -> None:
    """The param is Forbidden unless the type is RequestedToCapacityRatio,
    and its shape is then not looked at."""
    args = decode({"scoringStrategy": {"type": kind, "requestedToCapacityRatio": SHAPE}})
    with pytest.raises(ValueError) as err:
        args.validate()
    assert str(err.value) == (
        "scoringStrategy.requestedToCapacityRatio: must be nil when type is not "
        "RequestedToCapacityRatio"
    )
    bad_shape = {"shape": [{"utilization": 200, "score": 99}]}
    args = decode({"scoringStrategy": {"type": kind, "requestedToCapacityRatio": bad_shape}})
    with pytest.raises(
        ValueError, match=r"^scoringStrategy\.requestedToCapacityRatio: must be nil"
    ):
        args.validate()


def test_validate_node_resources_fit_args_accepts_the_ratio_param_with_its_type() -> None:
    decode(
        {"scoringStrategy": {"type": "RequestedToCapacityRatio", "requestedToCapacityRatio": SHAPE}}
    ).validate()


def test_utilization_shape_point_fields_default_to_zero() -> None:
    """A shape point without utilization or score decodes them as 0."""
    args = decode(
        {
            "scoringStrategy": {
                "type": "RequestedToCapacityRatio",
                "requestedToCapacityRatio": {"shape": [{"score": 10}, {"utilization": 100}]},
            }
        }
    )
    args.validate()
    ratio = args.strategy.requested_to_capacity_ratio
    assert ratio is not None
    assert ratio.shape == [UtilizationShapePoint(0, 10), UtilizationShapePoint(100, 0)]
