"""The environment: ${NAME} references in configuration files, the variables that name a
credential or the configuration file, and the per-user data folder.

The configuration package is the only part of parley that reads environment variables (here, and
PARLEY_DB in database.py, a token's token_env in loading.py); everything else receives a loaded
`ServerConfig`."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

from parley.config.codes import E_ENV
from parley.errors import ConfigError

ENV_REF = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand_env(value: Any, file: str, where: str) -> Any:
    """Replace ${NAME} in every string with the environment variable's value ($$ is a literal $)."""
    if isinstance(value, dict):
        return {k: expand_env(v, file, f"{where}.{k}" if where else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_env(v, file, f"{where}.{i}") for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "$"
        if name not in os.environ:
            raise ConfigError(
                E_ENV,
                file,
                where or "(value)",
                f"environment variable {name} is not set; set it or remove ${{{name}}}",
            )
        return os.environ[name]

    return ENV_REF.sub(substitute, value)


def secret_from_env(name: str | None) -> str | None:
    """A credential, read from the environment variable the configuration names."""
    return os.environ.get(name) if name else None


def config_path_from_env(cli_value: str | None) -> Path | None:
    value = cli_value or os.environ.get("PARLEY_CONFIG")
    return Path(value) if value else None


def default_data_dir() -> Path:
    """The per-user data folder for the default database."""
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "parley"
    if os.name == "nt":
        return Path(os.environ.get("APPDATA", str(Path.home()))) / "parley"
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "parley"
