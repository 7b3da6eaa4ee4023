"""The Store, written once for SQLite and PostgreSQL: every port, on the programs a backend runs
(parley/storage/sqlite.py and postgres.py hold only connections, wake-ups and errors)."""

from __future__ import annotations

from parley.storage.sql.credentials import SqlCredentials
from parley.storage.sql.forks import SqlForks
from parley.storage.sql.leases import SqlLeases
from parley.storage.sql.oauth_flows import SqlOAuthFlows
from parley.storage.sql.owners import SqlOwners
from parley.storage.sql.reads import SqlReads
from parley.storage.sql.schedules import SqlSchedules
from parley.storage.sql.sessions import SqlSessions
from parley.storage.sql.tasks import SqlTasks
from parley.storage.sql.webhooks import SqlWebhooks


class SqlStore(
    SqlSessions,
    SqlReads,
    SqlLeases,
    SqlOwners,
    SqlTasks,
    SqlForks,
    SqlWebhooks,
    SqlSchedules,
    SqlCredentials,
    SqlOAuthFlows,
):
    """Every port of parley/storage/ports.py; a backend adds `_execute`, `dialect` and `codec`."""
