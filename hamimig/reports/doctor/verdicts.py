"""How a doctor check comes out, and the exit code a failure maps to (docs/formats.md).

`guarded` turns an error a section did not expect into that section's failing check, so that no
broken node makes doctor raise instead of report.
"""

from __future__ import annotations

from collections.abc import Callable

from hamimig.errors import HamimigError, why
from hamimig.reports.views import Check, CheckStatus

HARDWARE = 4
"""Exit code of a failing hardware or I/O check."""


UNVERIFIABLE = 5
"""Exit code of a failing check on state that cannot be trusted."""


def ok(name: str, message: str) -> Check:
    return Check(name=name, status=CheckStatus.OK, message=message)


def skipped(name: str, message: str, hint: str = "") -> Check:
    return Check(name=name, status=CheckStatus.SKIPPED, message=message, hint=hint)


def warn(name: str, message: str, hint: str) -> Check:
    return Check(name=name, status=CheckStatus.WARN, message=message, hint=hint)


def fail(name: str, message: str, hint: str, exit_code: int = UNVERIFIABLE) -> Check:
    return Check(
        name=name, status=CheckStatus.FAIL, message=message, hint=hint, exit_code=exit_code
    )


def guarded(name: str, checks: Callable[[], list[Check]]) -> list[Check]:
    """A section of checks; an error it did not expect becomes its failing check."""
    try:
        return checks()
    except (HamimigError, OSError, ValueError) as exc:
        code = UNVERIFIABLE if isinstance(exc, ValueError) else HARDWARE
        if isinstance(exc, HamimigError):
            code = HARDWARE if exc.exit_code == HARDWARE else UNVERIFIABLE
        hint = "run as root; if it persists, report it with hamimig doctor -o json"
        return [fail(name, f"could not check: {why(exc)}", hint, code)]


def mode_text(mode: int) -> str:
    return f"{mode:04o}"


def subject_of(store: str, subject: str) -> str:
    """The check name for one file of a store: `record/mig-<sha256>`, or the store's own name
    for a store of one file (the removal queue, the counters). Whole, never shortened: an
    operator copies it, and a script matches it (the table folds it)."""
    return f"{store}/{subject}" if subject else store
