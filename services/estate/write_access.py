"""The privileges each change kind needs on a queue's own tables, and which of them the
role queuebot connects as lacks (PostgreSQL): ``config check`` says so before a change is
approved, instead of the approval failing. A change writes the status column of the rows
it moves (UPDATE, with ``SELECT ... FOR UPDATE`` before it) and, on message_job, a job
event (INSERT); each profile declares them (``QueueProfile.write_needs``) and
docs/profiles.md lists them."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.estate.profile import QueueProfile
from services.estate.tables import BoundTable


def _kinds(kinds: list[str]) -> str:
    return kinds[0] if len(kinds) == 1 else f"{', '.join(kinds[:-1])} and {kinds[-1]}"


async def missing(conn: AsyncConnection, profile: QueueProfile) -> list[str]:
    """One line per privilege this connection's role lacks on the queue's tables, naming
    the change kinds that need it and the GRANT that gives it. Nothing on SQLite (no
    roles) or for a profile that declares no ``write_needs``."""
    needs = profile.write_needs
    if conn.dialect.name != "postgresql" or not needs:
        return []
    tables = await profile.tables(conn)
    quote = conn.dialect.identifier_preparer.format_table
    wanted: dict[tuple[str, str, str | None], list[str]] = {}  # (table, priv, col) -> kinds
    bound: dict[str, BoundTable] = {}
    for kind, kind_needs in needs.items():
        for role, privilege, column in kind_needs:
            table = tables.get(role)
            if table is None:  # an optional table this team does not keep
                continue
            quoted = quote(table.table)
            bound[quoted] = table
            actual = table.c(column).name if column is not None else None
            wanted.setdefault((quoted, privilege, actual), []).append(kind)
    lacking = []
    for quoted, privilege, column in wanted:
        if column is None:
            query = sa.text("SELECT has_table_privilege(:t, :p), current_user")
        else:
            query = sa.text("SELECT has_column_privilege(:t, :c, :p), current_user")
        has, user = (await conn.execute(query, {"t": quoted, "c": column, "p": privilege})).one()
        if not has:
            lacking.append((quoted, privilege, column, str(user)))
    lines = []
    for quoted, privilege, column, user in lacking:
        kinds = wanted[(quoted, privilege, column)]
        on = f" (column {column})" if column is not None else ""
        lines.append(
            f"queue {profile.queue!r} ({profile.name}): role {user!r} lacks the {privilege} "
            f"privilege on table {bound[quoted].name!r}{on}, which {_kinds(kinds)} "
            f"need{'s' if len(kinds) == 1 else ''}: approving one would fail; the table's "
            f"owner grants it (GRANT {privilege} ON {quoted} TO "
            f"{conn.dialect.identifier_preparer.quote(user)})"
        )
    return lines
