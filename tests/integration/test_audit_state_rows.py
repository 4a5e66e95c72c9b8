"""The rows queuebot's runtime may change for its normal work (an incident's state, a
communication's state, the incident timers in the schedule, a change request's row)
against the audit events: `audit verify` holds each to what the trail says happened and
names the row that says otherwise; each incident event posts the trail's head to the
audit channel, as each executed change does."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import cast

import pytest
import sqlalchemy as sa
from pydantic import SecretStr

from bot import cli
from services.audit import Anchor, AuditTrail, Verification
from services.db.tables import ScheduledItem
from services.estate.model import DeadFilter
from services.estate.ops import Selector
from tests.helpers.people import ALICE, DORA
from tests.integration.support import RecordingNotifier, Shop, build_services
from tests.kinds import ChangeKind

KEY = "queuebot-test-audit-key-0123456789abcdef"
SCENARIO = "gd:queue-loss"  # operators told within 5 minutes, actors within 15
SCHEDULE = cast(sa.Table, ScheduledItem.__table__)
BROKEN = "audit trail BROKEN: the state tables do not match the audit trail: "


def anchors_posted(chat: RecordingNotifier) -> list[str]:
    return [p.message.summary.split()[3] for p in chat.posts if p.where == "audit"]


@pytest.fixture
def chat() -> RecordingNotifier:
    return RecordingNotifier()


@pytest.fixture
def at_work(shop: Shop, chat: RecordingNotifier) -> Shop:
    """The shop on a keyed trail, posting anchors to the audit channel."""
    shop.services = build_services(
        shop.engine,
        shop.estate,
        shop.clock,
        chat,
        audit=AuditTrail(key=SecretStr(KEY)),
        audit_channel=True,
    )
    shop.changes = shop.services.changes
    return shop


async def verify(shop: Shop, *anchors: Anchor) -> Verification:
    """`audit verify` at the shop's time (its timers are judged then)."""
    async with shop.engine.connect() as conn:
        return await shop.services.audit.verify(conn, anchors=anchors, now=shop.clock.now)


async def anchored(shop: Shop, chat: RecordingNotifier) -> str:
    """The outbox delivered; the newest anchor posted, which is the trail's head."""
    await shop.services.outbox.run_due()
    async with shop.engine.connect() as conn:
        head = await shop.services.audit.head(conn)
    posted = anchors_posted(chat)
    assert posted and posted[-1] == str(head)
    return posted[-1]


