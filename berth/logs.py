"""Berth's log output: klog's verbosity levels and component-base's two formats
on top of the standard library's ``logging``.

Code logs with the standard library and passes structured keys in ``extra``::

    log = logging.getLogger(__name__)
    log.log(V(2), "Successfully bound pod to node", extra={"pod": "ns/name", "node": "n1"})

The keys in use: ``pod`` (``namespace/name``), ``node``, ``profile``, ``plugin``,
``event``, ``trace_id`` (filled in from OpenTelemetry's current span when the
call does not give one), and any other a call needs.

**Verbosity** (``-v N``/``--v=N``, component-base logs/api/v1 options.go
``addFlags``): klog's levels, where ``V(n)`` lines show at ``-v n`` and above.
``V(0)`` is ``logging.INFO``; ``V(1)`` to ``V(3)`` lie just below it; ``V(4)`` is
``logging.DEBUG``, so every ``log.debug`` shows from ``-v 4``, as upstream's
logging conventions put debug output at V(4); ``V(5)`` to ``V(10)`` lie below
DEBUG. Berth's own loggers follow ``-v``; other libraries' loggers stay at INFO
until ``-v 10`` ("everything").

**Formats** (``--logging-format``, component-base logs/api/v1 registry: ``text``
and ``json``):

- ``text``, klog's header then the message and the keys as ``key="value"``
  (strings quoted, numbers and booleans bare, multi-line strings as klog prints
  them, ``key=<`` then the lines indented)::

      I1127 23:19:29.123456   12345 berth.shim.binding:550] Successfully bound pod to node pod="ns/p" node="n1"

- ``json``, one object per line as component-base logs/json/json.go
  ``NewJSONLogger`` writes them: ``ts`` (milliseconds since the epoch, a
  float), ``caller`` (``module:line``), ``logger``, ``msg``, ``v`` (the klog
  level of an informational line), ``level`` for warnings and errors (klog's
  JSON has no warnings; Python code has them), ``err`` with the exception of a
  line logged with one, then the keys.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import sys
from collections.abc import Iterable
from typing import IO, Any

import orjson

__all__ = [
    "FORMATS",
    "MAX_VERBOSITY",
    "JSONFormatter",
    "KlogTextFormatter",
    "TraceIdFilter",
    "V",
    "add_logging_flags",
    "configure",
    "configure_from_args",
    "verbosity_of",
]

# component-base logs/api/v1: the text format and the JSON one.
FORMATS = ("text", "json")
# "10 everything": higher values are accepted and log as much as 10.
MAX_VERBOSITY = 10
# The loggers whose threshold -v sets; everything else stays at INFO below -v 10.
BERTH_LOGGER = "berth"


def V(n: int) -> int:
    """The ``logging`` level of klog verbosity ``n``: ``log.log(V(2), ...)``
    shows at ``-v 2`` and above."""
    if n <= 0:
        return logging.INFO
    if n < 4:
        return logging.INFO - n
    return logging.DEBUG - (min(n, MAX_VERBOSITY) - 4)


def verbosity_of(levelno: int) -> int:
    """The klog verbosity a record of ``levelno`` needs to show: the least
    ``n`` with ``V(n) <= levelno``."""
    for n in range(MAX_VERBOSITY + 1):
        if V(n) <= levelno:
            return n
    return MAX_VERBOSITY


for _n in range(1, MAX_VERBOSITY + 1):
    if _n != 4:  # V(4) is DEBUG and keeps its name
        logging.addLevelName(V(_n), f"V{_n}")

# The attributes every LogRecord has; anything else on a record came in ``extra``.
_STANDARD = frozenset(
    logging.LogRecord("", 0, "", 0, "", (), None).__dict__.keys()
    | {"message", "asctime", "taskName"}
)


def _extras(record: logging.LogRecord) -> Iterable[tuple[str, Any]]:
    for key, value in record.__dict__.items():
        if key not in _STANDARD and not key.startswith("_"):
            yield key, value


class TraceIdFilter(logging.Filter):
    """Adds ``trace_id`` (32 hex digits) from OpenTelemetry's current span to
    records that carry none, so a log line can be found beside its trace."""

    def filter(self, record: logging.LogRecord) -> bool:
        if "trace_id" in record.__dict__:
            return True
        from opentelemetry import trace

        ctx = trace.get_current_span().get_span_context()
        if ctx.is_valid:
            record.trace_id = trace.format_trace_id(ctx.trace_id)
        return True


def _severity(levelno: int) -> str:
    # klog's header letters: Info, Warning, Error (Fatal has no Python twin).
    if levelno >= logging.ERROR:
        return "E"
    if levelno >= logging.WARNING:
        return "W"
    return "I"


def _text_value(value: Any) -> str:
    """klog's text rendering of one value (k8s.io/klog/v2 internal/serialize
    ``KVListFormat``): strings quoted, multi-line ones as ``<`` + lines + ``>``,
    numbers and booleans bare, anything else as its string, quoted."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    text = value if isinstance(value, str) else str(value)
    if "\n" in text:
        lines = text.rstrip("\n").split("\n")
        return "<\n" + "".join(f"\t{line}\n" for line in lines) + " >"
    return orjson.dumps(text).decode()


