"""`attachments:` in parley.yaml: what a message may carry besides its text (see
parley/runtime/attachments.py for how it is checked, stored and shown to models)."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

# type/subtype, or type/* for every subtype of a type.
_MIME_PATTERN = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]{0,63}/(\*|[a-z0-9][a-z0-9!#$&^_.+-]{0,126})")

DEFAULT_MIME_TYPES = (
    "image/png",
    "image/jpeg",
    "image/gif",
    "image/webp",
    "audio/wav",
    "audio/mpeg",
    "text/plain",
    "text/markdown",
    "text/csv",
    "application/json",
)


class AttachmentsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_bytes: int = Field(
        2_097_152,
        ge=1,
        le=64 * 1024 * 1024,
        description=(
            "Largest attachment, in bytes once decoded (a whole request must also fit http.max_request_bytes, "
            "where base64 takes 4 characters per 3 bytes)."
        ),
    )
    max_count: int = Field(8, ge=0, le=100, description="Attachments one message may carry (0: none).")
    mime_types: tuple[str, ...] = Field(
        DEFAULT_MIME_TYPES,
        description="The media types accepted (type/subtype, or type/* for a whole type); resource links are "
        "checked only when they name one.",
    )

    collect_interval_s: float = Field(
        3600.0,
        gt=0,
        le=86_400,
        description=(
            "Seconds between two deletions of the bytes no session refers to any more (deleted sessions')."
        ),
    )
    collect_grace_s: float = Field(
        3600.0,
        ge=0.05,
        le=30 * 86_400,
        description=(
            "Bytes stored less than this many seconds ago are kept even when nothing refers to them yet (a "
            "message being stored may be about to)."
        ),
    )

    @field_validator("mime_types")
    @classmethod
    def _patterns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            if not _MIME_PATTERN.fullmatch(item):
                raise ValueError(
                    f"'{item}' is not a media type; write type/subtype (image/png) or type/* (image/*), lowercase"
                )
        return value

    def accepts(self, mime_type: str) -> bool:
        kind = mime_type.split("/", 1)[0]
        return any(p == mime_type or (p.endswith("/*") and p[:-2] == kind) for p in self.mime_types)
