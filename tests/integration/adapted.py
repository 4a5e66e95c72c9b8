"""A queue of one adapter's profile in a test database, as the contract tests and the
tests over every profile build it: the profiles the wiring is given (the shipped ones and
the test-only one), whether the adapter's profile can be tested on this database and
here, and its tables, empty."""

from __future__ import annotations

import pytest
from sqlalchemy.ext.asyncio import AsyncConnection

from services.estate.ddl import create_estate_tables
from services.estate.registry import ProfileRegistry, shipped_profiles
from tests.helpers.systems import need_system
from tests.integration.profile_adapters import ProfileAdapter
from tests.integration.single_table_profile import SingleTableProfile


def registry() -> ProfileRegistry:
    """The shipped profiles and the test-only one, as the wiring would be given them."""
    profiles = shipped_profiles()
    profiles.add(SingleTableProfile)
    return profiles


def need(kind: type[ProfileAdapter], db_url: str) -> None:
    """Skip a preset on SQLite, and one whose schema needs a system's runtime where that
    runtime is missing (failed instead where the systems are required)."""
    if kind.postgres_only and not db_url.startswith("postgresql"):
        pytest.skip(f"{kind.profile_class.name} is a PostgreSQL system (enum states, jsonb)")
    if kind.runtime is not None:
        need_system(kind.runtime)


async def create_tables(conn: AsyncConnection, kind: type[ProfileAdapter]) -> None:
    create = getattr(kind, "create", None)
    if create is not None:  # a preset: the system's own tables
        await create(conn)
    else:
        await create_estate_tables(conn, kind.profile_class)
