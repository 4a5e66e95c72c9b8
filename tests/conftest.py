"""Shared fixtures: databases for the integration and e2e tests.

``db_url`` runs a test twice, on SQLite (a temporary file) and on PostgreSQL (a fresh
database created and dropped around the test). Both come migrated to the newest revision,
copied from a template this process builds once (see ``tests/db_templates.py``);
``upgrade()`` on them is a quick no-op. A test that needs an empty database (migrations,
"not migrated" errors, ``queuebot db upgrade``) is marked ``@pytest.mark.empty_db``;
``demo_db_url`` (or ``db_url`` in a test marked ``demo_db``) also holds the demo estate
built at ``START``; helpers that build it check ``holds_demo(url)`` first. PostgreSQL comes from
``QUEUEBOT_TEST_POSTGRES`` (default: postgres@127.0.0.1:5432/test). When it cannot be
reached the PostgreSQL half is skipped, unless ``QUEUEBOT_REQUIRE_POSTGRES=1`` (CI), where
that is an error and the run fails.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from services.estate.demo import DemoEstate
from tests.db_templates import Kind, Templates

PG_ADMIN = os.environ.get("QUEUEBOT_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
REQUIRE_PG = os.environ.get("QUEUEBOT_REQUIRE_POSTGRES") == "1"
# Reports of tests marked postgres, counted where reports arrive: in the one process of a
# serial run, in the controller of a parallel one (pytest-xdist's workers send it theirs).
_postgres_reports = {"wanted": 0, "ran": 0}
_pg_ok: bool | None = None
_templates: Templates | None = None


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


def templates() -> Templates:
    """This process's database templates (built on first use, dropped at session end)."""
    global _templates
    if _templates is None:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        workdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"qb-templates-{os.getpid()}-{worker}"
        _templates = Templates(PG_ADMIN, _pg_conninfo, workdir)
    return _templates


def create_pg_database(kind: Kind = "empty") -> str:
    return templates().create_pg(kind)


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


def postgres_database(kind: Kind = "empty") -> Iterator[str]:
    """A fresh PostgreSQL database for as long as the generator runs (dropped after it, in
    the background: see ``tests/db_templates.py``)."""
    need_postgres()
    url = create_pg_database(kind)
    try:
        yield url
    finally:
        templates().drop_later(url)


# Fixtures whose tests get the demo estate in ``db_url``: one database per test, whichever
# of these and ``db_url`` its fixtures ask for.
DEMO_FIXTURES = frozenset({"shop", "demo_db_url", "demo_estate"})


def _kind(request: pytest.FixtureRequest, wanted: Kind) -> Kind:
    if request.node.get_closest_marker("empty_db"):
        return "empty"
    if request.node.get_closest_marker("demo_db") or DEMO_FIXTURES & set(request.fixturenames):
        return "demo"
    return wanted


def holds_demo(url: str) -> bool:
    """Whether the database at ``url`` was copied from the demo template: the demo estate
    built at ``START`` is in it already (``@pytest.mark.demo_db``)."""
    return _templates is not None and _templates.holds_demo(url)


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh, migrated PostgreSQL database (mark the test ``postgres``; ``empty_db`` for
    one without queuebot's tables)."""
    yield from postgres_database(_kind(request, "migrated"))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The same test on SQLite and on PostgreSQL, each database migrated to the newest
    revision (``@pytest.mark.empty_db``: without queuebot's tables; ``@pytest.mark.demo_db``
    or a fixture in ``DEMO_FIXTURES``: with the demo estate built at ``START`` too)."""
    kind = _kind(request, "migrated")
    if request.param == "sqlite":
        yield templates().sqlite(kind, tmp_path)
        return
    yield from postgres_database(kind)


@pytest.fixture(autouse=True)
def _alerting_programs(request: pytest.FixtureRequest) -> None:
    """A test marked ``alerting`` is skipped where Prometheus or Alertmanager is missing
    (failed instead under ``QUEUEBOT_REQUIRE_ALERTING=1``)."""
    if request.node.get_closest_marker("alerting"):
        from tests.e2e.alerting_stack import need_alerting

        need_alerting()


@pytest.fixture
def demo_db_url(db_url: str) -> str:
    """``db_url``, holding the demo estate built at ``START`` too (see ``demo_estate``)."""
    assert holds_demo(db_url), "a test marked empty_db cannot have the demo estate"
    return db_url


@pytest.fixture
def demo_estate(demo_db_url: str) -> DemoEstate:
    """What ``build_demo_estate`` returned for the demo in ``demo_db_url``."""
    return templates().demo


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Count the tests marked postgres, and those of them whose body ran (a call report
    exists only when the setup, which made the database, succeeded)."""
    if "postgres" in report.keywords:
        _postgres_reports["wanted"] += report.when == "setup"
        _postgres_reports["ran"] += report.when == "call"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _templates is not None:
        _templates.close()
    if hasattr(session.config, "workerinput"):
        return  # a worker: the controller has every worker's reports
    if REQUIRE_PG and _postgres_reports["wanted"] and not _postgres_reports["ran"]:
        print("\nQUEUEBOT_REQUIRE_POSTGRES=1 but no test ran on PostgreSQL")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
