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
    """The pod list could not be obtained or trusted, so no pod state can be verified.

    Exit 5 rather than a usage error: the command was right, but acting on an unknown pod list
    could destroy an instance that a running pod uses.
    """


@dataclass(frozen=True)
class Pod:
    """One pod and its decoded allocations.

    `annotation_error` is set when the annotation is present but malformed; `allocations` is
    then empty. The pod is kept rather than rejected so that the engine can name it and fail
    closed: a pod whose claim cannot be read may still be using an instance.
    """

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
    """What the cluster says about the node named by --node/NODE_NAME.

    A wrong node name makes every pod of this machine look absent, so recovery would free
    instances that running pods use. These facts let the engine catch that before acting: the
    GPUs HAMi's device plugin registered for the node, and the machine UUID the kubelet reported.
    Either is None when the cluster does not say.
    """

    name: str
    registered_gpus: frozenset[str] | None
    system_uuid: str | None


@dataclass(frozen=True)
class PodSnapshot:
    """Every pod the source reported, and where and when they came from.

    `complete` is False when the source is known to hold only part of the list: a file that is
    one page of a paginated API list (its `metadata.continue` is set). The API source follows
    every page or raises, so its snapshots are always complete.

    `taken_at` (epoch seconds) is when the list was current, as nearly as its source can tell:
    an instance made after it may belong to a pod the list cannot show. The API source takes the
    time just before it asks for the first page; a file (or a file redirected to stdin) gives its
    modification time, when it was last written; a pipe gives the process start, because its
    writer (`kubectl get pods -o json |`) normally runs alongside. Hand-built snapshots leave it
    at 0.0.

    `elsewhere` holds the pods bound to other nodes that hold decodable allocations, and
    `node_identity` what the API says about the node; both feed `verify_node`, which checks
    that --node/NODE_NAME names this machine.
    """

    pods: tuple[Pod, ...]
    source: str
    complete: bool = True
    taken_at: float = 0.0
    elsewhere: tuple[Pod, ...] = ()
    unbound: tuple[Pod, ...] = ()
    """Pods bound to no node yet that hold decodable allocations: their claims count as this
    node's pods' do, on whichever GPUs they name."""
    node_identity: NodeIdentity | None = None
