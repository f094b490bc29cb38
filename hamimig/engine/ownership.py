"""Who holds an instance: what the pods' annotations claim and which records name a pod slot.

The pods are the truth (HAMi's plugin hands Idle instances out without touching records), so
every command that could take an instance from a tenant asks `PodHolds` first; a claim that
cannot be read, or two pods claiming one instance, refuse the command rather than guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING

from hamimig.durations import parse_time
from hamimig.engine.results import Hold
from hamimig.errors import NOTHING_CHANGED, UnverifiableError
from hamimig.hw.types import Placement
from hamimig.store.records import Owner, Record
from hamimig.vocabulary import Setting, State

if TYPE_CHECKING:
    from hamimig.pods.annotation import MigAllocation
    from hamimig.pods.model import Pod
    from hamimig.pods.sources import PodSnapshot


def same_uid(a: str | None, b: str | None) -> bool:
    """Pod UIDs match when either side has none, ignoring case (hex digits may be written
    either way by hand; the API server writes lowercase)."""
    return a is None or b is None or a.lower() == b.lower()


def owned_by(owner: Owner, pod: Pod) -> bool:
    """Whether `pod` is the pod an owner names (namespace, name, and uid when both have one)."""
    return (pod.namespace, pod.name) == (owner.namespace, owner.name) and same_uid(
        owner.uid, pod.uid
    )


def holding_pods(pods: PodSnapshot) -> list[Pod]:
    """The pods that hold allocations, once the list is known to be complete and every such
    pod's allocation annotation readable: a pod list that cannot say who holds what stops a
    command before its first change."""
    if not pods.complete:
        raise UnverifiableError(
            f"the pod list from {pods.source} is incomplete: its metadata.continue is set, so it "
            "is one page of a paginated list and the pods on the other pages may hold instances; "
            "give the whole list (kubectl get pods -A -o json joins the pages itself; an API "
            "request with ?limit= returns one page) or read the pods from the Kubernetes API; "
            f"{NOTHING_CHANGED}",
            Setting.POD_LIST,
        )
    holding = [p for p in pods.pods if p.holds_allocations]
    for pod in holding:
        if pod.annotation_error:
            raise UnverifiableError(
                f"pod {pod.key} has a malformed hami.io/vgpu-mig-allocations annotation "
                f"({pod.annotation_error}); {NOTHING_CHANGED}"
            )
    return holding


@dataclass(frozen=True)
class PodHolds:
    """What the holding pods of a snapshot claim, the requester's own entries apart: HAMi
    hands out an Idle instance by annotation alone, so the pods, not the records, say who holds
    one (docs/formats.md, "Pod sources"). Without a snapshot nothing is claimed."""

    named: dict[str, str]
    slots: tuple[tuple[str, MigAllocation], ...]
    """(pod, entry) per entry of a holding pod, on this node or bound to none yet."""
    own: tuple[MigAllocation, ...] = ()
    """The requester's own entries (same pod, uid when both have one, same slot)."""
    taken_at: float = 0.0
    """When the pod list was current (0: no list, or its time is unknown)."""

    @classmethod
    def of(cls, pods: PodSnapshot | None, requester: Owner | None = None) -> PodHolds:
        named: dict[str, str] = {}
        slots: list[tuple[str, MigAllocation]] = []
        own: list[MigAllocation] = []
        holding = [] if pods is None else holding_pods(pods)
        if pods is not None:  # a pending pod's claim is real before its binding is
            holding += [p for p in pods.unbound if p.holds_allocations]
        for pod in holding:
            for alloc in pod.allocations:
                if requester is not None and _own_entry(requester, pod, alloc):
                    own.append(alloc)
                    continue
                if alloc.mig_uuid is not None:
                    # MIG UUIDs compare without regard to case, as annotations may spell them.
                    other = named.setdefault(alloc.mig_uuid.lower(), pod.key)
                    if other != pod.key:
                        raise UnverifiableError(
                            f"{alloc.mig_uuid} is named by pod {other} and by pod {pod.key}: "
                            f"two pods cannot hold one instance; {NOTHING_CHANGED}"
                        )
                slots.append((pod.key, alloc))
        return cls(named, tuple(slots), tuple(own), pods.taken_at if pods is not None else 0.0)

    def hold(self, record: Record) -> Hold | None:
        """The claim a pod has on `record`'s instance, or None."""
        if (pod := self.named.get(record.mig_uuid.lower())) is not None:
            return Hold(pod=pod, how="names it")
        if slots := self.reserved(record.gpu_uuid, record.placement):
            return slot_hold(*slots[0])
        if record.state not in (State.IDLE, State.ERROR) or self.taken_at <= 0:
            return None
        released = record.idle_since or record.updated_at
        when = parse_time(released) if released else None
        if when is not None and when > self.taken_at:
            return Hold(pod=None, how=f"released after the pod list was taken ({released})")
        return None

    def reserved(self, gpu_uuid: str, placement: Placement) -> list[tuple[str, MigAllocation]]:
        """The entries of other pods that claim slices of `placement` on that GPU."""
        return [
            (pod, alloc)
            for pod, alloc in self.slots
            if alloc.gpu_uuid == gpu_uuid and alloc.placement.overlaps(placement)
        ]


def _own_entry(owner: Owner, pod: Pod, alloc: MigAllocation) -> bool:
    return owned_by(owner, pod) and alloc.slot == (owner.container_index, owner.device_index)


def slot_hold(pod: str, alloc: MigAllocation) -> Hold:
    """The claim of an entry on the slices it names (with its MIG UUID) or reserves."""
    return Hold(
        pod=pod, how="names its slot" if alloc.mig_uuid is not None else "reserves its slot"
    )


def same_slot(a: Owner, b: Owner) -> bool:
    """One pod container device slot; a recorded uid must match when both sides have one."""
    slot = attrgetter("namespace", "name", "container_index", "device_index")
    return slot(a) == slot(b) and same_uid(a.uid, b.uid)


def held_by(records: dict[str, Record], owner: Owner) -> Record | None:
    for record in records.values():
        if record.state is State.ACTIVE and record.owner and same_slot(record.owner, owner):
            return record
    return None
