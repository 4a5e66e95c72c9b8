"""A halted plan keeps counting, and a rollback says only what it returned: the team table
of issue 26 (``jobs(id, state, last_error, enqueued_at, locked_at, attempts, kind)``,
no failure_reason column), through the command router as a person in chat sees it, on
SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa

from bot.boundary import answer
from bot.render_text import render_message
from commands.context import Invocation
from commands.deps import Deps
from commands.reply import Reply
from commands.router import Router
from services.config import AccessConfig, ApprovalConfig
from services.people import Directory, Person
from services.plans.model import PlanState, WaveOutcome
from services.reads.gate import ReadGate
from services.reads.service import QueueReads
from tests.helpers.people import ALICE_APPROVER, BOB_APPROVER, DORA_APPROVER
from tests.integration.support import START, RecordingNotifier, build_services
from tests.integration.team_support import SMTP, Team, add_worker_rows, dead_letters

SMTP_AGAIN = "TimeoutError: smtp relay mail-3.internal:587 did not answer within 45 s"


@pytest.fixture(autouse=True)
async def trail_holds(team: Team) -> AsyncIterator[None]:
    """After every test here, the audit trail holds, cross-checked with the state tables."""
    yield
    async with team.engine.connect() as conn:
        result = await team.services.audit.verify(conn)
    assert result.ok, result.problem


def router_over(team: Team) -> Router:
    return Router(
        Deps(
            reads=QueueReads(team.estate, gate=ReadGate(fresh_for=0.0)),
            changes=team.services.changes,
            plans=team.services.plans,
            directory=Directory([ALICE_APPROVER, BOB_APPROVER, DORA_APPROVER]),
            access=AccessConfig(),
        )
    )


async def say(team: Team, line: str, person: Person = ALICE_APPROVER) -> str:
    """A line typed in chat; the reply as the console renders it."""
    inv = Invocation(person=person, platform="console", account=person.name, channel="ops")
    reply = await answer(router_over(team).handle_line(line, inv), correlation_id="t", where="t")
    assert isinstance(reply, Reply)
    assert not reply.error, render_message(reply.message)
    return render_message(reply.message)


async def eight_dead(team: Team) -> list[str]:
    return await dead_letters(team, 8)


async def worker(team: Team, sql: str, **params: object) -> int:
    """The team's worker, by hand: one UPDATE of the jobs table; the rows it changed."""
    async with team.engine.begin() as conn:
        done = await conn.execute(sa.text(sql), {"n": team.clock.now, **params})
        return int(done.rowcount)


async def finish_queued(team: Team, limit: int = 100) -> int:
    return await worker(
        team,
        "UPDATE jobs SET state = 'done', locked_at = :n WHERE id IN (SELECT id FROM jobs "
        "WHERE state = 'queued' ORDER BY id LIMIT :k)",
        k=limit,
    )


async def claim_queued(team: Team, limit: int) -> int:
    return await worker(
        team,
        "UPDATE jobs SET state = 'running', locked_at = :n WHERE id IN (SELECT id FROM jobs "
        "WHERE state = 'queued' ORDER BY id LIMIT :k)",
        k=limit,
    )


async def states(team: Team) -> dict[str, int]:
    async with team.engine.connect() as conn:
        rows = await conn.execute(sa.text("SELECT state, count(*) FROM jobs GROUP BY state"))
        return {str(s): int(n) for s, n in rows.all()}


async def tick(team: Team, seconds: float = 5) -> None:
    team.clock.advance(seconds=seconds)
    await team.services.scheduler.run_due()


async def plan_in_last_wave(team: Team) -> None:
    """P-1 over the eight dead rows, a sample of one, then wave 1 of seven: the sample
    succeeded and wave 1 is out (its seven rows queued)."""
    await eight_dead(team)
    asked = await say(team, '/queue redrive --all --sample 1 --reason "smtp relay fixed"')
    assert "CR-1" in asked
    await say(team, "/queue approve CR-1", BOB_APPROVER)
    assert await finish_queued(team) == 1
    await tick(team)
    view = await team.services.plans.view(number=1)
    assert [w.size for w in view.waves] == [1, 7] and view.schedule == [1, 7]
    assert await states(team) == {"done": 1, "queued": 7}


