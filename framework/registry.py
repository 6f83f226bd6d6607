"""The plugins a framework can build, by the name configuration files use.

Like pkg/scheduler/framework/runtime/registry.go: the runtime and the
configuration loader are handed a registry and never import a plugin. The
in-tree registry is ``berth.plugins.registry.REGISTRY``; what a scheduler or
server runs is ``berth.plugins.registry.load_registry()``, the in-tree plugins
merged with the installed out-of-tree ones (framework/discovery.py).

A plugin's factory is its class: the framework calls it with the plugin's
args and its Handle (upstream's PluginFactory). The configuration loader reads
what it checks (the extension points a plugin implements, its ``Args`` type,
the kinds it writes) through ``points_of``, ``args_type_of`` and ``writes_of``.
A Registry may hold a ``PluginSpec`` in place of a class: those facts declared
beside the path of the class, which is imported the first time the class
itself is asked for. A process that only checks a configuration, such as the
shim calling a plugin server, then never loads the plugins' code.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from berth.framework.interfaces import EXTENSION_POINTS, Plugin
from berth.framework.objects import ObjectKind

__all__ = [
    "PluginFactory",
    "PluginSpec",
    "Registry",
    "RegistryLike",
    "args_type_of",
    "extension_points",
    "implements",
    "points_of",
    "writes_of",
]

PluginFactory: TypeAlias = type[Plugin]

# What the runtime and the configuration loader take: a Registry or any
# mapping of names to factories (a test's own dict).
RegistryLike: TypeAlias = Mapping[str, PluginFactory]


def _resolve(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True, slots=True)
class PluginSpec:
    """A plugin known by where its class lives (``"package.module:Class"``)
    and by what the configuration loader reads from the class: the extension
    points it implements (EXTENSION_POINTS' names, in that order), where its
    ``Args`` type lives (None: it takes no args) and the kinds it writes
    (None: they depend on its args, so the class is read). The in-tree specs
    are checked against their classes by tests/plugins/test_registry.py."""

    target: str
    points: tuple[str, ...]
    args: str | None = None
    writes: tuple[ObjectKind, ...] | None = ()

    def load(self) -> PluginFactory:
        cls: PluginFactory = _resolve(self.target)
        return cls


class Registry(MutableMapping[str, PluginFactory]):
    """Plugin factories by name (registry.go, Registry). An entry given as a
    PluginSpec becomes its class the first time it is read as one."""

    def __init__(self, entries: Mapping[str, PluginFactory | PluginSpec] | None = None) -> None:
        self._entries: dict[str, PluginFactory | PluginSpec] = {}
        # The classes of the PluginSpec entries read so far.
        self._loaded: dict[str, PluginFactory] = {}
        if isinstance(entries, Registry):
            self._entries.update(entries._entries)
            self._loaded.update(entries._loaded)
        elif entries is not None:
            self._entries.update(entries)

    def __getitem__(self, name: str) -> PluginFactory:
        entry = self._entries[name]
        if not isinstance(entry, PluginSpec):
            return entry
        cls = self._loaded.get(name)
        if cls is None:
            cls = self._loaded[name] = entry.load()
        return cls

    def __setitem__(self, name: str, factory: PluginFactory) -> None:
        self._entries[name] = factory
        self._loaded.pop(name, None)

    def __delitem__(self, name: str) -> None:
        del self._entries[name]
        self._loaded.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._entries!r})"

    def spec(self, name: str) -> PluginSpec | None:
        """The entry's PluginSpec, None for an entry given as a class."""
        entry = self._entries[name]
        return entry if isinstance(entry, PluginSpec) else None

    def register(self, name: str, factory: PluginFactory | PluginSpec) -> None:
        """Registry.Register: adds ``name``; a name already there is a
        ValueError."""
        if name in self._entries:
            raise ValueError(f"a plugin named {name} already exists")
        self._entries[name] = factory
        self._loaded.pop(name, None)

    def unregister(self, name: str) -> None:
        """Registry.Unregister: removes ``name``; a name not there is a
        ValueError."""
        if name not in self._entries:
            raise ValueError(f"no plugin named {name} exists")
        del self[name]

    def merge(self, other: Mapping[str, PluginFactory]) -> None:
        """Registry.Merge: registers every entry of ``other`` (an out-of-tree
        registry); the first name already there is a ValueError."""
        entries = other._entries if isinstance(other, Registry) else other
        for name, factory in entries.items():
            self.register(name, factory)
        if isinstance(other, Registry):
            self._loaded.update(other._loaded)


def _spec(registry: RegistryLike, name: str) -> PluginSpec | None:
    return registry.spec(name) if isinstance(registry, Registry) else None


def extension_points(cls: PluginFactory) -> list[str]:
    """The extension points ``cls`` implements, in EXTENSION_POINTS' order."""
    return [point for point, iface in EXTENSION_POINTS.items() if issubclass(cls, iface)]


def implements(registry: RegistryLike, name: str, point: str) -> bool:
    """Does the plugin ``name`` implement extension point ``point``?"""
    spec = _spec(registry, name)
    if spec is not None:
        return point in spec.points
    return issubclass(registry[name], EXTENSION_POINTS[point])


def points_of(registry: RegistryLike, name: str) -> tuple[str, ...]:
    """The extension points the plugin ``name`` implements."""
    spec = _spec(registry, name)
    if spec is not None:
        return spec.points
    return tuple(extension_points(registry[name]))


def args_type_of(registry: RegistryLike, name: str) -> type[Any] | None:
    """The plugin's ``Args`` type, None when it takes no args."""
    spec = _spec(registry, name)
    if spec is not None:
        return None if spec.args is None else _resolve(spec.args)
    args_type: type[Any] | None = getattr(registry[name], "Args", None)
    return args_type


def writes_of(registry: RegistryLike, name: str, args: Any) -> tuple[ObjectKind, ...]:
    """The kinds the plugin declares it writes given its decoded args
    (``Plugin.writes``)."""
    spec = _spec(registry, name)
    if spec is not None and spec.writes is not None:
        return spec.writes
    return tuple(registry[name].writes(args))
