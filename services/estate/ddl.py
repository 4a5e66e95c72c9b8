"""Creating a profile's tables from its shipped DDL (``ddl/*.sql`` in its package)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

from services.estate.profile import QueueProfile
from services.estate.registry import shipped_profiles


async def create_estate_tables(conn: AsyncConnection, profile: str | type[QueueProfile]) -> None:
    """Create a profile's tables (if missing) exactly as its shipped DDL defines them."""
    kind = shipped_profiles().get(profile) if isinstance(profile, str) else profile
    dialect = conn.dialect.name
    text = kind.ddl(dialect)
    if dialect == "postgresql":
        await conn.exec_driver_sql(text)  # psycopg runs a parameterless script at once
        return
    for statement in text.split(";\n"):
        body = "\n".join(
            line for line in statement.splitlines() if not line.lstrip().startswith("--")
        ).strip()
        if body:
            await conn.exec_driver_sql(body)
