"""NodeMetrics (metrics.k8s.io/v1beta1 ``nodes``) served by a local API server from a
CustomResourceDefinition, standing in for metrics-server (which serves the same objects
through an aggregated API and measures them with the kubelets): what LowCpuScheduler
reads, for ``berth demo`` and the integration tests alike."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from berth.kube.rest import JSON

METRICS_CRD = "nodes.metrics.k8s.io"
METRICS_PATH = "/apis/metrics.k8s.io/v1beta1/nodes"


def node_metrics_crd() -> JSON:
    """The CRD serving metrics.k8s.io/v1beta1 ``nodes`` (kind NodeMetrics, cluster-scoped).
    A ``*.k8s.io`` group needs the ``api-approved.kubernetes.io`` annotation."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": METRICS_CRD,
            "annotations": {
                "api-approved.kubernetes.io": "unapproved, berth's stand-in for metrics-server"
            },
        },
        "spec": {
            "group": "metrics.k8s.io",
            "scope": "Cluster",
            "names": {
                "plural": "nodes",
                "singular": "nodemetrics",
                "kind": "NodeMetrics",
                "listKind": "NodeMetricsList",
            },
            "versions": [
                {
                    "name": "v1beta1",
                    "served": True,
                    "storage": True,
                    # No status subresource: NodeMetrics carry timestamp, window and
                    # usage at the top level.
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


def node_metrics_object(
    node: str,
    *,
    cpu: str,
    memory: str,
    at: dt.datetime,
    window: str,
    labels: Mapping[str, str] | None = None,
) -> JSON:
    """A NodeMetrics object as metrics-server reports one: ``usage`` (CPU and the memory
    working set, as quantities) measured over ``window`` ending at ``at``."""
    metadata: JSON = {"name": node}
    if labels is not None:
        metadata["labels"] = dict(labels)
    return {
        "apiVersion": "metrics.k8s.io/v1beta1",
        "kind": "NodeMetrics",
        "metadata": metadata,
        "timestamp": at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "window": window,
        "usage": {"cpu": cpu, "memory": memory},
    }
