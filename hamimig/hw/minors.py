"""The MIG capability minors table (`/proc/driver/nvidia-caps/mig-minors`).

A container using a MIG device needs `/dev/nvidia-caps/nvidia-cap<N>` for the GI's and the CI's
access capability; the driver publishes N per `gpu<minor>/gi<gi>[/ci<ci>]/access` here.
"""

from __future__ import annotations

import re
from pathlib import Path

from hamimig.errors import HardwareError
from hamimig.hw.devnodes import read_driver_file
from hamimig.hw.types import CapabilityMinors

DEFAULT_MIG_MINORS = Path("/proc/driver/nvidia-caps/mig-minors")


_ENTRY = re.compile(r"^[ \t]*(\S+)[ \t]+([0-9]+)[ \t]*$", re.MULTILINE | re.ASCII)


def parse_mig_minors(text: str, source: str = "mig-minors") -> dict[str, int]:
    """The table; `HardwareError` naming the first line that is not `<capability> <minor>`.
    The file has thousands of lines, so one regex reads a well-formed one; the loop finds faults."""
    if text not in _PARSED:  # a text that fails to parse raises and is not kept
        table = _parse(text, source)
        _PARSED.clear()
        _PARSED[text] = table
    return dict(_PARSED[text])


_PARSED: dict[str, dict[str, int]] = {}
"""The text parsed last, with its table: the file does not change while the driver is loaded,
and a process (a test run above all) may read the same text many times."""


def _parse(text: str, source: str) -> dict[str, int]:
    entries = _ENTRY.findall(text)
    if len(entries) == sum(1 for line in text.splitlines() if line.strip()):
        return {name: int(minor) for name, minor in entries}
    table: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 2 or not (fields[1].isascii() and fields[1].isdigit()):
            raise HardwareError(f"{source}:{number}: expected '<capability> <minor>', got {line!r}")
        table[fields[0]] = int(fields[1])
    return table


class MigMinors:
    """Reads the table once, on first use."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._table: dict[str, int] | None = None

    def table(self) -> dict[str, int]:
        if self._table is None:
            text = read_driver_file(self.path, "MIG capability minors ")
            self._table = parse_mig_minors(text, str(self.path))
        return self._table

    def lookup(self, gpu_minor: int, gi_id: int, ci_id: int) -> CapabilityMinors:
        table = self.table()
        gi_key = f"gpu{gpu_minor}/gi{gi_id}/access"
        ci_key = f"gpu{gpu_minor}/gi{gi_id}/ci{ci_id}/access"
        missing = [k for k in (gi_key, ci_key) if k not in table]
        if missing:
            raise HardwareError(f"{self.path} has no entry for {', '.join(missing)}")
        return CapabilityMinors(gi_access=table[gi_key], ci_access=table[ci_key])
