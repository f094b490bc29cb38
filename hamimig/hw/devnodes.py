"""The capability device nodes' numbers and modes, as the driver publishes them (docs/cdi.md):
a composed spec declares each node fully, as NVIDIA's own specs do, so a runtime creates it in
the container without looking at the host's `/dev`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hamimig.errors import HardwareError

DEFAULT_PROC_DEVICES = Path("/proc/devices")
DEFAULT_CAPABILITIES = Path("/proc/driver/nvidia/capabilities")
CAPS_DEVICE = "nvidia-caps"


@dataclass(frozen=True)
class CapabilityNodes:
    """What a spec needs beyond the minors: the major, and each node's mode where known."""

    major: int
    gi_mode: int | None
    ci_mode: int | None


def parse_char_majors(text: str) -> dict[str, int]:
    """`/proc/devices`' character section: device name → major."""
    majors: dict[str, int] = {}
    in_char = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.endswith(":"):
            in_char = stripped == "Character devices:"
            continue
        fields = stripped.split()
        if in_char and len(fields) == 2 and fields[0].isdigit():
            majors.setdefault(fields[1], int(fields[0]))
    return majors


def read_driver_file(path: Path, what: str = "") -> str:
    """A text file the driver publishes; a `HardwareError` saying why it cannot be read."""
    try:
        return path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise HardwareError(f"cannot read {what}{path}: {exc}") from None


def caps_major(proc_devices: Path) -> int:
    major = parse_char_majors(read_driver_file(proc_devices)).get(CAPS_DEVICE)
    if major is None:
        raise HardwareError(
            f"{proc_devices} lists no {CAPS_DEVICE} character device: the driver's MIG "
            "capabilities are not loaded"
        )
    return major


def access_mode(path: Path) -> int | None:
    """`DeviceFileMode` of a capability's access file; None when it cannot be read."""
    try:
        text = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "DeviceFileMode" and value.strip().isdigit():
            mode = int(value.strip())
            return mode if 0 <= mode <= 0o7777 else None
    return None


def capability_nodes(
    proc_devices: Path,
    capabilities: Path,
    gpu_minor: int,
    gi_id: int,
    ci_id: int,
    major: int | None = None,
) -> CapabilityNodes:
    gi_dir = capabilities / f"gpu{gpu_minor}" / "mig" / f"gi{gi_id}"
    return CapabilityNodes(
        major=caps_major(proc_devices) if major is None else major,
        gi_mode=access_mode(gi_dir / "access"),
        ci_mode=access_mode(gi_dir / f"ci{ci_id}" / "access"),
    )
