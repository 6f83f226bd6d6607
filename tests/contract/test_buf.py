"""Contract test: the API is lint-clean and checked for breaking changes (hack/buf.sh).

buf comes from npm (hack/tools/package.json, installed by `hack/buf.sh install`). The
checks run on the repository's protos and on temporary copies that a test breaks on
purpose: a removed, renumbered or retyped field must be reported against the v0.1.0
release image, and an uncommented field must fail lint. npm is required: without it
the fixture fails (it does not skip).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUF_SH = REPO / "hack" / "buf.sh"
BUF = REPO / "hack" / "tools" / "node_modules" / ".bin" / "buf"
RELEASE = REPO / "protos" / "releases" / "v0.1.0.binpb"
SCHEDULING = Path("protos/berth/v1/scheduling.proto")
CLUSTER = Path("protos/berth/v1/cluster.proto")

# What STANDARD reports with buf.yaml's exceptions taken away, by (rule, the element it
# names): exactly the cases buf.yaml documents. A new RPC or enum that breaks these
# rules changes this count, so the exceptions never silently cover it.
EXCEPTED = Counter(
    {
        ("ENUM_ZERO_VALUE_SUFFIX", "CODE_SUCCESS"): 1,
        ("RPC_REQUEST_STANDARD_NAME", "CycleRequest"): 1,
        ("RPC_REQUEST_STANDARD_NAME", "NodesRequest"): 3,
        ("RPC_REQUEST_STANDARD_NAME", "NodeRequest"): 6,
        ("RPC_REQUEST_STANDARD_NAME", "ScheduleRequest"): 1,
        ("RPC_RESPONSE_STANDARD_NAME", "StatusResponse"): 4,
        ("RPC_REQUEST_RESPONSE_UNIQUE", "berth.v1.NodesRequest"): 3,
        ("RPC_REQUEST_RESPONSE_UNIQUE", "berth.v1.NodeRequest"): 6,
        ("RPC_REQUEST_RESPONSE_UNIQUE", "berth.v1.StatusResponse"): 4,
        ("RPC_REQUEST_RESPONSE_UNIQUE", "berth.v1.ScheduleRequest"): 2,
    }
)
NO_EXCEPTIONS = json.dumps(
    {
        "version": "v2",
        "modules": [{"path": "protos"}],
        "lint": {"use": ["STANDARD", "COMMENTS"]},
    }
)


@dataclass(frozen=True)
class Run:
    returncode: int
    output: str

    def describe(self) -> str:
        return f"exit {self.returncode}\n{self.output}"


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> Run:
    proc = subprocess.run(
        cmd,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
        check=False,
    )
    return Run(proc.returncode, proc.stdout)


def _buf_sh(*args: str, root: Path | None = None) -> Run:
    env = dict(os.environ)
    if root is not None:
        env["BUF_REPO_ROOT"] = str(root)
    return _run([str(BUF_SH), *args], cwd=REPO, env=env)


@pytest.fixture(scope="module")
def buf() -> Path:
    """The pinned buf CLI, installed from npm by hack/buf.sh."""
    if shutil.which("npm") is None:
        pytest.fail("npm not found on PATH: hack/buf.sh installs buf from npm", pytrace=False)
    run = _buf_sh("install")
    if run.returncode != 0 or not BUF.exists():
        pytest.fail(f"hack/buf.sh install failed:\n{run.describe()}", pytrace=False)
    return BUF


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of buf.yaml and protos/ to break on purpose."""
    shutil.copy(REPO / "buf.yaml", tmp_path / "buf.yaml")
    shutil.copytree(REPO / "protos", tmp_path / "protos")
    return tmp_path


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} must appear once in {path}"
    path.write_text(text.replace(old, new))


def test_lint_is_clean(buf: Path) -> None:
    run = _buf_sh("lint")
    assert run.returncode == 0, run.describe()
    assert "lint clean" in run.output


