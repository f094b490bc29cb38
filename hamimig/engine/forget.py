"""`forget`: the supported way out when recovery refuses (exit 5) because of one file, instead
of a hand edit (docs/runbook.md "When recovery refuses"). It verifies nothing against the
hardware and ignores other unreadable files (but an unreadable intent when forgetting a record),
since the named file is often the one that does not verify; a record is read on its own, not
through the loader, so a corrupt one is still dropped by UUID, file or device name.
"""

from __future__ import annotations

from hamimig.engine.executor import Applied, execute
from hamimig.engine.facts import forget_line
from hamimig.engine.lookup import (
    FULL_MIG_UUID,
    check_reference,
    is_reference,
    resolve_instance,
    whole_device,
)
from hamimig.engine.node import Node
from hamimig.engine.release import index_hint
from hamimig.engine.requests import ByIntent, ByUuid
from hamimig.engine.results import Forget, Forgotten, intent_view, record_view
from hamimig.engine.steps import Forgettable, Plan, Step
from hamimig.errors import ConflictError, NotFoundError, UnverifiableError, UsageError
from hamimig.store.cdi import device_name
from hamimig.store.files import Problem
from hamimig.store.intents import Intent
from hamimig.store.records import Record, forget_name
from hamimig.vocabulary import ActionKind, Outcome, State


def parse_mig_uuid(text: str) -> str:
    # Either form a driver prints (R470+, and the older MIG-GPU-<uuid>/<gi>/<ci> that records
    # may still hold), matched whole: the UUID becomes part of the file names this removes.
    if not FULL_MIG_UUID.fullmatch(text):
        raise UsageError(
            f"invalid MIG UUID {text!r}: use MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx "
            "as nvidia-smi -L prints it, or a record's file name (hami-owned-….json, without "
            "its directory)"
        )
    return text


def parse_intent_id(node: Node, text: str) -> str:
    """An intent's ID, or the whole file name of an intent file whose name holds no valid ID
    (what `doctor` and the refusals name it by)."""
    try:
        node.intents.file_name_of(text)
    except ValueError:
        raise UsageError(
            f"invalid intent ID {text!r}: use the part between 'intent-' and '.json' of its "
            "file name (letters, digits, '_' and '-', at most 64), or the whole file name "
            "when what stands there is no valid ID"
        ) from None
    return text


def forget(node: Node, target: ByUuid | ByIntent, dry_run: bool) -> Forget:
    """Drop one record (and its CDI spec) or one intent; the hardware is never touched."""
    named = _named(node, target)
    with node.lock_unless(dry_run):
        # Like every mutating command, never on a node others can forge records on (a dry run
        # notes the refusal and plans on). Unreadable records do not matter here: forgetting
        # one is the point.
        from hamimig.engine.safety import refuse_if_unsafe

        records, unreadable = node.records.load()
        warnings = refuse_if_unsafe(node, records, dry_run)
        if isinstance(named, str):
            item, step = plan_forget_intent(node, named)
        else:
            item, step = _plan_record(node, *named, records, unreadable)
        if not dry_run:
            done = execute(node, Plan([step], abort=True), dry_run=False).results[0]
            assert isinstance(done, Applied)
            item = item.model_copy(update={"note": done.note}) if done.note else item
    return Forget(dry_run=dry_run, forgotten=(item,), warnings=warnings)


def _named(node: Node, target: ByUuid | ByIntent) -> str | tuple[str | None, str | None, str]:
    """What the target names, checked before the lock is taken: an intent ID, or a record's
    file (by its file name or whole CDI device name: no lookup), the device name, and the MIG
    UUID or a prefix (or CDI device name) to resolve under the lock."""
    if isinstance(target, ByIntent):
        return parse_intent_id(node, target.intent_id)
    text = target.mig_uuid
    device = whole_device(text, lambda: node.config().cdi_kind)
    file = node.records.named_by(device or text)
    if file is None:
        check_reference(text, mutating=True)
    uuid = text if file or is_reference(text) else parse_mig_uuid(text)
    return file, device, uuid


def _plan_record(
    node: Node,
    file: str | None,
    device: str | None,
    uuid: str,
    records: dict[str, Record],
    unreadable: list[Problem],
) -> tuple[Forgotten, Step]:
    """The record a file name, device name, MIG UUID or prefix names, planned to be dropped.
    The caller holds the lock."""
    if file is not None:
        found = node.records.read_named(file)
        if isinstance(found, Problem):
            return plan_forget_file(node, file, found)
        if found is not None:
            uuid = found.mig_uuid
        elif device is None:
            raise NotFoundError(f"no record file {file} in {node.records.directory}")
    if is_reference(uuid):
        if unreadable and device is None:
            # An unreadable record may be the one the prefix names: resolving among the
            # readable ones could drop the wrong instance's record.
            raise UnverifiableError(
                f"{len(unreadable)} record(s) cannot be read ({unreadable[0].file}), so a "
                "prefix may name one of them; nothing was changed: give the whole MIG "
                "UUID, or drop an unreadable record by its name: "
                f"{forget_line(unreadable[0], node)}"
            )
        intents = node.intents.load()[0]
        uuid = parse_mig_uuid(resolve_instance(node, uuid, True, records, intents))
    return plan_forget_record(node, uuid)


# --------------------------------------------------------------------------------------------
# Records


def _find_record(node: Node, mig_uuid: str) -> tuple[Record | None, str | None]:
    """The file at the record's name, read on its own: other files (even one claiming the same
    UUID under another name) neither block nor change what is dropped. Decoded when it can
    be, else the reason it cannot."""
    records = node.records
    found = records.read_one(mig_uuid)
    if isinstance(found, Problem):
        return None, found.reason
    if found is not None:
        return found, None
    queued = "; a removal of its CDI spec is queued: run 'hamimig reconcile'"
    removals, _ = node.queue.load()
    hint = queued if any(r.mig_uuid == mig_uuid for r in removals) else ""
    raise NotFoundError(f"no hamimig record for {mig_uuid} ({records.path_of(mig_uuid)}){hint}")


