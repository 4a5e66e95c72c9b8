"""Shared fixtures: databases for the integration and e2e tests.

``db_url`` runs a test twice, on SQLite (a temporary file) and on PostgreSQL (a fresh
database created and dropped around the test). PostgreSQL comes from
``QUEUEBOT_TEST_POSTGRES`` (default: postgres@127.0.0.1:5432/test). When it cannot be
reached the PostgreSQL half is skipped, unless ``QUEUEBOT_REQUIRE_POSTGRES=1`` (CI), where
that is an error and the run fails.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy.engine import make_url

PG_ADMIN = os.environ.get("QUEUEBOT_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
REQUIRE_PG = os.environ.get("QUEUEBOT_REQUIRE_POSTGRES") == "1"
_ran_on_postgres = 0
_pg_ok: bool | None = None


def _pg_conninfo(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def postgres_available() -> bool:
    global _pg_ok
    if _pg_ok is None:
        try:
            with psycopg.connect(_pg_conninfo(PG_ADMIN), connect_timeout=3):
                _pg_ok = True
        except psycopg.OperationalError:
            _pg_ok = False
    return _pg_ok


def create_pg_database() -> str:
    name = f"qb_test_{secrets.token_hex(4)}"
    with psycopg.connect(_pg_conninfo(PG_ADMIN), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return (
        make_url(PG_ADMIN)
        .set(drivername="postgresql+psycopg", database=name)
        .render_as_string(hide_password=False)
    )


def drop_pg_database(url: str) -> None:
    name = make_url(url).database
    with psycopg.connect(_pg_conninfo(PG_ADMIN), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def need_postgres() -> None:
    if not postgres_available():
        if REQUIRE_PG:
            pytest.fail(
                f"PostgreSQL is required (QUEUEBOT_REQUIRE_POSTGRES=1) but {PG_ADMIN} "
                "cannot be reached"
            )
        pytest.skip("PostgreSQL not reachable")


def postgres_database() -> Iterator[str]:
    """A fresh PostgreSQL database for as long as the generator runs, counted so that the
    session can tell whether anything ran on PostgreSQL."""
    global _ran_on_postgres
    need_postgres()
    url = create_pg_database()
    _ran_on_postgres += 1
    try:
        yield url
    finally:
        drop_pg_database(url)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database (mark the test ``postgres``)."""
    yield from postgres_database()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> Iterator[str]:
    """The same test on SQLite and on PostgreSQL."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path}/queuebot-test.db"
        return
    yield from postgres_database()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    wanted = [i for i in session.items if i.get_closest_marker("postgres")]
    if REQUIRE_PG and wanted and _ran_on_postgres == 0:
        print("\nQUEUEBOT_REQUIRE_POSTGRES=1 but no test ran on PostgreSQL")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
