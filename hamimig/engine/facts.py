"""What the engine knows before it plans: durable state, and records checked against hardware.

Loading is I/O; the checks are pure functions over values, so the rules that decide whether an
instance may be reused or destroyed are testable without hardware.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path

from hamimig.engine.node import Node
from hamimig.engine.results import Warning_
from hamimig.errors import HardwareError, NvmlError, UnverifiableError
from hamimig.hw.devnodes import capability_nodes
from hamimig.hw.types import (
    ComputeInstance,
    Gpu,
    GpuInstance,
    MigDevice,
    MigHardware,
    MigMode,
    Placement,
)
from hamimig.store.cdi import CdiDevice
from hamimig.store.files import Problem
from hamimig.store.intents import Intent, IntentStore
from hamimig.store.queue import QueuedRemoval
from hamimig.store.records import Record, RecordStore, forget_name


@dataclass(frozen=True)
class Durable:
    """Everything hamimig keeps on disk, as loaded at the start of one command."""

    records: dict[str, Record]
    intents: tuple[Intent, ...]
    removals: tuple[QueuedRemoval, ...]
    problems: tuple[Problem, ...]
    finished: tuple[Intent, ...] = ()
    warnings: tuple[Warning_, ...] = ()
    """What makes the node unsafe to change, found by a dry run (a real run refuses)."""

    def on_gpu(self, gpu_uuid: str) -> list[Record]:
        return [r for r in self.records.values() if r.gpu_uuid == gpu_uuid]

    def unreadable_records(self) -> dict[str, Problem]:
        """The record files that cannot be used, by file name: `list` matches a live instance
        to its record by name (`record_name` of its MIG UUID) when the content says nothing."""
        return {Path(p.file).name: p for p in self.problems if p.store == RecordStore.store}


def forget_line(problem: Problem, node: Node) -> str | None:
    """The `hamimig forget …` line that drops an unusable record or intent file (the way on
    when recovery and mutating commands refuse the node because of it), as it is pasted on
    `node` (`Node.pasteable`); None for the queue."""
    if problem.store == RecordStore.store:
        return node.pasteable(f"forget {forget_name(Path(problem.file).name)}")
    if problem.store == IntentStore.store:
        return node.pasteable(f"forget --intent {problem.subject}")
    return None


def load_durable(node: Node) -> Durable:
    records, record_problems = node.records.load()
    intents, intent_problems = node.intents.load()
    removals, queue_problems = node.queue.load()
    problems = tuple(record_problems + intent_problems + queue_problems)
    return Durable(records, tuple(intents), tuple(removals), problems)


def load_for_mutation(node: Node, tidy: bool = False, dry_run: bool = False) -> Durable:
    """The durable state a mutating command may act on, refusing (exit 5) past any unreadable
    file or an unsafe node (a dry run notes it and plans on). With `tidy`, intents of finished
    allocations (only their removal failed) are set aside in `finished` so they never block
    the GPU; `executor.tidy_finished` removes them once the command has changed something."""
    durable = load_durable(node)
    if durable.problems:
        first = durable.problems[0]
        more = f" (and {len(durable.problems) - 1} more)" if len(durable.problems) > 1 else ""
        line = forget_line(first, node)
        # The line comes last, unquoted: pasted as it stands (its own words may be quoted).
        way = f"; repair it, or drop it with: {line}" if line else ""
        raise UnverifiableError(
            f"cannot verify {first.file}: {first.reason}{more}; nothing was changed{way}"
        )
    from hamimig.engine.safety import refuse_if_unsafe

    warnings = refuse_if_unsafe(node, durable.records, dry_run)
    durable = dataclasses.replace(durable, warnings=warnings)
    if not tidy:
        return durable
    slots = {uuid: (r.gpu_uuid, r.placement) for uuid, r in durable.records.items()}
    finished = tuple(
        i for i in durable.intents if slots.get(i.mig_uuid or "") == (i.gpu_uuid, i.placement)
    )
    kept = tuple(i for i in durable.intents if i not in finished)
    return dataclasses.replace(durable, intents=kept, finished=finished)


def same_slot(intent: Intent, gi: GpuInstance) -> bool:
    """Whether `gi` stands where `intent`'s request creates one: same placement and profile."""
    return gi.placement == intent.placement and gi.profile_id == intent.profile_id


