"""The `sim` commands' results: operator actions on a simulated node (`hamimig.sim.admin`)
reported as the view the CLI renders."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec

from hamimig.config import DEFAULT_CDI_KIND
from hamimig.engine.lookup import is_reference, match_reference
from hamimig.engine.results import InstanceView
from hamimig.hw.types import Placement
from hamimig.reports.views import SimView
from hamimig.sim import admin
from hamimig.sim.ops import BusyKind
from hamimig.sim.state import profile_of
from hamimig.vocabulary import State

_P = ParamSpec("_P")


def _view(change: admin.Change) -> SimView:
    created = None
    if change.created is not None:
        gpu, gi, ci = change.created
        created = InstanceView(
            mig_uuid=ci.mig_uuid if ci else None,
            gpu_uuid=gpu.uuid,
            gpu_index=gpu.index,
            profile=profile_of(gpu, gi.profile_id).name,
            placement=Placement(gi.start, gi.size),
            gpu_instance_id=gi.id,
            compute_instance_id=ci.id if ci else None,
            state=State.UNMANAGED if ci else State.ORPHAN_GI,
        )
    store = change.store
    return SimView(
        path=str(store.path), state=store.read(), message=change.message, created=created
    )


def _viewed(action: Callable[_P, admin.Change]) -> Callable[_P, SimView]:
    """An operator action on the node, reported as the `sim` commands' view."""

    @functools.wraps(action)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> SimView:
        return _view(action(*args, **kwargs))

    return run


sim_init = _viewed(admin.sim_init)
sim_show = _viewed(admin.sim_show)
sim_create = _viewed(admin.sim_create)
sim_reset = _viewed(admin.sim_reset)
sim_mig_mode = _viewed(admin.sim_mig_mode)
sim_fault_add = _viewed(admin.sim_fault_add)
sim_fault_clear = _viewed(admin.sim_fault_clear)
sim_clock = _viewed(admin.sim_clock)


def sim_busy(
    path: Path,
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
