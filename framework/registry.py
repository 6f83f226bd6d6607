"""The plugins a framework can build, by the name configuration files use.

Like pkg/scheduler/framework/runtime/registry.go: the runtime and the
configuration loader are handed a registry and never import a plugin. The
in-tree registry is ``berth.plugins.registry.REGISTRY``; what a scheduler or
server runs is ``berth.plugins.registry.load_registry()``, the in-tree plugins
merged with the installed out-of-tree ones (framework/discovery.py).

A plugin's factory is its class: the framework calls it with the plugin's
args and its Handle (upstream's PluginFactory), and the configuration loader
reads from the class, before any instance exists, its ``Args`` type, the
extension points it implements and what it reads and writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias

from berth.framework.interfaces import Plugin

__all__ = ["PluginFactory", "Registry", "RegistryLike"]

PluginFactory: TypeAlias = type[Plugin]

# What the runtime and the configuration loader take: a Registry or any
# mapping of names to factories (a test's own dict).
RegistryLike: TypeAlias = Mapping[str, PluginFactory]


class Registry(dict[str, PluginFactory]):
    """Plugin factories by name (registry.go, Registry)."""

    def register(self, name: str, factory: PluginFactory) -> None:
        """Registry.Register: adds ``name``; a name already there is a
        ValueError."""
        if name in self:
            raise ValueError(f"a plugin named {name} already exists")
        self[name] = factory

    def unregister(self, name: str) -> None:
        """Registry.Unregister: removes ``name``; a name not there is a
        ValueError."""
        if name not in self:
            raise ValueError(f"no plugin named {name} exists")
        del self[name]

    def merge(self, other: Mapping[str, PluginFactory]) -> None:
        """Registry.Merge: registers every entry of ``other`` (an out-of-tree
        registry); the first name already there is a ValueError."""
        for name, factory in other.items():
            self.register(name, factory)