async def test_a_halted_plan_keeps_counting_what_it_had_redriven(team: Team) -> None:
    await plan_in_last_wave(team)
    halted = await say(team, '/queue halt P-1 --reason "checking the relay"')
    assert "P-1 halted by alice: checking the relay" in halted

    assert await finish_queued(team) == 7  # the worker finishes wave 1 all the same
    await tick(team)
    view = await team.services.plans.view(number=1)
    assert view.state is PlanState.HALTED
    assert (view.succeeded, view.redead) == (8, 0)
    wave1 = view.waves[1]
    assert (wave1.outcome, wave1.succeeded, wave1.finished_at) == (
        WaveOutcome.OK,
        7,
        team.clock.now,
    )
    shown = await say(team, "/queue plan P-1")
    assert "8/8 succeeded" in shown and "1/8 succeeded" not in shown
    row = next(line for line in shown.splitlines() if line.startswith("wave 1 "))
    assert row.split()[-1] == "ok" and row.split()[5] == "7"  # its ok column
    assert any("P-1 wave 1 finished: 7 succeeded, 0 dead again - ok" in t for t in posted(team))
    await tick(team, 60)  # nothing more to settle: no more ticks, no new wave
    assert await states(team) == {"done": 8}


def posted(team: Team) -> list[str]:
    notifier = team.services.publisher.notifier
    assert isinstance(notifier, RecordingNotifier)
    return notifier.texts()


async def test_a_rollback_states_and_returns_only_the_rows_still_unclaimed(team: Team) -> None:
    await plan_in_last_wave(team)
    await say(team, '/queue halt P-1 --reason "checking the relay"')
    assert await finish_queued(team, 4) == 4
    assert await claim_queued(team, 1) == 1  # a worker holds one; two are still queued
    await tick(team)
    assert (await team.services.plans.view(number=1)).succeeded == 5

    asked = await say(team, '/queue rollback P-1 --reason "relay still flaky"')
    assert "roll back plan P-1 (2 unclaimed row(s) now)" in asked
    assert "up to" not in asked

    assert await claim_queued(team, 1) == 1  # one more is claimed before the approval
    done = await say(team, "/queue approve CR-2", BOB_APPROVER)
    assert "1 unclaimed row(s) returned to the dead letters" in done
    view = await team.services.plans.view(number=1)
    assert view.state is PlanState.ROLLED_BACK
    assert (view.succeeded, view.rolled_back) == (5, 1)
    wave1 = view.waves[1]
    assert (wave1.succeeded, wave1.rolled_back, wave1.outcome) == (4, 1, WaveOutcome.ROLLED_BACK)
    assert "2 claimed by a worker were left alone" in (view.note or "")
    assert await states(team) == {"done": 5, "running": 2, "dead": 1}

    # what was left alone is still counted when it finishes
    await worker(team, "UPDATE jobs SET state = 'done' WHERE state = 'running'")
    await tick(team)
    assert (await team.services.plans.view(number=1)).succeeded == 7
    assert "7/8 succeeded" in await say(team, "/queue plan P-1")


async def test_a_wave_whose_rows_all_finished_is_not_called_rolled_back(team: Team) -> None:
    await plan_in_last_wave(team)
    await say(team, "/queue halt P-1")
    await claim_queued(team, 7)
    asked = await say(team, '/queue rollback P-1 --reason "relay still flaky"')
    assert "(0 unclaimed row(s) now)" not in asked  # 0 now: closed at once instead
    assert "P-1 closed" in asked
    assert "nothing to roll back, no row of it is still unclaimed" in asked
    view = await team.services.plans.view(number=1)
    assert view.state is PlanState.CLOSED
    await worker(team, "UPDATE jobs SET state = 'done' WHERE state = 'running'")
    await tick(team)
    view = await team.services.plans.view(number=1)
    assert view.succeeded == 8 and view.waves[1].outcome is WaveOutcome.OK
    shown = await say(team, "/queue plan P-1")
    row = next(line for line in shown.splitlines() if line.startswith("wave 1 "))
    assert row.split()[-1] == "ok" and "rolled back" not in row
    assert "now: closed after wave 1 of 1 (7 jobs)" in shown


async def test_an_approved_rollback_with_nothing_left_reports_none_returned(team: Team) -> None:
    await plan_in_last_wave(team)
    await say(team, "/queue halt P-1")
    await say(team, '/queue rollback P-1 --reason "relay still flaky"')
    assert await finish_queued(team) == 7  # all finished before the approval
    done = await say(team, "/queue approve CR-2", BOB_APPROVER)
    assert "0 unclaimed row(s) returned to the dead letters" in done
    view = await team.services.plans.view(number=1)
    assert (view.succeeded, view.rolled_back) == (8, 0)
    assert [w.outcome for w in view.waves] == [WaveOutcome.OK, WaveOutcome.OK]
    assert "8/8 succeeded" in await say(team, "/queue plan P-1")


