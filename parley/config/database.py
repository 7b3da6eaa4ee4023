"""Naming the database: PostgreSQL URLs (their ${NAME} references expanded, no password in clear
text in a file or on a command line), --db and PARLEY_DB, and what the fields of `storage:` say
together."""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import quote

from parley.config.codes import E_FIELD
from parley.config.env import ENV_REF, expand_env
from parley.config.storage import StorageConfig
from parley.errors import ConfigError

# What names a database on the command line or in PARLEY_DB: a URL with one of these schemes is
# PostgreSQL; anything else is a SQLite file.
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
# Fields of `storage:` that mean nothing to the other backend.
_POSTGRES_ONLY = (
    "schema",
    "pool_size",
    "statement_timeout_s",
    "connect_retry_s",
    "listen",
    "listen_url",
    "listen_poll_interval_s",
)
# Fields whose URL may carry a password reference (${NAME}), expanded by expand_database_url.
URL_FIELDS = ("url", "listen_url")
_SQLITE_ONLY = ("max_size_mb",)
_PLAIN_SCHEMA = re.compile(r"(?!pg_)[a-z_][a-z0-9_]{0,62}")
# A URL's parts: the user information (user[:password]) and the rest.
_URL_PARTS = re.compile(
    r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?:(?P<userinfo>[^/?#]*)@)?(?P<rest>.*)$", re.S
)
_PASSWORD_PARAM = re.compile(r"(?:^|[?&])password=(?P<value>[^&#]*)", re.IGNORECASE)
_ONE_REFERENCE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")


def is_database_url(value: str) -> bool:
    return value.startswith(POSTGRES_SCHEMES)


def clear_text_password(url: str) -> bool:
    """Whether `url` (as written, before ${NAME} is expanded) carries a password other than one
    ${NAME} reference: in its user part or as a `password=` parameter."""
    parts = _URL_PARTS.match(url)
    if parts is None:
        return False
    userinfo = parts.group("userinfo") or ""
    written = [userinfo.partition(":")[2]] if ":" in userinfo else []
    written += [m.group("value") for m in _PASSWORD_PARAM.finditer(parts.group("rest"))]
    return any(value and not _ONE_REFERENCE.fullmatch(value) for value in written)


def expand_database_url(url: str, file: str, where: str) -> str:
    """`url` with ${NAME} replaced from the environment; in the user part (user and password) the
    value is percent-encoded, so a password with @, : or / in it keeps the URL whole.

    Raises:
        ConfigError: a referenced variable is not set.
    """
    parts = _URL_PARTS.match(url)
    if parts is None:
        return str(expand_env(url, file, where))
    userinfo = parts.group("userinfo")
    rest = str(expand_env(parts.group("rest"), file, where))
    if userinfo is None:
        return parts.group("scheme") + rest
    encoded = ENV_REF.sub(lambda m: quote(str(expand_env(m.group(0), file, where)), safe=""), userinfo)
    return f"{parts.group('scheme')}{encoded}@{rest}"


CLEAR_TEXT_FIX = (
    "holds a password in clear text; write ${PGPASSWORD} in its place (the password then comes from "
    "that environment variable), or leave it out and set PGPASSWORD or PGPASSFILE for libpq"
)


def storage_problems(storage: StorageConfig, file: str) -> list[ConfigError]:
    """What the fields of `storage:` say together: one database, and fields for its backend."""
    given = storage.model_fields_set
    if storage.url is not None and storage.path is not None:
        return [
            ConfigError(
                E_FIELD,
                file,
                "storage.url",
                "storage.path and storage.url are both set; keep one: path for a SQLite file, url for PostgreSQL",
            )
        ]
    problems = []
    if storage.url is not None:
        if not is_database_url(storage.url):
            problems.append(
                ConfigError(
                    E_FIELD,
                    file,
                    "storage.url",
                    "must start with postgresql:// (a SQLite file goes in storage.path)",
                )
            )
        problems += [
            ConfigError(
                E_FIELD, file, f"storage.{name}", "applies to SQLite only; remove it (storage.url is set)"
            )
            for name in _SQLITE_ONLY
            if name in given
        ]
    elif storage.path is not None:
        # (Without a path they may apply to a PostgreSQL URL given by --db or PARLEY_DB.)
        problems += [
            ConfigError(
                E_FIELD,
                file,
                f"storage.{name}",
                "applies to PostgreSQL (storage.url) only; remove it or set storage.url",
            )
            for name in _POSTGRES_ONLY
            if (name if name != "schema" else "db_schema") in given
        ]
    if storage.listen_url is not None and not is_database_url(storage.listen_url):
        problems.append(ConfigError(E_FIELD, file, "storage.listen_url", "must start with postgresql://"))
    if not _PLAIN_SCHEMA.fullmatch(storage.db_schema):
        problems.append(
            ConfigError(
                E_FIELD,
                file,
                "storage.schema",
                f"'{storage.db_schema}' is not a plain PostgreSQL name: use lowercase letters, digits and _ "
                "(at most 63, not starting with a digit or pg_)",
            )
        )
    return problems


def db_override_from_env(cli_value: str | None) -> Path | str | None:
    """The database named by --db (`cli_value`) or else PARLEY_DB: a PostgreSQL URL (a str; on the
    command line its ${NAME} references are expanded) or a SQLite file (a Path).

    Raises:
        ConfigError: a URL on the command line holds a password (every local account can read a
            command line), or names a variable that is not set.
    """
    value = cli_value or os.environ.get("PARLEY_DB")
    if not value:
        return None
    if not is_database_url(value):
        return Path(value)
    if not cli_value:
        return value  # from the environment: taken as it is, a password included
    if clear_text_password(cli_value):
        raise ConfigError(
            E_FIELD,
            "(command line)",
            "--db",
            "holds a password, which every local account can read in the process list; write "
            "'${PGPASSWORD}' in its place (quoted, so the shell leaves it) or set PGPASSWORD or PGPASSFILE",
        )
    return expand_database_url(cli_value, "(command line)", "--db")
