"""What a missing queue table's error says: the table, the section of the configuration
that named it (the one the team wrote: ``[queue]`` or ``[queues.NAME]``), and the tables
of the queue database whose names come close. Only the demo's queues, used when no queue
is configured, are pointed at ``queuebot demo``."""

from __future__ import annotations

import difflib

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from services.config import QueueConfig


def table_names(conn: Connection, schema: str) -> list[str]:
    """The tables of the schema (the default one when empty); none when they cannot be
    listed (the hint then goes without them)."""
    try:
        return list(sa.inspect(conn).get_table_names(schema=schema or None))
    except sa.exc.SQLAlchemyError:
        return []


def missing_table(
    queue: str,
    profile: str,
    config: QueueConfig,
    role: str,
    full: str,
    *,
    existing: list[str],
    main: str,
) -> str:
    """A table of the profile's ``role`` is not in the queue database: say where its name
    came from and what comes close. ``main`` is the role of the profile's main table (the
    one ``table`` renames)."""
    head = f"queue {queue!r} ({profile}): table {full!r} does not exist in the queue database"
    if config.section is None:  # no queue configured: the demo's queues
        return (
            f"{head}. No queue is configured, so queuebot looks for the demo estate's "
            "tables: run `queuebot demo` to build it, or configure your own queue with "
            "[queue] or [queues.NAME] (docs/configuration.md)."
        )
    name = full.rpartition(".")[2]
    close = difflib.get_close_matches(name, existing, n=3, cutoff=0.6)
    near = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    if config.preset is not None and role not in config.tables:
        schema = full.rpartition(".")[0]
        return (
            f"{head}: the {config.preset} preset looks for the system's own tables in schema "
            f"{schema!r}. Has the system made its tables in this database (its migrations "
            f"or schema tool)? If they live in another schema, set {config.key('schema')} "
            '= "<schema>".' + near + " Check QUEUEBOT_QUEUE_DATABASE_URL too."
        )
    if role in config.tables:
        named = f"named by {config.key(f'tables.{role}')}"
    elif config.table and role == main:
        named = f"named by {config.key('table')}"
    else:
        named = (
            f"the profile's default name for its {role} table; name yours with "
            f'{config.key(f"tables.{role}")} = "<table>"'
        )
    return (
        f"{head} ({named}).{near} Check the name and QUEUEBOT_QUEUE_DATABASE_URL "
        "(or QUEUEBOT_DATABASE_URL, when the queue is in queuebot's database)."
    )
