"""What a profile's plugins declare they write (``Plugin.writes``).

A plugin that must change an object returns the change as data
(``ObjectWrite``) and the caller performs it with its own credentials. The
caller performs only writes to the pod being scheduled and to the kinds the
asking plugin declared: the plugin server holds no credentials, and the
caller does not trust its answers further than it can check them. The Berth shim works the
declarations out from the configuration it loaded and its own plugin
registry, not from the plugin server's answers, so a misbehaving server cannot
widen them.
"""

from __future__ import annotations

from collections.abc import Mapping

from berth.framework.interfaces import Plugin
from berth.framework.objects import ObjectKind
from berth.framework.profile import ProfileConfig, SchedulerConfig
from berth.framework.registry import writes_of

# Plugin name to the kinds it declares it writes.
PluginWrites = Mapping[str, tuple[ObjectKind, ...]]


def profile_writes(
    profile: ProfileConfig, registry: Mapping[str, type[Plugin]]
) -> dict[str, tuple[ObjectKind, ...]]:
    """The kinds each plugin the profile enables declares it writes, given
    its args; plugins that declare none are left out, and so are plugins the
    registry does not have (the configuration's own check reports those).
    ValueError names the profile and plugin of a declaration that is not a
    tuple of ObjectKind."""
    out: dict[str, tuple[ObjectKind, ...]] = {}
    for refs in profile.plugins.values():
        for ref in refs:
            if ref.name not in registry or ref.name in out:
                continue
            kinds = writes_of(registry, ref.name, profile.plugin_args.get(ref.name))
            for kind in kinds:
                if not isinstance(kind, ObjectKind):
                    raise ValueError(
                        f"profile {profile.scheduler_name}: plugin {ref.name}: writes() must "
                        f"return ObjectKind values, got {type(kind).__name__}"
                    )
            if kinds:
                out[ref.name] = kinds
    return out


def config_writes(
    config: SchedulerConfig, registry: Mapping[str, type[Plugin]]
) -> dict[str, dict[str, tuple[ObjectKind, ...]]]:
    """``profile_writes`` of every profile, by schedulerName."""
    return {p.scheduler_name: profile_writes(p, registry) for p in config.profiles}


def declared_kind(
    kinds: tuple[ObjectKind, ...], group: str, version: str, resource: str
) -> ObjectKind | None:
    """The kind among ``kinds`` with this group, version and resource, if any."""
    for k in kinds:
        if k.group == group and k.version == version and k.resource == resource:
            return k
    return None


__all__ = ["PluginWrites", "config_writes", "declared_kind", "profile_writes"]
