"""Where an allocation goes, as pure functions: the Idle instances a request may reuse, the
instances in the way of a new placement, and the creation plan (or the refusal) for it.

Nothing here performs I/O, so every decision about reuse, placement and reclamation is
unit-tested without hardware, and `--dry-run` shows exactly what execution would do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hamimig.engine.facts import LiveCheck, Liveness, check_record
from hamimig.engine.results import Blocked, BlockingInstance, Hold
from hamimig.errors import ConflictError, UnverifiableError
from hamimig.hw.types import GpuInstance, Placement
from hamimig.store.intents import Intent
from hamimig.store.records import Record
from hamimig.vocabulary import State

if TYPE_CHECKING:
    from hamimig.pods.annotation import MigAllocation

from hamimig.engine.ownership import PodHolds, slot_hold


def reuse_candidates(
    records: dict[str, Record], gpu: int | str, profile: str, start: int | None, size: int | None
) -> list[Record]:
    """Idle records an exact reuse could hand out, most likely first. A record's GPU index is
    only a hint (indexes change across reboots), so those on the wrong GPU by hint go last,
    not dropped: the live check decides."""
    out: list[tuple[int, int, str, str, Record]] = []
    for r in records.values():
        if r.state is not State.IDLE or r.profile != profile:
            continue
        if start is not None and r.placement.start != start:
            continue
        if size is not None and r.placement.size != size:
            continue
        if isinstance(gpu, str):
            if r.gpu_uuid != gpu:
                continue
            rank = 0
        else:
            rank = 0 if r.gpu_index == gpu else (1 if r.gpu_index is None else 2)
        out.append((rank, r.placement.start, r.updated_at or "", r.mig_uuid, r))
    return [item[-1] for item in sorted(out, key=lambda t: t[:4])]


@dataclass(frozen=True)
class Blocker:
    """Something live at a placement, with the record that owns it (None: not ours)."""

    gi: GpuInstance
    record: Record | None
    check: LiveCheck | None
    busy: bool = False
    held: Hold | None = None
    reserved: MigAllocation | None = None
    """The entry that claims these free slices (`gi` is then a stand-in)."""

    @property
    def hard(self) -> bool:
        """Whether it stays in the way: hamimig never reclaims it."""
        if self.record is None or self.busy or self.held is not None:
            return True
        return self.record.state not in (State.IDLE, State.ERROR, State.RECLAIMING)

    def view(self, names: dict[int, str]) -> BlockingInstance:
        entry = self.reserved
        if entry is not None:
            return BlockingInstance(
                mig_uuid=entry.mig_uuid,
                gpu_instance_id=None,
                profile=entry.profile,
                placement=entry.placement,
                state=None,
                held=self.held,
            )
        return blocking_instance(self.gi, self.record, names, self.busy, self.held)


def blocking_instance(
    gi: GpuInstance,
    record: Record | None,
    names: dict[int, str],
    busy: bool = False,
    held: Hold | None = None,
) -> BlockingInstance:
    """How a refusal names a live GI in the way: by its record, else Unmanaged (with the MIG
    UUID of its compute instance) or OrphanGI (no compute instance, so no MIG UUID)."""
    cis = gi.compute_instances
    state = State.UNMANAGED if cis else State.ORPHAN_GI
    mig_uuid = cis[0].mig_uuid if cis else None
    owner = None
    if record is not None:
        state, mig_uuid = record.state, record.mig_uuid
        owner = record.owner if record.state is State.ACTIVE else None
    return BlockingInstance(
        mig_uuid=mig_uuid,
        gpu_instance_id=gi.id,
        profile=names.get(gi.profile_id) or f"profile {gi.profile_id}",
        placement=gi.placement,
        state=state,
        owner=owner,
        busy=busy,
        held=held,
    )


@dataclass(frozen=True)
class CreatePlan:
    """Destroy `reclaim` (Idle or Error instances, oldest first), then create at `placement`."""

    placement: Placement
    reclaim: tuple[tuple[Record, LiveCheck], ...]
    reason: str


def record_of(gi: GpuInstance, records: list[Record]) -> Record | None:
    """The record of the live GI `gi` among `records` (its GPU's): same GI ID and placement."""
    return next(
        (r for r in records if (r.gpu_instance_id, r.placement) == (gi.id, gi.placement)), None
    )


def _check_verifiable(
    gpu_uuid: str,
    records: list[Record],
    intents: list[Intent],
    layout: tuple[GpuInstance, ...],
    names: dict[int, str],
) -> None:
    """Refuse (exit 5) a GPU with an interrupted allocation, or a record the hardware
    contradicts: where to create cannot be judged on it."""
    recorded = {r.mig_uuid for r in records}
    for intent in intents:
        # An intent whose instance is recorded is a finished allocation whose intent removal
        # failed: nothing is in flight.
        if intent.gpu_uuid == gpu_uuid and intent.mig_uuid not in recorded:
            raise UnverifiableError(
                f"an allocation on this GPU was interrupted (intent {intent.id}, "
                f"{intent.profile} at {intent.placement}); run 'hamimig recover' first"
            )
    for r in records:
        live = check_record(r, layout, names)
        if live.status is Liveness.MISMATCH or (
            live.status is not Liveness.COMPLETE and r.state in (State.IDLE, State.ACTIVE)
        ):
            raise UnverifiableError(
                f"record {r.mig_uuid} ({r.state.value}, {r.profile} at {r.placement}) does "
                f"not match the hardware: {live.detail}; run 'hamimig recover'"
            )


def plan_create(
    gpu_uuid: str,
    placements: tuple[Placement, ...],
    requested: Placement | None,
    records: list[Record],
    intents: list[Intent],
    layout: tuple[GpuInstance, ...],
    names: dict[int, str],
    is_busy: Callable[[Record], bool] = lambda _record: False,
    holds: PodHolds | None = None,
) -> CreatePlan:
    """Choose where to create and which Idle instances of this GPU's `records` to reclaim (an
    Error one in the way is retried for destruction), or refuse; nothing else is ever touched.
    A busy (`is_busy`, asked only of those in the way) or claimed (`holds`) one blocks like
    an Active one."""
    _check_verifiable(gpu_uuid, records, intents, layout, names)

    def blockers(p: Placement) -> list[Blocker]:
        out = []
        for gi in layout:
            if not gi.placement.overlaps(p):
                continue
            rec = record_of(gi, records)
            if rec is None:
                out.append(Blocker(gi, None, None))
                continue
            check = check_record(rec, layout, names)
            mine = rec.state is not State.ACTIVE  # an Active one blocks whatever it says
            busy = mine and check.status is Liveness.COMPLETE and is_busy(rec)
            out.append(Blocker(gi, rec, check, busy, holds.hold(rec) if mine and holds else None))
        # Free slices another pod's entry claims: the plugin would hand that pod whatever is
        # created there. An entry at a live GI's exact slices is judged with that GI above.
        live = {gi.placement for gi in layout}
        for pod, alloc in holds.reserved(gpu_uuid, p) if holds else []:
            if alloc.placement not in live:
                ghost = GpuInstance(-1, gpu_uuid, -1, -1, alloc.placement, ())
                out.append(Blocker(ghost, None, None, held=slot_hold(pod, alloc), reserved=alloc))
        return out

    def leftovers(p: Placement) -> list[Blocker]:
        """Reclaiming/Error records over `p` whose hardware is already gone (a removal failed
        after the destroy): finish them first, or they would name the new instance's slot."""
        out = []
        for r in records:
            if r.placement.overlaps(p) and r.state in (State.RECLAIMING, State.ERROR):
                live = check_record(r, layout, names)
                if live.status is Liveness.ABSENT:
                    ghost = GpuInstance(-1, gpu_uuid, r.gpu_instance_id, -1, r.placement, ())
                    out.append(Blocker(ghost, r, live))
        return out

    scored: list[tuple[int, int, Placement, list[Blocker]]] = []
    in_the_way: list[Blocked] = []
    for p in placements if requested is None else (requested,):
        bs = blockers(p)
        refused = [b for b in bs if b.hard]
        if refused:
            in_the_way.append(Blocked(placement=p, instances=tuple(b.view(names) for b in refused)))
            continue
        scored.append((len(bs), p.start, p, bs))
    if requested is not None and in_the_way:
        raise ConflictError(
            f"placement {requested} is blocked: "
            + "; ".join(b.describe() for b in in_the_way[0].instances)
            + " (hamimig never reclaims these)",
            blockers=in_the_way,
        )
    if not scored:
        raise ConflictError(
            "no placement for this profile is free of Active, Unmanaged, busy, in-flight or "
            "pod-claimed instances: " + "; ".join(b.brief() for b in in_the_way),
            blockers=in_the_way,
        )
    scored.sort(key=lambda t: (t[0], t[1]))
    count, _, p, bs = scored[0]
    reason = "free placement" if count == 0 else f"reclaims the fewest idle instances ({count})"
    soft = [(b.record, b.check) for b in bs + leftovers(p) if b.record and b.check]
    soft.sort(key=lambda rc: (rc[0].updated_at or "", rc[0].mig_uuid))
    reason = "requested placement" if requested is not None else reason
    return CreatePlan(placement=p, reclaim=tuple(soft), reason=reason)
