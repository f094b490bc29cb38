"""Choosing the pod source a command was given: a kubectl list, the API, or an explicit none."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hamimig.engine.node import Node
from hamimig.errors import UsageError

if TYPE_CHECKING:
    from hamimig.pods.sources import PodSnapshot


def load_pods(
    node: Node,
    pods_file: str | None,
    kube: bool,
    assume_no_pods: bool,
    required: bool,
) -> PodSnapshot | None:
    """The pods to trust, or None for `--assume-no-pods` (and for an optional source unset).

    `recover` and `adopt` require one of the three: acting without knowing which instances
    running pods hold is exactly how a tenant's slice gets handed to another.
    """
    given = sum((pods_file is not None, kube, assume_no_pods))
    if given > 1:
        raise UsageError("give only one pod source: --pods FILE|-, --kube or --assume-no-pods")
    if given == 0:
        if required:
            raise UsageError(
                "a pod source is required: --pods FILE|- (kubectl get pods -o json), --kube, "
                "or --assume-no-pods when no pod on this node holds a MIG instance"
            )
        return None
    if pods_file is not None:
        from hamimig.pods.sources import read_pods_file  # only commands that read pods pay

        return read_pods_file(pods_file, node.node_name)
    if kube:
        from hamimig.pods.sources import read_pods_kube

        if not node.node_name:
            raise UsageError("--kube needs this node's name: --node NAME or NODE_NAME")
        return read_pods_kube(node.node_name)
    return None
