"""The `credentials:` block of parley.yaml: where the key that encrypts per-principal credentials
comes from (an environment variable or a 0600 file), and the previous keys a rotation still
reads (docs/credentials.md). The keys themselves are read here, each problem named by its field;
the key is never part of a message."""

from __future__ import annotations

import base64
import binascii
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import Field, model_validator

from parley.config.base import Strict
from parley.config.codes import E_ENV, E_FIELD, E_MISSING
from parley.errors import ConfigError

# A key: 32 random bytes (AES-256-GCM), written as URL-safe base64.
KEY_BYTES = 32
_NEW_KEY = "make one with `parley credentials new-key`"


class CredentialsConfig(Strict):
    key_env: str | None = Field(
        None,
        description=(
            "The environment variable holding the current key (32 random bytes, URL-safe base64, as "
            "`parley credentials new-key` prints); it encrypts every credential stored. Give this or key_file."
        ),
    )
    key_file: str | None = Field(
        None,
        description=(
            "A file holding the current key instead (relative to parley.yaml); it must be readable by its "
            "owner only (chmod 600)."
        ),
    )
    previous_keys_env: list[str] = Field(
        default_factory=list,
        description=(
            "Environment variables holding earlier keys: credentials they encrypted are still read, and "
            "`parley credentials rotate-key` encrypts them again under the current key."
        ),
    )
    previous_key_files: list[str] = Field(
        default_factory=list,
        description="Files holding earlier keys (each chmod 600), as previous_keys_env.",
    )

    @model_validator(mode="after")
    def _one_current_key(self) -> CredentialsConfig:
        if (self.key_env is None) == (self.key_file is None):
            raise ValueError(f"give key_env or key_file, one of them: where the current key is ({_NEW_KEY})")
        return self


@dataclass(frozen=True, slots=True)
class CredentialKeys:
    """The keys as read: the current one, and the previous ones (the repr shows neither)."""

    current: bytes = field(repr=False)
    previous: tuple[bytes, ...] = field(repr=False, default=())


def decode_key(text: str) -> bytes | None:
    """A key's bytes from its text (spaces and a final newline around it are dropped); None when
    it is not URL-safe base64 of KEY_BYTES bytes."""
    text = text.strip()
    try:
        key = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None
    if len(key) != KEY_BYTES or base64.urlsafe_b64encode(key).decode().rstrip("=") != text.rstrip("="):
        return None
    return key


def _from_env(name: str, file: str, where: str) -> bytes | ConfigError:
    value = os.environ.get(name)
    if not value:
        return ConfigError(
            E_ENV, file, where, f"environment variable {name} is not set (or empty); {_NEW_KEY}"
        )
    key = decode_key(value)
    if key is None:
        return ConfigError(
            E_FIELD, file, where, f"the key in {name} is not {KEY_BYTES} bytes of URL-safe base64; {_NEW_KEY}"
        )
    return key


def _from_file(name: str, base_dir: Path, file: str, where: str) -> bytes | ConfigError:
    path = base_dir / name
    try:
        mode = path.stat().st_mode
        text = path.read_text()
    except FileNotFoundError:
        return ConfigError(E_MISSING, file, where, f"key file {path} does not exist; {_NEW_KEY}")
    except (OSError, UnicodeDecodeError) as exc:
        return ConfigError(E_FIELD, file, where, f"key file {path} cannot be read: {exc.__class__.__name__}")
    # Windows has no such mode bits: a file's ACL is the operator's to set there.
    if os.name != "nt" and stat.S_IMODE(mode) & 0o077:
        return ConfigError(
            E_FIELD,
            file,
            where,
            f"key file {path} is readable by others (mode {stat.S_IMODE(mode):04o}); "
            f"run `chmod 600 {path}` so only its owner reads it",
        )
    key = decode_key(text)
    if key is None:
        return ConfigError(
            E_FIELD, file, where, f"the key in {path} is not {KEY_BYTES} bytes of URL-safe base64; {_NEW_KEY}"
        )
    return key


def read_credential_keys(
    config: CredentialsConfig | None, file: str, base_dir: Path
) -> tuple[CredentialKeys | None, list[ConfigError]]:
    """The keys `config` names, read now; None and every problem found when any is missing or bad."""
    if config is None:
        problem = (
            f"not configured: add credentials: {{key_env: NAME}} (or key_file) to parley.yaml; {_NEW_KEY}"
        )
        return None, [ConfigError(E_FIELD, file, "credentials", problem)]
    read: list[bytes | ConfigError] = [
        _from_env(config.key_env, file, "credentials.key_env")
        if config.key_env is not None
        else _from_file(config.key_file or "", base_dir, file, "credentials.key_file")
    ]
    read += [
        _from_env(name, file, f"credentials.previous_keys_env.{i}")
        for i, name in enumerate(config.previous_keys_env)
    ]
    read += [
        _from_file(name, base_dir, file, f"credentials.previous_key_files.{i}")
        for i, name in enumerate(config.previous_key_files)
    ]
    errors = [item for item in read if isinstance(item, ConfigError)]
    if errors:
        return None, errors
    keys = [item for item in read if isinstance(item, bytes)]
    return CredentialKeys(current=keys[0], previous=tuple(keys[1:])), []
