"""Berth: a Kubernetes scheduler whose plugins are Python, served over gRPC."""

__version__ = "0.1.0"

# The kube-scheduler release whose behaviour Berth follows (hack/k8s-versions.env
# K8S_VERSION, the release the tests build and compare against).
KUBERNETES_VERSION = "v1.36.3"


def version_text() -> str:
    """What ``--version`` prints: Berth's version and the Kubernetes release it follows."""
    return f"berth {__version__} (follows kube-scheduler {KUBERNETES_VERSION})"
