"""The `sim` commands' results: operator actions on a simulated node (`hamimig.sim.admin`)
reported as the view the CLI renders."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from hamimig.config import DEFAULT_CDI_KIND
from hamimig.engine.lookup import is_reference, match_reference
from hamimig.engine.results import InstanceView
from hamimig.reports.views import SimView
from hamimig.sim import admin
from hamimig.sim.ops import DRIVER_VERSION, BusyKind
from hamimig.vocabulary import State


def _view(change: admin.Change) -> SimView:
    made = change.created
    created = None
    if made is not None:
        created = InstanceView(
            mig_uuid=made.mig_uuid,
            gpu_uuid=made.gpu_uuid,
            gpu_index=made.gpu_index,
            profile=made.profile,
            placement=made.placement,
            gpu_instance_id=made.gpu_instance_id,
            compute_instance_id=made.compute_instance_id,
            state=State.UNMANAGED if made.mig_uuid else State.ORPHAN_GI,
        )
    store = change.store
    return SimView(
        path=str(store.path), state=store.read(), message=change.message, created=created
    )


def sim_init(
    path: Path | None, model: str, count: int, driver_version: str = DRIVER_VERSION
) -> SimView:
    return _view(admin.sim_init(path, model, count, driver_version))


def sim_show(path: Path | None) -> SimView:
    return _view(admin.sim_show(path))


def sim_create(
    path: Path | None,
    gpu_ref: str,
    profile: str,
    placement: str,
    no_ci: bool,
    ci_slices: int | None = None,
    ci_count: int = 1,
) -> SimView:
    return _view(admin.sim_create(path, gpu_ref, profile, placement, no_ci, ci_slices, ci_count))


def sim_busy(
    path: Path | None,
    mig_uuid: str,
    gi_only: bool,
    clear: bool,
    kind: BusyKind | None = None,
    node_kind: Callable[[], str] = lambda: DEFAULT_CDI_KIND,
) -> SimView:
    """`mig_uuid` may be what `list` shows (a prefix of the MIG UUID or of the CDI device
    name, with at least 8 hex digits: the mark changes the node), looked up among the
    simulated node's MIG devices; `node_kind` gives the CDI kind a qualified name must have."""
    if is_reference(mig_uuid):
        mig_uuid = match_reference(mig_uuid, admin.mig_uuids(path), True, node_kind)
    return _view(admin.sim_busy(path, mig_uuid, gi_only, clear, kind))


def sim_reset(path: Path | None, gpu_ref: str) -> SimView:
    return _view(admin.sim_reset(path, gpu_ref))


def sim_mig_mode(path: Path | None, gpu_ref: str, enable: bool, pending_only: bool) -> SimView:
    return _view(admin.sim_mig_mode(path, gpu_ref, enable, pending_only))


def sim_fault_add(
    path: Path | None,
    op: str,
    error: str | None,
    action: str,
    times: int,
    skip: int,
    gpu_ref: str | None,
) -> SimView:
    return _view(admin.sim_fault_add(path, op, error, action, times, skip, gpu_ref))


def sim_fault_clear(path: Path | None) -> SimView:
    return _view(admin.sim_fault_clear(path))


def sim_clock(path: Path | None, advance: int | None, set_to: float | None) -> SimView:
    return _view(admin.sim_clock(path, advance, set_to))
