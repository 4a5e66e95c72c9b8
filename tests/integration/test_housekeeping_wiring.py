"""Housekeeping as people reach it: ``/queue housekeep`` from chat (operators only),
the periodic run inside serve on the durable scheduler, and a table without the columns
some parts need (those parts are skipped and say so, in the run's summary and in what
config check prints)."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.bootstrap import wire_services
from bot.boundary import answer
from bot.render_text import render_message
from commands.context import Invocation
from commands.deps import Deps
from commands.reply import Reply
from commands.router import Router
from services.audit import Actor, AuditTrail
from services.config import AccessConfig, ApprovalConfig, QueueConfig
from services.config.housekeeping import HousekeepingConfig
from services.estate.estate import Estate
from services.housekeeping import jobs
from services.housekeeping.run import housekeeping_lines
from services.people import Directory, Person
from services.reads.gate import ReadGate
from services.reads.service import QueueReads
from tests.integration.housekeeping_support import NOW, build_estate, housekeeper, table_rows
from tests.integration.support import FAST, Clock, RecordingNotifier

OLGA = Person("olga", frozenset({"operator"}))
VERA = Person("vera", frozenset({"viewer"}))


async def say(router: Router, line: str, person: Person) -> tuple[Reply, str]:
    inv = Invocation(person=person, platform="console", account=person.name, channel="ops")
    reply = await answer(router.handle_line(line, inv), correlation_id="t", where="test")
    assert isinstance(reply, Reply)
    return reply, render_message(reply.message)


async def test_queue_housekeep_from_chat(engine: AsyncEngine) -> None:
    estate = await build_estate(engine)
    router = Router(
        Deps(
            reads=QueueReads(estate, gate=ReadGate(fresh_for=0.0)),
            changes=None,  # type: ignore[arg-type]  # not used by this command
            plans=None,  # type: ignore[arg-type]
            directory=Directory([OLGA, VERA]),
            access=AccessConfig(),
            housekeeping=housekeeper(engine, estate, chat=True),
        )
    )
    before = await table_rows(engine)
    refused, said = await say(router, "/queue housekeep --dry-run", VERA)
    assert refused.error and "needs the operator role" in said
    reply, text = await say(router, "/queue housekeep --dry-run", OLGA)
    assert reply.ephemeral
    assert "housekeeping dry run" in text and "would change 14 row(s)" in text
    assert "2 would be cancelled as duplicates: 2, 6" in text
    refused, said = await say(router, "/queue housekeep", VERA)
    assert refused.error and "needs the operator role" in said
    bad, said = await say(router, "/queue housekeep --only X", OLGA)
    assert bad.error and "the parts are A, B, C, D, E, F" in said
    assert await table_rows(engine) == before

    done, said = await say(router, "/queue housekeep --only D", OLGA)
    assert not done.ephemeral and "changed 1 row(s)" in said
    assert "1 released to queued: 30" in said
    assert (await table_rows(engine))[30]["status"] == "queued"


async def test_periodic_run_inside_serve_on_the_durable_scheduler(engine: AsyncEngine) -> None:
    estate = await build_estate(engine)
    clock = Clock(now=NOW)
    services = wire_services(
        state_engine=engine,
        estate=estate,
        clock=clock,
        approval=ApprovalConfig(),
        redrive=FAST,
        notifier=None,
        audit=AuditTrail(),
        housekeeping=HousekeepingConfig(periodic=True, every_minutes=10),
    )
    await services.scheduler.seed()
    await services.scheduler.run_due()
    rows = await table_rows(engine)
    assert rows[2]["status"] == "cancelled" and rows[30]["status"] == "queued"
    assert rows[13]["status"] == "failed"  # no chat, no webhook: nobody told, not retired
    async with engine.connect() as conn:
        due = (
            await conn.execute(
                sa.text("SELECT due_at FROM qb_schedule WHERE kind = :k"), {"k": jobs.HOUSEKEEP}
            )
        ).scalar_one()
    assert str(due).startswith(str((NOW + timedelta(minutes=10)).replace(tzinfo=None))[:16])


SLIM = """CREATE TABLE slim_jobs (
  id INTEGER PRIMARY KEY,
  status TEXT NOT NULL,
  error_message TEXT,
  queued_at TIMESTAMP NOT NULL,
  claimed_at TIMESTAMP,
  issue_number INTEGER,
  failure_reason TEXT,
  retry_count INTEGER NOT NULL DEFAULT 0,
  max_retries INTEGER NOT NULL DEFAULT 3,
  next_attempt_at TIMESTAMP,
  started_at TIMESTAMP
)"""


async def test_parts_whose_columns_the_table_lacks_are_skipped_and_say_so(
    engine: AsyncEngine,
) -> None:
    async with engine.begin() as conn:
        await conn.exec_driver_sql(SLIM)
        await conn.execute(
            sa.text(
                "INSERT INTO slim_jobs (id, status, queued_at, claimed_at, issue_number) VALUES "
                "(1, 'running', :t, :t, 7), (2, 'queued', :t, NULL, 7), (3, 'claimed', :t, :old, 8)"
            ),
            {"t": NOW.replace(tzinfo=None), "old": (NOW - timedelta(hours=1)).replace(tzinfo=None)},
        )
    estate = Estate(
        engine=engine,
        queues={"slim": QueueConfig(profile="worker_queue", table="slim_jobs")},
        clock=Clock(),
    )
    report = await housekeeper(engine, estate, chat=True).run(actor=Actor.system("test"))
    text = "\n".join(report.lines())
    assert "Part D (release stuck claimed rows): skipped: no column slim_jobs.heartbeat_at" in text
    assert (
        "Part F (re-route spawn_oom failures away from an unavailable node): skipped: no "
        "column slim_jobs.server_node" in text
    )
    assert report.rows() == {("slim", "A", "cancelled as duplicates"): ["2"]}
    async with estate.connect() as conn:
        profile = estate.profile("slim")
        lines = housekeeping_lines(profile, await profile.tables(conn))
    assert lines == [
        "housekeeping Part D (release stuck claimed rows) is off: no column slim_jobs.heartbeat_at",
        "housekeeping Part F (re-route spawn_oom failures away from an unavailable node) is "
        "off: no column slim_jobs.server_node",
    ]


async def test_notices_and_the_summary_reach_the_alerts_channel_in_threads(
    engine: AsyncEngine,
) -> None:
    estate = await build_estate(engine)
    clock = Clock(now=NOW)
    chat = RecordingNotifier()
    services = wire_services(
        state_engine=engine,
        estate=estate,
        clock=clock,
        approval=ApprovalConfig(),
        redrive=FAST,
        notifier=chat,  # a chat platform: retry-exhausted rows are told there
        audit=AuditTrail(),
    )
    assert services.housekeeper is not None
    report = await services.housekeeper.run(actor=Actor.system("test"))
    assert report.rows()[("workers", "B", "retired to failed_permanently")] == ["13", "14"]

    async def deliver() -> list[str]:
        while await services.alerts.process_due():
            pass
        assert await services.outbox.run_due(limit=1000) == []
        return [f"{p.where}: {render_message(p.message)}" for p in chat.posts]

    posts = "\n".join(await deliver())
    assert "alerts: " in posts
    for said in (
        "Housekeeping changed 14 row(s) of workers",
        "LAST retry of job 12 in workers (issue 212)",
        "2 notices: Job 13 of workers failed after every retry (issue 213); Job 14",
        "Worker bms-4 unavailable: spawn_oom x3",
        "stuck claimed row(s) of workers released",
    ):
        assert said in posts, posts
    # a housekeeping notice says where it is from, and is not styled as Alertmanager's
    roots = [render_message(p.message) for p in chat.posts if p.where == "alerts"]
    assert len(roots) == 5 and all("From: queuebot's housekeeping" in r for r in roots)
    assert "Alertmanager" not in posts and "FIRING" not in posts
    assert "Housekeeping notice: LastRetry · queue workers" in posts
    seen = len(chat.posts)

    again = await services.housekeeper.run(actor=Actor.system("test"))
    assert again.changed == 0
    await deliver()
    assert len(chat.posts) == seen  # nothing changed: no summary, and bms-4 is told once

    clock.advance(minutes=31)  # no spawn_oom trip on bms-4 for a whole window
    later = await services.housekeeper.run(actor=Actor.system("test"))
    assert "available again (no spawn_oom trip for a window): bms-4" in "\n".join(later.lines())
    posts = "\n".join((await deliver())[seen:])
    assert "bms-4" in posts and "resolved" in posts.lower()
