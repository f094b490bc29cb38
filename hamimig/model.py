"""The one base for every file format and JSON result hamimig declares.

Strict, because Go's `encoding/json` (HAMi's reader) refuses `1.0`, `true` and `"1"` for an
int and hamimig must never accept a record HAMi would read differently. Frozen, because a
record read from disk is evidence, not a scratch pad. Deferred building, because building a
model class costs milliseconds that every start-up (`--help`, TAB completion) would pay.
Aliases are explicit on each field: the JSON names are a contract, not a naming convention.
Serialisation goes through `json.dumps` of `model_dump`, as the writers always did, so the
bytes on disk and on stdout do not change (pydantic's own encoder escapes and spaces
differently).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict


class Model(BaseModel):
    model_config = ConfigDict(
        strict=True,
        frozen=True,
        populate_by_name=True,
        defer_build=True,
        extra="ignore",
    )

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


def dumps(model: Model, *, indent: int | None = 2) -> str:
    """The bytes every state file and JSON result has always had."""
    return json.dumps(model.to_json(), indent=indent)
