"""Reading a configuration file: its text, its YAML mapping (${NAME} expanded or as written), and
pydantic's objections to its fields as ConfigErrors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from parley.config.codes import E_FIELD, E_MISSING, E_YAML
from parley.config.env import expand_env
from parley.errors import ConfigError


def field_errors(file: str, exc: ValidationError) -> list[ConfigError]:
    errors = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field; remove it or check its spelling"
        errors.append(ConfigError(E_FIELD, file, loc, msg))
    return errors


def read_yaml(path: Path) -> dict[str, Any]:
    expanded: dict[str, Any] = expand_env(read_raw_yaml(path), str(path), "")
    return expanded


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(E_MISSING, str(path), "(file)", f"cannot be read: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(E_YAML, str(path), "(file)", f"is not UTF-8 text ({exc.reason})") from exc


def read_raw_yaml(path: Path) -> dict[str, Any]:
    """The file's mapping, ${NAME} references as written."""
    try:
        data = yaml.safe_load(read_text(path))
    except yaml.YAMLError as exc:
        raise ConfigError(E_YAML, str(path), "(file)", f"is not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(E_YAML, str(path), "(top level)", "must be a mapping of fields (key: value)")
    return data