def test_lint_exceptions_cover_exactly_the_documented_elements(buf: Path) -> None:
    run = _run([str(buf), "lint", "--error-format=json", "--config", NO_EXCEPTIONS], cwd=REPO)
    assert run.returncode != 0, "without buf.yaml's exceptions STANDARD must complain"
    found: Counter[tuple[str, str]] = Counter()
    for line in run.output.splitlines():
        finding = json.loads(line)
        quoted = re.search(r'"([^"]+)"', finding["message"])
        assert quoted, finding
        found[(finding["type"], quoted.group(1))] += 1
    comments = {k: v for k, v in found.items() if k[0].startswith("COMMENT_")}
    assert not comments, f"uncommented elements: {comments}"
    assert found == EXCEPTED


def test_lint_fails_on_an_uncommented_field(buf: Path, tree: Path) -> None:
    _edit(
        tree / CLUSTER,
        "  // The taint's value; may be empty.\n  string value = 2;",
        "  string value = 2;",
    )
    run = _buf_sh("lint", root=tree)
    assert run.returncode != 0, run.describe()
    assert 'Field "value" should have a non-empty comment' in run.output, run.describe()


def test_no_breaking_change_against_the_release(buf: Path) -> None:
    assert RELEASE.is_file(), "protos/releases/v0.1.0.binpb is the v0.1.0 baseline"
    run = _buf_sh("check")
    assert run.returncode == 0, run.describe()
    assert "no breaking changes against v0.1.0" in run.output, run.describe()


@pytest.mark.parametrize(
    ("old", "new", "reported"),
    [
        pytest.param(
            "  // Pods in the snapshot (bound, assumed or nominated).\n  int32 pod_count = 3;\n",
            "",
            'Previously present field "3" with name "pod_count" on message "SyncResponse"',
            id="field-removed",
        ),
        pytest.param(
            "  string node = 2;\n  // Nodes Filter ran on",
            "  string node = 99;\n  // Nodes Filter ran on",
            'Previously present field "2" with name "node" on message "ScheduleResponse"',
            id="field-renumbered",
        ),
        pytest.param(
            "  int32 evaluated_nodes = 3;",
            "  int64 evaluated_nodes = 3;",
            'changed type from "int32" to "int64"',
            id="field-type-changed",
        ),
    ],
)
def test_breaking_change_is_reported(
    buf: Path, tree: Path, old: str, new: str, reported: str
) -> None:
    _edit(tree / SCHEDULING, old, new)
    run = _buf_sh("breaking", str(RELEASE), root=tree)
    assert run.returncode != 0, run.describe()
    assert reported in run.output, run.describe()


def test_comment_only_changes_do_not_break(buf: Path, tree: Path) -> None:
    _edit(
        tree / SCHEDULING,
        "  // Nodes that passed Filter.\n",
        "  // Nodes that passed every Filter plugin.\n",
    )
    run = _buf_sh("check", root=tree)
    assert run.returncode == 0, run.describe()


def test_release_writes_the_baseline_the_next_check_uses(buf: Path, tree: Path) -> None:
    for image in (tree / "protos" / "releases").glob("*.binpb"):
        image.unlink()
    assert _buf_sh("check", root=tree).returncode != 0, "no release yet: check must say so"

    run = _buf_sh("release", "v1.2.3", root=tree)
    assert run.returncode == 0, run.describe()
    assert (tree / "protos" / "releases" / "v1.2.3.binpb").is_file()
    again = _buf_sh("release", "v1.2.3", root=tree)
    assert again.returncode != 0 and "exists" in again.output, again.describe()

    _edit(tree / SCHEDULING, "  uint64 seed = 7;\n", "  reserved 7;\n")
    check = _buf_sh("check", root=tree)
    assert check.returncode != 0, check.describe()
    assert 'name "seed" on message "ScheduleRequest"' in check.output, check.describe()
    # A release that breaks the previous one is refused.
    refused = _buf_sh("release", "v1.2.4", root=tree)
    assert refused.returncode != 0, refused.describe()
    assert not (tree / "protos" / "releases" / "v1.2.4.binpb").exists()
