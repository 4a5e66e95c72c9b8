"""Each piece of what keeps a silent database from holding queuebot up, on real
PostgreSQL: every connection carries ``[database]``'s timeouts and keepalives, a wait on a
database that answers nothing ends at its bound (a loopback proxy holds every byte, as a
partition does), migrations are exempt, and a delivery the ack could not wait for is
never acted on, even when its INSERT reaches the database after all.

The whole of it through a real ``queuebot serve``: tests/reliability/test_silent_database.py.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from services.config import DatabaseConfig
from services.db import create_engine, transaction
from services.db.bounds import bounded
from services.db.migrate import MIGRATION_LOCK, upgrade
from services.errors import DatabaseUnavailable
from services.ledger import DeliveryLedger
from services.ledger.acks import NOT_RECORDED, ThreadedAcks
from testkit.tcp_proxy import TcpProxy
from tests.conftest import _pg_conninfo

pytestmark = pytest.mark.postgres

# Short bounds, so that the silences below are short: a wait gives up after 2 + 2 s, a
# pooled connection's ping after 2 s, a new connection after 2 s.
QUICK = DatabaseConfig(
    connect_timeout_seconds=2,
    statement_timeout_seconds=2,
    lock_timeout_seconds=1,
    idle_in_transaction_timeout_seconds=5,
)


@pytest.fixture
def proxy(pg_url: str) -> Iterator[TcpProxy]:
    url = make_url(pg_url)
    with TcpProxy((url.host or "127.0.0.1", url.port or 5432)) as running:
        yield running


def through(pg_url: str, proxy: TcpProxy) -> str:
    return make_url(pg_url).set(port=proxy.port).render_as_string(hide_password=False)


@pytest.fixture
async def silent_engine(pg_url: str, proxy: TcpProxy) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(through(pg_url, proxy), settings=QUICK)
    try:
        yield engine
    finally:
        proxy.forward()
        await engine.dispose()


def sql(pg_url: str, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(_pg_conninfo(pg_url), autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []


async def test_every_connection_carries_the_timeouts_and_keepalives(pg_url: str) -> None:
    settings = DatabaseConfig(statement_timeout_seconds=7, lock_timeout_seconds=3)
    shown = (
        "SELECT current_setting('statement_timeout'), current_setting('lock_timeout'), "
        "current_setting('idle_in_transaction_session_timeout'), "
        "current_setting('tcp_keepalives_idle'), current_setting('tcp_user_timeout')"
    )
    expected = ("7s", "3s", "20s", "4", "10000")
    engine = create_engine(pg_url, settings=settings)
    try:
        async with engine.connect() as conn:
            assert tuple((await conn.execute(sa.text(shown))).one()) == expected
            # and what SQLAlchemy gives each connection still holds: queuebot's JSON
            at = datetime(2026, 12, 7, tzinfo=UTC)
            json = sa.text("SELECT CAST(:v AS json)").bindparams(sa.bindparam("v", type_=sa.JSON))
            assert (await conn.execute(json, {"v": {"at": at}})).scalar() == {"at": at.isoformat()}
    finally:
        await engine.dispose()
    acks = ThreadedAcks(make_url(pg_url), settings=settings)  # the write-down's own thread
    try:
        conn, _ = await asyncio.to_thread(acks._connect, None)
        with conn:
            assert conn.execute(shown).fetchone() == expected
            assert conn.info.get_parameters()["keepalives_idle"] == "4"
    finally:
        await asyncio.to_thread(acks.close)
    # what the URL itself says wins
    url = make_url(pg_url).update_query_dict({"options": "-c statement_timeout=60s"})
    engine = create_engine(url.render_as_string(hide_password=False), settings=settings)
    try:
        async with engine.connect() as conn:
            assert (await conn.execute(sa.text(shown))).one()[:2] == ("1min", "3s")
    finally:
        await engine.dispose()


async def test_a_silent_database_ends_each_wait_at_its_bound(
    silent_engine: AsyncEngine, proxy: TcpProxy
) -> None:
    async with transaction(silent_engine, subject="a test") as conn:
        await conn.execute(sa.text("SELECT 1"))  # a connection pooled, as serve has them
    proxy.silence()
    started = time.monotonic()
    with pytest.raises(DatabaseUnavailable):  # the pooled one's ping, then a new one
        async with transaction(silent_engine, subject="a test") as conn:
            await conn.execute(sa.text("SELECT 1"))
    assert time.monotonic() - started < 2 + 2 + 1.5

    started = time.monotonic()
    with bounded(1.0), pytest.raises(DatabaseUnavailable):  # readiness's shorter bound
        async with transaction(silent_engine, subject="a test") as conn:
            await conn.execute(sa.text("SELECT 1"))
    assert time.monotonic() - started < 1 + 2 + 1.5

    proxy.forward()
    async with transaction(silent_engine, subject="a test") as conn:
        assert (await conn.execute(sa.text("SELECT 1"))).scalar() == 1


async def test_a_statement_in_flight_when_the_silence_begins_ends_at_its_bound(
    silent_engine: AsyncEngine, proxy: TcpProxy
) -> None:
    async with silent_engine.connect() as conn:
        await conn.execute(sa.text("SELECT 1"))
        started = time.monotonic()
        threading.Timer(0.3, proxy.silence).start()
        with pytest.raises(sa.exc.OperationalError) as failed:
            await conn.execute(sa.text("SELECT pg_sleep(1)"))  # its answer never comes
    assert "no answer from the database within 4 s" in str(failed.value)
    assert 4 <= time.monotonic() - started < 4 + 1.5


@pytest.mark.empty_db
async def test_a_migration_waits_for_another_replicas_beyond_every_timeout(pg_url: str) -> None:
    """Another replica migrating holds the lock longer than the lock, statement and
    client timeouts: this one waits and then finds the work done."""
    other = psycopg.connect(_pg_conninfo(pg_url), autocommit=True)
    other.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
    threading.Timer(4.5, lambda: other.execute("SELECT pg_advisory_unlock_all()")).start()
    engine = create_engine(pg_url, settings=QUICK)
    started = time.monotonic()
    try:
        assert await upgrade(engine) is not None
    finally:
        await engine.dispose()
        other.close()
    assert time.monotonic() - started >= 4.5  # past every bound of QUICK


def acks_of(pg_url: str, **kwargs: Any) -> ThreadedAcks:
    return ThreadedAcks(make_url(pg_url), settings=QUICK, late_after=2.5, bound=1.0, **kwargs)


def claim_rows(pg_url: str, *keys: str) -> dict[str, tuple[Any, ...]]:
    rows = sql(
        pg_url,
        "SELECT key, state, request IS NOT NULL, answered_at IS NOT NULL, outcome "
        "FROM qb_deliveries WHERE key = ANY(%s)",
        (list(keys),),
    )
    return {r[0]: r[1:] for r in rows}


async def test_a_write_down_given_up_on_during_a_silence_is_never_acted_on(
    pg_url: str, proxy: TcpProxy
) -> None:
    acks = acks_of(through(pg_url, proxy))
    now = datetime.now(UTC)
    try:
        assert await acks.write("k:warm", "o-warm", {"text": "warm"}, now)
        proxy.silence()
        asked = []
        for n in (1, 2):  # the first INSERT goes out and is held; the second waits behind it
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.3):
                    await acks.write(f"k:{n}", f"o-{n}", {"text": str(n)}, datetime.now(UTC))
            asked.append(f"k:{n}")
        await asyncio.sleep(3.5)  # past late_after: the held INSERT is too late now
        proxy.forward()  # ... and reaches the database
        deadline = time.monotonic() + 10
        while acks.unsettled():
            assert time.monotonic() < deadline, "never settled"
            await asyncio.sleep(0.1)
    finally:
        await asyncio.to_thread(acks.close)
    rows = claim_rows(pg_url, *asked)
    # the first: written by nothing but the settling, done, answered, "not recorded"
    assert rows["k:1"] == ("done", False, True, NOT_RECORDED)
    assert "k:2" not in rows  # given up on before it went out: never sent
    ledger = DeliveryLedger(engine=create_engine(pg_url), clock=lambda: now + timedelta(hours=1))
    try:  # nothing for the orphan sweep to take, ever
        assert await ledger.adopt_orphans(prefixes=tuple(asked)) == []
    finally:
        await ledger.engine.dispose()


async def test_a_write_down_reaching_the_database_late_writes_nothing(pg_url: str) -> None:
    acks = acks_of(pg_url)
    try:
        late = datetime.now(UTC) - timedelta(seconds=10)  # acknowledged 10 s ago
        assert not await acks.write("k:late", "o-late", {"text": "late"}, late)
        assert await acks.write("k:now", "o-now", {"text": "now"}, datetime.now(UTC))
    finally:
        await asyncio.to_thread(acks.close)
    assert claim_rows(pg_url, "k:late", "k:now") == {"k:now": ("claimed", True, False, None)}


async def test_a_write_down_whose_connection_died_is_sent_again(pg_url: str) -> None:
    """A failover or a restart ended the thread's connection since its last write: the
    next write goes out again on a new one, instead of being refused."""
    acks = acks_of(pg_url)
    try:
        assert await acks.write("k:before", "o-before", {}, datetime.now(UTC))
        sql(
            pg_url,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        assert await acks.write("k:after", "o-after", {}, datetime.now(UTC))
    finally:
        await asyncio.to_thread(acks.close)
    assert claim_rows(pg_url, "k:after")["k:after"][0] == "claimed"


async def test_an_answer_the_database_could_not_be_told_of_is_not_given_again(
    silent_engine: AsyncEngine, proxy: TcpProxy
) -> None:
    now = datetime.now(UTC)
    clock = [now]
    ledger = DeliveryLedger(engine=silent_engine, clock=lambda: clock[0])
    claim = await ledger.claim("k:answered", request={"text": "pending"})
    assert claim is not None
    proxy.silence()  # the answer goes out; the database cannot be told
    with pytest.raises(DatabaseUnavailable):
        await ledger.finish(claim)
    proxy.forward()
    clock[0] = now + timedelta(minutes=1)  # its claim went stale unrefreshed meanwhile
    assert await ledger.adopt_orphans(prefixes=("k:",)) == []  # recorded, not answered again
    async with silent_engine.connect() as conn:
        answered = await conn.execute(
            sa.text("SELECT answered_at IS NOT NULL FROM qb_deliveries WHERE key = 'k:answered'")
        )
        assert answered.scalar() is True
