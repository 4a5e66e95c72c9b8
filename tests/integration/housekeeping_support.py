"""An estate with each housekeeping part's situation and its near misses, a local
webhook that takes or refuses a POST, and a housekeeper over them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from aiohttp import web
from pydantic import SecretStr
from sqlalchemy.ext.asyncio import AsyncEngine

from services.audit import AuditTrail
from services.config import QueueConfig
from services.config.housekeeping import HousekeepingConfig
from services.estate.ddl import create_estate_tables
from services.estate.estate import Estate
from services.estate.profile import as_utc
from services.housekeeping.run import Housekeeper
from services.housekeeping.webhook import TIMEOUT, Webhook
from tests.integration.support import START, Clock

NOW = START


def ago(**kwargs: float) -> datetime:
    return NOW - timedelta(**kwargs)


def row(ident: int, status: str, **values: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": ident,
        "job_type": "dev-issue",
        "status": status,
        "queued_at": ago(hours=1),
        "retry_count": 0,
        "max_retries": 3,
    }
    return {**base, **values}


# Each part's situation, and the near misses it must leave alone.
ROWS = [
    # Part A: queued rows of an issue that already has a running or done row
    row(1, "running", issue_number=100, claimed_at=ago(minutes=5), started_at=ago(minutes=4)),
    row(2, "queued", issue_number=100),  # cancelled
    row(3, "queued", issue_number=101),  # near miss: its sibling is only queued
    row(4, "queued", issue_number=101),
    row(5, "done", issue_number=102),
    row(6, "queued", issue_number=102),  # cancelled
    row(7, "queued"),  # no issue number: never a duplicate
    # Part B: failed implementation_error / timeout rows
    row(10, "failed", issue_number=210, failure_reason="implementation_error", retry_count=0),
    row(11, "failed", issue_number=211, failure_reason="timeout", retry_count=1),
    row(12, "failed", issue_number=212, failure_reason="timeout", retry_count=2),  # LAST retry
    row(13, "failed", issue_number=213, failure_reason="implementation_error", retry_count=3),
    # near miss: at max_retries, and the webhook refuses it: not told, so it stays failed
    row(14, "failed", issue_number=999, failure_reason="timeout", retry_count=3),
    row(15, "failed", issue_number=215, failure_reason="spawn_oom", retry_count=0),  # not B's
    # near miss: retries left, but its issue is already done: requeued, it would be a duplicate
    row(16, "failed", issue_number=102, failure_reason="implementation_error", retry_count=0),
    # Part C: stale duplicates
    row(20, "cancelled", failure_reason="stale_duplicate", queued_at=ago(hours=25)),  # deleted
    row(21, "cancelled", failure_reason="stale_duplicate", queued_at=ago(hours=23)),
    # Part D: claimed, never started, no heartbeat
    row(30, "claimed", issue_number=230, claimed_at=ago(minutes=16)),  # released
    row(31, "claimed", issue_number=231, claimed_at=ago(minutes=14)),  # near miss: 14 min
    row(32, "claimed", issue_number=232, claimed_at=ago(minutes=20), heartbeat_at=ago(minutes=1)),
    # Part E: trivial failures
    row(40, "failed", issue_number=240, failure_reason="mutex_collision", retry_count=0),
    row(41, "failed", issue_number=241, failure_reason="spawn_ram", retry_count=1),
    row(42, "failed", issue_number=242, failure_reason="spawn_ram", retry_count=3),  # none left
    # Part F: three spawn_oom on bms-4 within 30 min; two on bms-5; one old one on bms-4
    *(
        row(
            50 + i,
            "failed",
            issue_number=250 + i,
            failure_reason="spawn_oom",
            server_node="bms-4",
            server_preference="bms-4",
            claimed_at=ago(minutes=10 + i),
        )
        for i in range(3)
    ),
    *(
        row(
            53 + i,
            "failed",
            issue_number=253 + i,
            failure_reason="spawn_oom",
            server_node="bms-5",
            claimed_at=ago(minutes=5),
        )
        for i in range(2)
    ),
    row(
        55,
        "failed",
        issue_number=255,
        failure_reason="spawn_oom",
        server_node="bms-4",
        claimed_at=ago(minutes=40),
    ),
]


async def build_estate(engine: AsyncEngine, rows: list[dict[str, Any]] = ROWS) -> Estate:
    async with engine.begin() as conn:
        await create_estate_tables(conn, "worker_queue")
        table = await conn.run_sync(
            lambda c: sa.Table("dev_r_worker_queue", sa.MetaData(), autoload_with=c)
        )
        columns = [c.name for c in table.columns]
        filled = [{c: r.get(c) for c in columns if c != "id" or "id" in r} for r in rows]
        for r in filled:  # NOT NULL columns with defaults
            r["retry_count"] = r["retry_count"] or 0
            r["max_retries"] = r["max_retries"] or 3
        await conn.execute(table.insert(), filled)
        if conn.dialect.name == "postgresql":
            await conn.exec_driver_sql(
                "SELECT setval('dev_r_worker_queue_id_seq', "
                "(SELECT max(id) FROM dev_r_worker_queue))"
            )
    return Estate(
        engine=engine, queues={"workers": QueueConfig(profile="worker_queue")}, clock=Clock()
    )


async def table_rows(engine: AsyncEngine) -> dict[int, dict[str, Any]]:
    """Every row, timestamps as UTC datetimes on both databases."""
    async with engine.connect() as conn:
        table = await conn.run_sync(
            lambda c: sa.Table("dev_r_worker_queue", sa.MetaData(), autoload_with=c)
        )
        found = await conn.execute(sa.select(table).order_by(table.c.id))
        return {
            int(r["id"]): {k: as_utc(v) if isinstance(v, datetime) else v for k, v in r.items()}
            for r in found.mappings()
        }


@dataclass
class FakeWebhook:
    """A local HTTP endpoint: 200 for every row except those of the refused issues; with
    ``hang``, no answer at all until the endpoint is closed."""

    refuse: set[int] = field(default_factory=lambda: {999})
    hang: bool = False
    bodies: list[dict[str, Any]] = field(default_factory=list)
    keys: list[str | None] = field(default_factory=list)  # each POST's Idempotency-Key
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    url: str = ""

    async def handle(self, request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        self.bodies.append(body)
        self.keys.append(request.headers.get("Idempotency-Key"))
        self.arrived.set()
        if self.hang:
            await self.closed.wait()
        if body.get("issue") in self.refuse:
            return web.Response(status=500, text="down")
        return web.Response(status=200, text="ok")


@asynccontextmanager
async def fake_webhook(
    refuse: set[int] | None = None, *, hang: bool = False
) -> AsyncIterator[FakeWebhook]:
    hook = FakeWebhook(refuse=refuse if refuse is not None else {999}, hang=hang)
    app = web.Application()
    app.router.add_post("/hook", hook.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    hook.url = f"http://127.0.0.1:{port}/hook"
    try:
        yield hook
    finally:
        hook.closed.set()
        await runner.cleanup()


def housekeeper(
    engine: AsyncEngine,
    estate: Estate,
    *,
    chat: bool,
    webhook: str | None = None,
    config: HousekeepingConfig | None = None,
    timeout: float = TIMEOUT,
) -> Housekeeper:
    return Housekeeper(
        engine=engine,
        estate=estate,
        audit=AuditTrail(),
        config=config or HousekeepingConfig(),
        clock=lambda: NOW,
        chat=chat,
        webhook=Webhook(SecretStr(webhook), timeout=timeout) if webhook else None,
    )
