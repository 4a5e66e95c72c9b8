"""Least privilege on PostgreSQL: serve and console run as a role that is not the owner of
queuebot's tables, granted by `queuebot db grant ROLE --apply`. As that role every way of
tampering with the audit trail is refused, and the append path still works."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from bot import cli
from bot.bootstrap import build_app
from bot.readiness import FRESH_FOR, Readiness
from services.config import load_config
from services.db import create_engine
from services.db.migrate import upgrade
from services.estate.demo import build_demo_estate
from services.estate.model import DeadFilter
from services.estate.ops import Selector
from services.incidents.model import Lead
from tests.conftest import _pg_conninfo, holds_demo
from tests.helpers.people import ALICE, BOB, DORA
from tests.integration import retention_support
from tests.integration.support import START, RecordingNotifier
from tests.integration.test_incident_timers import drill_runbook, say, until, write_config
from tests.kinds import ChangeKind

pytestmark = [pytest.mark.postgres, pytest.mark.demo_db]  # the demo estate built at START

KEY = "queuebot-test-audit-key-0123456789abcdef"
QUEUE_TABLES = ("queue_messages", "clip_jobs", "job_events", "video_assets", "dev_r_worker_queue")


@dataclass
class Roles:
    owner_url: str
    runtime_url: str
    role: str
    owner: AsyncEngine
    runtime: AsyncEngine


@pytest.fixture
async def roles(pg_url: str) -> AsyncIterator[Roles]:
    """queuebot's tables and the demo estate, owned by the test's superuser; a login role
    for the runtime (dropped afterwards)."""
    role = f"qb_runtime_{secrets.token_hex(4)}"
    with psycopg.connect(_pg_conninfo(pg_url), autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
    owner = create_engine(pg_url)
    runtime_url = make_url(pg_url).set(username=role, password=None)
    runtime = create_engine(runtime_url.render_as_string(hide_password=False))
    try:
        await upgrade(owner)
        if not holds_demo(pg_url):
            async with owner.begin() as conn:
                await build_demo_estate(conn, now=START)
        yield Roles(pg_url, runtime_url.render_as_string(hide_password=False), role, owner, runtime)
    finally:
        await runtime.dispose()
        await owner.dispose()
        with psycopg.connect(_pg_conninfo(pg_url), autocommit=True) as conn:
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE "{role}"')


async def grant(roles: Roles, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *argv: str) -> int:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("QUEUEBOT_CONFIG", raising=False)
    monkeypatch.setenv("QUEUEBOT_DATABASE_URL", roles.owner_url)
    return await cli.run(cli.parse(["db", "grant", *argv]))


async def refused(engine: AsyncEngine, statement: str, match: str) -> None:
    with pytest.raises(DBAPIError, match=match):
        async with engine.begin() as conn:
            await conn.execute(sa.text(statement))


async def test_the_runtime_role_appends_and_cannot_tamper(
    roles: Roles,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert await grant(roles, monkeypatch, tmp_path, roles.role, "--apply") == 0
    out = capsys.readouterr().out
    assert f"give role '{roles.role}' queuebot's runtime privileges" in out
    async with roles.owner.begin() as conn:  # the team grants on its own queue tables
        for table in QUEUE_TABLES:
            await conn.exec_driver_sql(
                f'GRANT SELECT, INSERT, UPDATE ON TABLE "{table}" TO "{roles.role}"'
            )
        await conn.exec_driver_sql(
            f'GRANT USAGE ON SEQUENCE "dev_r_worker_queue_id_seq" TO "{roles.role}"'
        )

    # serve's start as the runtime role: the schema check, the key check, the services
    config = load_config(
        environ={
            "QUEUEBOT_DATABASE_URL": roles.runtime_url,
            "QUEUEBOT_AUDIT_KEY": KEY,
        }
    )
    app = await build_app(config)
    try:
        dead = await app.router.deps.reads.list_dead(queue="clips", filters=DeadFilter(limit=2))
        await app.changes.request(
            kind=ChangeKind.REDRIVE,
            queue="clips",
            selector=Selector(ids=tuple(r.id for r in dead.rows)),
            reason="fixed upstream",
            actor=ALICE,
        )
        decision = await app.changes.approve(number=1, actor=BOB)
        assert decision.executed
        # the rest of what serve does: the delivery ledger, the scheduler's housekeeping
        event = await app.ledger.claim("slack:event:1")
        assert event is not None
        await app.ledger.finish(event)
        assert await app.ledger.heartbeat(event) is False  # done: nothing left to refresh
        assert await app.ledger.claim("slack:click:1", stale_after=timedelta(minutes=1))
        await app.outbox.run_due()
        await app.ledger.forget_older_than(timedelta(0))
        await app.scheduler.seed()
        assert await app.scheduler.run_due() > 0
    finally:
        await app.close()

    runtime = roles.runtime
    for statement, match in (
        ("UPDATE qb_audit_events SET reason = 'x' WHERE id = 1", "permission denied"),
        ("DELETE FROM qb_audit_events WHERE id = 3", "permission denied"),
        ("TRUNCATE qb_audit_events", "permission denied"),
        # a request's kept rows, whose digest the trail seals, are written once
        ("UPDATE qb_change_items SET image = '{}' WHERE request_id = 1", "permission denied"),
        ("DELETE FROM qb_change_items WHERE request_id = 1", "permission denied"),
        ("UPDATE qb_change_outcomes SET before = '{}'", "permission denied"),
        ("DELETE FROM qb_change_outcomes", "permission denied"),
        ("TRUNCATE qb_audit_head", "permission denied"),
        (
            "ALTER TABLE qb_audit_events DISABLE TRIGGER qb_audit_events_append_only",
            "must be owner",
        ),
        ("ALTER TABLE qb_audit_head DISABLE TRIGGER USER", "must be owner"),
        ("DROP TRIGGER qb_audit_head_guard ON qb_audit_head", "must be owner"),
        ("DELETE FROM qb_audit_head", "permission denied"),
        ("UPDATE qb_audit_head SET id = 2", "permission denied"),
        (  # repoint the head at an earlier event, as after deleting the newest
            "UPDATE qb_audit_head SET last_id = 1, "
            "last_hash = (SELECT hash FROM qb_audit_events WHERE id = 1)",
            "only moves forward",
        ),
        ("UPDATE qb_audit_head SET last_id = 99", "must name an event"),
        (  # an event that does not follow the head
            "INSERT INTO qb_audit_events (occurred_at, action, actor_platform, "
            "actor_account, details, prev_hash, hash, scheme) VALUES (now(), 'x', 'x', 'x', "
            "'{}', repeat('0', 64), repeat('f', 64), 'sha256')",
            "must follow the head",
        ),
        # a request's row moves on; what was asked, by whom and why stays
        ("UPDATE qb_change_requests SET reason = 'x'", "permission denied"),
        ("UPDATE qb_change_requests SET requester_person = 'x'", "permission denied"),
    ):
        if match is None:
            async with runtime.begin() as conn:
                await conn.execute(sa.text(statement))
            continue
        await refused(runtime, statement, match)

    # a temporary table of the same name does not stand in for the events
    with pytest.raises(DBAPIError, match="must name an event"):
        async with runtime.begin() as conn:
            await conn.execute(sa.text("CREATE TEMP TABLE qb_audit_events (id bigint, hash text)"))
            await conn.execute(sa.text("INSERT INTO qb_audit_events VALUES (99, repeat('e', 64))"))
            await conn.execute(
                sa.text("UPDATE qb_audit_head SET last_id = 99, last_hash = repeat('e', 64)")
            )

    # the owner cannot truncate either, while the triggers stand
    await refused(roles.owner, "TRUNCATE qb_audit_events, qb_audit_head", "TRUNCATE refused")

    monkeypatch.setenv("QUEUEBOT_DATABASE_URL", roles.runtime_url)
    monkeypatch.setenv("QUEUEBOT_AUDIT_KEY", KEY)
    capsys.readouterr()
    assert await cli.run(cli.parse(["audit", "verify"])) == 0
    assert "audit trail intact: 3 event(s) verified (3 keyed, 0 unkeyed)" in capsys.readouterr().out


async def test_grant_refuses_roles_that_could_undo_the_rules(
    roles: Roles,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with psycopg.connect(_pg_conninfo(roles.owner_url), autocommit=True) as conn:
        owner = conn.execute(
            "SELECT tableowner FROM pg_tables WHERE tablename = %s", ("qb_audit_events",)
        ).fetchone()
    assert owner is not None
    assert await grant(roles, monkeypatch, tmp_path, owner[0], "--apply") == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a superuser" in err
    assert await grant(roles, monkeypatch, tmp_path, "qb_nobody_here", "--apply") == 4
    assert "role 'qb_nobody_here' does not exist" in capsys.readouterr().err

    member = f"qb_member_{secrets.token_hex(4)}"
    with psycopg.connect(_pg_conninfo(roles.owner_url), autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{member}" IN ROLE "{roles.role}"')
        conn.execute(f'ALTER TABLE qb_audit_events OWNER TO "{roles.role}"')
    try:
        assert await grant(roles, monkeypatch, tmp_path, member, "--apply") == 4
        assert "or a member of it" in capsys.readouterr().err
    finally:
        with psycopg.connect(_pg_conninfo(roles.owner_url), autocommit=True) as conn:
            conn.execute(f'ALTER TABLE qb_audit_events OWNER TO "{owner[0]}"')
            conn.execute(f'DROP ROLE "{member}"')


async def test_incident_work_as_the_runtime_role_and_what_it_can_still_rewrite(
    roles: Roles,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Declare, notify, steps, timers firing and resolve all work as the runtime role and
    verify intact. What the role cannot be refused for its normal work (an incident's or a
    communication's state, deleting from the schedule) `audit verify` names; the rest of
    those rows it cannot change at all."""
    assert await grant(roles, monkeypatch, tmp_path, roles.role, "--apply") == 0
    drill_runbook(tmp_path / "runbooks", "gd:drill", operators_ms=400, actors_ms=900_000)
    environ = {"QUEUEBOT_DATABASE_URL": roles.runtime_url, "QUEUEBOT_AUDIT_KEY": KEY}
    app = await build_app(
        load_config(write_config(tmp_path), environ=environ),
        notifier=RecordingNotifier(),
        announce=False,
    )

    async def escalations() -> int:
        async with roles.owner.connect() as conn:
            found = await conn.execute(
                sa.text("SELECT count(*) FROM qb_audit_events WHERE action = :a"),
                {"a": "incident.deadline_missed"},
            )
            return int(found.scalar_one())

    async def escalated() -> bool:
        await app.scheduler.run_due()
        return await escalations() == 1

    try:
        await say(app, '/incident declare gd:drill "jobs stopped" --queue workers')
        await say(app, "/incident notify actors --incident INC-1")
        await say(app, "/incident step dep:job-queue done --incident INC-1")
        # the operators' reminders and deadline come due on the real clock and fire
        await until(escalated, within=10, what="the operators' escalation")
        for step in ("v1", "v2", "v3"):
            await say(app, f'/incident step {step} done --incident INC-1 --result "seen"')
        assert "resolved" in await say(app, "/incident resolve INC-1")
        await say(app, '/incident declare gd:drill "again" --queue clips')  # stays open
        # its lead handed to alice: the lead columns are the runtime role's to move
        incidents = app.router.deps.incidents
        assert incidents is not None
        await incidents.hand_over(
            number=2,
            to=Lead("alice", "console", "alice"),
            expected=Lead("dora", "console", "dora"),
            actor=DORA,
        )
        await app.outbox.run_due()
    finally:
        await app.close()

    monkeypatch.setenv("QUEUEBOT_DATABASE_URL", roles.runtime_url)
    monkeypatch.setenv("QUEUEBOT_AUDIT_KEY", KEY)

    async def verified() -> tuple[int, str]:
        capsys.readouterr()
        code = await cli.run(cli.parse(["audit", "verify"]))
        out = capsys.readouterr()
        return code, out.out + out.err

    code, said = await verified()
    assert code == 0 and "2 incident(s) match theirs" in said, said

    runtime = roles.runtime
    for statement, match in (
        ("UPDATE qb_incidents SET summary = 'x'", "permission denied"),
        ("UPDATE qb_incidents SET declared_at = now()", "permission denied"),
        ("UPDATE qb_incident_obligations SET due_at = now()", "permission denied"),
        ("UPDATE qb_incident_obligations SET audience = 'x'", "permission denied"),
        ("UPDATE qb_incident_steps SET name = 'x'", "permission denied"),
        ("UPDATE qb_schedule SET kind = 'x'", "permission denied"),
        ("DELETE FROM qb_incidents", "permission denied"),
        ("DELETE FROM qb_incident_obligations", "permission denied"),
    ):
        await refused(runtime, statement, match)

    for tamper, undo, named in (
        (
            "UPDATE qb_incidents SET state = 'resolved' WHERE id = 2",
            "UPDATE qb_incidents SET state = 'open' WHERE id = 2",
            "qb_incidents row 2 (INC-2): state is 'resolved' but the trail says 'open' "
            "(no incident.resolved event)",
        ),
        (
            "UPDATE qb_incident_obligations SET state = 'met' WHERE incident_id = 2",
            "UPDATE qb_incident_obligations SET state = 'pending' WHERE incident_id = 2",
            "(INC-2, actors): state is 'met' but the trail says 'pending'",
        ),
        (  # the lead handed back in the table alone
            "UPDATE qb_incidents SET lead = 'dora', lead_account = 'dora' WHERE id = 2",
            "UPDATE qb_incidents SET lead = 'alice', lead_account = 'alice' WHERE id = 2",
            "qb_incidents row 2 (INC-2): lead is 'dora' but incident.lead_changed event ",
        ),
        (  # the scheduler deletes what it runs: the role keeps DELETE, verify counts
            "DELETE FROM qb_schedule WHERE kind LIKE 'incident.%'",
            None,
            "(INC-2, actors, due ",
        ),
    ):
        async with runtime.begin() as conn:
            await conn.execute(sa.text(tamper))
        code, said = await verified()
        assert code == 1 and named in said, said
        assert said.startswith(
            "audit trail BROKEN: the state tables do not match the audit trail: "
        )
        if undo is not None:
            async with runtime.begin() as conn:
                await conn.execute(sa.text(undo))
            assert (await verified())[0] == 0


