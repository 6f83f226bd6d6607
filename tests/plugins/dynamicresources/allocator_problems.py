"""Random allocation problems for comparing Berth's structured allocator with
upstream's: hack/gen-dra-allocator-cases.sh pipes them through upstream's
incubating allocator (hack/dra-allocator-cases/answer.go) and keeps the
answers in testdata/allocator_random_answers.jsonl; test_allocator.py
generates the same problems again. Deterministic for a seed; small enough
that the exhaustive search stays fast; mixing every input the allocator
reads: pools spread over slices and nodes (incomplete, obsolete
generations, per-device node selection), shared counters, consumable
capacity with request policies, taints and tolerations, binding conditions,
admin access, prioritized lists, All requests, constraints, configs,
devices already allocated, and now and then a feature turned off.

Usage: python3 allocator_problems.py SEED COUNT > problems.jsonl (plain
Python, no dependencies).
"""

from __future__ import annotations

import json
import random
import sys
from typing import Any

DRIVERS = ("driver-a", "driver-b")
NODES = ("node-1", "node-2")
FEATURES = (
    "adminAccess",
    "consumableCapacity",
    "deviceBindingAndStatus",
    "deviceTaints",
    "partitionableDevices",
    "prioritizedList",
)


def gi(n: int) -> str:
    return f"{n}Gi"


def device(
    rng: random.Random, name: str, driver: str, counters: list[str] | None
) -> dict[str, Any]:
    d: dict[str, Any] = {"name": name}
    attrs: dict[str, Any] = {}
    if rng.random() < 0.8:
        attrs["numa"] = {"int": rng.randint(0, 1)}
    if rng.random() < 0.8:
        attrs["model"] = {"string": rng.choice("AB")}
    if rng.random() < 0.3:
        attrs[f"{driver}/flag"] = {"bool": rng.random() < 0.5}
    if rng.random() < 0.3:
        attrs["version"] = {"version": rng.choice(["1.0.0", "1.1.0"])}
    if attrs:
        d["attributes"] = attrs
    multi = rng.random() < 0.2
    if multi:
        d["allowMultipleAllocations"] = True
    if rng.random() < 0.6 or multi:
        cap: dict[str, Any] = {"value": gi(rng.choice([1, 2, 4, 8]))}
        roll = rng.random()
        if multi and roll < 0.3:
            cap["requestPolicy"] = {
                "default": gi(1),
                "validRange": {"min": gi(1), "step": gi(1), "max": gi(4)},
            }
        elif multi and roll < 0.5:
            cap["requestPolicy"] = {"default": gi(1), "validValues": [gi(1), gi(2), gi(4)]}
        d["capacity"] = {"memory": cap}
    if counters and rng.random() < 0.7:
        d["consumesCounters"] = [
            {
                "counterSet": rng.choice(counters),
                "counters": {"mem": {"value": gi(rng.choice([1, 2, 3]))}},
            }
        ]
    if rng.random() < 0.15:
        d["taints"] = [
            {
                "key": rng.choice(["k1", "k2"]),
                "value": "v",
                "effect": rng.choice(["NoSchedule", "NoExecute", "None"]),
            }
        ]
    if rng.random() < 0.1:
        d["bindingConditions"] = ["ready"]
        d["bindingFailureConditions"] = ["failed"]
        if rng.random() < 0.5:
            d["bindsToNode"] = True
    return d


