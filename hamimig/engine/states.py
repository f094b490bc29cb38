"""The one transition table of the lifecycle. Every state change asks it; it refuses the rest.

`None` stands for "no record" (before creation, after permanent destruction). Creating lives in
the intent journal rather than in a record, so Creating -> Active is the record's first write.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hamimig.errors import HamimigError
from hamimig.vocabulary import State

if TYPE_CHECKING:
    from hamimig.store.records import Owner, Record

Creating = State.CREATING
StateName = State | None

_A, _I, _R, _E = State.ACTIVE, State.IDLE, State.RECLAIMING, State.ERROR

TRANSITIONS: frozenset[tuple[StateName, StateName]] = frozenset(
    {
        (None, Creating),  # allocate: intent written
        (Creating, _A),  # GI + CI + CDI + record done
        (Creating, None),  # failed or crashed allocation rolled back
        (_A, _I),  # confirmed pod release
        (_I, _A),  # exact reuse by a matching request
        (_I, _R),  # placement pressure or maintenance
        (_E, _R),  # reconcile, or an allocation at the same key, retries the destruction
        (_R, None),  # destroyed: CDI spec and record removed
        (_R, _E),  # the destruction failed: kept, never reused
        (None, _I),  # recovery/adoption: a verified pair without an active pod
        (None, _A),  # recovery: a pod annotation names the instance
        (_A, _A),  # recovery re-confirms an active owner
        (_I, _I),  # recovery re-confirms an idle instance
        (_I, None),  # recovery drop-missing: the instance is provably gone
        (_A, None),  # recovery drop-missing (no pod holds it)
        (_E, None),  # recovery drop-missing of an Error instance that vanished
        (_R, _R),  # finishing a reclaim that a crash interrupted
    }
)


class IllegalTransition(HamimigError):
    """A bug: some code tried a move the lifecycle does not allow."""


def check_transition(current: StateName, target: StateName, what: str) -> None:
    if (current, target) not in TRANSITIONS:
        raise IllegalTransition(
            f"internal error: {what} cannot go from {_name(current)} to {_name(target)}"
        )


def _name(state: StateName) -> str:
    return "(none)" if state is None else state.value


def idle_since_after(record: Record | None, target: State, now: str) -> str | None:
    """The idle policy's clock across a transition (docs/idle-policy.md): it starts on entering
    Idle, keeps running while the instance stays Idle (a second `recover` must not make it look
    freshly released), and stops on any other state; an older record counts from `updatedAt`."""
    if target is not State.IDLE:
        return None
    if record is not None and record.state is State.IDLE:
        return record.idle_since or record.updated_at or now
    return now


def last_owner_after(record: Record | None, target: State) -> Owner | None:
    """Who last held an instance, across a transition: the owner an Active record drops on
    entering Idle (a release, reconcile's release, recovery's restore from Active), kept while
    it stays Idle, and cleared on every other state (a hand-out makes it someone's again)."""
    if target is not State.IDLE or record is None:
        return None
    if record.state is State.ACTIVE:
        return record.owner
    if record.state is State.IDLE:
        return record.last_owner
    return None
