"""The board as each person reads it, on SQLite and PostgreSQL: the requests waiting for
their approval (not their own, not one they approved, none past its expiry), their own,
each active plan's bar of waves and its last halt, each open incident's audiences told,
due or missed with its lead, and each queue's dead letters against the count written
down an hour before, never a trend where no count was written then."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from bot.render_text import render_message
from services.board import BoardReader, board_message
from services.config import ApprovalConfig, QueueConfig, default_queues
from services.estate.estate import Estate
from services.estate.model import DeadFilter
from services.estate.ops import Selector
from services.people import Person
from services.reads import samples
from services.reads.gate import ReadGate
from services.reads.service import QueueReads
from tests.helpers.people import (
    ALICE,
    ALICE_APPROVER,
    BOB,
    BOB_APPROVER,
    DORA,
    DUTY_OFFICER,
)
from tests.integration.support import Shop, add_dead_letters, simulated_worker
from tests.integration.test_incident_timers import deliver
from tests.integration.test_plans import ERROR, flat_history, request_plan, tick
from tests.kinds import ChangeKind

pytestmark = pytest.mark.usefixtures("trail_holds")

DORA_OFFICER = Person("dora", DUTY_OFFICER)  # no approver role


def reader(shop: Shop) -> BoardReader:
    return BoardReader(shop.engine, shop.reads, shop.changes.kinds, shop.clock)


async def board_text(shop: Shop, person: Person | None) -> str:
    return render_message(board_message(await reader(shop).board(person=person)))


def section(text: str, title: str) -> str:
    """The lines of the board's section whose heading starts with ``title``."""
    return text.split(f"== {title}", 1)[1].split("\n== ", 1)[0]


async def dead_ids(shop: Shop, queue: str, count: int, skip: int = 0) -> tuple[str, ...]:
    found = await shop.reads.list_dead(queue=queue, filters=DeadFilter(limit=skip + count))
    return tuple(r.id for r in found.rows[skip:])


async def test_each_person_sees_what_waits_for_their_approval_and_their_own(shop: Shop) -> None:
    changes = shop.changes
    one = await changes.request(
        kind=ChangeKind.REDRIVE,
        queue="clips",
        selector=Selector(ids=await dead_ids(shop, "clips", 2)),
        reason="ffmpeg fixed",
        actor=ALICE,
    )
    two = await changes.request(
        kind=ChangeKind.REQUEUE,
        queue="workers",
        selector=Selector(ids=await dead_ids(shop, "workers", 1)),
        reason="allowlist fixed",
        actor=BOB,
    )
    # three rows where more than one is large: two approvals, bob's given
    strict = shop.with_approval(ApprovalConfig(large_change_rows=1))
    three = await strict.request(
        kind=ChangeKind.REDRIVE,
        queue="clips",
        selector=Selector(ids=await dead_ids(shop, "clips", 3, skip=2)),
        reason="second batch",
        actor=ALICE,
    )
    assert three.approvals_required == 2
    await strict.approve(number=three.number, actor=BOB)
    four = await changes.request(
        kind=ChangeKind.REDRIVE,
        queue="clips",
        selector=Selector(ids=await dead_ids(shop, "clips", 1, skip=5)),
        reason="past its time",
        actor=ALICE,
    )
    async with shop.engine.begin() as conn:  # expired, and not marked yet
        await conn.execute(
            sa.text("UPDATE qb_change_requests SET expires_at = :t WHERE id = :n"),
            {"t": shop.clock.now - timedelta(minutes=1), "n": four.number},
        )

    bob = await reader(shop).board(person=BOB_APPROVER)
    assert [r.ref for r in bob.waiting] == [one.ref]  # not his own, not the one he approved
    assert [r.ref for r in bob.own] == [two.ref]
    alice = await reader(shop).board(person=ALICE_APPROVER)
    assert [r.ref for r in alice.waiting] == [two.ref]
    assert [r.ref for r in alice.own] == [one.ref, three.ref]
    anyone = await reader(shop).board(person=None)
    assert [r.ref for r in anyone.waiting] == [one.ref, two.ref, three.ref]
    assert anyone.own == ()

    text = await board_text(shop, BOB_APPROVER)
    waiting = section(text, "Waiting for your approval (1)")
    assert "CR-1: redrive 2 row(s) in queue clips. Asked by alice; 0 of 1 approval(s)" in waiting
    assert "[Approve CR-1] /queue approve CR-1  [Reject CR-1] /queue reject CR-1" in waiting
    assert "CR-2" in section(text, "Your requests waiting for approval (1)")
    mine = section(await board_text(shop, ALICE_APPROVER), "Your requests")
    assert "CR-3" in mine and "1 of 2" in mine and "CR-4" not in mine

    dora = await board_text(shop, DORA_OFFICER)
    assert "You do not hold the approver role" in section(dora, "Waiting for your approval (0)")
    assert "Approve" not in dora


