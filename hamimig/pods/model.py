"""The little of a Kubernetes pod (and of its node) that decides whether it holds MIG instances.

Pods are reduced to these fields at the source, so the engine never sees raw manifests and cannot
start depending on fields that one source (a kubectl file, the API) provides and another lacks.
"""

from __future__ import annotations

from dataclasses import dataclass

from hamimig.errors import UnverifiableError
from hamimig.pods.annotation import MigAllocation

TERMINAL_PHASES = ("Succeeded", "Failed")


class PodSourceError(UnverifiableError):
    """The pod list could not be obtained or trusted. Exit 5, not a usage error: the command
    was right, but acting on an unknown pod list could destroy a running pod's instance."""


@dataclass(frozen=True)
class Pod:
    """One pod and its decoded allocations. A malformed annotation sets `annotation_error`
    (no allocations) but keeps the pod, so the engine can name it and fail closed: a pod whose
    claim cannot be read may still be using an instance."""

    namespace: str
    name: str
    uid: str | None
    node_name: str | None
    phase: str | None
    deletion_timestamp: str | None
    allocations: tuple[MigAllocation, ...]
    annotation_error: str | None

    @property
    def holds_allocations(self) -> bool:
        """HAMi's rule: a terminating or finished pod no longer keeps its instances."""
        return self.deletion_timestamp is None and self.phase not in TERMINAL_PHASES

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class NodeIdentity:
    """What the cluster says about the node named by --node/NODE_NAME (None where it does not
    say), so that `verify_node` can catch a wrong node name before recovery acts on it."""

    name: str
    registered_gpus: frozenset[str] | None
    system_uuid: str | None


@dataclass(frozen=True)
class PodSnapshot:
    """Every pod the source reported, and where and when they came from."""

    pods: tuple[Pod, ...]
    source: str
    complete: bool = True
    """False for a file holding one page of a paginated list; the API source follows every page."""
    taken_at: float = 0.0
    """When the list was current, as nearly as its source can tell (epoch seconds; 0.0 when
    hand-built): an instance made after it may belong to a pod the list cannot show."""
    elsewhere: tuple[Pod, ...] = ()
    """Pods bound to other nodes that hold decodable allocations, for `verify_node`."""
    unbound: tuple[Pod, ...] = ()
    """Pods bound to no node yet that hold decodable allocations: their claims count as this
    node's pods' do, on whichever GPUs they name."""
    node_identity: NodeIdentity | None = None
