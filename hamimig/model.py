"""The pydantic base of the command results and the simulated node's file (the state files are
declared in store/_fields.py, which TAB completion reads without pydantic).

Strict, because a shape hamimig declares accepts `1.0`, `true` or `"1"` for an int no more
than Go's `encoding/json` does. Frozen, because what was read or reported is evidence, not a
scratch pad. Deferred building, because building a model class costs milliseconds that every
start-up would pay. Aliases are explicit on each field: the JSON names are a contract, not a
naming convention. Output goes through `json.dumps` of `to_json()`, never pydantic's own
encoder, which escapes and spaces differently.
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
