"""The command line's part of the configuration reference, read from the `parley` command's own
argument parser (parley/cli.py's build_parser): every command, its arguments and its options."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from markdown_text import anchor, cell, code, table

from parley.cli import build_parser

INTRO = """\
## Command line {#command-line}

Every `parley` command with its arguments and options, as `parley COMMAND --help` shows them.
"""


def _own(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The parser's own arguments and options (not --help, --version, nor its commands)."""
    skipped = (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)
    return [a for a in parser._actions if not isinstance(a, skipped)]


def commands(
    parser: argparse.ArgumentParser, prefix: str = "parley", inherited: tuple[argparse.Action, ...] = ()
) -> Iterator[tuple[str, str, list[argparse.Action]]]:
    """(command line, help, arguments and options) of each command that runs something, in the
    parser's order; a command group's own options (`parley sessions --owner`) count for each of
    its commands."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
        for name, sub in action.choices.items():
            line = f"{prefix} {name}"
            if any(isinstance(a, argparse._SubParsersAction) for a in sub._actions):
                yield from commands(sub, line, (*inherited, *_own(sub)))
            else:
                yield line, helps.get(name, ""), [*inherited, *_own(sub)]


def _argument(action: argparse.Action) -> str:
    if not action.option_strings:
        optional = action.nargs in ("?", "*")
        return code(f"[{action.dest}]" if optional else action.dest)
    names = ", ".join(action.option_strings)
    if action.nargs == 0:
        return code(names)
    shown = action.metavar or action.dest.upper()
    return code(f"{names} {shown}" + (" ..." if action.nargs in ("+", "*") else ""))


def _default(action: argparse.Action) -> str:
    if action.required:
        return "required"
    if action.default in (None, False, argparse.SUPPRESS) or not action.option_strings:
        return ""
    default = action.default
    return code(" ".join(map(str, default)) if isinstance(default, list) else str(default))


def _help(action: argparse.Action) -> str:
    said = " ".join((action.help or "").split())
    if action.choices:
        said = (said + "; " if said else "") + "one of " + ", ".join(str(c) for c in action.choices)
    return cell(said)


def command_text(line: str, summary: str, actions: list[argparse.Action]) -> str:
    rows = [[_argument(a), _default(a), _help(a)] for a in actions]
    heading = f"### {code(line)} {{#{anchor('cli', line)}}}\n\n{cell(summary)}\n"
    if not rows:
        return heading
    return heading + "\n" + table(["Argument or option", "Default", "Description"], rows)


def cli_reference() -> str:
    parts = [INTRO] + [command_text(*found) for found in commands(build_parser())]
    return "\n\n".join(parts)
