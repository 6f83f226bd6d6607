"""The ``berth`` command line.

Each command group lives beside the code it drives and adds itself through a
``register(subparsers)`` function; this module only wires them together, and
every group owns its own ``--help`` text. To run one command only that
command's module is imported (``berth shim`` does not load what ``berth
what-if`` or ``berth bench`` need); ``berth --help``, no command or an unknown
one build the whole parser.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence

from berth import version_text
from berth.logs import add_logging_flags, configure_from_args

# Each module exposes ``register(subparsers) -> None`` and sets ``func`` on its
# parsers: a callable taking the parsed namespace and returning the process
# exit code.
COMMAND_MODULES: tuple[str, ...] = (
    "berth.server.cli",  # berth serve
    "berth.shim.cli",  # berth shim
    "berth.cli.certs",  # berth certs
    "berth.cli.place",  # berth place
    "berth.cli.explain",  # berth explain
    "berth.cli.whatif",  # berth what-if
    "berth.cli.replay",  # berth replay
    "berth.cli.plugins_cmd",  # berth plugins
    "berth.cli.new_plugin",  # berth new-plugin
)

# The command each module of COMMAND_MODULES registers, in the same order
# (tests/unit/cli/test_startup.py checks the two agree).
COMMAND_NAMES: tuple[str, ...] = (
    "serve",
    "shim",
    "certs",
    "place",
    "explain",
    "what-if",
    "replay",
    "plugins",
    "new-plugin",
)

# The root's options that take a value (berth/logs.py add_logging_flags).
_VALUE_OPTIONS = frozenset({"-v", "--v", "--logging-format"})

# The developer tools live in berth.dev, which a checkout has and the wheel and
# the image do not: (module, command, one-line help).
DEV_COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("berth.dev.bench", "bench", "benchmarks, side by side with kube-scheduler"),
    (
        "berth.dev.localcluster.cli",
        "cluster",
        "a local etcd, kube-apiserver and kube-controller-manager",
    ),
    ("berth.dev.demo", "demo", "the live demo on a local cluster"),
)


def _not_installed(command: str) -> int:
    print(
        f"berth {command} is a developer tool of Berth's repository and is not part of the "
        "installed package. Run it from a checkout: ./hack/setup-venv.sh, then "
        f".venv/bin/berth {command} (./hack/demo.sh runs the demo).",
        file=sys.stderr,
    )
    return 2


def _register_dev_commands(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], only: str | None = None
) -> None:
    have_dev = importlib.util.find_spec("berth.dev") is not None
    for module_name, command, help_text in DEV_COMMANDS:
        if only is not None and command != only:
            continue
        if have_dev:
            importlib.import_module(module_name).register(sub)
            continue
        p = sub.add_parser(command, help=f"{help_text} (needs a checkout of Berth)")
        p.set_defaults(func=lambda _args, command=command: _not_installed(command))


def command_of(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names (its first word that is not an option or an
    option's value), when it is one of the known commands; else None."""
    known = set(COMMAND_NAMES) | {command for _, command, _ in DEV_COMMANDS}
    skip = False
    for word in argv:
        if skip:
            skip = False
            continue
        if word == "--":
            return None
        if word.startswith("-"):
            skip = word in _VALUE_OPTIONS
            continue
        return word if word in known else None
    return None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``berth`` parser with every command; with ``only`` (a name
    `command_of` returned) with that command alone, its module the only one
    imported."""
    parser = argparse.ArgumentParser(
        prog="berth",
        description=(
            "Berth: a Kubernetes scheduler whose Scheduler Framework plugins are Python, "
            "served over gRPC. Run 'berth COMMAND --help' for a command's options."
        ),
    )
    parser.add_argument("--version", action="version", version=version_text())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, command in zip(COMMAND_MODULES, COMMAND_NAMES, strict=True):
        if only is not None and command != only:
            continue
        module = importlib.import_module(name)
        module.register(sub)
    _register_dev_commands(sub, only)
    # -v N and --logging-format on every command, before or after its name.
    add_logging_flags(parser)
    return parser


def single_threaded_blas() -> None:
    """Ask numpy's BLAS (OpenBLAS in the numpy wheels) for one thread unless the
    environment already says how many. Berth's plugins call numpy's element-wise
    operations and reductions only, never BLAS routines, yet by default OpenBLAS starts
    one thread per core when numpy is imported, and on a 2-core machine that start costs
    about as much CPU again as the import itself (0.23 against 0.11 s measured here), in
    every ``berth shim`` and ``berth serve`` start. Read once, when numpy is first
    imported, so this runs before any command module loads."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def main(argv: Sequence[str] | None = None) -> int:
    single_threaded_blas()
    words = sys.argv[1:] if argv is None else argv
    parser = build_parser(command_of(words))
    args = parser.parse_args(argv)
    # The long-running commands (serve, shim) set default_verbosity 0: they
    # say what they do; the others print warnings only unless given -v.
    configure_from_args(args, default_verbosity=getattr(args, "default_verbosity", None))
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    code: int = func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
