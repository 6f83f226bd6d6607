"""The registry the framework is handed (pkg/scheduler/framework/runtime/
registry.go: Register, Unregister, Merge), and that the framework builds
profiles from it without importing any plugin."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from berth.framework.registry import Registry
from tests.unit.framework.fakes import REGISTRY as FAKES


def test_register_adds_a_name_once() -> None:
    registry = Registry()
    registry.register("Counter", FAKES["SkipPreFilter"])
    assert registry == {"Counter": FAKES["SkipPreFilter"]}
    with pytest.raises(ValueError, match="a plugin named Counter already exists"):
        registry.register("Counter", FAKES["RejectLabel"])
    assert registry["Counter"] is FAKES["SkipPreFilter"]


def test_unregister_removes_a_registered_name_only() -> None:
    registry = Registry(FAKES)
    registry.unregister("RejectLabel")
    assert "RejectLabel" not in registry
    with pytest.raises(ValueError, match="no plugin named RejectLabel exists"):
        registry.unregister("RejectLabel")


def test_merge_adds_an_out_of_tree_registry_and_refuses_a_name_twice() -> None:
    registry = Registry({"RejectLabel": FAKES["RejectLabel"]})
    registry.merge({"LabelScore": FAKES["LabelScore"]})
    assert set(registry) == {"RejectLabel", "LabelScore"}
    with pytest.raises(ValueError, match="a plugin named LabelScore already exists"):
        registry.merge({"LabelScore": FAKES["LabelScore"]})


def test_the_framework_builds_a_profile_without_importing_a_plugin() -> None:
    """Configuration and runtime take the registry they are given: nothing of
    berth.plugins is imported, statically or at call time."""
    code = textwrap.dedent(
        """
        import sys

        from berth.framework.config import default_config
        from berth.framework.runtime import Framework
        from tests.unit.config.fakes import REGISTRY

        config = default_config(REGISTRY)
        frameworks = [Framework(p, REGISTRY) for p in config.profiles]
        loaded = sorted(m for m in sys.modules if m.startswith("berth.plugins"))
        assert not loaded, loaded
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_spec_entry_is_its_class_once_read_and_its_facts_before() -> None:
    """framework/registry.py PluginSpec: points, Args and writes come from the
    spec while the class is not loaded; reading the entry loads and keeps the
    class."""
    from berth.framework.registry import PluginSpec, args_type_of, points_of, writes_of

    spec = PluginSpec("tests.unit.framework.fakes:RejectLabel", ("filter",))
    registry = Registry({"RejectLabel": spec})
    assert registry.spec("RejectLabel") is spec
    assert points_of(registry, "RejectLabel") == ("filter",)
    assert args_type_of(registry, "RejectLabel") is None
    assert writes_of(registry, "RejectLabel", None) == ()
    assert registry["RejectLabel"] is FAKES["RejectLabel"]
    assert registry["RejectLabel"] is FAKES["RejectLabel"]
    assert dict(registry.items()) == {"RejectLabel": FAKES["RejectLabel"]}


def test_registry_copies_and_merges_keep_specs_unloaded() -> None:
    from berth.framework.registry import PluginSpec

    spec = PluginSpec("no.such.module:Plugin", ("filter",))
    registry = Registry({"Unloaded": spec})
    copy = Registry(registry)
    merged = Registry()
    merged.merge(registry)
    assert copy.spec("Unloaded") is spec and merged.spec("Unloaded") is spec
    assert "Unloaded" in merged and len(merged) == 1
    with pytest.raises(ModuleNotFoundError):
        merged["Unloaded"]