async def test_a_halted_plan_with_nothing_unclaimed_is_closed_without_approval(
    team: Team,
) -> None:
    await plan_in_last_wave(team)
    await say(team, "/queue halt P-1")
    await finish_queued(team)
    await tick(team)
    closed = await say(team, '/queue rollback P-1 --reason "all done anyway"')
    assert "P-1 closed by alice (all done anyway): nothing to roll back" in closed
    assert "no approval is needed" in closed
    assert (await team.services.plans.view(number=1)).state is PlanState.CLOSED
    async with team.engine.connect() as conn:
        actions = [
            r[0]
            for r in await conn.execute(
                sa.text("SELECT action FROM qb_audit_events WHERE subject = 'P-1' ORDER BY id")
            )
        ]
    assert actions[-1] == "plan.closed"
    assert "No change requests are waiting" in await say(team, "/queue pending")
    # the queue takes a new plan
    await add_worker_rows(
        team,
        [{"status": "dead", "error_message": SMTP, "queued_at": START, "claimed_at": START}],
    )
    asked = await say(team, '/queue redrive --all --reason "smtp relay fixed"')
    assert "staged redrive of 1 dead letter(s)" in asked


async def test_the_same_error_again_halts_as_the_same_signature(team: Team) -> None:
    await eight_dead(team)
    asked = await say(team, '/queue redrive --all --sample 1 --reason "smtp relay fixed"')
    assert "(no failure_reason)" not in asked  # the table has no such column
    assert "TimeoutError: smtp relay mail-<n>.internal:<n> did not answer within <n> s" in asked
    await say(team, "/queue approve CR-1", BOB_APPROVER)
    await worker(
        team, "UPDATE jobs SET state = 'dead', last_error = :e WHERE state = 'queued'", e=SMTP_AGAIN
    )
    await tick(team)
    view = await team.services.plans.view(number=1)
    assert view.state is PlanState.HALTED
    assert view.note is not None
    assert "the same signature as before: the fix did not hold" in view.note
    assert "new error" not in view.note and "(no failure_reason)" not in view.note


async def audit_actions(team: Team, subject: str = "P-1") -> list[str]:
    async with team.engine.connect() as conn:
        rows = await conn.execute(
            sa.text("SELECT action FROM qb_audit_events WHERE subject = :s ORDER BY id"),
            {"s": subject},
        )
        return [str(r[0]) for r in rows]


async def test_a_plan_closed_before_its_tick_counted_the_wave_says_it_finished(
    team: Team,
) -> None:
    """The rows all finished between two ticks, and the plan is closed before the next one:
    the close counts them and ends the wave, and says nothing is still out (nothing will
    count it later: the plan has no tick left)."""
    await plan_in_last_wave(team)
    await say(team, "/queue halt P-1")
    assert await finish_queued(team) == 7  # no tick has seen them yet
    closed = await say(team, '/queue rollback P-1 --reason "all done anyway"')
    assert "P-1 closed" in closed
    assert "still out" not in closed
    view = await team.services.plans.view(number=1)
    assert view.succeeded == 8
    wave1 = view.waves[1]
    assert (wave1.outcome, wave1.succeeded, wave1.finished_at) == (
        WaveOutcome.OK,
        7,
        team.clock.now,
    )
    shown = await say(team, "/queue plan P-1")
    assert "closed after wave 1 of 1 (7 jobs)" in shown and "still out" not in shown
    assert (await audit_actions(team))[-2:] == ["plan.wave_finished", "plan.closed"]


async def test_a_rollback_that_ends_a_wave_records_that_it_finished(team: Team) -> None:
    """A wave ended by a rollback's approval (every row of it finished or returned) is
    audited as finished, as a wave a tick ends is."""
    await plan_in_last_wave(team)
    await say(team, "/queue halt P-1")
    await say(team, '/queue rollback P-1 --reason "relay still flaky"')
    assert await finish_queued(team, 5) == 5  # two are still unclaimed at the approval
    await say(team, "/queue approve CR-2", BOB_APPROVER)
    view = await team.services.plans.view(number=1)
    assert (view.succeeded, view.rolled_back) == (6, 2)
    assert view.waves[1].finished_at == team.clock.now
    assert (await audit_actions(team))[-2:] == ["plan.wave_finished", "plan.rolled_back"]


async def test_a_plan_halted_by_an_earlier_version_is_counted_after_a_restart(
    team: Team,
) -> None:
    """Before halted plans kept counting, a halt took the plan's tick away: such a plan
    (its wave never ended) gets its tick back when queuebot starts, so what it says (its
    rows still out are counted) holds."""
    await plan_in_last_wave(team)
    await say(team, "/queue halt P-1")
    async with team.engine.begin() as conn:  # what a halt did before
        await conn.execute(sa.text("DELETE FROM qb_schedule WHERE kind = 'plan.tick'"))
    assert await finish_queued(team) == 7
    await tick(team)
    assert (await team.services.plans.view(number=1)).succeeded == 1  # not counted yet

    await team.services.scheduler.seed()
    await tick(team)
    view = await team.services.plans.view(number=1)
    assert view.succeeded == 8 and view.waves[1].outcome is WaveOutcome.OK
    assert "8/8 succeeded" in await say(team, "/queue plan P-1")


