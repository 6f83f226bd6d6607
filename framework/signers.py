"""The parts of a pod that plugins sign (opportunistic batching, framework/batch.py).

Upstream keeps these in kube-scheduler's framework/signers.go: one name per
part of a pod, and a function that turns that part into a value two pods
share exactly when the part is the same for scheduling. Plugins that read the
same part use the same name, so their fragments merge into one entry of the
signature. Values here are hashable Python values built from the pod record
(cluster.proto ``Pod``); a sub-message is compared by its deterministic wire
bytes.

Where Berth's record differs from the API object the signature is stricter
than upstream's, never looser: a volume is signed with its claim name (two
pods with different claims never share a signature), so batching can only
happen less often than upstream's, never for pods that should not share
results.
"""

from __future__ import annotations

from google.protobuf.message import Message

from berth.api.v1 import cluster_pb2 as pb

__all__ = [
    "FEATURES",
    "HOST_PORTS",
    "IMAGE_NAMES",
    "LABELS",
    "NODE_AFFINITY",
    "NODE_NAME",
    "NODE_SELECTOR",
    "RESOURCES",
    "SCHEDULER_NAME",
    "TOLERATIONS",
    "VOLUMES",
    "host_ports",
    "labels",
    "message_bytes",
    "node_affinity",
    "node_selector",
    "tolerations",
    "volumes",
]

# signers.go: the names of the signed parts (upstream's *SignerName constants).
IMAGE_NAMES = "v1.Pod.Spec.CanonicalImageNames()"
LABELS = "v1.Pod.Labels"
NODE_NAME = "v1.Pod.Spec.NodeName"
NODE_AFFINITY = "v1.Pod.Spec.Affinity.NodeAffinity"
NODE_SELECTOR = "v1.Pod.Spec.Affinity.NodeSelector"
HOST_PORTS = "v1.Pod.Spec.HostPorts()"
RESOURCES = "v1.Pod.Spec.ContainerRequestsAndOverheads()"
SCHEDULER_NAME = "v1.Pod.Spec.SchedulerName"
TOLERATIONS = "v1.Pod.Spec.Tolerations"
VOLUMES = "v1.Pod.Spec.Volumes.NonSyntheticSources()"
FEATURES = "v1.Pod.Spec.RequiredFeatures()"


def message_bytes(msg: Message) -> bytes:
    """A protobuf message as deterministic wire bytes (map entries sorted)."""
    return msg.SerializeToString(deterministic=True)


def host_ports(pod: pb.Pod) -> tuple[int, ...]:
    """signers.go HostPortsSigner: the distinct non-zero host ports of every
    container and init container, sorted."""
    ports = {
        port.host_port
        for c in (*pod.containers, *pod.init_containers)
        for port in c.ports
        if port.host_port
    }
    return tuple(sorted(ports))


def tolerations(pod: pb.Pod) -> tuple[bytes, ...]:
    """signers.go TolerationsSigner: the tolerations ordered by key, then
    value (each compared whole)."""
    ordered = sorted(pod.tolerations, key=lambda t: (t.key, t.value))
    return tuple(message_bytes(t) for t in ordered)


def volumes(pod: pb.Pod) -> tuple[bytes, ...]:
    """signers.go VolumesSigner: the volumes scheduling reads, sorted. The
    record already leaves configMap, secret and other volumes no plugin reads
    out (berth/kube/records.py); the volume's own name is left out as
    upstream signs only the source."""
    signed = []
    for v in pod.volumes:
        copy = pb.Volume()
        copy.CopyFrom(v)
        copy.name = ""
        signed.append(message_bytes(copy))
    return tuple(sorted(signed))


def node_affinity(pod: pb.Pod) -> bytes | None:
    """signers.go NodeAffinitySigner: the pod's node affinity (None without
    one)."""
    if not pod.HasField("affinity") or not pod.affinity.HasField("node_affinity"):
        return None
    return message_bytes(pod.affinity.node_affinity)


def node_selector(pod: pb.Pod) -> tuple[tuple[str, str], ...]:
    """The pod's nodeSelector as sorted pairs."""
    return tuple(sorted(pod.node_selector.items()))


def labels(pod: pb.Pod) -> tuple[tuple[str, str], ...]:
    """The pod's labels as sorted pairs."""
    return tuple(sorted(pod.labels.items()))