def created_by(intent: Intent, gi: GpuInstance) -> bool:
    """Whether `gi` can be the GI that `intent`'s interrupted request created: same placement
    and profile, and the journaled GI ID, or without one a GI holding no CI (the CI is created
    only after the GI ID is journaled, so a GI holding one is someone else's)."""
    if not same_slot(intent, gi):
        return False
    if intent.gpu_instance_id is not None:
        # The driver gives a slot's next GI the same ID: a GI with that ID whose compute
        # instances are not the one the request made (or are more than one) is another's.
        cis = gi.compute_instances
        if gi.id != intent.gpu_instance_id or len(cis) > 1:
            return False
        return not cis or intent.mig_uuid in (None, cis[0].mig_uuid)
    return not gi.compute_instances


def ci_created_by(intent: Intent, gi: GpuInstance, ci: ComputeInstance) -> bool:
    """Whether the live CI `ci` of `gi` can be the one `intent`'s request created: the journaled
    MIG UUID, or any CI when none was journaled. Another MIG UUID is someone else's even under
    the journaled GI ID, since the driver gives a slot's next GI the same ID."""
    return created_by(intent, gi) and intent.mig_uuid in (None, ci.mig_uuid)


BUSY = "busy: processes run on it"
"""Why a command leaves an instance alone that processes run on (or that NVML cannot show idle)."""


def pending_mig_mode(gpu: int, current: MigMode, pending: MigMode) -> Warning_ | None:
    """A MIG mode change that waits for the GPU's next reset: said wherever instances are
    planned or listed, since that reset undoes all of it (NVML applies the change only then)."""
    if current is pending:
        return None
    if pending is MigMode.DISABLED:
        reason = (
            "MIG is enabled now but disabled after the next GPU reset, which destroys every "
            f"MIG instance on it; to keep MIG: nvidia-smi -i {gpu} -mig 1"
        )
    else:
        reason = (
            f"MIG is {current.value} now and {pending.value} after the next GPU reset; no MIG "
            f"instance can be created before it (nvidia-smi -r -i {gpu} when the GPU is idle)"
        )
    return Warning_(file=f"GPU {gpu}", reason=reason)


@dataclass(frozen=True)
class GpuFacts:
    """A GPU, its live layout, and the profile name of each profile ID there (as record checks
    compare them). The two ways to read the names make different NVML calls: each caller keeps
    its own."""

    gpu: Gpu
    layout: tuple[GpuInstance, ...]
    names: dict[int, str]

    @classmethod
    def listed(cls, hw: MigHardware, gpu: Gpu) -> GpuFacts:
        """Every profile of the GPU's profile list (read first), then the layout."""
        names = {p.id: p.name for p in hw.profiles(gpu.index)}
        return cls(gpu, hw.layout(gpu.index), names)

    @classmethod
    def named(cls, hw: MigHardware, gpu: Gpu, layout: tuple[GpuInstance, ...]) -> GpuFacts:
        """`layout` with the name of each of its GIs' profile IDs, looked up one by one."""
        names = {gi.profile_id: hw.profile_name(gpu.index, gi.profile_id) or "" for gi in layout}
        return cls(gpu, layout, names)


def process_count_on(hw: MigHardware, mig_uuid: str) -> int | None:
    """How many processes run on a MIG device (`-o wide`, `show`): compute, graphics and MPS
    compute processes, each PID once; None when NVML cannot say."""
    try:
        return hw.instance_process_count(mig_uuid)
    except NvmlError:
        return None


