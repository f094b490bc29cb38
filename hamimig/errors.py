"""Typed failures shared by every layer.

Each error carries the exit code docs/formats.md assigns to its category, so the CLI never has to
guess how to translate an exception into a status that scripts and init containers rely on.
Messages are one line and name what is wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from hamimig.vocabulary import Setting

NOTHING_CHANGED = "nothing was changed"
"""How a refusal ends, so an operator knows the node is as it was."""


def why(exc: BaseException) -> str:
    """An exception's text for a one-line message, without Python's class name: an OSError's
    own text (its strerror, without errno and file name) when it has one."""
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


class HamimigError(Exception):
    """A failure that the CLI reports as one line with a contract exit code."""

    exit_code = 1
    code = "internal"

    def __init__(self, message: str, setting: Setting | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.setting = setting
        """The node-wide input that is wrong, when one is (the CLI says which flag sets it)."""

    def detail(self) -> dict[str, Any]:
        """Structured fields the JSON error object carries beside `code` and `message`; most
        errors have none, so their JSON is only those two."""
        return {}


class SupportsJson(Protocol):
    def to_json(self) -> dict[str, Any]: ...


class UsageError(HamimigError):
    """Bad arguments, unknown GPU or profile, illegal placement, missing opt-in, bad paths."""

    exit_code = 2
    code = "usage"


class PathUnusable(UsageError):
    """A path the caller named cannot serve: the CLI says which option named it."""

    def __init__(self, path: object, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path = path
        self.why = why

    def for_option(self, flag: str) -> UsageError:
        return UsageError(f"{flag} {self.path}: {self.why}")


class ConflictError(HamimigError):
    """The placement is blocked by something hamimig may not touch, or owners clash."""

    exit_code = 3
    code = "conflict"

    def __init__(self, message: str, blockers: Sequence[SupportsJson] = ()) -> None:
        super().__init__(message)
        self.blockers = tuple(blockers)
        """What is in the way, per placement (`engine.results.Blocked`), for a refusal that a
        placement's instances make; empty for the other conflicts."""

    def detail(self) -> dict[str, Any]:
        if not self.blockers:
            return {}
        return {"blockers": [b.to_json() for b in self.blockers]}


class HardwareError(HamimigError):
    """An NVML call or a write to the state or CDI directory failed."""

    exit_code = 4
    code = "hardware"


class UnverifiableError(HamimigError):
    """State that cannot be verified; nothing was changed."""

    exit_code = 5
    code = "unverifiable"


class NotFoundError(HamimigError):
    """No such MIG UUID or pod allocation."""

    exit_code = 6
    code = "not-found"


class BusyError(HamimigError):
    """The node lock could not be taken in time."""

    exit_code = 7
    code = "busy"


class NvmlError(HardwareError):
    """An NVML call failed; keeps the call and NVML's error name and code, so each call site
    tells a conflict (INSUFFICIENT_RESOURCES on create) from a failure without string matching."""

    def __init__(self, call: str, name: str, value: int, detail: str = "") -> None:
        text = f"NVML call {call} failed: {name} (code {value})"
        if detail:
            text += f": {detail}"
        super().__init__(text)
        self.call = call
        self.name = name
        self.value = value


class GpuInstanceUnreadable(NvmlError):
    """The GI was created but could not be read back, so, unlike a refused create, a GI now
    occupies the placement: the caller must roll it back."""


class NvmlUnavailableError(HardwareError):
    """NVML cannot be loaded at all: not a GPU node, or the driver is missing."""
