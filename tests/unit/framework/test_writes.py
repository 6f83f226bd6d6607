"""Plugins declare the kinds they write (``Plugin.writes``), beside what they read; the
caller performs no other write (framework/writes.py, shim/guard.py)."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from berth.framework import CycleState, ObjectKind, PodInfo, PreBindPlugin, Status
from berth.framework.config import API_VERSION, KIND, default_config, parse_config
from berth.framework.interfaces import Plugin
from berth.framework.runtime import Framework, ProfileError
from berth.framework.storage import PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES
from berth.framework.writes import config_writes, declared_kind, profile_writes
from berth.plugins.dynamicresources import RESOURCE_CLAIMS
from berth.plugins.registry import REGISTRY, load_registry
from berth.plugins.stickynode import StickyNode
from berth.plugins.stickynode.args import OwnerKind, StickyNodeArgs
from berth.plugins.volumebinding import VolumeBinding

DEPLOYMENTS = ObjectKind("apps", "v1", "deployments", "Deployment")


class BadDeclaration(PreBindPlugin):
    name: ClassVar[str] = "BadDeclaration"

    @classmethod
    def writes(cls, args: Any) -> tuple[ObjectKind, ...]:
        return ("deployments",)  # type: ignore[return-value]

    def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        return Status.success()


def config_with(plugin: type[Plugin]) -> Any:
    registry = {**REGISTRY, plugin.name: plugin}
    return (
        parse_config(
            {
                "apiVersion": API_VERSION,
                "kind": KIND,
                "profiles": [
                    {
                        "schedulerName": "s",
                        "plugins": {"preBind": {"enabled": [{"name": plugin.name}]}},
                    }
                ],
            },
            "<test>",
            registry,
        ),
        registry,
    )


def test_plugins_that_write_declare_it() -> None:
    # binder.binding_writes: PVs (claimRef) and claims (selected-node annotation).
    assert VolumeBinding.writes(None) == (PERSISTENT_VOLUMES, PERSISTENT_VOLUME_CLAIMS)
    # PostBind records the node on the last owner of the chain.
    (default,) = StickyNode.writes(None)
    assert (default.group, default.resource) == ("kubevirt.io", "virtualmachines")
    chain = [
        OwnerKind(group="", version="v1", resource="pods", kind="Pod"),
        OwnerKind(group="apps", version="v1", resource="deployments", kind="Deployment"),
    ]
    (last,) = StickyNode.writes(StickyNodeArgs(owner_chain=chain))
    assert (last.group, last.version, last.resource) == ("apps", "v1", "deployments")


def test_the_default_profile_declares_volume_binding_and_dynamic_resources_writes() -> None:
    registry = load_registry()
    writes = config_writes(default_config(registry), registry)
    assert writes == {
        "default-scheduler": {
            "VolumeBinding": (PERSISTENT_VOLUMES, PERSISTENT_VOLUME_CLAIMS),
            "DynamicResources": (RESOURCE_CLAIMS,),
        }
    }
    framework = Framework(default_config(registry).profiles[0], registry)
    assert framework.writes == writes["default-scheduler"]


def test_a_declaration_that_is_not_object_kinds_is_refused_at_start() -> None:
    config, registry = config_with(BadDeclaration)
    with pytest.raises(
        ValueError, match="plugin BadDeclaration: writes\\(\\) must return ObjectKind"
    ):
        profile_writes(config.profiles[0], registry)
    with pytest.raises(ProfileError, match="plugin BadDeclaration: writes\\(\\)"):
        Framework(config.profiles[0], registry)


@pytest.mark.parametrize(
    ("group", "version", "resource", "want"),
    [
        ("apps", "v1", "deployments", True),
        ("apps", "v1beta1", "deployments", False),
        ("", "v1", "deployments", False),
        ("apps", "v1", "statefulsets", False),
    ],
)
def test_declared_kind_matches_group_version_and_resource(
    group: str, version: str, resource: str, want: bool
) -> None:
    found = declared_kind((DEPLOYMENTS,), group, version, resource)
    assert found == (DEPLOYMENTS if want else None)
