"""``berth plugins``: the plugins Berth can run, and where each comes from.

In-tree plugins (plugins/registry.py) and those installed distributions
declare in the ``berth.plugins`` entry-point group: name, extension points,
whether the default profile enables it, source (in-tree, or distribution,
version and entry point), and the fields of its Args type with their
defaults. ``berth serve --list-plugins`` prints the same.
"""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "plugins",
        help="list the plugins Berth can run: in-tree and installed (berth.plugins entry points)",
        description=(
            "List every plugin Berth finds: the in-tree registry and the 'berth.plugins' entry "
            "points of the distributions installed in this Python environment. For each: "
            "extension points, whether the default profile enables it, where it comes from, "
            "and its pluginConfig args with their defaults; then entry points that could not "
            "be loaded. Exit status 1 when two sources provide the same name (berth serve, "
            "shim and place refuse to start then), else 0."
        ),
        epilog="add a plugin: pip install <your package> (see examples/out-of-tree-plugin)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from berth.framework.discovery import print_listing
    from berth.plugins.registry import load_registry

    return print_listing(load_registry(strict=False), sys.stdout)
