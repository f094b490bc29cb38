"""The pydantic base of the command results and the simulated node's file (docs/design.md
"Declared data"). Strict, as Go's `encoding/json` is for an int; frozen, since what was read
or reported is evidence; built lazily, since every start-up would pay for it; output through
`json.dumps`, never pydantic's encoder, which escapes and spaces differently.
"""

from __future__ import annotations

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