class KlogTextFormatter(logging.Formatter):
    """``Lmmdd hh:mm:ss.uuuuuu threadid file:line] msg key="value"...`` as klog's
    header (k8s.io/klog/v2 ``formatHeader``), with the logger's name for the
    file, since Python's file names repeat across packages."""

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.datetime.fromtimestamp(record.created)
        head = (
            f"{_severity(record.levelno)}{when:%m%d %H:%M:%S.%f} {os.getpid():7d} "
            f"{record.name}:{record.lineno}]"
        )
        parts = [head, record.getMessage()]
        parts.extend(f"{k}={_text_value(v)}" for k, v in _extras(record))
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        if record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line


def _json_default(value: Any) -> Any:
    return str(value)


class JSONFormatter(logging.Formatter):
    """One JSON object per record, as component-base's JSON format writes it."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": record.created * 1000.0,
            "caller": f"{record.name}:{record.lineno}",
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.levelno < logging.WARNING:
            out["v"] = verbosity_of(record.levelno)
        else:
            out["level"] = record.levelname.lower()
        if record.exc_info:
            out["err"] = self.formatException(record.exc_info)
        for key, value in _extras(record):
            out.setdefault(key, value)
        return orjson.dumps(out, default=_json_default).decode()


def _formatter(fmt: str) -> logging.Formatter:
    if fmt == "json":
        return JSONFormatter()
    if fmt == "text":
        return KlogTextFormatter()
    raise ValueError(f"--logging-format {fmt!r}: the formats are {', '.join(FORMATS)}")


class _BerthHandler(logging.StreamHandler[IO[str]]):
    """The handler ``configure`` installs, told apart from any other on the root."""


def log_start(logger: logging.Logger, component: str) -> None:
    """The first lines of a long-running command, as upstream components write theirs
    (cmd/kube-scheduler/app/server.go, Run: "Starting Kubernetes Scheduler" with the
    version, then "Golang settings"): Berth's version and the Kubernetes release it
    follows, then the interpreter it runs on and the cyclic collector's thresholds. The
    interpreter's build moves Berth's CPU per pod by a fifth (docs/benchmarks.md), so a log
    says which one ran. Only ``sys`` and ``gc`` are read: nothing is imported for it."""
    import gc

    from berth import KUBERNETES_VERSION, __version__

    logger.info(
        "Starting %s", component, extra={"version": __version__, "follows": KUBERNETES_VERSION}
    )
    logger.info(
        "Python settings",
        extra={
            "implementation": sys.implementation.name,
            "version": ".".join(str(n) for n in sys.version_info[:3]),
            "executable": sys.executable,
            "gcThreshold": list(gc.get_threshold()),
        },
    )


def configure(verbosity: int | None, fmt: str = "text", stream: IO[str] | None = None) -> None:
    """Sends log records to ``stream`` (stderr) in format ``fmt``. Berth's
    loggers show ``V(verbosity)`` and above; ``None`` (no ``-v`` given to a
    command that does not log by default) shows warnings only. Other
    libraries' loggers show INFO and above, and everything from ``-v 10``.
    Called again, it replaces the handler it installed before and leaves
    other handlers alone."""
    handler = _BerthHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(_formatter(fmt))
    handler.addFilter(TraceIdFilter())
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _BerthHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    if verbosity is None:
        logging.getLogger(BERTH_LOGGER).setLevel(logging.WARNING)
        root.setLevel(logging.WARNING)
        return
    level = V(verbosity)
    logging.getLogger(BERTH_LOGGER).setLevel(level)
    root.setLevel(level if verbosity >= MAX_VERBOSITY else logging.INFO)


def _verbosity(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a verbosity: give a number, e.g. -v 2 (0 the default, "
            "2 a line per scheduled or failed pod, 4 debug, 10 everything)"
        )
    return value


def _add_flags(parser: argparse.ArgumentParser, *, root: bool) -> None:
    # On the root the defaults are set; below it they are left out, so that a
    # value given before the command is not reset by the command's parser.
    default: Any = None if root else argparse.SUPPRESS
    g = parser.add_argument_group("logging (component-base's flags)")
    g.add_argument(
        "-v",
        "--v",
        dest="v",
        type=_verbosity,
        default=default,
        metavar="N",
        help="log verbosity, klog's levels: 0 (the default) says what the process does, 2 adds "
        "a line per scheduled or failed pod, 4 debug output, 10 everything",
    )
    g.add_argument(
        "--logging-format",
        dest="logging_format",
        choices=FORMATS,
        default="text" if root else argparse.SUPPRESS,
        help='text (klog\'s header, key="value" pairs; the default) or json (one object per '
        "line: ts, caller, logger, msg, v, and the keys)",
    )


def add_logging_flags(parser: argparse.ArgumentParser) -> None:
    """``-v``/``--v`` and ``--logging-format`` on ``parser`` and on every
    command below it, so they may come before or after a command's name."""
    _add_flags(parser, root=True)
    stack = [parser]
    while stack:
        for action in stack.pop()._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child in dict.fromkeys(action.choices.values()):
                    _add_flags(child, root=False)
                    stack.append(child)


def configure_from_args(args: argparse.Namespace, *, default_verbosity: int | None) -> None:
    """``configure`` from the flags ``add_logging_flags`` added;
    ``default_verbosity`` when ``-v`` was not given (0 for the long-running
    commands, None for the others: warnings only)."""
    verbosity = args.v if args.v is not None else default_verbosity
    configure(verbosity, args.logging_format)
