"""The base of parley's configuration models: a field the model does not know is refused (a
misspelt key is an error, not a silent default), and a loaded value never changes."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
