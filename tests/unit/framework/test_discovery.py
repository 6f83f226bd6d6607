"""Out-of-tree plugins through the ``berth.plugins`` entry points
(framework/discovery.py), with real distributions: a ``.dist-info``
folder and a module written to a temporary directory on sys.path, found by
importlib.metadata as pip-installed ones are."""

from __future__ import annotations

import importlib.metadata
import io
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Literal

import msgspec
import pytest

from berth.framework.config import API_VERSION, KIND, ConfigError, parse_config
from berth.framework.discovery import (
    ENTRY_POINT_GROUP,
    PluginRegistry,
    RegistryError,
    discover,
    format_listing,
    print_listing,
    type_name,
)
from berth.plugins.registry import REGISTRY, load_registry

PLUGIN_MODULE = """
from typing import ClassVar

import msgspec

from berth.framework import CycleState, FilterPlugin, NodeInfo, PodInfo, Status


class {cls}Args(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    zone_key: str
    limit: int = 3


class {cls}(FilterPlugin):
    name: ClassVar[str] = {name!r}
    Args = {cls}Args

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        return Status.success()


class NotAPlugin:
    name = {name!r}
"""


class Site:
    """A directory on sys.path where tests install distributions."""

    def __init__(self, root: Path, prefix: str) -> None:
        self.root = root
        self.prefix = prefix
        self.dists: list[str] = []

    def module(self, name: str, cls: str, plugin_name: str) -> str:
        """Writes a module holding plugin class ``cls`` named
        ``plugin_name``; returns its import name."""
        mod = f"{self.prefix}_{name}"
        (self.root / f"{mod}.py").write_text(PLUGIN_MODULE.format(cls=cls, name=plugin_name))
        return mod

    def dist(self, name: str, version: str, entry_points: dict[str, str]) -> None:
        info = self.root / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        lines = [f"[{ENTRY_POINT_GROUP}]", *(f"{k} = {v}" for k, v in entry_points.items())]
        (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
        self.dists.append(name)

    def entry_points(self) -> list[importlib.metadata.EntryPoint]:
        """The group's entry points of this site's distributions only, so a
        distribution installed in the venv does not change the outcome."""
        return [
            ep
            for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
            if ep.dist is not None and ep.dist.name in self.dists
        ]

    def discover(self, *, strict: bool = True) -> PluginRegistry:
        return discover(REGISTRY, strict=strict, entry_points=self.entry_points())


@pytest.fixture
def site(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[Site]:
    prefix = "oot_" + "".join(c if c.isalnum() else "_" for c in request.node.name)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield Site(tmp_path, prefix)
    for name in [m for m in sys.modules if m.startswith(prefix)]:
        del sys.modules[name]


def config_naming(*names: str) -> dict[str, object]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "profiles": [
            {
                "schedulerName": "p",
                "plugins": {"filter": {"enabled": [{"name": n} for n in names]}},
                "pluginConfig": [{"name": n, "args": {"zoneKey": "zone"}} for n in names],
            }
        ],
    }


# -- found ------------------------------------------------------------------------


def test_a_distributions_plugin_is_found_with_its_source(site: Site) -> None:
    mod = site.module("zone", "ZoneFilter", "ZoneFilter")
    site.dist("zone-plugins", "1.2.0", {"ZoneFilter": f"{mod}:ZoneFilter"})
    registry = site.discover()
    assert list(registry)[: len(REGISTRY)] == list(REGISTRY)
    cls = registry["ZoneFilter"]
    assert cls.name == "ZoneFilter" and cls.__module__ == mod
    source = registry.sources["ZoneFilter"]
    assert (source.distribution, source.version) == ("zone-plugins", "1.2.0")
    assert source.entry_point == f"ZoneFilter = {mod}:ZoneFilter"
    assert str(source) == f"zone-plugins 1.2.0, entry point ZoneFilter = {mod}:ZoneFilter"
    assert all(registry.sources[n].in_tree for n in REGISTRY)
    assert registry.distributions == {"zone-plugins 1.2.0": ("ZoneFilter",)}
    assert not registry.broken and not registry.clashes


def test_a_config_enables_and_configures_a_found_plugin(site: Site) -> None:
    mod = site.module("zone", "ZoneFilter", "ZoneFilter")
    site.dist("zone-plugins", "1.2.0", {"ZoneFilter": f"{mod}:ZoneFilter"})
    config = parse_config(config_naming("ZoneFilter"), "<test>", site.discover())
    (profile,) = config.profiles
    assert [r.name for r in profile.enabled("filter")][-1] == "ZoneFilter"
    args = profile.plugin_args["ZoneFilter"]
    assert (args.zone_key, args.limit) == ("zone", 3)


def test_load_registry_includes_installed_distributions(site: Site) -> None:
    """The real lookup, without entry_points=: whatever else is installed,
    this site's plugin is in."""
    mod = site.module("zone", "ZoneFilter", "ZoneFilter")
    site.dist("zone-plugins", "1.2.0", {"ZoneFilter": f"{mod}:ZoneFilter"})
    registry = load_registry()
    assert registry.sources["ZoneFilter"].distribution == "zone-plugins"
    assert set(REGISTRY) <= set(registry)


# -- clashes ----------------------------------------------------------------------


def test_a_clash_with_an_in_tree_name_is_refused_naming_both_sources(site: Site) -> None:
    mod = site.module("fit", "Fit", "NodeResourcesFit")
    site.dist("shadow", "0.3", {"NodeResourcesFit": f"{mod}:Fit"})
    with pytest.raises(RegistryError) as err:
        site.discover()
    message = str(err.value)
    assert message.startswith('plugin "NodeResourcesFit" is provided twice: ')
    assert "by the in-tree registry (plugins/registry.py)" in message
    assert (
        f'by distribution shadow 0.3 (entry point "NodeResourcesFit = {mod}:Fit" in group '
        "berth.plugins)"
    ) in message
    assert "uninstall that distribution or rename its plugin" in message
    # Listing still works, and keeps the in-tree class.
    registry = site.discover(strict=False)
    assert registry["NodeResourcesFit"] is REGISTRY["NodeResourcesFit"]
    assert [c.name for c in registry.clashes] == ["NodeResourcesFit"]
    assert mod not in sys.modules, "a clashing entry point is not even imported"


def test_two_distributions_with_one_name_are_refused(site: Site) -> None:
    a = site.module("a", "ZoneFilter", "ZoneFilter")
    b = site.module("b", "ZoneFilter", "ZoneFilter")
    site.dist("first", "1.0", {"ZoneFilter": f"{a}:ZoneFilter"})
    site.dist("second", "2.0", {"ZoneFilter": f"{b}:ZoneFilter"})
    with pytest.raises(RegistryError, match=r"distribution first 1\.0 .* distribution second 2\.0"):
        site.discover()


def test_a_name_is_ambiguous_even_when_one_of_its_sources_is_broken(site: Site) -> None:
    good = site.module("good", "ZoneFilter", "ZoneFilter")
    site.dist("a-broken", "1.0", {"ZoneFilter": "no_such_module_here:ZoneFilter"})
    site.dist("b-good", "1.0", {"ZoneFilter": f"{good}:ZoneFilter"})
    with pytest.raises(RegistryError, match=r"distribution a-broken 1\.0 .* distribution b-good"):
        site.discover()
    registry = site.discover(strict=False)
    assert "ZoneFilter" not in registry and not registry.broken


# -- entry points that cannot be used ---------------------------------------------


def test_an_entry_point_that_fails_to_import_is_reported_not_fatal(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    mod = site.module("zone", "ZoneFilter", "ZoneFilter")
    site.dist("zone-plugins", "1.2.0", {"ZoneFilter": f"{mod}:ZoneFilter"})
    site.dist("broken-plugins", "0.1", {"Broken": "no_such_module_here.plugin:Broken"})
    with caplog.at_level(logging.WARNING, logger="berth.framework.discovery"):
        registry = site.discover()
    assert "Broken" not in registry and "ZoneFilter" in registry
    broken = registry.broken["Broken"]
    assert broken.source.distribution == "broken-plugins"
    assert broken.error == (
        "import failed: ModuleNotFoundError: No module named 'no_such_module_here'"
    )
    assert "plugin Broken not available" in caplog.text
    assert "distribution broken-plugins 0.1" in caplog.text
    # A configuration that does not name it loads.
    parse_config(config_naming("ZoneFilter"), "<test>", registry)


def test_a_config_naming_a_broken_entry_point_is_refused_with_the_error(site: Site) -> None:
    site.dist("broken-plugins", "0.1", {"Broken": "no_such_module_here.plugin:Broken"})
    with pytest.raises(ConfigError) as err:
        parse_config(config_naming("Broken"), "<test>", site.discover())
    first = err.value.errors[0]
    assert first.field == "profiles[0].plugins.filter.enabled[0].name"
    assert first.reason == (
        'plugin "Broken" could not be loaded from distribution broken-plugins 0.1 (entry point '
        '"Broken = no_such_module_here.plugin:Broken" in group berth.plugins): import failed: '
        "ModuleNotFoundError: No module named 'no_such_module_here'; fix or reinstall "
        "broken-plugins, or leave the plugin out of the configuration"
    )


def test_the_entry_point_name_must_be_the_class_name(site: Site) -> None:
    mod = site.module("zone", "ZoneFilter", "ZoneFilter")
    site.dist("zone-plugins", "1.2.0", {"Zone": f"{mod}:ZoneFilter"})
    registry = site.discover()
    assert "Zone" not in registry and "ZoneFilter" not in registry
    assert registry.broken["Zone"].error == (
        'the entry point is named "Zone" but its class\'s name is "ZoneFilter"; they must be '
        "equal (configuration files use that name)"
    )


def test_the_entry_point_must_be_a_plugin_class(site: Site) -> None:
    mod = site.module("zone", "ZoneFilter", "ZoneFilter")
    site.dist("odd", "1", {"ZoneFilter": f"{mod}:NotAPlugin", "Pi": "math:pi"})
    registry = site.discover()
    assert registry.broken["ZoneFilter"].error.startswith(
        f"{mod}:NotAPlugin is the class {mod}.NotAPlugin, not a plugin class"
    )
    assert registry.broken["Pi"].error.startswith("math:pi is a float, not a plugin class")


# -- where Berth looked -----------------------------------------------------------


def test_an_unknown_name_says_where_berth_looked_and_how_to_install(site: Site) -> None:
    mod = site.module("zone", "ZoneFilter", "ZoneFilter")
    site.dist("zone-plugins", "1.2.0", {"ZoneFilter": f"{mod}:ZoneFilter"})
    with pytest.raises(ConfigError) as err:
        parse_config(config_naming("NoSuchPlugin"), "<test>", site.discover())
    reason = err.value.errors[0].reason
    assert reason.startswith('unknown plugin "NoSuchPlugin"; registered plugins: ')
    assert "ZoneFilter" in reason
    assert (
        'Berth looked in the in-tree registry (plugins/registry.py) and in the "berth.plugins" '
        f"entry points of the distributions installed in {sys.prefix}: zone-plugins 1.2.0 "
        "(ZoneFilter); to add a plugin, pip install <your package> into that environment"
    ) in reason


def test_with_no_distribution_the_message_says_none_declares_one(site: Site) -> None:
    with pytest.raises(ConfigError, match="none of them declares one; to add a plugin, pip"):
        parse_config(config_naming("NoSuchPlugin"), "<test>", site.discover())


def test_a_plain_mapping_registry_keeps_the_plain_message() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(config_naming("NoSuchPlugin"), "<test>", dict(REGISTRY))
    assert "Berth looked" not in str(err.value)


# -- listing ----------------------------------------------------------------------


def test_the_listing_shows_points_default_profile_source_and_args(site: Site) -> None:
    mod = site.module("zone", "ZoneFilter", "ZoneFilter")
    site.dist("zone-plugins", "1.2.0", {"ZoneFilter": f"{mod}:ZoneFilter"})
    site.dist("broken-plugins", "0.1", {"Broken": "no_such_module_here.plugin:Broken"})
    text = format_listing(site.discover(strict=False))
    lines = text.splitlines()
    assert lines[0].split() == ["NAME", "EXTENSION", "POINTS", "DEFAULT", "PROFILE", "SOURCE"]
    row = {line.split()[0]: line for line in lines[1 : len(REGISTRY) + 2]}
    assert row["TaintToleration"].split()[1:] == [
        "filter,",
        "preScore,",
        "score",
        "yes,",
        "weight",
        "3",
        "in-tree",
    ]
    assert row["ZoneFilter"].split()[1:] == [
        "filter",
        "no",
        "zone-plugins",
        "1.2.0,",
        "entry",
        "point",
        "ZoneFilter",
        "=",
        f"{mod}:ZoneFilter",
    ]
    args = text[text.index("  ZoneFilter: ZoneFilterArgs") :].splitlines()
    assert args[1].split() == ["zoneKey", "str", "required"]
    assert args[2].split() == ["limit", "int", "default", "3"]
    assert "  NodeAffinity: NodeAffinityArgs\n    addedAffinity  NodeAffinity | None" in text
    assert "Found but not loaded (a configuration naming one is refused):\n  Broken: " in text
    # Entry points are taken in name order, whatever sys.path's order.
    assert text.endswith(": broken-plugins 0.1 (Broken); zone-plugins 1.2.0 (ZoneFilter).\n")


def test_listing_exit_status_is_1_on_a_clash(site: Site) -> None:
    mod = site.module("fit", "Fit", "NodeResourcesFit")
    site.dist("shadow", "0.3", {"NodeResourcesFit": f"{mod}:Fit"})
    out = io.StringIO()
    assert print_listing(site.discover(strict=False), out) == 1
    assert "Name clashes (berth serve, shim and place refuse to start until resolved):" in (
        out.getvalue()
    )
    out = io.StringIO()
    assert print_listing(discover(REGISTRY, entry_points=[]), out) == 0


class _Inner(msgspec.Struct):
    x: int = 0


@pytest.mark.parametrize(
    ("tp", "want"),
    [
        (int, "int"),
        (list[str], "list[str]"),
        (_Inner | None, "_Inner | None"),
        (dict[str, list[_Inner]], "dict[str, list[_Inner]]"),
        (Annotated[int, msgspec.Meta(ge=0)], "int"),
        (Literal["a", "b"], "'a' | 'b'"),
    ],
)
def test_type_names_read_without_module_paths(tp: object, want: str) -> None:
    assert type_name(tp) == want