def slices_for(rng: random.Random) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    n = 0
    for driver in DRIVERS:
        for p in range(rng.randint(1, 2)):
            # Pool names differ between drivers: upstream keys a pool's
            # counters by its name alone, which Berth does not copy (see
            # structured/README.md, "Differences").
            pool = f"{driver[-1]}-pool-{p}"
            generation = 1
            num_slices = rng.randint(1, 3)
            counter_sets: list[str] = []
            declared = num_slices
            with_counters = rng.random() < 0.3
            if with_counters:
                declared += 1
            if rng.random() < 0.05:
                declared += 1  # incomplete pool
            if with_counters:
                counter_sets = ["cs-0", "cs-1"][: rng.randint(1, 2)]
                n += 1
                out.append(
                    {
                        "metadata": {"name": f"slice-{n}"},
                        "spec": {
                            "driver": driver,
                            "pool": {
                                "name": pool,
                                "generation": generation,
                                "resourceSliceCount": declared,
                            },
                            "nodeName": rng.choice(NODES) if rng.random() < 0.5 else None,
                            "allNodes": None,
                            "sharedCounters": [
                                {
                                    "name": cs,
                                    "counters": {"mem": {"value": gi(rng.choice([2, 4, 6]))}},
                                }
                                for cs in counter_sets
                            ],
                        },
                    }
                )
            for _ in range(num_slices):
                n += 1
                spec: dict[str, Any] = {
                    "driver": driver,
                    "pool": {
                        "name": pool,
                        "generation": generation,
                        "resourceSliceCount": declared,
                    },
                }
                roll = rng.random()
                per_device = False
                if roll < 0.55:
                    spec["nodeName"] = rng.choice(NODES)
                elif roll < 0.7:
                    spec["allNodes"] = True
                elif roll < 0.85:
                    spec["nodeSelector"] = {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "region",
                                        "operator": "In",
                                        "values": [rng.choice(["r1", "r2"])],
                                    }
                                ]
                            }
                        ]
                    }
                else:
                    spec["perDeviceNodeSelection"] = True
                    per_device = True
                devices = []
                for i in range(rng.randint(0, 5)):
                    d = device(rng, f"dev-{n}-{i}", driver, counter_sets)
                    if per_device:
                        r2 = rng.random()
                        if r2 < 0.5:
                            d["nodeName"] = rng.choice(NODES)
                        else:
                            d["allNodes"] = True
                    devices.append(d)
                spec["devices"] = devices
                out.append({"metadata": {"name": f"slice-{n}"}, "spec": spec})
            if rng.random() < 0.08 and out:
                # A newer generation of this pool elsewhere makes these obsolete.
                n += 1
                out.append(
                    {
                        "metadata": {"name": f"slice-{n}"},
                        "spec": {
                            "driver": driver,
                            "pool": {"name": pool, "generation": 2, "resourceSliceCount": 1},
                            "nodeName": rng.choice(NODES),
                            "devices": [device(rng, f"dev-{n}-0", driver, None)],
                        },
                    }
                )
    for s in out:
        s["spec"] = {k: v for k, v in s["spec"].items() if v is not None}
    rng.shuffle(out)
    return out


CLASSES = [
    {
        "metadata": {"name": "class-a"},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "driver-a"'}}]},
    },
    {
        "metadata": {"name": "class-b"},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "driver-b"'}}]},
    },
    {
        "metadata": {"name": "class-any"},
        "spec": {
            "selectors": [
                {
                    "cel": {
                        "expression": 'device.driver == "driver-a" || device.driver == "driver-b"'
                    }
                }
            ],
            "config": [{"opaque": {"driver": "driver-a", "parameters": {"from": "class"}}}],
        },
    },
    {
        "metadata": {"name": "class-multi"},
        "spec": {
            "selectors": [
                {
                    "cel": {
                        "expression": 'device.driver == "driver-a" && device.allowMultipleAllocations == true'
                    }
                }
            ]
        },
    },
]

SELECTORS = [
    'device.attributes["driver-a"].model == "A"',
    '"model" in device.attributes[device.driver] && device.attributes[device.driver].model == "B"',
    '"memory" in device.capacity[device.driver] && '
    'device.capacity[device.driver].memory.compareTo(quantity("2Gi")) >= 0',
    '"numa" in device.attributes[device.driver] && device.attributes[device.driver].numa == 0',
]


