"""Finding an instance from what an operator types (docs/formats.md "MIG UUIDs"), so what
`list` prints can be pasted back. Mutating commands need `MIN_MUTATING_DIGITS`: a prefix
unique today must not act on another instance tomorrow through a script that kept it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

from hamimig.engine.node import Node
from hamimig.errors import NotFoundError, UsageError
from hamimig.hw.types import MigMode
from hamimig.store.cdi import device_name
from hamimig.store.intents import Intent
from hamimig.store.records import Record

MIN_MUTATING_DIGITS = 8
"""Hex digits after `MIG-` (or a device name's `mig-`) a prefix needs on a command that changes
something."""
SHOWN_CANDIDATES = 5
"""How many candidates an ambiguous prefix names before `and N more`."""

_HEX_UUID = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
FULL_MIG_UUID = re.compile(rf"MIG-(?:{_HEX_UUID}|GPU-{_HEX_UUID}/\d{{1,3}}/\d{{1,3}})")
"""The two forms a driver prints (R470+, and the older MIG-GPU-<uuid>/<gi>/<ci>), whole."""
_PREFIX = "MIG-"
_DEVICE = re.compile(r"mig-[0-9a-f]{1,64}")
"""A CDI device name (`mig-` and the 64 hex digits of the MIG UUID's sha256) or a prefix of one."""
_DEVICE_DIGITS = 64
_HEX = frozenset("0123456789abcdefABCDEF")


def is_reference(text: str) -> bool:
    """Whether `text` is one of the forms looked up (a prefix, a CDI device name, or a full MIG
    UUID written in capitals, which drivers never print) rather than a full MIG UUID as drivers
    print it or something else, which commands take as they always did."""
    if FULL_MIG_UUID.fullmatch(text):
        return text != text.lower().replace("mig-gpu-", "MIG-GPU-").replace("mig-", "MIG-", 1)
    return text.startswith(_PREFIX) or _is_device(text)


def prefix_digits(text: str) -> int:
    """The hex digits of a `MIG-` prefix after `MIG-` (and an old-style `GPU-`)."""
    rest = text.removeprefix(_PREFIX)
    if rest.startswith("GPU-") or "GPU-".startswith(rest):
        rest = rest[4:]
    return sum(1 for c in rest.split("/", 1)[0] if c in _HEX)


_ZERO_UUID = "00000000-0000-0000-0000-000000000000"
_COMPLETIONS = (f"MIG-{_ZERO_UUID}", f"MIG-GPU-{_ZERO_UUID}/0/0")


def could_begin(text: str) -> bool:
    """Whether `text` is the beginning of some MIG UUID of either form the driver prints: some
    ending (the rest of a zero UUID of either form, or of an old form's `/GI/CI`) makes it whole."""
    endings = [whole[len(text) :] for whole in _COMPLETIONS] + ["0", "/0", "0/0"]
    return text.startswith(_PREFIX) and any(FULL_MIG_UUID.fullmatch(text + e) for e in endings)


SHORTENED = ("…", "...")
"""What a table puts where it cuts a MIG UUID or device name short (and its ASCII spelling)."""


def check_reference(text: str, mutating: bool) -> None:
    """Refuse (exit 2) a form that could never resolve for this command, before any lock."""
    if not is_reference(text):
        return
    if any(mark in text for mark in SHORTENED):
        raise UsageError(
            f"{text} was shortened by a table (the '…'): give the whole MIG UUID or CDI "
            "device name, or a prefix of it without the '…'"
        )
    if _is_device(text):
        digits = len(_device_part(text)[1]) - len("mig-")
        if mutating and digits < MIN_MUTATING_DIGITS:
            raise UsageError(
                f"CDI device name prefix {text} is too short for a command that changes "
                f"something: give at least {MIN_MUTATING_DIGITS} hex digits after 'mig-', or "
                "the whole device name"
            )
    elif not mutating and prefix_digits(text) < 1:
        raise UsageError(
            f"MIG UUID prefix {text!r} names no digits: give at least the first hex digits "
            "after 'MIG-' (an empty variable?)"
        )
    elif mutating and text.upper().startswith("MIG-GPU-") and not FULL_MIG_UUID.fullmatch(text):
        # Drivers before R470 print MIG UUIDs whose hex digits are their GPU's UUID: no prefix
        # of one tells one instance of that GPU from another.
        raise UsageError(
            f"MIG UUID {text} is part of an old-form MIG UUID: give a command that changes "
            "something the whole MIG-GPU-<GPU UUID>/<GI>/<CI>, since every instance on a GPU "
            "shares its digits"
        )
    elif mutating and not could_begin(text):
        raise UsageError(
            f"invalid MIG UUID {text}: use MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx as "
            f"nvidia-smi -L prints it, or a prefix of one with at least {MIN_MUTATING_DIGITS} "
            "hex digits after 'MIG-'"
        )
    elif mutating and prefix_digits(text) < MIN_MUTATING_DIGITS:
        raise UsageError(
            f"MIG UUID prefix {text} is too short for a command that changes something: give "
            f"at least {MIN_MUTATING_DIGITS} hex digits after 'MIG-', or the whole MIG UUID"
        )


def _is_device(text: str) -> bool:
    return "=" in text or text.startswith("mig-")


def _device_part(text: str) -> tuple[str, str]:
    """The kind (empty: none given) and the device name (or prefix) of `text`, lowered: the hex
    digits are matched without regard to case, as a MIG UUID prefix is."""
    kind, eq, name = text.rpartition("=")
    if eq and not kind:
        raise UsageError(f"CDI device {text!r} has an empty kind: give KIND=mig-<sha256>")
    lowered = name.lower()
    if lowered == "mig-":
        raise UsageError(
            f"CDI device name {text!r} names no digits: give at least the first hex digits "
            "after 'mig-' (an empty variable?)"
        )
    if not _DEVICE.fullmatch(lowered):
        raise UsageError(
            f"invalid CDI device name {text!r}: use mig-<sha256 of the MIG UUID> (64 hex "
            "digits) or a unique prefix of it (as list's CDI column shows), optionally with "
            "its kind (KIND=mig-...), as the CDI spec names it"
        )
    return kind, lowered


def whole_device(text: str, node_kind: Callable[[], str]) -> str | None:
    """`mig-<sha256>` (lowered) when `text` is a whole CDI device name of this node's kind
    (`node_kind`, read only for a qualified name), else None: such a name is a file name
    too (`hami-owned-mig-<sha256>.json`), so it names a record even when nothing else does."""
    if not _is_device(text):
        return None
    kind, eq, name = text.rpartition("=")
    lowered = name.lower()
    whole = _DEVICE.fullmatch(lowered) and len(lowered) == len("mig-") + _DEVICE_DIGITS
    if not whole or (eq and not kind):
        return None  # `check_reference` says what is wrong with it
    _check_kind(text, kind, node_kind)
    return lowered


def _check_kind(text: str, kind: str, node_kind: Callable[[], str]) -> None:
    if kind:
        mine = node_kind()
        if kind != mine:
            raise UsageError(
                f"CDI device {text!r} is of kind {kind!r}, not this node's {mine!r} "
                "(cdi.kind): it names no instance hamimig manages"
            )


def candidates(node: Node, records: Mapping[str, Record], intents: Iterable[Intent]) -> set[str]:
    """Every MIG UUID the node knows: usable records, live MIG devices, intents naming one."""
    known = set(records)
    known.update(i.mig_uuid for i in intents if i.mig_uuid)
    hw = node.hardware()
    for index in range(hw.gpu_count()):
        if hw.gpu(index).mig_mode is MigMode.ENABLED:
            known.update(ci.mig_uuid for gi in hw.layout(index) for ci in gi.compute_instances)
    return known


def resolve_instance(
    node: Node, text: str, mutating: bool, records: Mapping[str, Record], intents: Iterable[Intent]
) -> str:
    """The MIG UUID `text` names. A full MIG UUID (or any text that is no prefix or CDI
    device name) comes back unchanged, so an unknown one is the caller's "not found" as
    before; a prefix or device name that matches nothing is exit 6, more than one exit 2."""
    if not is_reference(text):
        return text
    known = candidates(node, records, intents)
    return match_reference(text, known, mutating, lambda: node.config().cdi_kind)


def match_reference(
    text: str, known: Iterable[str], mutating: bool, node_kind: Callable[[], str]
) -> str:
    """The one MIG UUID of `known` that `text` (a prefix of a MIG UUID, or a CDI device name
    or a prefix of one) names: `resolve_instance` without the node, for a caller that knows
    the candidates itself (the simulator's operator actions)."""
    pool = set(known)
    if not is_reference(text) or text in pool:
        return text  # a UUID of a form the pattern does not know, named whole
    check_reference(text, mutating)
    if _is_device(text):
        kind, wanted = _device_part(text)
        _check_kind(text, kind, node_kind)
        matches = sorted(u for u in pool if device_name(u).startswith(wanted))
        whole = len(wanted) == len("mig-") + _DEVICE_DIGITS
        what = f"CDI device {text}" if whole else f"CDI device name prefix {text}"
    else:
        folded = text.casefold()
        if FULL_MIG_UUID.fullmatch(text):  # whole, in another case: that one and no longer one
            matches = sorted(u for u in pool if u.casefold() == folded)
        else:
            matches = sorted(u for u in pool if u.casefold().startswith(folded))
        what = f"MIG UUID prefix {text}"
    if not matches:
        raise NotFoundError(
            f"no MIG instance matches {what} on this node (no record, live MIG device or "
            "intent names one)"
        )
    if len(matches) > 1:
        shown = ", ".join(matches[:SHOWN_CANDIDATES])
        more = len(matches) - SHOWN_CANDIDATES
        rest = f" and {more} more" if more > 0 else ""
        raise UsageError(
            f"{what} is ambiguous: it matches {len(matches)} instances ({shown}{rest}); "
            "give more of it"
        )
    return matches[0]
