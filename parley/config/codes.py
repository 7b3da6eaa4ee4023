"""The stable codes of configuration problems, so scripts and docs can refer to one by name.

An error keeps a file from loading (or an agent from being served). A notice (C014 to C018) says
what an agent file asks that parley serves differently: the file loads, and `parley check` prints
the notice as a warning, or as a note when it is a `ConfigNote`. Every code is here, also those
raised outside the package: C010 by server/http.py, C025 by runtime/schedules.py, C019 and C020 (what a running server's reload
logs) by runtime/agent_reload.py.
"""

from __future__ import annotations

from parley.errors import ConfigError

E_YAML = "PARLEY-C001"  # the file is not valid YAML or not a mapping
E_FIELD = "PARLEY-C002"  # a field has a wrong type or value, or is unknown
E_PROVIDER = "PARLEY-C003"  # unknown model provider
E_TOOL = "PARLEY-C004"  # unknown built-in tool
E_DUPLICATE = "PARLEY-C005"  # two agent files define the same name
E_MISSING = "PARLEY-C006"  # a referenced file or folder does not exist
E_RESULT_SCHEMA = "PARLEY-C007"  # the result schema is not a JSON Schema of an object
E_INPUT_SCHEMA = "PARLEY-C008"  # the input schema is not a valid JSON Schema of an object
E_KIND = "PARLEY-C009"  # default_kind is not among the agent's kinds
E_BIND = "PARLEY-C010"  # a non-loopback --host while parley authenticates nobody (auth: none)
E_ENV = "PARLEY-C011"  # a ${NAME} reference names an environment variable that is not set
E_SERVER = "PARLEY-C012"  # an agent names an MCP server that parley.yaml does not configure
E_SERVER_TOOL = "PARLEY-C013"  # a tool named in include/exclude/tools is not listed by its server
E_PLAN = "PARLEY-C021"  # plan mode without write_todos, or a forced plan tool its model refuses
E_SCHEDULE_TIMING = "PARLEY-C022"  # a schedule's name, cron expression, time zone or interval is not valid
E_SCHEDULE_INTERVAL = "PARLEY-C023"  # a schedule's interval is shorter than runtime.schedule_min_interval_s
E_SCHEDULE_AGENT = "PARLEY-C024"  # a schedule names an unknown agent, or its message/input does not fit it
E_SCHEDULE_NAME = "PARLEY-C025"  # a schedule name in parley.yaml is also a schedule made with the tools
E_TRIGGER = "PARLEY-C026"  # a trigger names an agent that is not served, or an input it does not take

# Codes of notices: the file loads, but something in it is not served as written.
E_UNSERVABLE_TOOL = "PARLEY-C014"  # a tool parley cannot serve (Claude Code's own Read, Bash...): skipped
E_NO_TOOLS = "PARLEY-C015"  # a Markdown agent without `tools`: none in parley (Claude Code would give all)
E_DEFAULT_MODEL = "PARLEY-C016"  # `model: inherit` or an alias model_aliases lacks: the server's default
E_IGNORED_FIELD = "PARLEY-C017"  # a front-matter field parley does not use: ignored
E_NOT_AGENT = "PARLEY-C018"  # a .md file without front matter in an agents folder (a README): skipped

# Codes a running server's reload of the agent files logs.
E_RESTART = "PARLEY-C019"  # parley.yaml changed beyond its agent parts: that applies at the next start
E_KEPT = "PARLEY-C020"  # an agent file that does not validate: the version read before stays served


class ConfigNote(ConfigError):
    """A notice that informs rather than warns (e.g. which model `model: inherit` runs on);
    `parley check` prints it as a note."""
