"""Berth against upstream kube-scheduler, scenario by scenario (tests/differential/README.md)."""

from __future__ import annotations

import dataclasses
import re
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from berth.kube.rest import JSON, KubeApi
from tests.differential.harness import (
    ALWAYS_OUT,
    BERTH_PROFILES,
    KNOWN_DIFFERENT,
    NOT_COMPARED,
    SEQUENCE,
    UPSTREAM,
    Comparison,
    Outcome,
    Scenario,
    StepOutcome,
    all_scenarios,
    config,
    device_allocation,
    device_claim_key,
    run,
    unexpected,
)

# Issue 11's scenarios: spreading and inter-pod affinity (spread-*, ipa-*), preemption
# (preempt-*) and volumes (volume-*).
ISSUE_11_PREFIXES = ("spread-", "ipa-", "preempt-", "volume-")


def namespace_of(scenario: Scenario) -> str:
    return "diff-" + re.sub(r"[^a-z0-9-]+", "-", scenario.name.lower())[:50]


def _scenario_params() -> list[Any]:
    """Every scenario; the KNOWN_DIFFERENT ones as strict xfails with their reason."""
    return [
        pytest.param(
            p,
            id=p.stem,
            marks=[pytest.mark.xfail(strict=True, reason=KNOWN_DIFFERENT[p.stem])]
            if p.stem in KNOWN_DIFFERENT
            else [],
        )
        for p in all_scenarios()
    ]


@pytest.mark.parametrize("path", _scenario_params())
def test_berth_decides_like_kube_scheduler(
    path: Path, schedulers: bool, diff_kube: KubeApi
) -> None:
    scenario = Scenario.load(path)
    not_compared = set(NOT_COMPARED) & {"DynamicResources"}
    if schedulers and not_compared and scenario.needs_dynamic_resources():
        pytest.skip(
            f"needs {sorted(not_compared)}, disabled on both sides (harness.NOT_COMPARED); "
            "BERTH_DIFF_ONLY=upstream checks its expectations against kube-scheduler"
        )
    comparisons = run(
        diff_kube, scenario, namespace_of(scenario), berth=BERTH_PROFILES if schedulers else ()
    )
    wrong = [u for c in comparisons for u in c.unexpected]
    assert not wrong, f"kube-scheduler did not do what the scenario expects: {scenario.about}\n" + (
        "\n".join(wrong)
    )
    disagreements = [str(c) for c in comparisons if not c.agrees]
    assert not disagreements, f"{scenario.about}\n" + "\n".join(disagreements)
    if not schedulers:
        pytest.skip("BERTH_DIFF_ONLY=upstream: kube-scheduler did as expected; Berth not run")


def test_every_scenario_loads_and_cluster_scoped_names_are_unique() -> None:
    """Scenarios run one after another on one control plane: cluster-scoped objects (other
    than nodes and their CSINodes, which are removed and awaited after each scenario) must not
    share names, and each scenario's namespace is its own."""
    owners: dict[str, list[str]] = {}
    namespaces: Counter[str] = Counter()
    for path in all_scenarios():
        scenario = Scenario.load(path)
        namespaces[namespace_of(scenario)] += 1
        for kind, entries in (
            ("namespace", scenario.namespaces),
            ("storageclass", scenario.storage_classes),
            ("persistentvolume", scenario.volumes),
            ("deviceclass", scenario.device_classes),
            ("resourceslice", scenario.slices),
        ):
            for entry in entries:
                owners.setdefault(f"{kind}/{entry['name']}", []).append(scenario.name)
    shared = {k: v for k, v in owners.items() if len(v) > 1}
    assert not shared, f"cluster-scoped names used by more than one scenario: {shared}"
    assert max(namespaces.values()) == 1, namespaces.most_common(3)


def test_the_corpus_covers_enough_scenarios() -> None:
    names = [p.stem for p in all_scenarios()]
    assert len(names) >= 30
    issue_11 = [n for n in names if n.startswith(ISSUE_11_PREFIXES)]
    assert len(issue_11) >= 25, issue_11
    preempt = [n for n in names if n.startswith("preempt-")]
    volume = [n for n in names if n.startswith("volume-")]
    assert len(preempt) + len(volume) >= 15, (preempt, volume)
    for path in all_scenarios():
        if path.stem.startswith(("preempt-", "volume-")):
            assert Scenario.load(path).mode == SEQUENCE, path.stem


def test_a_difference_in_any_recorded_field_is_a_disagreement() -> None:
    """The comparison itself can fail: every field a step records counts."""
    bound = StepOutcome(
        node="d-a",
        first="Unschedulable: 0/2 nodes are available: 2 Insufficient cpu.",
        nominated=("d-a",),
        victims=("low",),
        cleared=("other",),
        claims=(("data", "pv-1", ""),),
        devices=(("gpu", "gpu.example.com/d-a/gpu-0@p"),),
    )
    assert Comparison("p", bound, bound, {"d-a"}).agrees
    for change in (
        {"node": "d-b"},
        {"first": ""},
        {"nominated": ()},
        {"victims": ("low", "more")},
        {"cleared": ()},
        {"claims": (("data", "pv-2", ""),)},
        {"devices": (("gpu", "gpu.example.com/d-a/gpu-1@p"),)},
    ):
        other = dataclasses.replace(bound, **change)
        assert not Comparison("p", bound, other, {"d-a"}).agrees, change
    pending = StepOutcome(node="", first="Unschedulable: x", last="Unschedulable: y")
    assert Comparison("p", pending, pending, set()).agrees
    assert not Comparison("p", pending, dataclasses.replace(pending, last="other"), set()).agrees
    assert not Comparison("p", pending, bound, set()).agrees
    # A declared tie accepts either node only if Berth's own explain finds exactly that tie.
    on_b = dataclasses.replace(bound, node="d-b")
    assert Comparison("p", bound, on_b, {"d-a", "d-b"}, {"d-a", "d-b"}).agrees
    assert not Comparison("p", bound, on_b, {"d-a"}, {"d-a", "d-b"}).agrees
    # Interleaved outcomes compare reason and message.
    assert not Comparison(
        "p", Outcome("", "Unschedulable", "a"), Outcome("", "Unschedulable", "b"), set()
    ).agrees