def exact(rng: random.Random, name: str) -> dict[str, Any]:
    cls = rng.choice(
        ["class-a", "class-b", "class-any", "class-any", "class-a"] * 2 + ["class-multi"]
    )
    r: dict[str, Any] = {"deviceClassName": cls}
    if rng.random() < 0.1:
        r["allocationMode"] = "All"
    else:
        r["allocationMode"] = "ExactCount"
        r["count"] = rng.choice([1, 1, 1, 1, 2, 2, 3])
    if rng.random() < 0.25:
        # The first selector fails at run time on driver-b's devices (no
        # such key), as upstream's does: rarely.
        r["selectors"] = [{"cel": {"expression": rng.choice(SELECTORS[1:] * 6 + SELECTORS[:1])}}]
    if rng.random() < 0.15:
        r["tolerations"] = [
            {
                "key": rng.choice(["k1", "k2"]),
                "operator": "Exists",
                "effect": rng.choice(["NoSchedule", "NoExecute"]),
            }
        ]
    if rng.random() < 0.2:
        r["capacity"] = {
            "requests": {"memory": rng.choice(["512Mi", "1Gi", "1500Mi", "2Gi", "3Gi"])}
        }
    return r


def claim(rng: random.Random, index: int) -> dict[str, Any]:
    requests: list[dict[str, Any]] = []
    for i in range(rng.choice([1, 1, 2, 2, 3])):
        name = f"req-{i}"
        if rng.random() < 0.3:
            subs = []
            for j in range(rng.randint(1, 3)):
                sub = exact(rng, f"sub-{j}")
                sub["name"] = f"sub-{j}"
                subs.append(sub)
            requests.append({"name": name, "firstAvailable": subs})
        else:
            r = exact(rng, name)
            if rng.random() < 0.1:
                r["adminAccess"] = True
            requests.append({"name": name, "exactly": r})
    devices: dict[str, Any] = {"requests": requests}
    # Names a constraint or config may list: requests and parent/sub.
    names = [r["name"] for r in requests] + [
        f"{r['name']}/{sub['name']}" for r in requests for sub in r.get("firstAvailable", [])
    ]
    if rng.random() < 0.35:
        constraints = []
        for _ in range(rng.choice([1, 1, 2])):
            kind = rng.choice(["matchAttribute", "distinctAttribute"])
            attr = rng.choice(
                ["driver-a/numa", "driver-a/model", "driver-b/numa", "driver-a/version"]
            )
            c: dict[str, Any] = {kind: attr}
            if rng.random() < 0.5:
                c["requests"] = rng.sample(names, k=rng.randint(1, len(names)))
            constraints.append(c)
        devices["constraints"] = constraints
    if rng.random() < 0.2:
        cfg: dict[str, Any] = {"opaque": {"driver": "driver-a", "parameters": {"from": "claim"}}}
        if rng.random() < 0.5:
            cfg["requests"] = rng.sample(names, k=1)
        devices["config"] = [cfg]
    return {"metadata": {"name": f"claim-{index}", "namespace": "ns"}, "spec": {"devices": devices}}


def problem(rng: random.Random, name: str) -> dict[str, Any]:
    slices = slices_for(rng)
    features = dict.fromkeys(FEATURES, True)
    if rng.random() < 0.15:
        features[rng.choice(FEATURES)] = False
    all_devices = [
        (s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"], d)
        for s in slices
        for d in s["spec"].get("devices", [])
    ]
    allocated = []
    allocated_capacity = []
    for driver, pool, dev, d in all_devices:
        if d.get("allowMultipleAllocations") and rng.random() < 0.3:
            allocated_capacity.append(
                {"driver": driver, "pool": pool, "device": dev, "capacity": {"memory": gi(1)}}
            )
        elif rng.random() < 0.15:
            allocated.append({"driver": driver, "pool": pool, "device": dev})
    return {
        "name": name,
        "features": features,
        "allocatedDevices": allocated,
        "allocatedCapacity": allocated_capacity,
        "classes": CLASSES,
        "slices": slices,
        "nodeName": rng.choice(NODES),
        "nodeLabels": {"region": rng.choice(["r1", "r2"])} if rng.random() < 0.9 else {},
        "claims": [claim(rng, i) for i in range(rng.choice([1, 1, 2, 2, 3]))],
    }


def problems(seed: int, count: int) -> list[dict[str, Any]]:
    """The problems of ``seed``, named random-<seed>-<i>."""
    rng = random.Random(seed)
    return [problem(rng, f"random-{seed}-{i}") for i in range(count)]


def main() -> None:
    for p in problems(int(sys.argv[1]), int(sys.argv[2])):
        print(json.dumps(p, sort_keys=True))


if __name__ == "__main__":
    main()
