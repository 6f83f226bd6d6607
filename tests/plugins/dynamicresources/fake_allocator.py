"""A small stand-in for the structured allocator (structured/allocator.py),
for the plugin's own tests only: it knows exact-count and prioritized-list
requests against node-local ResourceSlices, by device class name, with no CEL,
counters or capacity. It follows the contract's shape (one AllocationResult
per claim, None when the node cannot hold them, AllocationError for a broken
claim) so the plugin's plumbing can be tested on its own."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from berth.plugins.dynamicresources import AllocationFailed

# A device class whose allocation raises, as a CEL runtime error would.
BROKEN_CLASS = "broken-class"


class FakeAllocator:
    def __init__(
        self,
        allocated: Sequence[Mapping[str, Any]],
        classes: Mapping[str, Mapping[str, Any]],
        slices: Sequence[Mapping[str, Any]],
    ) -> None:
        self.taken: set[tuple[str, str, str]] = set()
        for claim in allocated:
            alloc = claim.get("status", {}).get("allocation", {})
            for r in alloc.get("devices", {}).get("results", []):
                self.taken.add((r["driver"], r["pool"], r["device"]))
        self.classes = classes
        self.slices = slices
        self.calls: list[str] = []

    def _devices(self, node: str) -> list[tuple[str, str, str]]:
        out = []
        for s in self.slices:
            spec = s.get("spec", {})
            if spec.get("nodeName") != node:
                continue
            for d in spec.get("devices", []):
                out.append((spec["driver"], spec["pool"]["name"], d["name"]))
        return out

    def allocate(
        self,
        node_name: str,
        node_labels: Mapping[str, str],
        claims: Sequence[Mapping[str, Any]],
    ) -> list[dict[str, Any]] | None:
        self.calls.append(node_name)
        free = [d for d in self._devices(node_name) if d not in self.taken]
        out: list[dict[str, Any]] = []
        for claim in claims:
            results: list[dict[str, Any]] = []
            for req in claim["spec"]["devices"]["requests"]:
                options = (
                    [(req["name"], req["exactly"])]
                    if "exactly" in req
                    else [(f"{req['name']}/{s['name']}", s) for s in req["firstAvailable"]]
                )
                for ref, spec in options:
                    if spec["deviceClassName"] == BROKEN_CLASS:
                        raise AllocationFailed(
                            f"claim {claim['metadata']['namespace']}/{claim['metadata']['name']}: "
                            "selector evaluation failed",
                            on_node=False,
                        )
                    count = int(spec.get("count", 1))
                    if len(free) >= count:
                        for driver, pool, device in free[:count]:
                            results.append(
                                {"request": ref, "driver": driver, "pool": pool, "device": device}
                            )
                        free = free[count:]
                        break
                else:
                    return None
            out.append(
                {
                    "devices": {"results": results},
                    "nodeSelector": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {
                                        "key": "metadata.name",
                                        "operator": "In",
                                        "values": [node_name],
                                    }
                                ]
                            }
                        ]
                    },
                }
            )
        return out


def fake_factory(
    allocated: Sequence[Mapping[str, Any]],
    classes: Mapping[str, Mapping[str, Any]],
    slices: Sequence[Mapping[str, Any]],
) -> FakeAllocator:
    return FakeAllocator(allocated, classes, slices)