def test_expectations_are_checked_against_upstream() -> None:
    outcome = StepOutcome(
        node="d-a",
        first="Unschedulable: m",
        nominated=("d-a",),
        victims=("low",),
        devices=(("gpu", "gpu.example.com/d-a/gpu-0@p"),),
    )
    good = {
        "name": "p",
        "expect": {
            "node": "d-a",
            "message": "m",
            "nominated": "d-a",
            "victims": ["low"],
            "devices": {"gpu": "gpu.example.com/d-a/gpu-0"},
        },
    }
    assert unexpected(good, outcome) == []
    wrongs: list[dict[str, Any]] = [
        {"node": "d-b"},
        {"pending": True},
        {"message": "n"},
        {"nominated": ""},
        {"victims": []},
        {"cleared": ["x"]},
        {"claims": {"data": "pv"}},
        {"devices": {"gpu": "gpu.example.com/d-a/gpu-1"}},
    ]
    for wrong in wrongs:
        assert unexpected({"name": "p", "expect": wrong}, outcome), wrong


def test_claims_made_for_a_pod_are_named_by_pod_and_claim() -> None:
    """Generated claims have random names; outcomes name them by what they were made for."""
    owner = [{"kind": "Pod", "name": "p", "uid": "u1", "controller": True}]
    template_claim = {
        "metadata": {
            "name": "p-gpu-x7k2q",
            "annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"},
            "ownerReferences": owner,
        }
    }
    extended = {
        "metadata": {
            "name": "p-extended-resources-9fzt4",
            "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
            "ownerReferences": owner,
        }
    }
    assert device_claim_key(template_claim) == "p:gpu"
    assert device_claim_key(extended) == "p:extended-resources"
    assert device_claim_key({"metadata": {"name": "shared"}}) == "shared"


def test_an_allocation_is_its_devices_and_the_pods_it_is_reserved_for() -> None:
    claim = {
        "metadata": {"name": "c"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"driver": "d.example.com", "pool": "n1", "device": "b", "request": "r"},
                        {"driver": "d.example.com", "pool": "n1", "device": "a", "request": "r"},
                    ]
                }
            },
            "reservedFor": [{"resource": "pods", "name": "q"}, {"resource": "pods", "name": "p"}],
        },
    }
    assert device_allocation(claim) == "d.example.com/n1/a,d.example.com/n1/b@p,q"
    assert device_allocation({"metadata": {"name": "c"}}) == ""


def test_dra_scenarios_need_dynamic_resources_and_the_sequence_mode() -> None:
    dra = [Scenario.load(p) for p in all_scenarios() if p.stem.startswith("dra-")]
    assert len(dra) >= 7, [s.name for s in dra]
    for scenario in dra:
        assert scenario.needs_dynamic_resources(), scenario.name
        assert scenario.mode == SEQUENCE, scenario.name
    others = [Scenario.load(p) for p in all_scenarios() if not p.stem.startswith("dra-")]
    assert not any(s.needs_dynamic_resources() for s in others)


def test_every_side_runs_the_real_default_profile() -> None:
    """Nothing disabled on either side: the config names the profile and nothing else."""
    assert NOT_COMPARED == () and ALWAYS_OUT == ()
    for profile in (UPSTREAM, *BERTH_PROFILES):
        assert config(profile)["profiles"] == [{"schedulerName": profile}]


def test_a_pending_pod_the_harness_removes_is_no_victim_of_the_next_step(
    schedulers: bool, diff_kube: KubeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The harness deletes a pending pod that has no nomination before the next step; with
    the watch stream's deletion events late (as under load), the next step must not start
    until the watch saw that deletion, or it counts the pod among its victims
    (preempt-policy-never: p, deleted after its step, beside q's real victim low-a)."""
    watch = diff_kube.watch

    def late_deletions(path: str, **params: Any) -> Iterator[JSON]:
        for event in watch(path, **params):
            obj = event.get("object") or {}
            if event.get("type") == "DELETED" or obj.get("metadata", {}).get("deletionTimestamp"):
                time.sleep(1.0)
            yield event

    monkeypatch.setattr(diff_kube, "watch", late_deletions)
    path = next(p for p in all_scenarios() if p.stem == "preempt-policy-never")
    scenario = Scenario.load(path)
    comparisons = run(diff_kube, scenario, namespace_of(scenario) + "-late", berth=())
    wrong = [u for c in comparisons for u in c.unexpected]
    assert not wrong, "\n".join(wrong)
