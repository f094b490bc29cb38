"""The little of a Kubernetes pod that decides whether it holds MIG instances.

Pods are reduced to these fields at the source, so the engine never sees raw manifests and cannot
start depending on fields that one source (a kubectl file, the API) provides and another lacks.
"""

from __future__ import annotations

from dataclasses import dataclass

from hamimig.pods.annotation import MigAllocation

TERMINAL_PHASES = ("Succeeded", "Failed")


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
