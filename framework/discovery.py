"""Plugins from outside the repository: the ``berth.plugins`` entry points.

Upstream kube-scheduler takes out-of-tree plugins when it is built
(``app.WithPlugin`` merges an out-of-tree registry into the in-tree one, and a
name registered twice stops the scheduler). Berth finds them when it starts,
among the distributions installed in its Python environment. A distribution
declares, in its pyproject.toml::

    [project.entry-points."berth.plugins"]
    PreferLabel = "berth_example_plugin.plugin:PreferLabel"

The contract, checked here:

- the entry point refers to a class deriving from
  ``berth.framework.interfaces.Plugin`` (through the extension-point
  interfaces), and its name is the class's ``name``, the name configuration
  files use;
- no other source provides that name. A clash with an in-tree plugin, or with
  another distribution's entry point, is a ``RegistryError`` naming both
  sources: Berth does not choose one silently.

An entry point that cannot be used (its import fails, it is not a Plugin
class, its name differs from the class's) does not stop Berth: it is
reported with its distribution and the error, and a configuration that names
it is refused with that report (``PluginRegistry.explain_unknown``, which
the config loader asks about every unknown name).

``format_listing`` is what ``berth plugins`` and ``berth serve
--list-plugins`` print.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import logging
import re
import sys
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any, Protocol, TextIO

import msgspec

from berth.framework.interfaces import Plugin
from berth.framework.registry import Registry, extension_points

__all__ = [
    "ENTRY_POINT_GROUP",
    "IN_TREE",
    "BrokenPlugin",
    "Clash",
    "EntryPointLike",
    "PluginRegistry",
    "PluginSource",
    "RegistryError",
    "discover",
    "extension_points",
    "format_listing",
    "print_listing",
    "type_name",
]

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "berth.plugins"
IN_TREE_REGISTRY = "plugins/registry.py"
INSTALL_HINT = (
    "pip install <your package> into that environment "
    "(examples/out-of-tree-plugin shows such a package)"
)


class _Distribution(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...


class EntryPointLike(Protocol):
    """What discovery reads of an ``importlib.metadata.EntryPoint``."""

    @property
    def name(self) -> str: ...

    @property
    def value(self) -> str: ...

    @property
    def dist(self) -> _Distribution | None: ...

    def load(self) -> Any: ...


@dataclasses.dataclass(frozen=True, slots=True)
class PluginSource:
    """Where a plugin comes from: the in-tree registry (no distribution), or
    an entry point of an installed distribution."""

    distribution: str = ""
    version: str = ""
    # "Name = module:Class", as the distribution declares it.
    entry_point: str = ""

    @property
    def in_tree(self) -> bool:
        return not self.distribution

    def __str__(self) -> str:
        if self.in_tree:
            return "in-tree"
        return f"{self.distribution} {self.version}, entry point {self.entry_point}"

    def described(self) -> str:
        """For messages: which registry or which distribution and group."""
        if self.in_tree:
            return f"the in-tree registry ({IN_TREE_REGISTRY})"
        return (
            f'distribution {self.distribution} {self.version} (entry point "{self.entry_point}" '
            f"in group {ENTRY_POINT_GROUP})"
        )


IN_TREE = PluginSource()


@dataclasses.dataclass(frozen=True, slots=True)
class BrokenPlugin:
    """An entry point Berth found but cannot use."""

    name: str
    source: PluginSource
    error: str

    def __str__(self) -> str:
        return f"{self.source.described()}: {self.error}"


@dataclasses.dataclass(frozen=True, slots=True)
class Clash:
    """Two sources for one plugin name; ``first`` is the in-tree one when
    there is one."""

    name: str
    first: PluginSource
    second: PluginSource

    def __str__(self) -> str:
        fix = (
            "uninstall that distribution or rename its plugin (the entry point and the "
            "class's name)"
            if self.first.in_tree
            else "uninstall one of them"
        )
        return (
            f'plugin "{self.name}" is provided twice: by {self.first.described()} and by '
            f"{self.second.described()}; Berth does not choose between them: {fix}"
        )


class RegistryError(Exception):
    """Plugin names provided by more than one source; Berth refuses to
    start, as kube-scheduler does on a duplicate registration."""

    def __init__(self, clashes: Iterable[Clash]) -> None:
        self.clashes = tuple(clashes)
        super().__init__("\n".join(str(c) for c in self.clashes))


class PluginRegistry(Registry):
    """Plugin classes by configuration name, in-tree first, with where each
    came from and what was found but could not be used: the in-tree registry
    merged with the out-of-tree one (upstream's app.WithPlugin and
    Registry.Merge), a clash recorded rather than raised so it can be listed."""

    def __init__(
        self,
        plugins: Mapping[str, type[Plugin]],
        sources: Mapping[str, PluginSource],
        *,
        broken: Mapping[str, BrokenPlugin] | None = None,
        clashes: Iterable[Clash] = (),
        distributions: Mapping[str, tuple[str, ...]] | None = None,
        environment: str = "",
    ) -> None:
        super().__init__(plugins)
        self.sources = dict(sources)
        self.broken = dict(broken or {})
        self.clashes = tuple(clashes)
        # "name version" of each distribution declaring entry points in the
        # group, with their names.
        self.distributions = dict(distributions or {})
        self.environment = environment or sys.prefix

    def where_looked(self) -> str:
        if self.distributions:
            found = "; ".join(
                f"{dist} ({', '.join(names)})" for dist, names in self.distributions.items()
            )
        else:
            found = "none of them declares one"
        return (
            f"Berth looked in the in-tree registry ({IN_TREE_REGISTRY}) and in the "
            f'"{ENTRY_POINT_GROUP}" entry points of the distributions installed in '
            f"{self.environment}: {found}"
        )

    def explain_unknown(self, name: str, message: str) -> str:
        """The config loader's message for a name not in the registry, with
        where Berth looked, or why the entry point of that name failed."""
        broken = self.broken.get(name)
        if broken is not None:
            return (
                f'plugin "{name}" could not be loaded from {broken}; fix or reinstall '
                f"{broken.source.distribution}, or leave the plugin out of the configuration"
            )
        return f"{message}; {self.where_looked()}; to add a plugin, {INSTALL_HINT}"


# -- discovery ------------------------------------------------------------------


def discover(
    in_tree: Mapping[str, type[Plugin]],
    *,
    strict: bool = True,
    entry_points: Iterable[EntryPointLike] | None = None,
) -> PluginRegistry:
    """The in-tree plugins and those the installed distributions declare in
    the ``berth.plugins`` entry-point group (``entry_points`` replaces that
    lookup, for tests).

    With ``strict`` (what a scheduler or server uses), a plugin name with two
    sources raises RegistryError and every entry point that could not be used
    is logged as a warning; otherwise both are only recorded, for listing.
    """
    eps: Iterable[EntryPointLike] = (
        importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
        if entry_points is None
        else entry_points
    )
    # The in-tree entries as they are (a PluginSpec stays one until its class is read).
    plugins = Registry(in_tree)
    sources = dict.fromkeys(in_tree, IN_TREE)
    broken: dict[str, BrokenPlugin] = {}
    clashes: list[Clash] = []
    distributions: dict[str, list[str]] = {}
    # Sorted, so the outcome does not depend on the order of sys.path.
    for ep in sorted(eps, key=lambda e: (e.name, _dist_name(e), e.value)):
        source = PluginSource(
            distribution=_dist_name(ep) or "(unknown distribution)",
            version=ep.dist.version if ep.dist is not None else "?",
            entry_point=f"{ep.name} = {ep.value}",
        )
        distributions.setdefault(f"{source.distribution} {source.version}", []).append(ep.name)
        prior = sources.get(ep.name)
        if prior is None and ep.name in broken:
            prior = broken[ep.name].source
        if prior is not None:
            clashes.append(Clash(ep.name, prior, source))
            continue
        cls, error = _load(ep)
        if cls is None:
            broken[ep.name] = BrokenPlugin(ep.name, source, error)
            continue
        plugins[ep.name] = cls
        sources[ep.name] = source
    # A name that clashes is ambiguous even if its first source was broken.
    for clash in clashes:
        broken.pop(clash.name, None)
    registry = PluginRegistry(
        plugins,
        sources,
        broken=broken,
        clashes=clashes,
        distributions={k: tuple(v) for k, v in distributions.items()},
    )
    if strict:
        if clashes:
            raise RegistryError(clashes)
        for b in broken.values():
            log.warning(
                "plugin %s not available (a configuration naming it is refused): %s", b.name, b
            )
    return registry


def _dist_name(ep: EntryPointLike) -> str:
    return ep.dist.name if ep.dist is not None else ""


def _load(ep: EntryPointLike) -> tuple[type[Plugin] | None, str]:
    try:
        obj = ep.load()
    except Exception as exc:
        log.debug("loading entry point %s = %s failed", ep.name, ep.value, exc_info=True)
        return None, f"import failed: {type(exc).__name__}: {exc}"
    if not isinstance(obj, type) or not issubclass(obj, Plugin):
        return None, (
            f"{ep.value} is {_kind(obj)}, not a plugin class (a subclass of "
            "berth.framework.interfaces.Plugin)"
        )
    if obj.name != ep.name:
        return None, (
            f'the entry point is named "{ep.name}" but its class\'s name is "{obj.name}"; '
            "they must be equal (configuration files use that name)"
        )
    if not extension_points(obj):
        return None, f"{ep.value} serves no extension point (derive from FilterPlugin, ...)"
    return obj, ""


def _kind(obj: object) -> str:
    if isinstance(obj, type):
        return f"the class {obj.__module__}.{obj.__qualname__}"
    return f"a {type(obj).__name__}"


# -- listing ----------------------------------------------------------------------


def format_listing(registry: PluginRegistry) -> str:
    """Every plugin found: name, extension points, whether upstream's default
    profile (as Berth runs it) enables it, source; then each Args type's
    fields with their defaults, and what could not be used."""
    # Imported here: the config loader is not needed for discovery itself.
    from berth.framework.config import UPSTREAM_DEFAULT_PLUGINS

    defaults = dict(UPSTREAM_DEFAULT_PLUGINS)
    rows = [("NAME", "EXTENSION POINTS", "DEFAULT PROFILE", "SOURCE")]
    for name, cls in registry.items():
        source = registry.sources.get(name, IN_TREE)
        if name in defaults and source.in_tree:
            weight = defaults[name]
            default = "yes" if weight is None else f"yes, weight {weight}"
        else:
            default = "no"
        rows.append((name, ", ".join(extension_points(cls)), default, str(source)))
    widths = [max(len(r[k]) for r in rows) for k in range(3)]
    lines = [
        "  ".join(f"{cell:<{w}}" for cell, w in zip(r[:3], widths, strict=True)) + "  " + r[3]
        for r in rows
    ]

    lines += ["", "Args (pluginConfig; a plugin enabled without an entry gets the defaults):"]
    without: list[str] = []
    for name, cls in registry.items():
        args_type = getattr(cls, "Args", None)
        if args_type is None:
            without.append(name)
            continue
        lines.append(f"  {name}: {args_type.__name__}")
        lines += [f"    {line}" for line in _args_lines(args_type)]
    if without:
        lines.append(f"  no args: {', '.join(without)}")

    if registry.broken:
        lines += ["", "Found but not loaded (a configuration naming one is refused):"]
        lines += [f"  {b.name}: {b}" for b in registry.broken.values()]
    if registry.clashes:
        lines += ["", "Name clashes (berth serve, shim and place refuse to start until resolved):"]
        lines += [f"  {c}" for c in registry.clashes]
    lines += ["", registry.where_looked() + "."]
    return "\n".join(lines) + "\n"


def print_listing(registry: PluginRegistry, out: TextIO) -> int:
    """Writes format_listing; the exit status is 1 when a name clashes (the
    scheduler would not start), else 0."""
    out.write(format_listing(registry))
    return 1 if registry.clashes else 0


def _args_lines(args_type: type[Any]) -> list[str]:
    try:
        fields = msgspec.structs.fields(args_type)
    except TypeError:
        return [f"(not a msgspec.Struct: {args_type!r})"]
    # The defaults a profile gets: decoding an empty mapping runs the type's
    # own defaulting (__post_init__), as the config loader does.
    try:
        defaulted: Any = msgspec.convert({}, args_type)
    except msgspec.ValidationError:
        defaulted = None
    rows: list[tuple[str, str, str]] = []
    for f in fields:
        if f.default is msgspec.NODEFAULT and f.default_factory is msgspec.NODEFAULT:
            default = "required"
        else:
            if defaulted is not None:
                value = getattr(defaulted, f.name)
            elif f.default is not msgspec.NODEFAULT:
                value = f.default
            else:
                value = f.default_factory()
            default = "default " + _json(value)
        rows.append((f.encode_name, type_name(f.type), default))
    if not rows:
        return ["(no fields: only {} or no entry is accepted)"]
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    return [f"{a:<{w0}}  {b:<{w1}}  {c}" for a, b, c in rows]


def _json(value: object) -> str:
    try:
        return msgspec.json.encode(value).decode()
    except (TypeError, msgspec.EncodeError):
        return repr(value)


def type_name(tp: object) -> str:
    """A field's type as a reader wants it: ``list[ResourceSpec]``,
    ``NodeAffinity | None``, without module paths or constraints."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return type_name(args[0])
    if tp is type(None):
        return "None"
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin is not None and args:
        head = getattr(origin, "__name__", str(origin))
        return f"{head}[{', '.join(type_name(a) for a in args)}]"
    if isinstance(tp, type):
        return tp.__name__
    return re.sub(r"\b(?:\w+\.)+(\w+)", r"\1", str(tp))
