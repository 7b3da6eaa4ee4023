"""Loading the configuration: parley.yaml (or the embedded defaults) with ${NAME} expanded, every
agent file, the database chosen, the auth tokens read and hashed, and every problem found."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from parley.config.agent import DEMO_AGENT, AgentConfig
from parley.config.agent_files import combine_agent_files, load_agent_files
from parley.config.auth import (
    MIN_TOKEN_CHARS,
    AuthConfig,
    TokenEntry,
    check_allowed_host,
    check_base_path,
    check_public_url,
    token_digest,
)
from parley.config.codes import E_ENV, E_FIELD
from parley.config.credentials import CredentialKeys, read_credential_keys
from parley.config.database import (
    CLEAR_TEXT_FIX,
    URL_FIELDS,
    clear_text_password,
    expand_database_url,
    storage_problems,
)
from parley.config.env import default_data_dir, expand_env
from parley.config.files import field_errors, read_raw_yaml
from parley.config.schedules import schedule_problems
from parley.config.server import ServerConfig, ServerConfigFile
from parley.config.webhooks import secret_problems, trigger_problems
from parley.errors import ConfigError, ConfigErrors


def load_config(config_path: Path | None, db_override: Path | str | None) -> ServerConfig:
    """Load parley.yaml (or the embedded defaults) plus every agent file. `db_override` (from
    --db or PARLEY_DB, see db_override_from_env) wins over storage.path and storage.url: a
    PostgreSQL URL as a str, a SQLite file as a Path.

    Raises:
        ConfigErrors: every problem found.
    """
    config, errors = _load(config_path, db_override)
    if errors or config is None:
        raise ConfigErrors(errors)
    return config


def collect_config_errors(config_path: Path | None) -> list[ConfigError]:
    config, errors = _load(config_path, None)
    if config is None:
        return errors
    key_errors: list[ConfigError] = []
    if config.credentials is not None:
        key_errors = _credential_keys(config)[1]
    return errors + list(config.token_problems) + key_errors


def _credential_keys(config: ServerConfig) -> tuple[CredentialKeys | None, list[ConfigError]]:
    base_dir = config.config_path.resolve().parent if config.config_path is not None else Path.cwd()
    return read_credential_keys(config.credentials, str(config.config_path or "(defaults)"), base_dir)


def credential_keys(config: ServerConfig) -> CredentialKeys:
    """The keys of credentials:, read from the environment or their files now.

    Raises:
        ConfigErrors: the block is missing, or a key is unset, unreadable, too open or malformed.
    """
    keys, errors = _credential_keys(config)
    if keys is None:
        raise ConfigErrors(errors)
    return keys


def read_server_file(config_path: Path) -> tuple[ServerConfigFile | None, list[ConfigError]]:
    """parley.yaml as its fields say (None, and why, when it cannot be read or a field is wrong)."""
    try:
        return ServerConfigFile.model_validate(_read_server_yaml(config_path)), []
    except ConfigError as exc:
        return None, [exc]
    except ValidationError as exc:
        return None, field_errors(str(config_path), exc)


def _read_server_yaml(path: Path) -> dict[str, Any]:
    """parley.yaml with ${NAME} expanded, storage.url by its own rule (expand_database_url), after
    checking that it holds no password in clear text."""
    raw = read_raw_yaml(path)
    storage = raw.get("storage")
    urls = {
        name: value
        for name in URL_FIELDS
        if isinstance(storage, dict) and isinstance(value := storage.get(name), str)
    }
    if not urls:
        return dict(expand_env(raw, str(path), ""))
    assert isinstance(storage, dict)
    for name, url in urls.items():
        if clear_text_password(url):
            raise ConfigError(E_FIELD, str(path), f"storage.{name}", CLEAR_TEXT_FIX)
    others = {**raw, "storage": {k: v for k, v in storage.items() if k not in urls}}
    expanded: dict[str, Any] = expand_env(others, str(path), "")
    for name, url in urls.items():
        expanded["storage"][name] = expand_database_url(url, str(path), f"storage.{name}")
    return expanded


def _load(
    config_path: Path | None, db_override: Path | str | None
) -> tuple[ServerConfig | None, list[ConfigError]]:
    errors: list[ConfigError] = []
    file_cfg = ServerConfigFile()
    base_dir = Path.cwd()
    if config_path is not None:
        base_dir = config_path.resolve().parent
        read, problems = read_server_file(config_path)
        if read is None:
            return None, problems
        file_cfg = read
        errors.extend(storage_problems(file_cfg.storage, str(config_path)))
        errors.extend(_http_problems(file_cfg, str(config_path)))
    # Only serving HTTP needs the tokens: the other commands (the CLI's pending, approve, audit...)
    # work without their environment variables; `parley check` reports them.
    tokens, token_errors = _resolve_tokens(file_cfg.auth, str(config_path or "(defaults)"))

    agents: dict[str, AgentConfig] = {DEMO_AGENT.name: DEMO_AGENT}
    agent_files: dict[str, Path] = {}
    notices: list[ConfigError] = []
    if config_path is not None:
        loads, missing = load_agent_files(file_cfg, base_dir, str(config_path))
        agents, agent_files, problems = combine_agent_files(loads)
        errors += missing + problems
        notices = [n for load in loads for n in load.notices]
        errors += trigger_problems(file_cfg.triggers, agents, str(config_path))
        token_errors += secret_problems(file_cfg.webhooks, file_cfg.triggers, str(config_path))

    schedules, problems = schedule_problems(
        file_cfg.schedules, agents, file_cfg.runtime.schedule_min_interval_s, str(config_path)
    )
    errors += problems
    db_path: Path | None = None
    db_url: str | None = None
    if isinstance(db_override, str):
        db_url = db_override
    elif db_override is not None:
        db_path = db_override
    elif file_cfg.storage.url is not None:
        db_url = file_cfg.storage.url
    elif file_cfg.storage.path is not None:
        db_path = base_dir / file_cfg.storage.path
    else:
        db_path = default_data_dir() / "parley.db"
    config = ServerConfig(
        db_path=db_path,
        db_url=db_url,
        agents=agents,
        runtime=file_cfg.runtime,
        storage=file_cfg.storage,
        http=file_cfg.http,
        tasks=file_cfg.tasks,
        mcp_servers=file_cfg.mcp_servers,
        models=file_cfg.models,
        config_path=config_path,
        agent_files=agent_files,
        auth=file_cfg.auth,
        tokens=tokens,
        token_problems=tuple(token_errors),
        limits=file_cfg.limits,
        audit=file_cfg.audit,
        attachments=file_cfg.attachments,
        retention=file_cfg.retention,
        ui=file_cfg.ui,
        agent_notices=tuple(notices),
        webhooks=file_cfg.webhooks,
        triggers=file_cfg.triggers,
        schedules=tuple(schedules),
        credentials=file_cfg.credentials,
    )
    return config, errors


def _resolve_tokens(auth: AuthConfig, file: str) -> tuple[tuple[TokenEntry, ...], list[ConfigError]]:
    """auth.tokens with each token_env read and hashed at once (the token is not kept)."""
    entries: list[TokenEntry] = []
    errors: list[ConfigError] = []
    for i, token in enumerate(auth.tokens):
        where = f"auth.tokens.{i}.token_env"
        if token.sha256 is not None:
            digest = token.sha256
        else:
            value = os.environ.get(token.token_env or "")
            if not value:
                errors.append(
                    ConfigError(
                        E_ENV,
                        file,
                        where,
                        f"environment variable {token.token_env} is not set (or empty); set it to the token, "
                        "or use sha256 instead",
                    )
                )
                continue
            if len(value.strip()) < MIN_TOKEN_CHARS or value != value.strip():
                errors.append(
                    ConfigError(
                        E_FIELD,
                        file,
                        where,
                        f"the token in {token.token_env} is shorter than {MIN_TOKEN_CHARS} characters or has "
                        "spaces around it; make one with 'parley token new'",
                    )
                )
                continue
            digest = token_digest(value)
        entries.append(
            TokenEntry(name=token.name, scopes=frozenset(token.scopes), digest=bytes.fromhex(digest))
        )
    digests = [e.digest for e in entries]
    if len(set(digests)) != len(digests):
        errors.append(
            ConfigError(
                E_FIELD, file, "auth.tokens", "two entries hold the same token; give each principal its own"
            )
        )
    return tuple(entries), errors


def _base_path_problems(file_cfg: ServerConfigFile, file: str) -> list[ConfigError]:
    """What http.base_path and ui: say with http.public_url and auth:."""
    http, auth, ui = file_cfg.http, file_cfg.auth, file_cfg.ui
    problem = check_base_path(http.base_path)
    if problem:
        return [ConfigError(E_FIELD, file, "http.base_path", problem)]
    problems = []
    if http.base_path and http.public_url is not None and check_public_url(http.public_url) is None:
        path = urlsplit(http.public_url).path
        if path != http.base_path + "/mcp":
            problems.append(
                ConfigError(
                    E_FIELD,
                    file,
                    "http.public_url",
                    f"its path is '{path}' but http.base_path is {http.base_path}: clients reach MCP at "
                    f"{http.base_path}/mcp, so end the URL with that (or change http.base_path)",
                )
            )
    if ui.client_id is not None and auth.mode != "oauth":
        problems.append(
            ConfigError(
                E_FIELD,
                file,
                "ui.client_id",
                f"the page signs people in at an authorization server only with auth mode oauth (mode is "
                f"{auth.mode}); set auth.mode: oauth or remove ui.client_id",
            )
        )
    return problems


def _user_oauth_problems(file_cfg: ServerConfigFile, file: str) -> list[ConfigError]:
    """A server with auth user_oauth keeps tokens (credentials:). Its connect links and callback
    are at http.public_url, or without it on a listener on 127.0.0.1 (runtime/oauth/flows.py)."""
    problems = []
    for name, server in sorted(file_cfg.mcp_servers.items()):
        if server.auth is None:
            continue
        if file_cfg.credentials is None:
            problems.append(
                ConfigError(
                    E_FIELD,
                    file,
                    "credentials",
                    f"mcp_servers.{name} has auth user_oauth, whose tokens are stored encrypted: add "
                    "credentials: {key_env: NAME} (or key_file), with a key from `parley credentials new-key`",
                )
            )
    return problems


def _http_problems(file_cfg: ServerConfigFile, file: str) -> list[ConfigError]:
    """What http: and auth: say together."""
    http, auth = file_cfg.http, file_cfg.auth
    problems = []
    if http.public_url is not None:
        problem = check_public_url(http.public_url)
        if problem:
            problems.append(ConfigError(E_FIELD, file, "http.public_url", problem))
    elif auth.mode == "oauth":
        problems.append(
            ConfigError(
                E_FIELD,
                file,
                "http.public_url",
                "auth mode oauth needs the URL clients use for MCP (e.g. https://parley.example.com/mcp): "
                "tokens must be issued for it (their audience) and the metadata names it",
            )
        )
    problems += _base_path_problems(file_cfg, file)
    problems += _user_oauth_problems(file_cfg, file)
    for i, host in enumerate(http.allowed_hosts):
        problem = check_allowed_host(host)
        if problem:
            problems.append(ConfigError(E_FIELD, file, f"http.allowed_hosts.{i}", problem))
    for i, address in enumerate(http.trusted_proxies):
        try:
            ipaddress.ip_network(address, strict=False)
        except ValueError:
            problems.append(
                ConfigError(
                    E_FIELD,
                    file,
                    f"http.trusted_proxies.{i}",
                    f"'{address}' is not an IP address or network (e.g. 10.0.0.5 or 10.0.0.0/8)",
                )
            )
    for name in file_cfg.limits.principals:
        if not name:
            problems.append(ConfigError(E_FIELD, file, "limits.principals", "a principal name is empty"))
    return problems
