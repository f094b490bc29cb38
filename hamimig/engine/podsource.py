"""Choosing the pod source a command was given: a kubectl list, the API, or an explicit none.

The source is only *named* when the command starts and read after the node lock is taken: a
list read before the wait is older than the records written during it, and would release a
fresh allocation as "owner gone". For the same reason `changed_after` leaves newer records alone.
"""

from __future__ import annotations

import dataclasses
import datetime
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hamimig.durations import format_duration, to_rfc3339
from hamimig.engine.node import Node
from hamimig.errors import UsageError
from hamimig.vocabulary import Setting

if TYPE_CHECKING:
    from hamimig.engine.results import Warning_
    from hamimig.hw.types import MigHardware
    from hamimig.pods.sources import PodSnapshot
    from hamimig.store.records import Record


MAX_CLOCK_AHEAD = 5
"""Seconds a pod list may seem to be from the future (clock granularity, a copy's rounding)."""


def _iso(seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class PodSource:
    """Which pods to trust: a kubectl pod list (a file, `-` for stdin), the Kubernetes API, the
    caller's assertion that no pod on this node holds a MIG instance, or pods already in hand.
    Build one with the class methods; exactly one of them describes a source."""

    pods_file: str | None = None
    kube: bool = False
    assume_no_pods: bool = False
    snapshot: PodSnapshot | None = None
    """Pods already in hand (a long-lived caller: the demo); taken as given."""

    def __post_init__(self) -> None:
        # Fail closed: a source that names nothing must never read as "no pod holds anything".
        kinds = (self.pods_file is not None, self.kube, self.assume_no_pods, self.snapshot)
        if sum(1 for kind in kinds if kind is not None and kind is not False) != 1:
            raise UsageError("a pod source names exactly one of: a pod list, the API, no pods")

    @classmethod
    def pod_list(cls, path: str) -> PodSource:
        if not path:
            raise UsageError("a pod list needs a file name, or '-' for stdin")
        return cls(pods_file=path)

    @classmethod
    def kube_api(cls) -> PodSource:
        return cls(kube=True)

    @classmethod
    def no_pods(cls) -> PodSource:
        """The assertion that no pod on this node holds a MIG instance."""
        return cls(assume_no_pods=True)

    @classmethod
    def given(cls, snapshot: PodSnapshot) -> PodSource:
        return cls(snapshot=snapshot)

    def load(self, node: Node) -> PodSnapshot | None:
        """The pods, read now (call it under the node lock); None for the assertion that no
        pod holds an instance. The snapshot is verified to describe this node."""
        if self.pods_file is not None:
            from hamimig.pods.sources import read_pods_file  # only commands that read pods pay

            snapshot = read_pods_file(self.pods_file, node.node_name)
        elif self.kube:
            from hamimig.pods.sources import read_pods_kube  # refuses a node without a name

            snapshot = read_pods_kube(node.node_name or "")
        elif self.snapshot is not None:
            snapshot = self.snapshot
        else:
            return None
        verify_node(node, snapshot)
        offset = node.clock_offset()
        if offset and snapshot.taken_at:
            # A list is as old as the host says; records carry the node's time (a simulated
            # node's clock may run ahead), and `changed_after` compares the two.
            snapshot = dataclasses.replace(snapshot, taken_at=snapshot.taken_at + offset)
        # A time ahead of the clock (the clock stepped back, a copy that kept its mtime) would
        # read as newer than every record, and a pod allocated after the list was really taken
        # would look gone: refused (exit 5).
        now = node.now()
        if snapshot.taken_at > now + MAX_CLOCK_AHEAD:
            from hamimig.pods.model import PodSourceError

            raise PodSourceError(
                f"{snapshot.source} was taken at {_iso(snapshot.taken_at)}, ahead of this node's "
                f"clock ({_iso(now)}): the clock was set back or the file's time was copied; "
                "list the pods again; nothing was changed"
            )
        return snapshot


def stale_warning(node: Node, snapshot: PodSnapshot | None) -> Warning_ | None:
    """The warning every command that reads a pod list gives when it is older than
    `MAX_POD_LIST_AGE` (the actions that hand out or destroy an instance refuse it)."""
    if snapshot is None or (why := stale(node, snapshot)) is None:
        return None
    from hamimig.engine.results import Warning_

    return Warning_(file=snapshot.source, reason=why)


MAX_POD_LIST_AGE = 300
"""Seconds: an older pod list may miss a pod that HAMi's plugin handed an Idle instance to, and
that hand-out changes no record, so nothing else would show it."""


def stale(node: Node, snapshot: PodSnapshot) -> str | None:
    """Why `snapshot` is too old to say that no pod holds an Idle or Error instance (None: it
    is fresh enough)."""
    if snapshot.taken_at <= 0:
        return f"the pod list from {snapshot.source} was taken at an unknown time"
    age = node.now() - snapshot.taken_at
    if age <= MAX_POD_LIST_AGE:
        return None
    return (
        f"the pod list from {snapshot.source} was taken {format_duration(int(age))} ago (at "
        f"most {format_duration(MAX_POD_LIST_AGE)} old): an Idle instance HAMi's plugin has "
        "handed out since would not show"
    )


def load_fresh(node: Node, source: PodSource) -> PodSnapshot | None:
    """The pods for an action that destroys or hands out an Idle or Error instance: a list
    older than `MAX_POD_LIST_AGE` is refused (exit 5), since only the pods say who holds it."""
    snapshot = source.load(node)
    if snapshot is not None and (why := stale(node, snapshot)) is not None:
        from hamimig.errors import UnverifiableError

        raise UnverifiableError(f"{why}; list the pods again; nothing was changed")
    return snapshot


def verify_node(node: Node, snapshot: PodSnapshot) -> None:
    """The node name is verified, not trusted: pods bound elsewhere must not name this node's
    GPUs, and the Node object (with `--kube`) must describe this machine."""
    from hamimig.pods.identity import read_product_uuid
    from hamimig.pods.identity import verify_node as verify

    holding = [p for p in snapshot.pods if p.holds_allocations and p.allocations]
    if not (snapshot.elsewhere or holding or snapshot.node_identity is not None):
        return  # nothing here names a GPU or a machine: no NVML call to make
    hw: MigHardware = node.hardware()
    gpu_uuids = [hw.gpu(i).uuid for i in range(hw.gpu_count())]
    # A simulated node runs on some machine that is not the one it simulates.
    product_uuid = None if node.sim is not None else read_product_uuid()
    verify(snapshot, gpu_uuids, product_uuid)
    # The other direction: a pod on this node that holds an allocation on a GPU this machine
    # does not have means the list is another node's (a wrong --node); judged by it, every
    # instance here would look released.
    for pod in holding:
        for alloc in pod.allocations:
            if alloc.gpu_uuid not in gpu_uuids:
                from hamimig.pods.model import PodSourceError

                raise PodSourceError(
                    f"{snapshot.source}: pod {pod.key} holds an allocation on GPU "
                    f"{alloc.gpu_uuid}, which is not on this node: the node name is wrong, "
                    "or the pod data is; nothing was changed",
                    Setting.NODE_NAME,
                )


def _instant(text: str | None) -> float | None:
    if not text:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.timezone.utc)
    return parsed.timestamp()


def changed_after(record: Record, snapshot: PodSnapshot | None) -> str | None:
    """Why `record` must not be judged by `snapshot`, or None when it may: a record written
    after the listing may describe an allocation the list cannot show yet. A record without
    `updatedAt` (HAMi's own) is older than any snapshot."""
    if snapshot is None:
        return None
    updated = _instant(record.updated_at)
    if updated is None or updated <= snapshot.taken_at:
        return None
    return (
        f"changed after the pod snapshot (updated {record.updated_at}, pods listed "
        f"{to_rfc3339(snapshot.taken_at)}); left as it is"
    )