def has_processes(hw: MigHardware, mig_uuid: str) -> bool:
    """Whether processes of any kind HAMi counts (compute, graphics, MPS) run on a MIG
    device. Busy for every command that acts: an instance that cannot be shown idle (a failed
    query) is never handed out, restored Idle, adopted or destroyed."""
    count = process_count_on(hw, mig_uuid)
    return count is None or count > 0


class Liveness(enum.Enum):
    """How a record's instance looks on the hardware."""

    COMPLETE = "complete"  # the GI and CI with the recorded IDs and MIG UUID
    GI_ONLY = "gi-only"  # the recorded GI, its CI gone (a half-finished destroy)
    ABSENT = "absent"  # nothing overlaps the recorded placement
    MISMATCH = "mismatch"  # something else is there


@dataclass(frozen=True)
class LiveCheck:
    status: Liveness
    detail: str
    gi: GpuInstance | None = None


def check_record(
    record: Record, layout: tuple[GpuInstance, ...], names: dict[int, str]
) -> LiveCheck:
    """Compare a record with the live layout of its GPU (identity: GPU, profile, placement,
    GI ID, CI ID and MIG UUID; a GI without its CI is identified without the UUID)."""
    elsewhere = uuid_elsewhere(record, layout, names)
    overlapping = [gi for gi in layout if gi.placement.overlaps(record.placement)]
    if not overlapping:
        if elsewhere is not None:
            return LiveCheck(Liveness.MISMATCH, elsewhere)
        return LiveCheck(Liveness.ABSENT, f"no GPU instance at {record.placement}")
    recorded = (record.gpu_uuid, record.gpu_instance_id, record.placement, record.profile)
    for gi in overlapping:
        if (gi.gpu_uuid, gi.id, gi.placement, names.get(gi.profile_id)) != recorded:
            continue  # not the recorded GI
        if not gi.compute_instances:
            if elsewhere is not None:  # another GI that lost its CI: never destroyed for it
                return LiveCheck(Liveness.MISMATCH, elsewhere, gi)
            return LiveCheck(Liveness.GI_ONLY, f"GI {gi.id} without its compute instance", gi)
        if gi.shared:
            return LiveCheck(Liveness.MISMATCH, shared_gi_reason(gi), gi)
        for ci in gi.compute_instances:
            if ci.id == record.compute_instance_id and ci.mig_uuid == record.mig_uuid:
                return LiveCheck(Liveness.COMPLETE, "verified", gi)
        return LiveCheck(Liveness.MISMATCH, gi_holds(gi), gi)
    gi = overlapping[0]
    name = names.get(gi.profile_id, f"profile {gi.profile_id}")
    detail = f"GI {gi.id} ({name} at {gi.placement}) occupies the recorded placement"
    return LiveCheck(Liveness.MISMATCH, detail, gi)


def live_pairs(layout: Iterable[GpuInstance]) -> Iterator[tuple[GpuInstance, ComputeInstance]]:
    """Every live GI/CI pair of `layout`."""
    return ((gi, ci) for gi in layout for ci in gi.compute_instances)


def uuid_elsewhere(
    record: Record, layout: tuple[GpuInstance, ...], names: dict[int, str]
) -> str | None:
    """Where the record's MIG UUID is live in `layout` other than where it says (None: it is
    not, or it is there): then the record is wrong, not its instance gone or half destroyed,
    and the GI at its recorded placement is not its own."""
    for gi, ci in live_pairs(layout):
        if ci.mig_uuid == record.mig_uuid:
            name = names.get(gi.profile_id, f"profile {gi.profile_id}")
            return moved(record, gi.gpu_uuid, gi.placement, name, gi.id, ci.id)
    return None