def _refuse_intents(
    node: Node, mig_uuid: str, record: Record | None, intents: list[Intent], bad: list[Problem]
) -> None:
    """Forgetting a record that an intent covers (names its UUID, or is on the same GPU and
    overlaps the recorded placement) would let `recover` roll the intent back by destroying a
    live instance that no record protects any more; an unreadable intent might be such an
    intent, so it is refused too until that intent is forgotten first."""
    for intent in intents:
        named = intent.mig_uuid == mig_uuid
        if named or (
            record is not None
            and intent.gpu_uuid == record.gpu_uuid
            and intent.placement.overlaps(record.placement)
        ):
            owner = f" for {intent.owner.namespace}/{intent.owner.name}" if intent.owner else ""
            how = "named" if named else "overlapped"
            raise ConflictError(
                f"{mig_uuid} is {how} by intent {intent.id} (an allocation{owner} at "
                f"{intent.placement} that did not finish); nothing was changed: run 'hamimig "
                "recover', or forget the intent first: "
                + node.pasteable(f"forget --intent {intent.id}")
            )
    if bad:
        first = bad[0]
        raise UnverifiableError(
            f"cannot read intent {first.file} ({first.reason}), which may name {mig_uuid}; "
            "nothing was changed: forget it first: "
            + node.pasteable(f"forget --intent {first.subject}")
        )


def plan_forget_record(node: Node, mig_uuid: str) -> tuple[Forgotten, Step]:
    """What dropping the record of `mig_uuid` (and its CDI spec) means, or why it is refused.
    The caller holds the node lock."""
    record, unreadable = _find_record(node, mig_uuid)
    if record is not None and record.state is State.ACTIVE:
        held = f" (held by {record.owner.namespace}/{record.owner.name})" if record.owner else ""
        raise ConflictError(
            f"{mig_uuid} is Active{held}: release it first ('hamimig release --mig-uuid "
            f"{mig_uuid}'); nothing was changed"
        )
    intents, intent_problems = node.intents.load()
    _refuse_intents(node, mig_uuid, record, intents, intent_problems)
    cdi = node.cdi()
    has_spec = cdi is not None and cdi.exists(mig_uuid)
    # Checked before a dry run says yes: queueing the spec's removal is the first step.
    if has_spec and (queue_problems := node.queue.load()[1]):
        bad = queue_problems[0]
        raise UnverifiableError(
            f"cannot queue the removal of the CDI spec of {mig_uuid}: {bad.file}: "
            f"{bad.reason}; nothing was changed"
        )
    state = None if record is None else record.state
    view = None if record is None else record_view(record, index_hint(record))
    item = Forgotten(
        mig_uuid=mig_uuid,
        record=str(node.records.path_of(mig_uuid)),
        cdi_spec=str(cdi.path_of(mig_uuid)) if cdi is not None and has_spec else None,
        state=None if state is None else state.value,
        unreadable=unreadable,
        instance=None if view is None else view.with_outcome(Outcome.FORGOTTEN),
    )
    forgettable = Forgettable(mig_uuid, spec=has_spec, state=state)
    return item, Step(ActionKind.FORGET_RECORD, forgettable, "forget")


def plan_forget_file(node: Node, file: str, problem: Problem) -> tuple[Forgotten, Step]:
    """Dropping the unreadable record file `file` and its device's CDI spec, its MIG UUID
    unknown; the caller holds the lock. An intent that names (or, unreadable, might name) that
    device refuses it: a rollback could then destroy the instance this record protected."""
    records, cdi = node.records, node.cdi()
    device = forget_name(file) if forget_name(file) != file else None
    intents, intent_problems = node.intents.load()
    named = next(
        (i.mig_uuid for i in intents if i.mig_uuid and device_name(i.mig_uuid) == device), None
    )
    _refuse_intents(node, named or file, None, intents, intent_problems)
    spec = cdi.file_of_device(device) if cdi is not None and device else None
    has_spec = cdi is not None and spec is not None and cdi.exists_named(spec)
    item = Forgotten(
        record=str(records.directory / file),
        cdi_spec=str(cdi.directory / spec) if cdi is not None and spec and has_spec else None,
        unreadable=problem.reason,
    )
    forgettable = Forgettable(record_file=file, spec_file=spec if has_spec else None)
    return item, Step(ActionKind.FORGET_RECORD, forgettable, f"forget {file} (unreadable)")


# --------------------------------------------------------------------------------------------
# Intents


def plan_forget_intent(node: Node, intent_id: str) -> tuple[Forgotten, Step]:
    """Drop the intent file `intent-<id>.json`, readable or not. The caller holds the lock."""
    store = node.intents
    path = store.path_of(intent_id)
    intents, problems = store.load()
    intent = next((i for i in intents if i.id == intent_id), None)
    problem = next((p for p in problems if p.file == str(path)), None)
    if intent is None and problem is None:
        raise NotFoundError(f"no intent {intent_id} ({path})")
    view = None if intent is None else intent_view(intent, intent.gpu_index, intent.gpu_instance_id)
    item = Forgotten(
        intent=intent_id,
        intent_file=str(path),
        unreadable=None if problem is None else problem.reason,
        instance=None if view is None else view.with_outcome(Outcome.FORGOTTEN),
    )
    return item, Step(ActionKind.FORGET_INTENT, Forgettable(intent_id=intent_id), "forget")
