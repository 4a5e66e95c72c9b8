"""Migrate once, clone many: the databases the test fixtures hand out.

Running queuebot's migrations (and building the demo estate) for every test is most of a
database test's setup. Instead each test process (each pytest-xdist worker) builds a
template once, on first use, and every test gets a copy:

- PostgreSQL: a template database per kind, and each test's database is
  ``CREATE DATABASE ... TEMPLATE`` it. Templates are named
  ``qb_tpl_<worker>_<host>_<pid>_<started>_<kind>``, so that workers and concurrent runs
  (other checkouts on the same server) never share one; they are dropped when the session
  ends, and those a crashed run left behind (its process gone, or older than a day) are
  dropped when the next run builds its first.
- SQLite: a migrated file per kind in the worker's temporary directory, copied per test.

A PostgreSQL copy is made and dropped off the tests' path, in a thread of the process: the
next copy of a kind is made while the test that took the last one runs, and a test's
database is dropped after the test is over (``drop_later``), while the next one runs. Each
copy is a fresh database all the same; only its making and dropping no longer hold a test
up (a drop, like a copy, waits on the server's disk).

Kinds: ``empty`` (nothing; for tests of migrations, of "not migrated" errors and of
``queuebot db upgrade``), ``migrated`` (queuebot's tables at the newest revision) and
``demo`` (migrated plus the demo estate built at the constant ``START``, which is
deterministic: seeded ids, times relative to ``now``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import os
import re
import secrets
import shutil
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Literal

import psycopg
from sqlalchemy.engine import make_url

from services.db import create_engine
from services.db.migrate import upgrade
from services.estate.demo import DemoEstate, build_demo_estate

Kind = Literal["empty", "migrated", "demo"]
PREFIX = "qb_tpl_"
STALE_AFTER = 24 * 3600  # seconds: a template this old is left over, whoever made it
_WORKER = re.sub(r"\W", "", os.environ.get("PYTEST_XDIST_WORKER", "main"))[:8] or "main"
_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:6]
_STARTED = int(time.time())
_NAME = re.compile(r"^qb_tpl_\w+?_(?P<host>[0-9a-f]{6})_(?P<pid>\d+)_(?P<started>\d+)_\w+$")


def _run(make: Callable[[], Awaitable[None]]) -> None:
    """Run a coroutine to completion from sync code, even when called while an event
    loop runs in this thread (a fixture of an async test)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, make()).result()  # type: ignore[arg-type]


async def _fill(url: str, kind: Kind, demo: list[DemoEstate]) -> None:
    # Imported here: tests.integration.support imports tests.conftest, which imports this.
    from tests.integration.support import START

    engine = create_engine(url)
    try:
        await upgrade(engine)
        if kind == "demo":
            async with engine.begin() as conn:
                demo.append(await build_demo_estate(conn, now=START))
    finally:
        await engine.dispose()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stale(name: str, now: float) -> bool:
    """A template of a run that is over: this host's and its process gone, or very old.
    Never this process's, nor a live concurrent run's."""
    found = _NAME.match(name)
    if found is None:
        return False
    if int(found["started"]) < now - STALE_AFTER:
        return True
    return (
        found["host"] == _HOST
        and int(found["pid"]) != os.getpid()
        and not _alive(int(found["pid"]))
    )


