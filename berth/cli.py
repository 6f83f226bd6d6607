"""The ``berth`` command line.

Each command group lives beside the code it drives and adds itself through a
``register(subparsers)`` function; this module only wires them together, so
``berth --help`` stays fast and every group owns its own ``--help`` text.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

# (module, purpose). Each module exposes ``register(subparsers) -> None`` and
# sets ``func`` on its parsers: a callable taking the parsed namespace and
# returning the process exit code.
COMMAND_MODULES: tuple[str, ...] = (
    "server.cli",  # berth serve
    "shim.cli",  # berth shim
    "berth.certs",  # berth certs
    "berth.place",  # berth place
    "berth.plugins_cmd",  # berth plugins
    "berth.bench",  # berth bench ...
    "berth.localcluster.cli",  # berth cluster up|down|status|env
    "berth.demo",  # berth demo [--once|--down]
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="berth",
        description=(
            "Berth: a Kubernetes scheduler whose Scheduler Framework plugins are Python, "
            "served over gRPC. Run 'berth COMMAND --help' for a command's options."
        ),
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="more log output (-v info, -vv debug)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        module = importlib.import_module(name)
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING
    if args.verbose == 1:
        level = logging.INFO
    elif args.verbose >= 2:
        level = logging.DEBUG
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    code: int = func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