async def test_readiness_sees_a_revoked_grant_and_a_renamed_column_at_its_interval(
    roles: Roles, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """/readyz's queue check is made afresh at its interval, not from the reflection
    commands keep: a SELECT revoked from the runtime role, or a column renamed, makes it
    not ready within the interval, naming the queue and what is missing; put back, ready."""
    assert await grant(roles, monkeypatch, tmp_path, roles.role, "--apply") == 0

    async def owner(*statements: str) -> None:
        async with roles.owner.begin() as conn:
            for statement in statements:
                await conn.exec_driver_sql(statement)

    who = f'"{roles.role}"'
    await owner(*(f'GRANT SELECT ON TABLE "{table}" TO {who}' for table in QUEUE_TABLES))
    app = await build_app(load_config(environ={"QUEUEBOT_DATABASE_URL": roles.runtime_url}))
    now = [0.0]
    readiness = Readiness(app, slack=None, clock=lambda: now[0])

    async def probe_after_the_interval() -> tuple[bool, dict[str, Any]]:
        now[0] += FRESH_FOR
        return await readiness.check()

    try:
        ready, body = await readiness.check()
        assert ready, body
        await app.router.deps.reads.list_dead(queue="workers", filters=DeadFilter(limit=1))

        await owner(f"REVOKE SELECT ON TABLE dev_r_worker_queue FROM {who}")
        ready, body = await probe_after_the_interval()
        assert not ready
        said = body["queues"]["workers"]
        assert said == (
            f"queue 'workers' (worker_queue): role '{roles.role}' lacks the SELECT privilege "
            "on table 'dev_r_worker_queue', so the queue cannot be read; the table's owner "
            f"grants it (GRANT SELECT ON dev_r_worker_queue TO {roles.role})"
        )
        assert body["queues"]["clips"] == "ok"
        assert body["problems"] == [said]

        # a grant of some columns only: the others are named
        await owner(f"GRANT SELECT (id, status) ON TABLE dev_r_worker_queue TO {who}")
        ready, body = await probe_after_the_interval()
        assert not ready
        assert "lacks the SELECT privilege on column(s) " in body["queues"]["workers"]
        assert "failure_reason" in body["queues"]["workers"]
        assert " id," not in body["queues"]["workers"]

        await owner(f"GRANT SELECT ON TABLE dev_r_worker_queue TO {who}")
        ready, body = await probe_after_the_interval()
        assert ready, body

        await owner("ALTER TABLE clip_jobs RENAME COLUMN status TO state")
        ready, body = await probe_after_the_interval()
        assert not ready
        assert (
            "queue 'clips' (message_job): table 'clip_jobs' lacks column(s) status"
            in (body["queues"]["clips"])
        )
        await owner("ALTER TABLE clip_jobs RENAME COLUMN state TO status")
        ready, body = await probe_after_the_interval()
        assert ready, body
    finally:
        await app.close()


async def test_db_prune_runs_as_the_runtime_role(
    roles: Roles,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The runtime role's grants cover a prune: DELETE on the residue's tables and the
    audit append; no grant is added for it."""
    assert await grant(roles, monkeypatch, tmp_path, roles.role, "--apply") == 0
    await retention_support.seed(roles.owner, datetime.now(UTC))
    before = await retention_support.keys(roles.owner)
    capsys.readouterr()
    monkeypatch.setenv("QUEUEBOT_DATABASE_URL", roles.runtime_url)
    assert await cli.run(cli.parse(["db", "prune", "--older-than", "30d"])) == 0, (
        capsys.readouterr().err
    )
    assert "4 audit event(s) db.pruned" in capsys.readouterr().out  # one per table
    after = await retention_support.keys(roles.owner)
    gone = {t: len(before[t]) - len(after[t]) for t in before}
    assert gone == retention_support.GONE
    assert await cli.run(cli.parse(["audit", "verify"])) == 0, capsys.readouterr().err
    assert "audit trail intact: 4 event(s) verified" in capsys.readouterr().out
