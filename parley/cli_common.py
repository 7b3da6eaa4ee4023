"""What the modules of the `parley` command share (cli.py and cli_manage.py import it; it imports
neither): the configuration a command's --config and --db name."""

from __future__ import annotations

import argparse

from parley.config import ServerConfig, config_path_from_env, db_override_from_env, load_config


def load_from_args(args: argparse.Namespace) -> ServerConfig:
    """The configuration of --config (else PARLEY_CONFIG) with the database of --db (else PARLEY_DB)."""
    return load_config(config_path_from_env(args.config), db_override_from_env(getattr(args, "db", None)))