async def test_a_rollback_says_claimed_only_of_rows_a_worker_holds(team: Team) -> None:
    """A row of the wave cancelled by hand neither succeeded nor died again: the rollback
    leaves it alone without saying a worker holds it, and nothing is left to count."""
    await plan_in_last_wave(team)
    await say(team, "/queue halt P-1")
    await say(team, '/queue rollback P-1 --reason "relay still flaky"')
    await worker(
        team,
        "UPDATE jobs SET state = 'cancelled' WHERE id = "
        "(SELECT max(id) FROM jobs WHERE state = 'queued')",
    )
    done = await say(team, "/queue approve CR-2", BOB_APPROVER)
    assert "6 unclaimed row(s) returned to the dead letters" in done
    view = await team.services.plans.view(number=1)
    assert view.note is not None and "claimed by a worker" not in view.note
    assert "counted as they finish" not in await say(team, "/queue plan P-1")
    assert view.waves[1].finished_at == team.clock.now


async def test_a_rollback_waiting_for_a_second_approval_does_not_call_its_count_now(
    team: Team,
) -> None:
    """The request counted the unclaimed rows when it was made; shown again after a first
    approval of two, that count is not 'now' any more."""
    team.services = build_services(
        team.engine,
        team.estate,
        team.clock,
        RecordingNotifier(),
        approval=ApprovalConfig(large_change_rows=1, large_change_approvals=2),
    )
    await eight_dead(team)
    # the plan is judged by its sample of one: one approval starts it
    await say(team, '/queue redrive --all --sample 1 --reason "smtp relay fixed"')
    await say(team, "/queue approve CR-1", BOB_APPROVER)
    assert await finish_queued(team) == 1
    await tick(team)
    await say(team, "/queue halt P-1")
    asked = await say(team, '/queue rollback P-1 --reason "relay still flaky"')
    assert "roll back plan P-1 (7 unclaimed row(s) now)" in asked
    assert await claim_queued(team, 3) == 3
    team.clock.advance(minutes=5)
    once = await say(team, "/queue approve CR-2", BOB_APPROVER)
    assert "waiting for approval (1 of 2)" in once
    assert "unclaimed row(s) now" not in once
    assert "7 unclaimed row(s) when requested" in once


async def test_a_plan_frozen_by_an_earlier_version_halts_as_the_same_signature(
    team: Team,
) -> None:
    """An earlier version froze a row of a table without failure_reason as
    "(no failure_reason): <signature>"; a plan frozen then, still running after the
    upgrade, judges the same error again as the same signature, not as a new error."""
    await eight_dead(team)
    await say(team, '/queue redrive --all --sample 1 --reason "smtp relay fixed"')
    await say(team, "/queue approve CR-1", BOB_APPROVER)
    async with team.engine.begin() as conn:  # as the earlier version froze them
        await conn.execute(
            sa.text("UPDATE qb_plan_items SET signature = '(no failure_reason): ' || signature")
        )
    await worker(
        team, "UPDATE jobs SET state = 'dead', last_error = :e WHERE state = 'queued'", e=SMTP_AGAIN
    )
    await tick(team)
    view = await team.services.plans.view(number=1)
    assert view.state is PlanState.HALTED and view.note is not None
    assert "the same signature as before: the fix did not hold" in view.note
    assert "new error" not in view.note


async def test_a_plan_resumed_with_rows_still_out_does_not_call_the_wave_finished(
    team: Team,
) -> None:
    await plan_in_last_wave(team)
    await worker(
        team,
        "UPDATE jobs SET state = 'dead', last_error = :e WHERE id = "
        "(SELECT max(id) FROM jobs WHERE state = 'queued')",
        e=SMTP_AGAIN,
    )
    await tick(team)
    assert (await team.services.plans.view(number=1)).state is PlanState.HALTED
    await say(team, '/queue resume P-1 --reason "one row, the relay blipped"')
    await say(team, "/queue approve CR-2", BOB_APPROVER)
    await tick(team)  # six rows of wave 1 still queued
    shown = await say(team, "/queue plan P-1")
    assert "wave 1 of 1 (7 jobs) finished" not in shown
    assert "wave 1 of 1 (7 jobs) running" in shown
