"""MIG geometry of the GPU models the simulator reproduces, as NVIDIA documents and drivers show it.

Data, not logic: the real adapter never reads it (it asks the driver). Figures not yet seen on a
real board are marked unverified below.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProfileSpec:
    """One GI profile of a model. `index` is NVML's profile index constant, `id` its profile ID."""

    index: int
    id: int
    name: str
    slice_count: int
    memory_mb: int
    sm_count: int
    max_instances: int
    size: int
    starts: tuple[int, ...]


@dataclass(frozen=True)
class ModelSpec:
    """A GPU model: `key` is what `sim init --model` takes, `nvml_name` what the driver reports."""

    key: str
    nvml_name: str
    profiles: tuple[ProfileSpec, ...]

    def profile_by_id(self, profile_id: int) -> ProfileSpec | None:
        return next((p for p in self.profiles if p.id == profile_id), None)

    def profile_by_index(self, index: int) -> ProfileSpec | None:
        return next((p for p in self.profiles if p.index == index), None)


_ROWS = (
    # NVML's profile index (NVML_GPU_INSTANCE_PROFILE_*), profile ID, compute slices, max
    # instances, memory slices, legal starts
    (0, 19, 1, 7, 1, (0, 1, 2, 3, 4, 5, 6)),  # 1_SLICE
    (7, 20, 1, 1, 1, (0, 1, 2, 3, 4, 5, 6)),  # 1_SLICE_REV1 (+me)
    (9, 15, 1, 4, 2, (0, 2, 4, 6)),  # 1_SLICE_REV2
    (1, 14, 2, 3, 2, (0, 2, 4)),  # 2_SLICE
    (2, 9, 3, 2, 4, (0, 4)),  # 3_SLICE
    (3, 5, 4, 1, 4, (0,)),  # 4_SLICE
    (4, 0, 7, 1, 8, (0,)),  # 7_SLICE
)


def _board(
    key: str,
    nvml_name: str,
    names: tuple[str, str, str, str, str, str, str],
    memory: tuple[int, int, int, int, int, int, int],
    sms: tuple[int, int, int, int, int],
) -> ModelSpec:
    """A 7-compute-slice, 8-memory-slice board; `names` and `memory` follow `_ROWS`, `sms` the
    compute slices 1, 2, 3, 4 and 7."""
    sm_of = dict(zip((1, 2, 3, 4, 7), sms, strict=True))
    profiles = tuple(
        ProfileSpec(index, pid, name, slices, mem, sm_of[slices], most, size, starts)
        for (index, pid, slices, most, size, starts), name, mem in zip(
            _ROWS, names, memory, strict=True
        )
    )
    return ModelSpec(key, nvml_name, profiles)


MODELS: dict[str, ModelSpec] = {
    m.key: m
    for m in (
        _board(
            "A100-SXM4-40GB",
            "NVIDIA A100-SXM4-40GB",
            ("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
            (4864, 4864, 9856, 9856, 19968, 19968, 40192),
            (14, 28, 42, 56, 98),
        ),
        # Memory figures of the 80 GB A100 are not verified: twice the 40 GB board's
        # (unverified; only `profiles` output shows them).
        _board(
            "A100-SXM4-80GB",
            "NVIDIA A100-SXM4-80GB",
            ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
            (9856, 9856, 19968, 19968, 40192, 40192, 80384),
            (14, 28, 42, 56, 98),
        ),
        _board(
            "H100-SXM5-80GB",
            "NVIDIA H100 80GB HBM3",
            ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
            (9984, 9984, 20096, 20096, 40448, 40448, 81152),
            (16, 32, 60, 64, 132),
        ),
        # H200 and B200: the nominal figures of NVIDIA's own NVML mock, until a real board
        # shows the driver's exact MiB (the driver reports slightly less: H100's mock says 10240
        # for 1g.10gb where the driver says 9984). Placements as H100's. SM counts are
        # unverified placeholders (H100's for H200; 148 SMs in sevenths for B200): `profiles`
        # shows them, nothing in the lifecycle uses them.
        _board(
            "H200-SXM5-141GB",
            "NVIDIA H200",
            ("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
            (18432, 18432, 35840, 35840, 72704, 72704, 144384),
            (16, 32, 60, 64, 132),
        ),
        _board(
            "B200-180GB",
            "NVIDIA B200",
            ("1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"),
            (23552, 23552, 46080, 46080, 92160, 92160, 184320),
            (18, 36, 54, 72, 148),
        ),
    )
}