class Templates:
    """This process's templates, built on first use and dropped by ``close``."""

    def __init__(self, admin_url: str, conninfo: Callable[[str], str], workdir: Path) -> None:
        self._admin = admin_url
        self._conninfo = conninfo
        self._workdir = workdir
        self._pg: dict[Kind, str] = {}
        self._sqlite: dict[Kind, Path] = {}
        self._demo: DemoEstate | None = None
        self._swept = False
        self._with_demo: set[str] = set()
        # One thread makes the next copy of each kind, another drops what tests are done
        # with: a copy is never held up behind drops.
        self._maker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="qb-db-make")
        self._dropper = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="qb-db-drop")
        self._spare: dict[Kind, concurrent.futures.Future[str]] = {}
        self._drops: list[concurrent.futures.Future[None]] = []

    def holds_demo(self, url: str) -> bool:
        """Whether ``url`` is a copy of the demo template (so the demo is built there)."""
        return url in self._with_demo

    @property
    def demo(self) -> DemoEstate:
        """What ``build_demo_estate`` returned when the demo template was built."""
        assert self._demo is not None, "no demo template was built yet"
        return self._demo

    def _admin_execute(self, *statements: str) -> None:
        with psycopg.connect(self._conninfo(self._admin), autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)  # type: ignore[arg-type]

    def _sweep(self) -> None:
        """Drop templates that crashed runs left behind (never a live run's)."""
        self._swept = True
        now = time.time()
        with psycopg.connect(self._conninfo(self._admin), autocommit=True) as conn:
            names = [
                row[0]
                for row in conn.execute(
                    "SELECT datname FROM pg_database WHERE datname LIKE %s", ("qb\\_tpl\\_%",)
                )
            ]
            for name in names:
                if _stale(name, now):
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]

    def _url(self, name: str) -> str:
        return (
            make_url(self._admin)
            .set(drivername="postgresql+psycopg", database=name)
            .render_as_string(hide_password=False)
        )

    def _pg_template(self, kind: Kind) -> str:
        if kind not in self._pg:
            if not self._swept:
                self._sweep()
            name = f"{PREFIX}{_WORKER}_{_HOST}_{os.getpid()}_{_STARTED}_{kind}"
            self._admin_execute(
                f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}"'
            )
            demo: list[DemoEstate] = []
            _run(lambda: _fill(self._url(name), kind, demo))
            if demo:
                self._demo = demo[0]
            # No connection may be open to a template while it is copied: refuse them.
            self._admin_execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false')
            self._pg[kind] = name
        return self._pg[kind]

    def create_pg(self, kind: Kind) -> str:
        """A new PostgreSQL database of ``kind``; the caller drops it (``drop_later``)."""
        if kind != "empty":
            self._pg_template(kind)  # built here, once, before any copy is made
        spare = self._spare.pop(kind, None)
        try:
            name = spare.result() if spare is not None else self._copy(kind)
        except psycopg.Error:  # the copy made ahead failed: made here, its error raised here
            name = self._copy(kind)
        self._spare[kind] = self._maker.submit(self._copy, kind)  # the next test's
        return self._noted(self._url(name), kind)

    def _copy(self, kind: Kind) -> str:
        name = f"qb_test_{secrets.token_hex(4)}"
        if kind == "empty":
            self._admin_execute(f'CREATE DATABASE "{name}"')
        else:
            # The default copy (WAL-logged on PostgreSQL 15+): STRATEGY FILE_COPY is three
            # times faster alone but takes a checkpoint per copy, which under the whole
            # suite's writes made the run twice as slow.
            self._admin_execute(f'CREATE DATABASE "{name}" TEMPLATE "{self._pg[kind]}"')
        return name

    def drop_later(self, url: str) -> None:
        """Drop the database at ``url`` in the background; ``close`` waits for it."""
        name = make_url(url).database
        self._drops.append(
            self._dropper.submit(
                self._admin_execute, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'
            )
        )
        self._drops = [d for d in self._drops if not d.done() or d.exception() is not None]

    def _noted(self, url: str, kind: Kind) -> str:
        if kind == "demo":
            self._with_demo.add(url)
        else:
            self._with_demo.discard(url)
        return url

    def sqlite(self, kind: Kind, directory: Path, filename: str = "queuebot-test.db") -> str:
        """A SQLite database of ``kind`` in ``directory`` (a copy of the template file)."""
        path = directory / filename
        if kind != "empty":
            if kind not in self._sqlite:
                self._workdir.mkdir(parents=True, exist_ok=True)
                template = self._workdir / f"{kind}.db"
                template.unlink(missing_ok=True)
                demo: list[DemoEstate] = []
                _run(lambda: _fill(f"sqlite+aiosqlite:///{template}", kind, demo))
                if demo:
                    self._demo = demo[0]
                self._sqlite[kind] = template
            template = self._sqlite[kind]
            shutil.copyfile(template, path)
            for suffix in ("-wal", "-shm"):  # none once the engine is disposed; to be sure
                side = template.with_name(template.name + suffix)
                if side.exists():
                    shutil.copyfile(side, path.with_name(path.name + suffix))
        return self._noted(f"sqlite+aiosqlite:///{path}", kind)

    def close(self) -> None:
        for spare in self._spare.values():
            with contextlib.suppress(Exception):
                self.drop_later(self._url(spare.result()))
        self._spare.clear()
        self._maker.shutdown()
        self._dropper.shutdown()  # every drop asked for is done
        failed = [e for d in self._drops if (e := d.exception()) is not None]
        self._drops.clear()
        for name in self._pg.values():
            self._admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self._pg.clear()
        self._sqlite.clear()
        shutil.rmtree(self._workdir, ignore_errors=True)
        if failed:
            raise failed[0]
