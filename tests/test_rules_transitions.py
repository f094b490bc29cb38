"""The lifecycle's transition table, as rules: every record move asks it, and it refuses the rest.

`None` stands for "no record" (before creation, after destruction); Creating lives in the intent
journal, so Creating -> Active is a record's first write. The rules:

- The allowed moves are exactly these seventeen (spelled out below, not read from the table):
  None -> Creating, Creating -> Active, Creating -> None, Active -> Idle, Idle -> Active,
  Idle -> Reclaiming, Error -> Reclaiming, Reclaiming -> None, Reclaiming -> Error,
  None -> Idle, None -> Active, Active -> Active, Idle -> Idle, Idle -> None, Active -> None,
  Error -> None, Reclaiming -> Reclaiming.
- Every other pair over (no record, Creating, Active, Idle, Reclaiming, Error) is refused with
  IllegalTransition, an internal error (exit 1) that names the instance and both states.
- Active is never reclaimed and never fails in place: Active -> Reclaiming and Active -> Error
  are refused; it becomes destroyable only by being released to Idle first.
- Error is never reused: Error -> Active and Error -> Idle are refused; Error leaves only by a
  retried destruction (Reclaiming) or by being dropped when its instance vanished.
- Reclaiming never returns to service: Reclaiming -> Active and Reclaiming -> Idle are refused;
  it ends in no record, in Error, or is resumed as Reclaiming.
- Creating is entered only from no record, and ends only in Active or in no record.
- A record is born Active or Idle: no record -> Reclaiming and no record -> Error are refused.
- An Idle instance fails only through Reclaiming: Idle -> Error is refused.
- Nothing moves from no record to no record.
- The view-only states (Unmanaged, OrphanGI, Missing) are never part of a move.
"""

from __future__ import annotations

import itertools

import pytest

from hamimig.engine.states import TRANSITIONS, IllegalTransition, StateName, check_transition
from hamimig.errors import HamimigError
from hamimig.vocabulary import RECORD_STATES, State

CRE, ACT, IDL, REC, ERR = State.CREATING, State.ACTIVE, State.IDLE, State.RECLAIMING, State.ERROR

ALLOWED: tuple[tuple[StateName, StateName], ...] = (
    (None, CRE),
    (CRE, ACT),
    (CRE, None),
    (ACT, IDL),
    (IDL, ACT),
    (IDL, REC),
    (ERR, REC),
    (REC, None),
    (REC, ERR),
    (None, IDL),
    (None, ACT),
    (ACT, ACT),
    (IDL, IDL),
    (IDL, None),
    (ACT, None),
    (ERR, None),
    (REC, REC),
)

DOMAIN: tuple[StateName, ...] = (None, CRE, *RECORD_STATES)
REFUSED = tuple(pair for pair in itertools.product(DOMAIN, DOMAIN) if pair not in ALLOWED)
VIEW_ONLY = (State.UNMANAGED, State.ORPHAN_GI, State.MISSING)


def _label(pair: tuple[StateName, StateName]) -> str:
    return "->".join("none" if s is None else s.value for s in pair)


def accepted(current: StateName, target: StateName) -> bool:
    try:
        check_transition(current, target, "MIG-test")
    except IllegalTransition:
        return False
    return True


# --------------------------------------------------------------------------------------------
# The whole table


@pytest.mark.parametrize("move", ALLOWED, ids=_label)
def test_every_allowed_move_is_accepted(move: tuple[StateName, StateName]) -> None:
    assert accepted(*move)


@pytest.mark.parametrize("move", REFUSED, ids=_label)
def test_every_other_move_is_refused_with_illegal_transition(
    move: tuple[StateName, StateName],
) -> None:
    with pytest.raises(IllegalTransition):
        check_transition(*move, "MIG-test")


def test_the_table_holds_exactly_the_allowed_moves() -> None:
    assert set(TRANSITIONS) == set(ALLOWED)


def test_the_view_only_states_are_never_part_of_a_move() -> None:
    assert not {s for move in TRANSITIONS for s in move} & set(VIEW_ONLY)


def test_a_refused_move_is_an_internal_error_naming_the_instance_and_both_states() -> None:
    with pytest.raises(IllegalTransition) as refused:
        check_transition(ERR, ACT, "MIG-abc")
    assert isinstance(refused.value, HamimigError)
    assert refused.value.exit_code == 1
    assert "MIG-abc" in refused.value.message
    assert "from Error to Active" in refused.value.message


def test_a_refused_move_names_no_record_as_none() -> None:
    with pytest.raises(IllegalTransition, match=r"from \(none\) to Reclaiming"):
        check_transition(None, REC, "MIG-abc")


# --------------------------------------------------------------------------------------------
# Active


def test_active_is_never_reclaimed() -> None:
    assert not accepted(ACT, REC)


def test_active_never_fails_in_place() -> None:
    assert not accepted(ACT, ERR)


def test_active_is_released_to_idle() -> None:
    assert accepted(ACT, IDL)


def test_active_becomes_destroyable_only_through_idle() -> None:
    assert accepted(ACT, IDL) and accepted(IDL, REC)
    assert not accepted(ACT, REC)


# --------------------------------------------------------------------------------------------
# Error


def test_error_is_never_reused() -> None:
    assert not accepted(ERR, ACT)


def test_error_is_never_made_idle_again() -> None:
    assert not accepted(ERR, IDL)


def test_error_leaves_only_by_a_retried_destruction_or_by_being_dropped() -> None:
    assert {t for s, t in ALLOWED if s is ERR} == {REC, None}
    assert {t for t in DOMAIN if accepted(ERR, t)} == {REC, None}


def test_a_failed_destruction_keeps_the_instance_in_error() -> None:
    assert accepted(REC, ERR)


# --------------------------------------------------------------------------------------------
# Reclaiming


def test_reclaiming_never_returns_to_active() -> None:
    assert not accepted(REC, ACT)


def test_reclaiming_never_returns_to_idle() -> None:
    assert not accepted(REC, IDL)


def test_reclaiming_ends_in_no_record_or_error_or_is_resumed() -> None:
    assert {t for t in DOMAIN if accepted(REC, t)} == {None, ERR, REC}


# --------------------------------------------------------------------------------------------
# Creating


def test_creating_only_ends_in_active_or_nothing() -> None:
    assert {t for t in DOMAIN if accepted(CRE, t)} == {ACT, None}


def test_creating_never_ends_idle() -> None:
    assert not accepted(CRE, IDL)


def test_creating_is_entered_only_from_no_record() -> None:
    assert {s for s in DOMAIN if accepted(s, CRE)} == {None}


# --------------------------------------------------------------------------------------------
# Birth and death of a record


def test_a_record_is_born_active_or_idle_or_as_an_intent() -> None:
    assert {t for t in DOMAIN if accepted(None, t)} == {CRE, ACT, IDL}


def test_a_record_is_never_born_reclaiming() -> None:
    assert not accepted(None, REC)


def test_a_record_is_never_born_in_error() -> None:
    assert not accepted(None, ERR)


def test_an_idle_instance_fails_only_through_reclaiming() -> None:
    assert not accepted(IDL, ERR)
    assert accepted(IDL, REC) and accepted(REC, ERR)


def test_nothing_moves_from_no_record_to_no_record() -> None:
    assert not accepted(None, None)


def test_every_record_state_can_be_dropped_when_its_instance_is_gone() -> None:
    assert all(accepted(s, None) for s in RECORD_STATES)
