"""The shipped DDL for both estates (``services/estate/ddl/*.sql``)."""

from __future__ import annotations

from importlib import resources

from sqlalchemy.ext.asyncio import AsyncConnection


def ddl_text(profile: str, dialect: str) -> str:
    name = f"{profile}.{'postgresql' if dialect == 'postgresql' else 'sqlite'}.sql"
    return resources.files("services.estate").joinpath("ddl", name).read_text("utf-8")


async def create_estate_tables(conn: AsyncConnection, profile: str) -> None:
    """Create a profile's tables (if missing) exactly as the shipped DDL defines them."""
    dialect = conn.dialect.name
    text = ddl_text(profile, dialect)
    if dialect == "postgresql":
        await conn.exec_driver_sql(text)  # psycopg runs a parameterless script at once
        return
    for statement in text.split(";\n"):
        body = "\n".join(
            line for line in statement.splitlines() if not line.lstrip().startswith("--")
        ).strip()
        if body:
            await conn.exec_driver_sql(body)
