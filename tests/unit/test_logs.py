"""berth/logs.py: klog's verbosity flags on every command and component-base's text and
JSON formats (k8s.io/component-base logs/api/v1 options.go addFlags, logs/json/json.go
NewJSONLogger; k8s.io/klog/v2 formatHeader and KVListFormat)."""

from __future__ import annotations

import argparse
import io
import logging
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

import berth
from berth.cli import build_parser
from berth.logs import (
    MAX_VERBOSITY,
    JSONFormatter,
    KlogTextFormatter,
    V,
    configure,
    log_start,
    verbosity_of,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    berth_logger = logging.getLogger("berth")
    handlers, level, berth_level = list(root.handlers), root.level, berth_logger.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    berth_logger.setLevel(berth_level)


def _record(msg: str, level: int = logging.INFO, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("berth.shim.binding", level, "binding.py", 550, msg, (), None)
    record.__dict__.update(extra)
    return record


@pytest.mark.parametrize(
    ("argv", "verbosity", "fmt"),
    [
        (["shim", "-v", "2"], 2, "text"),
        (["shim", "--v=4"], 4, "text"),
        (["shim", "-v=3"], 3, "text"),
        (["shim", "-v5"], 5, "text"),
        (["-v", "2", "shim"], 2, "text"),
        (["--v=2", "serve", "--logging-format=json"], 2, "json"),
        (["--logging-format", "json", "-v", "1", "shim", "--v", "6"], 6, "json"),
        (["serve"], None, "text"),
        (["place", "-v", "4", "--cluster", "c", "--pod", "p"], 4, "text"),
    ],
    ids=lambda x: " ".join(x) if isinstance(x, list) else str(x),
)
def test_verbosity_and_format_before_or_after_the_command(
    argv: list[str], verbosity: int | None, fmt: str
) -> None:
    """klog's -v/--v and component-base's --logging-format, given before the command,
    after it, or both (the command's value wins, as the later flag)."""
    parser = build_parser()
    args, _ = parser.parse_known_args(argv)
    assert (args.v, args.logging_format) == (verbosity, fmt)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["shim", "-vv"], "'v' is not a verbosity"),
        (["-v", "-1", "shim"], "'-1' is not a verbosity"),
        (["shim", "--logging-format=yaml"], "invalid choice: 'yaml' (choose from 'text', 'json')"),
    ],
    ids=["count-style", "negative", "unknown-format"],
)
def test_bad_logging_flags_are_refused_naming_the_choices(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--version"], ["shim", "--version"], ["serve", "--version"]])
def test_version_names_berth_and_the_kubernetes_release(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(argv)
    out = capsys.readouterr().out
    assert out == f"berth {berth.__version__} (follows kube-scheduler v1.36.3)\n"


def test_the_kubernetes_version_is_the_pinned_one() -> None:
    pinned = re.search(
        r"^K8S_VERSION=(\S+)$", (ROOT / "hack/k8s-versions.env").read_text(), re.MULTILINE
    )
    assert pinned is not None and pinned.group(1) == berth.KUBERNETES_VERSION


def test_klog_levels_map_onto_logging_levels() -> None:
    """V(0) is INFO, log.debug is V(4) (upstream's debug level), V(10) is the floor; the
    map is strictly decreasing, so -v n shows exactly V(0)..V(n)."""
    assert V(0) == logging.INFO and V(4) == logging.DEBUG
    levels = [V(n) for n in range(MAX_VERBOSITY + 1)]
    assert levels == sorted(levels, reverse=True) and len(set(levels)) == len(levels)
    assert V(MAX_VERBOSITY + 5) == V(MAX_VERBOSITY) > 0
    assert [verbosity_of(V(n)) for n in range(MAX_VERBOSITY + 1)] == list(range(11))
    assert verbosity_of(logging.WARNING) == 0 and verbosity_of(15) == 4
    assert logging.getLevelName(V(2)) == "V2"


@pytest.mark.parametrize(
    ("verbosity", "shown"),
    [
        (None, ["warning"]),
        (0, ["warning", "v0"]),
        (2, ["warning", "v0", "v2"]),
        (4, ["warning", "v0", "v2", "debug"]),
        (10, ["warning", "v0", "v2", "debug", "v10", "other-debug"]),
    ],
)
def test_verbosity_decides_what_shows(
    verbosity: int | None, shown: list[str], restore_logging: None
) -> None:
    """Berth's loggers follow -v; other libraries' stay at INFO until -v 10."""
    out = io.StringIO()
    configure(verbosity, "text", out)
    berth_log, other = logging.getLogger("berth.shim.x"), logging.getLogger("urllib3.x")
    berth_log.warning("warning")
    berth_log.info("v0")
    berth_log.log(V(2), "v2")
    berth_log.debug("debug")
    berth_log.log(V(10), "v10")
    other.debug("other-debug")
    lines = out.getvalue().splitlines()
    assert [line.split("] ", 1)[1] for line in lines] == shown


def test_configure_replaces_only_its_own_handler(restore_logging: None) -> None:
    other = logging.NullHandler()
    logging.getLogger().addHandler(other)
    first, second = io.StringIO(), io.StringIO()
    configure(0, "text", first)
    configure(0, "json", second)
    logging.getLogger("berth.t").info("once")
    assert first.getvalue() == "" and orjson.loads(second.getvalue())["msg"] == "once"
    assert other in logging.getLogger().handlers


def test_text_format_is_klogs_header_message_and_quoted_keys() -> None:
    line = KlogTextFormatter().format(
        _record(
            "Successfully bound pod to node",
            V(2),
            pod="ns/p",
            node="n1",
            evaluatedNodes=5,
            ok=True,
            odd='say "hi"',
        )
    )
    assert re.fullmatch(
        r"I\d{4} \d\d:\d\d:\d\d\.\d{6} +\d+ berth\.shim\.binding:550\] "
        r'Successfully bound pod to node pod="ns/p" node="n1" evaluatedNodes=5 ok=true '
        r'odd="say \\"hi\\""',
        line,
    ), line


def test_text_format_prints_multi_line_values_as_klog_does() -> None:
    """klog KVListFormat: a string with newlines is written as key=< then each line
    indented by a tab, then " >"."""
    line = KlogTextFormatter().format(_record("Dump", nodes="Node name: a\nDeleted: false\n"))
    assert line.endswith("] Dump nodes=<\n\tNode name: a\n\tDeleted: false\n >")


@pytest.mark.parametrize(
    ("level", "letter"), [(logging.ERROR, "E"), (logging.WARNING, "W"), (V(3), "I")]
)
def test_text_severity_letters(level: int, letter: str) -> None:
    assert KlogTextFormatter().format(_record("m", level)).startswith(letter)


def test_json_format_has_components_keys() -> None:
    """json.go NewJSONLogger: ts (epoch milliseconds), caller, logger, msg, v; then the
    keys."""
    out = orjson.loads(JSONFormatter().format(_record("bound", V(2), pod="ns/p", node="n1")))
    assert out == {
        "ts": pytest.approx(out["ts"]),
        "caller": "berth.shim.binding:550",
        "logger": "berth.shim.binding",
        "msg": "bound",
        "v": 2,
        "pod": "ns/p",
        "node": "n1",
    }
    assert isinstance(out["ts"], float) and out["ts"] > 1.7e12


def test_json_format_errors_and_odd_values() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        import sys

        record = _record("failed", logging.ERROR, thing=object(), msgish={"a": [1]})
        record.exc_info = sys.exc_info()
    out = orjson.loads(JSONFormatter().format(record))
    assert out["level"] == "error" and "v" not in out
    assert "RuntimeError: boom" in out["err"]
    assert out["thing"].startswith("<object object") and out["msgish"] == {"a": [1]}


def test_json_lines_parse_one_by_one_with_the_trace_id(restore_logging: None) -> None:
    """Each line is one object; inside a span the line carries the span's trace id."""
    out = io.StringIO()
    configure(2, "json", out)
    log = logging.getLogger("berth.shim.test")
    tracer = TracerProvider().get_tracer("t")
    with tracer.start_as_current_span("attempt") as span:
        log.log(V(2), "Unable to schedule pod; no fit; waiting", extra={"pod": "ns/p"})
        want = trace.format_trace_id(span.get_span_context().trace_id)
    log.info("multi\nline message")
    log.log(V(2), "given", extra={"trace_id": "mine"})
    objs = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert [o["msg"] for o in objs] == [
        "Unable to schedule pod; no fit; waiting",
        "multi\nline message",
        "given",
    ]
    assert objs[0]["trace_id"] == want and len(want) == 32
    assert "trace_id" not in objs[1] and objs[2]["trace_id"] == "mine"


def test_a_command_starts_by_logging_its_version_then_its_interpreter(
    restore_logging: None,
) -> None:
    """cmd/kube-scheduler/app/server.go Run logs the version, then "Golang settings";
    Berth's commands log the version and the release they follow, then the Python that runs
    them (its build moves the figures) and the collector's thresholds."""
    out = io.StringIO()
    configure(0, "json", out)
    log_start(logging.getLogger("berth.shim"), "berth shim")
    started, settings = (orjson.loads(line) for line in out.getvalue().splitlines())
    assert started["msg"] == "Starting berth shim" and started["logger"] == "berth.shim"
    assert (started["version"], started["follows"]) == (
        berth.__version__,
        berth.KUBERNETES_VERSION,
    )
    assert settings["msg"] == "Python settings"
    assert settings["executable"] == sys.executable
    assert settings["implementation"] == sys.implementation.name
    assert settings["version"] == "{}.{}.{}".format(*sys.version_info[:3])
    assert len(settings["gcThreshold"]) == 3


def test_every_command_takes_the_logging_flags() -> None:
    parser = build_parser()
    seen = 0
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                flags = {s for a in sub._actions for s in a.option_strings}
                assert {"-v", "--v", "--logging-format"} <= flags, name
                seen += 1
    assert seen >= 6