async def cli_verify(
    db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    monkeypatch.delenv("QUEUEBOT_CONFIG", raising=False)
    monkeypatch.setenv("QUEUEBOT_DATABASE_URL", db_url)
    monkeypatch.setenv("QUEUEBOT_AUDIT_KEY", KEY)
    capsys.readouterr()
    code = await cli.run(cli.parse(["audit", "verify"]))
    out = capsys.readouterr()
    return code, out.out, out.err


async def test_incident_work_verifies_and_each_incident_event_is_anchored(
    at_work: Shop, chat: RecordingNotifier
) -> None:
    shop, desk = at_work, at_work.services.incidents
    posted: list[str] = []
    await desk.declare(
        scenario="gd:queue-loss", summary="jobs stopped", actor=DORA, queue="workers"
    )
    posted.append(await anchored(shop, chat))
    await desk.notify(number=1, audience="actors", text="we are on it", actor=DORA)
    await shop.services.outbox.run_due()  # delivered: the actors are told
    posted.append(await anchored(shop, chat))
    await desk.step_done(number=1, step="job-queue", actor=DORA)
    posted.append(await anchored(shop, chat))
    assert (await verify(shop)).ok

    # the operators' first reminder (at half their 5 minutes) fires and leaves no event
    shop.clock.advance(minutes=3)
    assert await shop.scheduler.run_due() == 1
    assert (await verify(shop)).ok
    # then their deadline: missed, escalated, anchored
    shop.clock.advance(minutes=2)
    assert await shop.scheduler.run_due() == 2
    posted.append(await anchored(shop, chat))
    assert (await verify(shop)).ok

    for step in ("v1", "v2", "v3"):
        await desk.step_done(number=1, step=step, actor=DORA, result="checked")
    await desk.resolve(number=1, actor=DORA)
    posted.append(await anchored(shop, chat))
    await desk.declare(scenario=SCENARIO, summary="again", actor=DORA, queue="clips")
    posted.append(await anchored(shop, chat))

    assert len(set(posted)) == len(posted)  # a new anchor after each of them
    result = await verify(shop, *(Anchor.parse(a) for a in posted))
    assert result.ok, result.problem
    assert (result.incidents, result.anchors) == (2, len(posted))


async def test_each_rewrite_of_an_incident_or_request_row_is_named(
    at_work: Shop,
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With the tables' own login, each row is changed the way someone hiding what
    happened would, `audit verify` exits 1 naming it, and with the row put back the
    trail holds again."""
    shop = at_work
    monkeypatch.chdir(tmp_path)
    dead = await shop.reads.list_dead(queue="clips", filters=DeadFilter(limit=2))
    await shop.changes.request(
        kind=ChangeKind.REDRIVE,
        queue="clips",
        selector=Selector(ids=tuple(r.id for r in dead.rows)),
        reason="fixed upstream",
        actor=ALICE,
    )
    desk = shop.services.incidents
    await desk.declare(
        scenario="gd:queue-loss", summary="jobs stopped", actor=DORA, queue="workers"
    )
    await desk.notify(number=1, audience="actors", text="we are on it", actor=DORA)
    for _ in range(3):  # the checklist, then the message: delivered, the actors are told
        await shop.services.outbox.run_due()
    assert (await verify(shop)).ok
    code, out, _ = await cli_verify(db_url, monkeypatch, capsys)
    assert code == 0 and "1 incident(s) match theirs" in out
    operators_due = (shop.clock.now + timedelta(minutes=5)).isoformat()
    pending = "the trail says it is pending (no incident.notified, deadline_missed or resolved)"

    async def run(statement: str | sa.Executable) -> None:
        async with shop.engine.begin() as conn:
            await conn.execute(sa.text(statement) if isinstance(statement, str) else statement)

    async def named(problem: str, *, on_the_command_line: bool = True) -> None:
        """The first row verify names (more may follow)."""
        result = await verify(shop)
        assert result.first_bad is None and result.problem is not None
        assert result.problem.startswith(BROKEN.split(": ", 1)[1] + problem), result.problem
        if on_the_command_line:
            code, out, err = await cli_verify(db_url, monkeypatch, capsys)
            assert (code, out) == (1, "")
            assert err.startswith(BROKEN + problem)

    # an incident called resolved that nobody resolved
    await run("UPDATE qb_incidents SET state = 'resolved' WHERE id = 1")
    await named(
        "qb_incidents row 1 (INC-1): state is 'resolved' but the trail says 'open' "
        "(no incident.resolved event)"
    )
    await run("UPDATE qb_incidents SET state = 'open' WHERE id = 1")

    # redrives let into a queue still being restored: its hold lifted with no step done
    await run("UPDATE qb_incidents SET blocks_redrive = false WHERE id = 1")
    await named(
        "qb_incidents row 1 (INC-1): blocks_redrive is False but the trail says True "
        "(no incident.restore_done of dep:job-queue)"
    )
    await run("UPDATE qb_incidents SET blocks_redrive = true WHERE id = 1")
    assert (await verify(shop)).ok

    # a communication called met that nobody sent
    await run(
        "UPDATE qb_incident_obligations SET state = 'met' WHERE incident_id = 1 "
        "AND audience = 'operators'"
    )
    await named(
        "qb_incident_obligations row 2 (INC-1, operators): state is 'met' but the trail says "
        "'pending' (no incident.notified or incident.deadline_missed event)"
    )
    # ... and one sent, called missed
    await run("UPDATE qb_incident_obligations SET state = 'pending' WHERE incident_id = 1")
    await named(
        "qb_incident_obligations row 1 (INC-1, actors): state is 'pending' but the trail says "
        "'met' (incident.notified event 3)"
    )
    await run("UPDATE qb_incident_obligations SET state = 'met' WHERE id = 1")

    # the escalation silently cancelled, and put off
    async with shop.engine.connect() as conn:
        timers = [dict(r) for r in (await conn.execute(sa.select(SCHEDULE))).mappings()]
    await run("DELETE FROM qb_schedule WHERE kind LIKE 'incident.%'")
    await named(
        f"qb_schedule has no incident.deadline 2 (INC-1, operators, due {operators_due}): "
        f"{pending}, so its escalation would never come"
    )
    async with shop.engine.begin() as conn:
        await conn.execute(SCHEDULE.insert(), timers)
    assert (await verify(shop)).ok
    later = shop.clock.now + timedelta(days=365)
    deadlines = SCHEDULE.update().where(SCHEDULE.c.kind == "incident.deadline")
    await run(deadlines.values(due_at=later))
    await named(
        f"qb_schedule's incident.deadline 2 (INC-1, operators) is due {later.isoformat()} but "
        f"the trail says {operators_due}"
    )
    await run(deadlines.values(attempts=3))
    await named(
        f"qb_schedule's incident.deadline 2 (INC-1, operators) is due {later.isoformat()} but "
        f"the trail says {operators_due}, later than a retry (3) moves it"
    )
    await run(deadlines.values(due_at=datetime.fromisoformat(operators_due), attempts=0))
    assert (await verify(shop)).ok
    # a reminder still to come cannot have been sent (judged at the shop's time: the
    # command line judges at the wall clock's, days after this shop's reminders)
    await run("DELETE FROM qb_schedule WHERE kind = 'incident.remind' AND subject = '2:80'")
    await named(
        "qb_schedule has no incident.remind 2:80 (INC-1, operators, due "
        f"{(shop.clock.now + timedelta(minutes=4)).isoformat()}): its time has not come, so it "
        "cannot have been sent",
        on_the_command_line=False,
    )
    async with shop.engine.begin() as conn:
        await conn.execute(SCHEDULE.insert(), [t for t in timers if t["subject"] == "2:80"])
    # one whose time has passed may have been sent, if the count of reminders sent says so
    shop.clock.advance(minutes=3)
    await run("DELETE FROM qb_schedule WHERE kind = 'incident.remind' AND subject = '2:50'")
    await named(
        "qb_schedule has no incident.remind 2:50 (INC-1, operators): 1 reminder(s) gone but "
        "qb_incident_obligations row 2 says 0 sent",
        on_the_command_line=False,
    )
    await run("UPDATE qb_incident_obligations SET reminders = 1 WHERE id = 2")
    assert (await verify(shop)).ok

    # a change request's reason rewritten
    await run("UPDATE qb_change_requests SET reason = 'nothing to see' WHERE id = 1")
    await named(
        "qb_change_requests row 1 (CR-1): reason is 'nothing to see' but its change.requested "
        "event 1 says 'fixed upstream'"
    )
    await run("UPDATE qb_change_requests SET reason = 'fixed upstream' WHERE id = 1")
    assert (await verify(shop)).ok