def moved(
    record: Record, gpu_uuid: str, placement: Placement, profile: str, gi: int, ci: int
) -> str | None:
    """How the live instance of the record's MIG UUID differs from the record, each field with
    both values (None: it does not)."""
    fields: tuple[tuple[str, object, object], ...] = (
        ("parentGPUUUID", record.gpu_uuid, gpu_uuid),
        ("placement", str(record.placement), str(placement)),
        ("profile", record.profile, profile),
        ("GI ID", record.gpu_instance_id, gi),
        ("CI ID", record.compute_instance_id, ci),
    )
    # Each field that differs, with both values: `GI ID recorded 9 but live 7`.
    wrong = [f"{name} recorded {was} but live {now}" for name, was, now in fields if was != now]
    return f"its MIG UUID is live, {'; '.join(wrong)}" if wrong else None


def gi_holds(gi: GpuInstance) -> str:
    """What is live in a GI: `GI 3 holds CI 0 MIG-…, CI 1 MIG-…` (or `no CI`)."""
    found = ", ".join(f"CI {c.id} {c.mig_uuid}" for c in gi.compute_instances)
    return f"GI {gi.id} holds {found or 'no CI'}"


def shared_gi_reason(gi: GpuInstance) -> str:
    """Why a GI with several CIs (or one that does not span it) is never ours: one GPU
    instance is one tenant."""
    if len(gi.compute_instances) > 1:
        return f"GI {gi.id} holds {len(gi.compute_instances)} compute instances"
    return f"GI {gi.id}'s compute instance does not span it (room for another tenant's)"


def check_reuse(record: Record, live: MigDevice | None, live_profile: str | None) -> str | None:
    """Why an Idle record may not be handed out as is, or None when its instance is verified."""
    if live is None:
        return f"{record.mig_uuid} is not a live MIG device"
    if not live.spans_gi:
        return (
            f"{record.mig_uuid}'s compute instance does not span GI {live.gpu_instance_id}: one "
            "GPU instance is one tenant"
        )
    where = attrgetter("gpu_uuid", "gpu_instance_id", "compute_instance_id", "placement")
    wanted, seen = (*where(record), record.profile), (*where(live), live_profile)
    if wanted != seen:
        return (
            f"{record.mig_uuid}: recorded GPU/GI/CI/placement/profile "
            f"{'/'.join(map(str, wanted))} but live {'/'.join(map(str, seen))}"
        )
    return None


def check_live(hw: MigHardware, record: Record, live: MigDevice | None) -> str | None:
    """`check_reuse` of `record` against `live`, what its MIG UUID reads back as."""
    profile = None if live is None else hw.profile_name(live.gpu_index, live.profile_id)
    return check_reuse(record, live, profile)


def cdi_device_for(
    node: Node,
    mig_uuid: str,
    gpu_uuid: str,
    gpu_minor: int,
    gi: int,
    ci: int,
    composes: bool | None = None,
    major: int | None = None,
) -> CdiDevice:
    """What the instance's spec is made of. The capability nodes' major (`major`, when the
    caller read it already) and modes are read only where a spec is composed from the NVIDIA
    base (`composes`; by default as the node's config says): the device-nodes-only form lists
    paths alone."""
    minors = node.hardware().capability_minors(gpu_minor, gi, ci)
    dev = CdiDevice(
        mig_uuid=mig_uuid,
        gpu_minor=gpu_minor,
        gi_cap_minor=minors.gi_access,
        ci_cap_minor=minors.ci_access,
        gpu_uuid=gpu_uuid,
        gi_id=gi,
        ci_id=ci,
    )
    if not (node.cdi_base().composes if composes is None else composes):
        return dev
    files = node.files()
    try:
        nodes = capability_nodes(files.proc_devices, files.capabilities, gpu_minor, gi, ci, major)
    except HardwareError as exc:  # composing then fails; an existing spec is kept
        return dataclasses.replace(dev, caps_problem=exc.message)
    return dataclasses.replace(
        dev, caps_major=nodes.major, gi_cap_mode=nodes.gi_mode, ci_cap_mode=nodes.ci_mode
    )