async def test_a_queues_trend_is_against_the_count_of_an_hour_before(shop: Shop) -> None:
    now = shop.clock.now
    clips = shop.estate.profile("clips")
    dead = (await shop.reads.dead_letters(["clips"])).counts["clips"]

    def clips_row(text: str) -> str:
        return next(line for line in text.splitlines() if line.startswith("clips "))

    assert f"{dead:,} (no count from an hour ago)" in clips_row(await board_text(shop, None))
    async with shop.engine.begin() as conn:  # too old to stand for an hour ago
        await samples.record(conn, profile=clips, now=now - timedelta(hours=2))
    assert "no count from an hour ago" in clips_row(await board_text(shop, None))
    async with shop.engine.begin() as conn:  # younger than an hour: not yet one either
        await samples.record(conn, profile=clips, now=now - timedelta(minutes=50))
    assert "no count from an hour ago" in clips_row(await board_text(shop, None))

    async with shop.engine.begin() as conn:
        await samples.record(conn, profile=clips, now=now - timedelta(minutes=61))
    assert f"{dead:,} (no change in 1 h 1 min)" in clips_row(await board_text(shop, None))
    await add_dead_letters(shop.engine, count=5, error=ERROR)
    assert f"{dead + 5:,} (+5 in 1 h 1 min)" in clips_row(await board_text(shop, None))
    async with shop.engine.begin() as conn:  # the newest count at least an hour old counts
        await samples.record(conn, profile=clips, now=now - timedelta(hours=1))
    assert f"{dead + 5:,} (no change in 1 h)" in clips_row(await board_text(shop, None))


async def test_plans_bars_move_and_halts_and_incidents_deadlines_show(shop: Shop) -> None:
    await add_dead_letters(shop.engine, count=60, error=ERROR)
    await flat_history(shop)
    approved = (await shop.changes.approve(number=await request_plan(shop), actor=BOB)).view
    assert approved.result is not None and approved.result.plan is not None
    plan = approved.result.plan
    first = section(await board_text(shop, None), "Active plans (1)")
    assert f"P-{plan} clips, running: ▱▱▱▱ 0/4 waves, 5/60 jobs redriven" in first
    assert "now: sample (5 jobs) running, wave 1 of 3 (10 jobs) next" in first

    await simulated_worker(shop.engine, now=shop.clock.now)
    await tick(shop)
    moved = section(await board_text(shop, None), "Active plans (1)")
    assert f"P-{plan} clips, running: ▰▱▱▱ 1/4 waves, 15/60 jobs redriven; 5 succeeded" in moved

    await shop.plans.halt(number=plan, actor=BOB, reason="error rate climbing")
    halted = section(await board_text(shop, None), "Active plans (1)")
    assert f"P-{plan} clips, HALTED: ▰▱▱▱ 1/4 waves" in halted
    assert f"last halt {shop.clock.now:%H:%M} UTC, by bob: error rate climbing" in halted

    incidents = shop.services.incidents
    declared = await incidents.declare(
        scenario="gd:queue-loss", summary="jobs stopped", actor=DORA, queue="workers"
    )
    owed = {o.audience: o for o in declared.incident.obligations}
    line = section(await board_text(shop, None), "Open incidents (1)")
    assert "INC-1 (workers) jobs stopped: lead dora" in line
    assert "operators due in 5 min" in line and "actors due in 15 min" in line

    await incidents.notify(number=1, audience="operators", text="we are on it", actor=DORA)
    queued = section(await board_text(shop, None), "Open incidents (1)")
    assert "operators due in 5 min" in queued  # queued, not delivered: not told yet
    await deliver(shop.services.outbox)
    told_at = shop.clock.now
    told = section(await board_text(shop, None), "Open incidents (1)")
    assert f"operators told at {told_at:%H:%M} UTC" in told

    shop.clock.now = owed["actors"].due_at + timedelta(seconds=1)  # the timer not run yet
    late = section(await board_text(shop, None), "Open incidents (1)")
    assert f"actors missed (due {owed['actors'].due_at:%H:%M} UTC)" in late
    assert f"operators told at {told_at:%H:%M} UTC" in late


async def test_a_queue_that_cannot_be_read_is_said_to_be_and_the_others_counted(
    shop: Shop,
) -> None:
    queues = {"ghost": QueueConfig(profile="worker_queue", table="no_such_table")}
    estate = Estate(engine=shop.engine, queues={**queues, **default_queues()}, clock=shop.clock)
    reads = QueueReads(estate, gate=ReadGate(fresh_for=0.0))
    board = await BoardReader(shop.engine, reads, shop.changes.kinds, shop.clock).board(person=None)
    ghost, *others = board.queues
    assert ghost.now is None and ghost.unread
    assert [q.queue for q in others] == list(default_queues())
    assert all(q.now is not None and q.now > 0 for q in others)
    text = render_message(board_message(board))
    assert "ghost    could not be read: " in text


async def test_a_table_gone_since_it_was_read_fails_only_its_own_count(shop: Shop) -> None:
    async with shop.engine.begin() as conn:
        await conn.execute(sa.text("CREATE TABLE workers_copy AS SELECT * FROM dev_r_worker_queue"))
    queues = {**default_queues(), "copy": QueueConfig(profile="worker_queue", table="workers_copy")}
    estate = Estate(engine=shop.engine, queues=queues, clock=shop.clock)
    reads = QueueReads(estate, gate=ReadGate(fresh_for=0.0))
    first = await reads.dead_letters(list(queues))
    assert first.counts["copy"] == first.counts["workers"] > 0 and not first.unread
    async with shop.engine.begin() as conn:  # its reflection is kept: the count itself fails
        await conn.execute(sa.text("DROP TABLE workers_copy"))
    after = await reads.dead_letters(list(queues))
    assert after.counts == {q: n for q, n in first.counts.items() if q != "copy"}
    assert "workers_copy" in after.unread["copy"]
