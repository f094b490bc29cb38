"""The hardware as doctor sees it: NVML (or the simulated node) reachable, the driver version,
each GPU and its MIG mode (pending changes included), and the `mig-minors` table that CDI specs
take their capability device numbers from. `Live` keeps what was read for the CDI checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hamimig.config import Config
from hamimig.engine.facts import GpuFacts, Liveness, cdi_device_for, check_record
from hamimig.engine.node import Node
from hamimig.errors import HamimigError, why
from hamimig.hw.minors import MigMinors
from hamimig.hw.types import Gpu, MigHardware, MigMode
from hamimig.reports.doctor.verdicts import HARDWARE, fail, guarded, ok, warn
from hamimig.reports.views import Check
from hamimig.store.cdi import CdiDevice
from hamimig.store.cdi_base import NONE
from hamimig.store.records import Record

_FIRST_STABLE_UUID_DRIVER = 470


@dataclass
class Live:
    """The hardware as far as it could be read, with per-GPU caches for the CDI comparison."""

    node: Node
    hw: MigHardware | None = None
    composes: bool = True
    """Whether specs are composed from the NVIDIA base (`cdi.baseSpec` is not none)."""
    gpus: list[Gpu] = field(default_factory=list)
    _layouts: dict[int, GpuFacts] = field(default_factory=dict)

    def needed_device(self, record: Record) -> CdiDevice | str:
        """What the record's live instance needs in its spec, or why that cannot be known."""
        assert self.hw is not None
        gpu = next((g for g in self.gpus if g.uuid == record.gpu_uuid), None)
        if gpu is None:
            return f"its GPU {record.gpu_uuid} is not on this node"
        if gpu.mig_mode is not MigMode.ENABLED:
            return f"MIG is {gpu.mig_mode.value} on GPU {gpu.index}: its instance is not live"
        if gpu.index not in self._layouts:
            self._layouts[gpu.index] = GpuFacts.listed(self.hw, gpu)
        facts = self._layouts[gpu.index]
        live = check_record(record, facts.layout, facts.names)
        if live.status is not Liveness.COMPLETE:
            return f"its instance is not live ({live.detail})"
        ids = (record.gpu_instance_id, record.compute_instance_id)
        return cdi_device_for(self.node, record.mig_uuid, gpu.uuid, gpu.minor, *ids, self.composes)


def check_hardware(node: Node, config: Config) -> tuple[list[Check], Live]:
    live = Live(node, composes=config.cdi_base_spec != NONE)
    if node.sim is not None:
        where = f"simulated node {node.sim}"
        hint = f"create it: hamimig --sim {node.sim} sim init --model H100-SXM5-80GB"
    else:
        where = "NVML"
        hint = "run on a GPU node with the NVIDIA driver loaded (nvidia-smi works), or use --sim"
    try:
        hw = node.hardware()
    except (HamimigError, OSError, ImportError) as exc:
        return [fail("nvml", f"{why(exc)}; GPU checks skipped", hint, HARDWARE)], live
    live.hw = hw
    checks = [ok("nvml", f"{where} reachable")]
    checks += guarded("driver", lambda: [_check_driver(hw.driver_version())])
    try:
        count = hw.gpu_count()
    except (HamimigError, OSError) as exc:
        checks.append(fail("gpus", f"cannot count GPUs: {why(exc)}", hint, HARDWARE))
        return checks, live
    if count == 0:
        checks.append(warn("gpus", "no GPUs on this node", "check the driver and nvidia-smi -L"))
    else:
        checks.append(ok("gpus", f"{count} GPU(s)"))
    for index in range(count):
        name = f"mig-mode/gpu{index}"
        try:
            gpu = hw.gpu(index)
        except (HamimigError, OSError) as exc:
            hint = f"check nvidia-smi -i {index}"
            checks.append(fail(name, f"GPU {index}: {why(exc)}", hint, HARDWARE))
            continue
        live.gpus.append(gpu)
        checks.append(_check_mig_mode(gpu))
    return checks, live


def _check_driver(version: str) -> Check:
    major_text = version.split(".", 1)[0]
    if major_text.isdigit() and int(major_text) < _FIRST_STABLE_UUID_DRIVER:
        old = f"driver {version} predates R470: MIG UUIDs there read MIG-GPU-…/GI/CI"
        return warn("driver", old, "upgrade the NVIDIA driver to R470 or later")
    return ok("driver", f"driver {version}")


def _check_mig_mode(gpu: Gpu) -> Check:
    name = f"mig-mode/gpu{gpu.index}"
    what = f"GPU {gpu.index} {gpu.model}"
    if gpu.mig_mode is MigMode.UNSUPPORTED:
        return warn(name, f"{what}: MIG not supported; hamimig ignores this GPU", "nothing to do")
    if gpu.reset_pending:
        disabling = gpu.mig_pending is MigMode.DISABLED
        loses = "; it destroys every MIG instance on the GPU" if disabling else ""
        revert = 1 if gpu.mig_mode is MigMode.ENABLED else 0
        return warn(
            name,
            f"{what}: MIG {gpu.mig_mode.value} now, {gpu.mig_pending.value} after a GPU reset "
            f"(reset needed{loses})",
            f"reset the GPU when idle (nvidia-smi -r -i {gpu.index}) to apply it, or revert: "
            f"nvidia-smi -i {gpu.index} -mig {revert}",
        )
    if gpu.mig_mode is MigMode.DISABLED:
        hint = f"to use it: nvidia-smi -i {gpu.index} -mig 1, then reset the GPU"
        return warn(name, f"{what}: MIG disabled; hamimig manages no instances on it", hint)
    return ok(name, f"{what}: MIG enabled")


def check_mig_minors(node: Node, live: Live) -> list[Check]:
    path = node.files().mig_minors  # the driver's, or the one beside the simulated node
    enabled = [g for g in live.gpus if g.mig_mode is MigMode.ENABLED]
    hint = (
        f"recreate the simulated node (sim init writes {path})"
        if node.sim is not None
        else "load the driver's MIG capabilities (nvidia-caps); see /proc/driver/nvidia-caps"
    )
    try:
        table = MigMinors(path).table()
    except HamimigError as err:
        if live.hw is not None and not enabled:
            return [warn("mig-minors", f"{err.message} (no GPU has MIG enabled)", hint)]
        return [fail("mig-minors", err.message, hint, HARDWARE)]
    missing = [g for g in enabled if f"gpu{g.minor}/gi0/access" not in table]
    if missing:
        which = ", ".join(f"GPU {g.index} (minor {g.minor})" for g in missing)
        return [fail("mig-minors", f"{path} has no entries for {which}", hint, HARDWARE)]
    return [ok("mig-minors", f"{path} readable ({len(table)} capabilities)")]
