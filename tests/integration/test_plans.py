"""Staged redrive on SQLite and PostgreSQL with a simulated worker: a sample, then waves of
10, 20, 40 ... that start only after success; a re-failure halts; rollback; audit."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from bot.render_text import render_message
from commands.messages.changes import change_message
from services.changes.model import RequestState
from services.errors import Conflict, NotFound, PreconditionFailed
from services.estate.model import DeadFilter
from services.estate.ops import Selector
from services.plans.messages import plan_message
from services.plans.model import PlanState, WaveOutcome
from services.reads import samples
from tests.helpers.people import ALICE, BOB, DORA
from tests.integration.support import (
    START,
    Shop,
    add_dead_letters,
    said,
    simulated_worker,
)
from tests.kinds import ChangeKind

# after every test here, the audit trail holds, cross-checked with the state tables
pytestmark = pytest.mark.usefixtures("trail_holds")

ERROR = "transcoder pod evicted while rendering clip 77"


async def flat_history(shop: Shop) -> None:
    """Counts written down 15 minutes ago and equal to now: the DLQ is not growing."""
    async with shop.engine.begin() as conn:
        await samples.record(
            conn, profile=shop.estate.profile("clips"), now=shop.clock.now - timedelta(minutes=15)
        )


async def request_plan(shop: Shop, **selector: object) -> int:
    view = await shop.changes.request(
        kind=ChangeKind.PLAN,
        queue="clips",
        selector=Selector(error_like=selector.pop("error_like", "pod evicted"), **selector),  # type: ignore[arg-type]
        reason="eviction fixed by raising memory limits",
        actor=ALICE,
        origin={"platform": "console", "channel": "ops"},
    )
    return view.number


async def pending_count(shop: Shop) -> int:
    async with shop.engine.connect() as conn:
        return int(
            (
                await conn.execute(
                    sa.text("SELECT count(*) FROM queue_messages WHERE status = 'PENDING'")
                )
            ).scalar_one()
        )


async def tick(shop: Shop, seconds: float = 5) -> None:
    assert shop.scheduler is not None
    shop.clock.advance(seconds=seconds)
    await shop.scheduler.run_due()


async def at_wave_1(shop: Shop) -> int:
    """A plan over 60 dead letters, approved, whose sample succeeded: its wave 1 (10 jobs)
    started. The plan's number."""
    await add_dead_letters(shop.engine, count=60, error=ERROR)
    await flat_history(shop)
    approved = (await shop.changes.approve(number=await request_plan(shop), actor=BOB)).view
    assert approved.result is not None and approved.result.plan is not None
    await simulated_worker(shop.engine, now=shop.clock.now)
    await tick(shop)
    return approved.result.plan


async def rolled_back(shop: Shop, plan_no: int) -> None:
    """P-``plan_no`` rolled back: asked by alice, the fix did not hold; approved by bob."""
    rollback = await shop.changes.request(
        kind=ChangeKind.ROLLBACK,
        queue=None,
        selector=Selector(plan=plan_no),
        reason="fix did not hold",
        actor=ALICE,
    )
    await shop.changes.approve(number=rollback.number, actor=BOB)


async def resume(shop: Shop, plan_no: int, reason: str, *, wait: float = 5) -> None:
    """P-``plan_no`` resumed: asked by alice for ``reason``, approved by bob; then the
    scheduler's tick ``wait`` seconds on."""
    resume = await shop.changes.request(
        kind=ChangeKind.RESUME,
        queue=None,
        selector=Selector(plan=plan_no),
        reason=reason,
        actor=ALICE,
    )
    await shop.changes.approve(number=resume.number, actor=BOB)
    await tick(shop, wait)


async def test_waves_grow_only_after_success_then_a_refailure_halts(shop: Shop) -> None:
    assert shop.plans is not None
    jobs = await add_dead_letters(shop.engine, count=200, error=ERROR)
    await flat_history(shop)
    number = await request_plan(shop)
    preview = await shop.changes.get(number=number)
    assert preview.eligible == 200
    assert preview.schedule == [5, 10, 20, 40, 80, 45]
    assert [name for name, verdict, _ in preview.checks if verdict == "ok"]
    assert all(verdict == "ok" for _, verdict, _ in preview.checks if verdict != "n/a")
    await simulated_worker(shop.engine, now=shop.clock.now)  # the demo's own backlog drains
    before = await pending_count(shop)
    assert before == 0

    # 200 rows, but a staged plan is judged by its sample of 5: one approval starts it
    decision = await shop.changes.approve(number=number, actor=BOB)
    plan_no = decision.view.result.plan
    assert await pending_count(shop) == before + 5  # the sample, and nothing else

    await tick(shop)  # the sample is not done yet: nothing more starts
    assert await pending_count(shop) == before + 5

    sizes = []
    for _ in range(3):  # sample, wave 1 and wave 2 succeed; each success starts the next
        await simulated_worker(shop.engine, now=shop.clock.now)
        await tick(shop)
        view = await shop.plans.view(number=plan_no)
        sizes.append(view.waves[-1].size)
        assert await pending_count(shop) == before + view.waves[-1].size
    assert sizes == [10, 20, 40]

    wave3 = await shop.plans.view(number=plan_no)
    redriven = wave3.redriven
    async with shop.engine.connect() as conn:
        in_wave = [
            str(r[0])
            for r in (
                await conn.execute(
                    sa.text("SELECT job_id FROM qb_plan_items WHERE plan_id = :p AND wave = 3"),
                    {"p": plan_no},
                )
            ).all()
        ]
    await simulated_worker(shop.engine, now=shop.clock.now, fail={in_wave[0]}, error=ERROR)
    await tick(shop)
    halted = await shop.plans.view(number=plan_no)
    assert halted.state is PlanState.HALTED
    assert halted.redead == 1 and halted.redriven == redriven
    assert halted.note and "the same signature as before: the fix did not hold" in halted.note
    await tick(shop, 60)
    await simulated_worker(shop.engine, now=shop.clock.now)
    await tick(shop, 60)
    assert (await shop.plans.view(number=plan_no)).redriven == redriven  # nothing more
    async with shop.engine.connect() as conn:
        left = (
            await conn.execute(
                sa.text(
                    "SELECT count(*) FROM queue_messages WHERE status = 'DLQ' AND last_error = :e"
                ),
                {"e": ERROR},
            )
        ).scalar_one()
    assert left == 200 - redriven + 1
    assert len(jobs) == 200

    async with shop.engine.connect() as conn:
        actions = [
            r[0]
            for r in (
                await conn.execute(sa.text("SELECT action FROM qb_audit_events ORDER BY id"))
            ).all()
        ]
    assert actions == [
        "change.requested",
        "change.approved",
        "plan.started",
        "plan.wave_started",
        "change.executed",
        "plan.wave_finished",
        "plan.wave_started",
        "plan.wave_finished",
        "plan.wave_started",
        "plan.wave_finished",
        "plan.wave_started",
        "plan.wave_finished",  # wave 3: every row finished, one dead again
        "plan.halted",
    ]
    posted = shop.notifier.texts()
    assert any("P-1 wave 3 started: 40 job(s)" in t for t in posted)
    assert any(
        "HALTED" in t and "the same signature as before: the fix did not hold" in t for t in posted
    )


async def test_resume_needs_approval_and_rollback_returns_the_unclaimed(shop: Shop) -> None:
    assert shop.plans is not None
    plan_no = await at_wave_1(shop)  # wave 1 (10) starts and stays unclaimed
    halted = await shop.plans.halt(number=plan_no, actor=ALICE, reason="looks wrong")
    assert halted.view.state is PlanState.HALTED and not halted.post_failures
    await tick(shop, 60)
    assert (await shop.plans.view(number=plan_no)).waves[-1].number == 1  # halted: no wave 2

    resume = await shop.changes.request(
        kind=ChangeKind.RESUME,
        queue=None,
        selector=Selector(plan=plan_no),
        reason="false alarm",
        actor=ALICE,
    )
    assert resume.state is RequestState.PENDING
    with pytest.raises(NotFound, match="no plan P-999"):
        await shop.changes.request(
            kind=ChangeKind.ROLLBACK,
            queue=None,
            selector=Selector(plan=999),
            reason="x" * 5,
            actor=ALICE,
        )
    rollback = await shop.changes.request(
        kind=ChangeKind.ROLLBACK,
        queue=None,
        selector=Selector(plan=plan_no),
        reason="fix did not hold",
        actor=ALICE,
    )
    assert rollback.eligible == 10
    async with shop.engine.begin() as conn:  # a worker claims one of them meanwhile
        claimed = (
            await conn.execute(
                sa.text(
                    "SELECT m.id FROM queue_messages m JOIN qb_plan_items i ON i.message_id = "
                    "CAST(m.id AS VARCHAR(64)) WHERE i.plan_id = :p AND i.wave = 1 LIMIT 1"
                ),
                {"p": plan_no},
            )
        ).scalar_one()
        await conn.execute(
            sa.text(
                "UPDATE queue_messages SET status = 'PROCESSING', claimed_at = :n WHERE id = :m"
            ),
            {"n": shop.clock.now, "m": claimed},
        )
    done = await shop.changes.approve(number=rollback.number, actor=BOB)
    assert done.view.result is not None and len(done.view.result.changed) == 9
    view = await shop.plans.view(number=plan_no)
    assert view.state is PlanState.ROLLED_BACK and view.rolled_back == 9
    async with shop.engine.connect() as conn:
        back = (
            await conn.execute(
                sa.text(
                    "SELECT count(*) FROM queue_messages m JOIN clip_jobs j ON j.id = m.job_id "
                    "WHERE m.status = 'DLQ' AND j.status = 'FAILED' AND m.attempt_count = 3 "
                    "AND m.last_error = :e"
                ),
                {"e": ERROR},
            )
        ).scalar_one()
        events = (
            await conn.execute(
                sa.text("SELECT count(*) FROM job_events WHERE event_type = 'REDRIVE_ROLLED_BACK'")
            )
        ).scalar_one()
    assert back == 60 - 5 - 1 and events == 9
    with pytest.raises(Conflict) as gone:
        await shop.changes.approve(number=resume.number, actor=BOB)
    assert f"P-{plan_no} is rolled back; only a halted plan can be resumed" in said(gone.value)


async def test_a_plan_resumed_after_a_redead_halt_goes_on(shop: Shop) -> None:
    assert shop.plans is not None
    plan_no = await at_wave_1(shop)
    async with shop.engine.connect() as conn:
        wave1 = [
            str(r[0])
            for r in await conn.execute(
                sa.text("SELECT job_id FROM qb_plan_items WHERE plan_id = :p AND wave = 1"),
                {"p": plan_no},
            )
        ]
    await simulated_worker(shop.engine, now=shop.clock.now, fail={wave1[0]}, error=ERROR)
    await tick(shop)
    halted = await shop.plans.view(number=plan_no)
    assert halted.state is PlanState.HALTED and halted.redead == 1
    assert halted.succeeded == 5 + 9  # the sample and the nine of wave 1 that finished

    await resume(shop, plan_no, "the one failure was a flaky node", wait=60)
    resumed = await shop.plans.view(number=plan_no)
    assert resumed.state is PlanState.RUNNING
    assert resumed.waves[-1].number == 2 and resumed.waves[-1].size == 20  # it goes on
    assert not (resumed.note or "").startswith("waiting")


async def test_rollback_gives_each_message_of_a_job_its_own_values(shop: Shop) -> None:
    jobs = await add_dead_letters(shop.engine, count=20, error=ERROR)
    async with shop.engine.begin() as conn:  # the newest job has a second dead message
        pg = conn.dialect.name == "postgresql"
        await conn.execute(
            sa.text(
                "INSERT INTO queue_messages (id, job_id, status, attempt_count, available_at, "
                "claimed_at, last_error) VALUES (:m, :j, 'DLQ', 7, :w, :w, :e)"
            ),
            {
                "m": uuid.uuid4() if pg else str(uuid.uuid4()),
                "j": uuid.UUID(jobs[-1]) if pg else jobs[-1],
                "w": shop.clock.now - timedelta(minutes=5),
                "e": ERROR + " (first try)",
            },
        )
    await flat_history(shop)
    number = await request_plan(shop, sample=5)
    plan_no = (await shop.changes.approve(number=number, actor=BOB)).view.result.plan
    sample = await shop.plans.view(number=plan_no)  # redriven, and no worker claimed it
    assert sample.redriven == 5
    async with shop.engine.connect() as conn:
        both = await conn.execute(
            sa.text(
                "SELECT count(*) FROM queue_messages WHERE status = 'PENDING' AND "
                "CAST(job_id AS VARCHAR(64)) = :j"
            ),
            {"j": jobs[-1]},
        )
        assert both.scalar_one() == 2  # both of its messages were in the sample
    await rolled_back(shop, plan_no)
    async with shop.engine.connect() as conn:
        dead = {
            (int(n), e)
            for n, e in await conn.execute(
                sa.text(
                    "SELECT attempt_count, last_error FROM queue_messages "
                    "WHERE status = 'DLQ' AND last_error LIKE :e"
                ),
                {"e": ERROR + "%"},
            )
        }
        events = [
            str(r[0])
            for r in await conn.execute(
                sa.text(
                    "SELECT aggregate_id FROM job_events WHERE event_type = 'REDRIVE_ROLLED_BACK'"
                )
            )
        ]
        its_messages = {
            (int(n), e, st)
            for n, e, st in await conn.execute(
                sa.text(
                    "SELECT attempt_count, last_error, status FROM queue_messages "
                    "WHERE CAST(job_id AS VARCHAR(64)) = :j"
                ),
                {"j": jobs[-1]},
            )
        }
    # each message back in the dead letters with its own values, not its sibling's
    assert its_messages == {(3, ERROR, "DLQ"), (7, ERROR + " (first try)", "DLQ")}
    assert (7, ERROR + " (first try)") in dead
    assert jobs[-1] in events
    assert sorted(events) == sorted(set(events)) and len(events) == 4  # one event per job


@pytest.mark.parametrize("queue", ["clips", "workers"])
async def test_a_plan_selects_the_dead_letters_dlq_lists_in_the_same_order(
    shop: Shop, queue: str
) -> None:
    await add_dead_letters(shop.engine, count=5, error=ERROR)
    async with shop.engine.begin() as conn:  # one dead message no worker ever claimed
        pg = conn.dialect.name == "postgresql"
        job = (await conn.execute(sa.text("SELECT job_id FROM queue_messages LIMIT 1"))).scalar()
        await conn.execute(
            sa.text(
                "INSERT INTO queue_messages (id, job_id, status, attempt_count, available_at, "
                "claimed_at, last_error) VALUES (:m, :j, 'DLQ', 1, :w, NULL, :e)"
            ),
            {"m": uuid.uuid4() if pg else str(uuid.uuid4()), "j": job, "w": START, "e": ERROR},
        )
    profile = shop.estate.profile(queue)
    async with shop.engine.connect() as conn:
        planned = await profile.plan_ops.candidate_ids(conn, selector=Selector(all_dead=True))
    listed = await shop.reads.list_dead(queue=queue, filters=DeadFilter(limit=200))
    assert planned == list(dict.fromkeys(r.id for r in listed.rows))


async def test_one_active_plan_per_queue(shop: Shop) -> None:
    await add_dead_letters(shop.engine, count=20, error=ERROR)
    await flat_history(shop)
    first = await request_plan(shop)
    await shop.changes.approve(number=first, actor=BOB)
    with pytest.raises(Conflict) as busy:
        await request_plan(shop)
    assert "already has an active plan, P-1" in said(busy.value)


# -- every precondition fails once, with its refusal text -----------------------------


async def test_refused_when_dead_letters_are_growing(shop: Shop) -> None:
    """message_job records when rows died (DLQ job events): growth is judged from them at
    once, over exactly the configured window, with no earlier count needed."""
    await add_dead_letters(
        shop.engine, count=20, error=ERROR, died_at=shop.clock.now - timedelta(minutes=3)
    )
    with pytest.raises(
        PreconditionFailed,
        match=r"dead letters not growing \(10 min\): 20 dead-lettered since 02:50 UTC",
    ):
        await request_plan(shop)


async def test_growth_is_judged_from_when_rows_died_without_any_count(shop: Shop) -> None:
    await add_dead_letters(shop.engine, count=20, error=ERROR)  # died two hours ago
    number = await request_plan(shop)  # no count was ever written down
    checks = {
        name: (verdict, detail)
        for name, verdict, detail in (await shop.changes.get(number=number)).checks
    }
    verdict, detail = checks["dead letters not growing (10 min)"]
    assert verdict == "ok"
    assert "0 dead-lettered since 02:50 UTC (when the queue's own records say they died)" in detail


async def workers_plan(shop: Shop) -> int:
    view = await shop.changes.request(
        kind=ChangeKind.PLAN,
        queue="workers",
        selector=Selector(all_dead=True),
        reason="spawn host fixed",
        actor=ALICE,
    )
    return view.number


async def test_growth_from_counts_is_labelled_with_the_window_it_used(shop: Shop) -> None:
    """worker_queue records no deaths: the counts written down decide, and the label
    names the span between the count used and now, not the configured window."""
    async with shop.engine.begin() as conn:
        await samples.record(
            conn, profile=shop.estate.profile("workers"), now=shop.clock.now - timedelta(minutes=15)
        )
    number = await workers_plan(shop)
    names = [name for name, _, _ in (await shop.changes.get(number=number)).checks]
    assert "dead letters not growing (15 min)" in names


async def test_refused_when_counts_show_growth(shop: Shop) -> None:
    async with shop.engine.begin() as conn:
        await samples.record(
            conn, profile=shop.estate.profile("workers"), now=shop.clock.now - timedelta(minutes=12)
        )
        await conn.execute(
            sa.text(
                "UPDATE dev_r_worker_queue SET status = 'failed', failure_reason = 'timeout', "
                "error_message = 'ssh spawn timed out' WHERE status = 'queued'"
            )
        )
    with pytest.raises(
        PreconditionFailed, match=r"dead letters not growing \(12 min\): .*\(\+20\)"
    ):
        await workers_plan(shop)


async def test_refused_without_an_earlier_count_says_what_to_do(shop: Shop) -> None:
    with pytest.raises(PreconditionFailed) as refused:
        await workers_plan(shop)
    assert (
        "no earlier count yet: keep queuebot running; the first count is written at start "
        "and every minute; retry after 03:01 UTC"
    ) in refused.value.message
    async with shop.engine.begin() as conn:  # the first count, half a minute ago
        await samples.record(
            conn, profile=shop.estate.profile("workers"), now=shop.clock.now - timedelta(seconds=30)
        )
    with pytest.raises(PreconditionFailed, match="retry after 03:01 UTC"):
        await workers_plan(shop)
    shop.clock.advance(seconds=20)
    with pytest.raises(PreconditionFailed, match="retry after 03:01 UTC"):
        await workers_plan(shop)
    shop.clock.advance(seconds=15)
    assert await workers_plan(shop)  # the count is a minute old now


async def test_refused_while_an_incident_blocks_redrives(shop: Shop) -> None:
    await add_dead_letters(shop.engine, count=20, error=ERROR)
    await flat_history(shop)
    # declared as queuebot declares it: a row without its events would break the trail
    await shop.services.incidents.declare(
        scenario="gd:queue-loss", summary="storage flapping", actor=DORA
    )
    with pytest.raises(
        PreconditionFailed,
        match=r"INC-1 \(gd:queue-loss\) is restoring dep:job-queue: redrives on every queue "
        r"wait until its restore step 1 \(dep:job-queue\) is done",
    ):
        await request_plan(shop)
    await shop.services.incidents.step_done(number=1, step="1", actor=DORA)
    assert await request_plan(shop)  # the queue is restored: redrives may run again


async def test_an_incident_whose_runbook_is_the_redrive_itself_does_not_refuse_it(
    shop: Shop,
) -> None:
    await add_dead_letters(shop.engine, count=20, error=ERROR)
    await flat_history(shop)
    for scenario in ("gd:dlq-redrive", "gd:failed-jobs-accumulating"):
        await shop.services.incidents.declare(scenario=scenario, summary="to redrive", actor=DORA)
    assert await request_plan(shop)


@pytest.mark.parametrize(
    ("error_like", "check", "excluded"),
    [
        pytest.param(
            "NoSuchKey",
            "source object exists: FAILED",
            "8 job(s) without their source object excluded",
            id="every-source-object-is-gone",
        ),
        pytest.param(
            "moov atom",
            "failure not classified permanent: FAILED",
            "5 job(s) with a permanent error excluded",
            id="the-error-is-permanent",
        ),
    ],
)
async def test_refused_when_no_job_selected_may_run_again(
    shop: Shop, error_like: str, check: str, excluded: str
) -> None:
    await flat_history(shop)
    with pytest.raises(PreconditionFailed, match=check) as refused:
        await request_plan(shop, error_like=error_like)
    assert excluded in refused.value.message


async def test_refused_when_redriven_too_often(shop: Shop) -> None:
    jobs = await add_dead_letters(shop.engine, count=4, error=ERROR)
    await flat_history(shop)
    async with shop.engine.begin() as conn:  # three earlier redrives each, by hand
        for n in range(3):
            for k, job in enumerate(jobs):
                await conn.execute(
                    sa.text(
                        "INSERT INTO job_events (id, aggregate_id, event_type, message, "
                        "created_at) VALUES (:i, :j, 'REDRIVE_REQUESTED', 'manual', :n)"
                    ),
                    {"i": f"00000000-0000-4000-8000-{n:04d}{k:08d}", "j": job, "n": shop.clock.now},
                )
    with pytest.raises(PreconditionFailed, match=r"redriven fewer than 3 times: FAILED"):
        await request_plan(shop)


async def test_reason_is_a_precondition(shop: Shop) -> None:
    await add_dead_letters(shop.engine, count=3, error=ERROR)
    await flat_history(shop)
    with pytest.raises(PreconditionFailed, match="reason given: FAILED"):
        await shop.changes.request(
            kind=ChangeKind.PLAN,
            queue="clips",
            selector=Selector(error_like="pod evicted"),
            reason="  ",
            actor=ALICE,
        )


async def test_rollback_updates_each_wave_row_and_the_status_line(shop: Shop) -> None:
    plan_no = await at_wave_1(shop)  # wave 1 (10) stays unclaimed
    async with shop.engine.begin() as conn:  # a worker claims one of wave 1 meanwhile
        await conn.execute(
            sa.text(
                "UPDATE queue_messages SET status = 'PROCESSING', claimed_at = :n WHERE id = "
                "(SELECT m.id FROM queue_messages m JOIN qb_plan_items i ON i.message_id = "
                "CAST(m.id AS VARCHAR(64)) WHERE i.plan_id = :p AND i.wave = 1 "
                "ORDER BY i.seq LIMIT 1)"
            ),
            {"n": shop.clock.now, "p": plan_no},
        )
    await rolled_back(shop, plan_no)
    view = await shop.plans.view(number=plan_no)
    sample, wave1 = view.waves
    assert (sample.outcome, sample.rolled_back) == (WaveOutcome.OK, 0)
    assert (wave1.outcome, wave1.rolled_back) == (WaveOutcome.ROLLED_BACK, 9)
    text = render_message(plan_message(view))
    assert "now: rolled back during wave 1 of 3 (10 jobs): 9 job(s) returned" in text
    row = next(line for line in text.splitlines() if line.startswith("wave 1 "))
    assert row.split()[-4:] == ["0", "9", "rolled", "back"]  # skipped, rolled back, outcome


async def test_a_worker_row_failing_again_the_same_way_halts_as_the_same_signature(
    shop: Shop,
) -> None:
    """worker_queue with a failure_reason column: the frozen signature names the reason;
    the row that died again is judged the same way, so the same failure is the same."""
    async with shop.engine.begin() as conn:
        await samples.record(
            conn, profile=shop.estate.profile("workers"), now=shop.clock.now - timedelta(minutes=15)
        )
        before = {
            str(i): (r, e)
            for i, r, e in await conn.execute(
                sa.text(
                    "SELECT id, failure_reason, error_message FROM dev_r_worker_queue "
                    "WHERE status IN ('failed', 'failed_permanently')"
                )
            )
        }
    number = await workers_plan(shop)
    plan_no = (await shop.changes.approve(number=number, actor=BOB)).view.result.plan
    async with shop.engine.begin() as conn:  # each redriven row dies again, as it did
        queued = [
            str(r[0])
            for r in await conn.execute(
                sa.text("SELECT job_id FROM qb_plan_items WHERE plan_id = :p AND wave = 0"),
                {"p": plan_no},
            )
        ]
        for job in queued:
            reason, error = before[job]
            await conn.execute(
                sa.text(
                    "UPDATE dev_r_worker_queue SET status = 'failed', failure_reason = :r, "
                    "error_message = :e WHERE id = :i"
                ),
                {"r": reason, "e": error, "i": int(job)},
            )
    await tick(shop)
    halted = await shop.plans.view(number=plan_no)
    assert halted.state is PlanState.HALTED and halted.note is not None
    assert "the same signature as before: the fix did not hold" in halted.note
    assert "new error" not in halted.note


# -- the jobs a plan redrove that died again ---------------------------------------------


async def plan_jobs(shop: Shop, plan_no: int, wave: int) -> list[str]:
    async with shop.engine.connect() as conn:
        found = await conn.execute(
            sa.text(
                "SELECT job_id FROM qb_plan_items WHERE plan_id = :p AND wave = :w ORDER BY seq"
            ),
            {"p": plan_no, "w": wave},
        )
        return [str(r[0]) for r in found.all()]


async def run_to_the_end(shop: Shop, plan_no: int) -> None:
    """The worker finishes every redriven job (they succeed) until the plan completes."""
    assert shop.plans is not None
    for _ in range(20):
        await simulated_worker(shop.engine, now=shop.clock.now)
        await tick(shop)
        if (await shop.plans.view(number=plan_no)).state is PlanState.COMPLETED:
            return
    raise AssertionError(f"P-{plan_no} did not complete")


async def halted_resumed_completed(shop: Shop, *, dead: int = 30) -> tuple[int, list[str]]:
    """A plan whose sample's first two jobs die again (it halts), resumed and run to its
    end: its number and the two jobs."""
    await add_dead_letters(shop.engine, count=dead, error=ERROR)
    await flat_history(shop)
    plan_no = (await shop.changes.approve(number=await request_plan(shop), actor=BOB)).view
    assert plan_no.result is not None and plan_no.result.plan is not None
    number = plan_no.result.plan
    again = (await plan_jobs(shop, number, 0))[:2]
    await simulated_worker(shop.engine, now=shop.clock.now, fail=set(again), error=ERROR)
    await tick(shop)
    assert (await shop.plans.view(number=number)).state is PlanState.HALTED
    await resume(shop, number, "second fix deployed")
    await run_to_the_end(shop, number)
    return number, again


async def test_the_jobs_a_plan_redrove_that_died_again_are_listed_and_redriven(
    shop: Shop,
) -> None:
    number, again = await halted_resumed_completed(shop)
    done = await shop.plans.view(number=number)
    assert done.redead == 2 and done.succeeded == 28
    assert (
        "done: the sample and 2 wave(s) finished; 28 succeeded, 2 died again: redrive them "
        f'with /queue redrive --from-plan P-{number} --reason "..."'
    ) in render_message(plan_message(done))

    listed = await shop.plans.dead_again(number=number, queue=None)
    assert listed.queue == "clips" and sorted(listed.jobs) == sorted(again)
    rows = await shop.reads.list_dead(
        queue="clips", filters=DeadFilter(job_ids=listed.jobs, limit=50)
    )
    assert sorted(r.id for r in rows.rows) == sorted(again) and rows.total == 2

    # with a filter, only those of them it selects
    async with shop.engine.begin() as conn:
        await conn.execute(
            sa.text(
                "UPDATE queue_messages SET last_error = 'codec probe timed out' "
                "WHERE CAST(job_id AS VARCHAR(64)) = :j"
            ),
            {"j": again[1]},
        )
    narrowed = await shop.changes.request(
        kind=ChangeKind.PLAN,
        queue=None,  # the plan's own queue
        selector=Selector(from_plan=number, error_like="pod evicted"),
        reason="eviction fixed for good",
        actor=ALICE,
    )
    assert narrowed.queue == "clips" and narrowed.eligible == 1
    assert narrowed.selector == f"P-{number}'s jobs dead again, with error like 'pod evicted'"
    await shop.changes.reject(
        number=narrowed.number, actor=ALICE, reason="all of them", may_reject_others=False
    )

    view = await shop.changes.request(
        kind=ChangeKind.PLAN,
        queue="clips",
        selector=Selector(from_plan=number),
        reason="eviction fixed for good",
        actor=ALICE,
    )
    assert view.eligible == 2 and view.selector == f"P-{number}'s jobs dead again"
    decision = await shop.changes.approve(number=view.number, actor=BOB)
    assert decision.view.result is not None
    second = decision.view.result.plan
    assert second is not None and second != number
    assert sorted(await plan_jobs(shop, second, 0)) == sorted(again)
    async with shop.engine.connect() as conn:
        pending = await conn.execute(
            sa.text(
                "SELECT CAST(job_id AS VARCHAR(64)) FROM queue_messages WHERE status = 'PENDING'"
            )
        )
        assert sorted(str(r[0]) for r in pending.all()) == sorted(again)


async def test_from_plan_says_what_is_wrong_with_the_plan_named(shop: Shop) -> None:
    def plan_of(number: int, queue: str | None = "clips") -> Any:
        return shop.changes.request(
            kind=ChangeKind.PLAN,
            queue=queue,
            selector=Selector(from_plan=number),
            reason="fix deployed",
            actor=ALICE,
        )

    with pytest.raises(NotFound, match="no plan P-9"):
        await plan_of(9)
    with pytest.raises(NotFound, match="no plan P-9"):
        await shop.plans.dead_again(number=9, queue=None)

    await add_dead_letters(shop.engine, count=8, error=ERROR)
    await flat_history(shop)
    first = (await shop.changes.approve(number=await request_plan(shop), actor=BOB)).view
    assert first.result is not None and first.result.plan is not None
    number = first.result.plan
    await run_to_the_end(shop, number)  # every job succeeded
    with pytest.raises(NotFound) as elsewhere:
        await plan_of(number, queue="workers")
    assert (
        f"P-{number} is a plan of queue clips, not of workers: its jobs are in clips. "
        "Write --queue clips, or leave --queue out"
    ) in said(elsewhere.value)
    with pytest.raises(NotFound, match="a plan of queue clips, not of workers"):
        await shop.plans.dead_again(number=number, queue="workers")
    with pytest.raises(PreconditionFailed) as none:
        await plan_of(number)
    assert f"no job of P-{number} is dead again now: nothing to redrive" in said(none.value)
    assert (await shop.plans.dead_again(number=number, queue=None)).jobs == ()


# -- the growth check and queuebot's own redrives ------------------------------------------


def growth_check(view: Any) -> tuple[str, str, str]:
    return next(c for c in view.checks if c[0].startswith("dead letters not growing"))


async def audit_details(shop: Shop, action: str) -> list[dict[str, Any]]:
    async with shop.engine.connect() as conn:
        found = await conn.execute(
            sa.text("SELECT details FROM qb_audit_events WHERE action = :a ORDER BY id"),
            {"a": action},
        )
        return [d if isinstance(d, dict) else json.loads(d) for (d,) in found.all()]


async def test_jobs_queuebot_redrove_that_died_again_are_not_growth_and_the_rest_is(
    shop: Shop,
) -> None:
    """The user's journey: a plan's sample dies again (recorded as the estate records a
    death), the plan halts; that is not the dead letters growing, so a redrive of the
    dead-again jobs is not refused for it. A death of any other job is growth: the refusal
    says when it stops counting, the setting, and the override; the override goes ahead,
    shown in the preview and named in the audit."""
    assert shop.plans is not None
    await add_dead_letters(shop.engine, count=30, error=ERROR)
    await flat_history(shop)
    first = (await shop.changes.approve(number=await request_plan(shop), actor=BOB)).view
    assert first.result is not None and first.result.plan is not None
    number = first.result.plan
    again = (await plan_jobs(shop, number, 0))[:2]
    shop.clock.advance(minutes=1)
    await simulated_worker(
        shop.engine, now=shop.clock.now, fail=set(again), error=ERROR, record_deaths=True
    )
    await tick(shop)
    assert (await shop.plans.view(number=number)).state is PlanState.HALTED

    by_id = await shop.changes.request(
        kind=ChangeKind.REDRIVE,
        queue="clips",
        selector=Selector(ids=(again[0],)),
        reason="the node that evicted it is drained",
        actor=ALICE,
    )
    name, verdict, detail = growth_check(by_id)
    assert (name, verdict) == ("dead letters not growing (10 min)", "ok")
    assert detail.startswith(
        "2 dead-lettered since 02:51 UTC (when the queue's own records say they died), all "
        f"of them jobs queuebot redrove (P-{number}) that died again: not counted as growth; "
    )
    await shop.changes.reject(
        number=by_id.number, actor=ALICE, reason="the plan takes them", may_reject_others=False
    )

    await resume(shop, number, "the eviction fix is deployed")
    await run_to_the_end(shop, number)

    # another job dies meanwhile, one queuebot never redrove: that is growth
    await add_dead_letters(
        shop.engine, count=1, error="disk full", died_at=shop.clock.now - timedelta(seconds=30)
    )
    newest = shop.clock.now - timedelta(seconds=30)
    with pytest.raises(PreconditionFailed) as growing:
        await shop.changes.request(
            kind=ChangeKind.PLAN,
            queue=None,
            selector=Selector(from_plan=number),
            reason="the eviction fix holds",
            actor=ALICE,
        )
    refusal = said(growing.value)
    assert f"{newest:%H:%M:%S}" == "03:00:50"  # leaves the window at 03:10:50
    assert (
        "3 dead-lettered since 02:51 UTC (when the queue's own records say they died), 2 of "
        f"them jobs queuebot redrove (P-{number}) that died again, not counted as growth; "
    ) in refusal
    assert (
        "retry after 03:11 UTC, when the newest death counted "
        "(03:00:50 UTC) has left the 10-min window ([redrive] "
        "growth_window_minutes sets it); if you know the outage is over, add "
        "--override-growth to go ahead (a second person approves it as any change)"
    ) in refusal

    view = await shop.changes.request(
        kind=ChangeKind.PLAN,
        queue=None,
        selector=Selector(from_plan=number, override_growth=True),
        reason="disk full is another queue's tenant; the eviction fix holds",
        actor=ALICE,
    )
    name, verdict, detail = growth_check(view)
    assert verdict == "overridden"
    assert detail.startswith(
        "overridden by alice: disk full is another queue's tenant; the eviction fix holds; "
        "measured: 3 dead-lettered since"
    )
    shown = render_message(change_message(view))
    assert "overridden by alice" in shown and "alice overrode a failed precondition" in shown
    assert view.eligible == 2
    decision = await shop.changes.approve(number=view.number, actor=BOB)
    assert decision.executed and decision.view.result is not None
    second = decision.view.result.plan
    requested = (await audit_details(shop, "change.requested"))[-1]
    assert requested["overridden"] == [[name, detail]]
    assert requested["selector"]["override_growth"] is True
    started = await audit_details(shop, "plan.started")
    assert "overridden" not in started[0]  # P-1 overrode nothing
    assert started[-1]["overridden"] == [[name, detail]] and started[-1]["request"] == (
        f"CR-{view.number}"
    )
    assert sorted(await plan_jobs(shop, second, 0)) == sorted(again)


async def test_override_growth_when_it_is_not_needed_says_so(shop: Shop) -> None:
    await add_dead_letters(shop.engine, count=8, error=ERROR)
    view = await shop.changes.request(
        kind=ChangeKind.PLAN,
        queue="clips",
        selector=Selector(error_like="pod evicted", override_growth=True),
        reason="eviction fixed",
        actor=ALICE,
    )
    _name, verdict, detail = growth_check(view)
    assert verdict == "ok" and detail.endswith("; --override-growth was given and not needed")
    assert "overridden" not in (await audit_details(shop, "change.requested"))[-1]


async def test_from_counts_a_rise_made_of_rows_queuebot_redrove_is_not_growth(shop: Shop) -> None:
    """worker_queue records no deaths: the counts decide. A count written while a plan's
    sample was out of the dead letters, and the sample dead again since, is not growth;
    another row dying is."""
    assert shop.plans is not None
    profile = shop.estate.profile("workers")
    async with shop.engine.begin() as conn:
        await samples.record(conn, profile=profile, now=shop.clock.now - timedelta(minutes=15))
    first = (await shop.changes.approve(number=await workers_plan(shop), actor=BOB)).view
    assert first.result is not None and first.result.plan is not None
    number = first.result.plan
    sample = await plan_jobs(shop, number, 0)
    async with shop.engine.begin() as conn:  # written while the sample is out
        await samples.record(conn, profile=profile, now=shop.clock.now)
    shop.clock.advance(minutes=11)
    async with shop.engine.begin() as conn:  # two of the sample fail again, as before
        await conn.execute(
            sa.text(
                "UPDATE dev_r_worker_queue SET status = 'failed', error_message = 'ssh spawn "
                "timed out' WHERE id IN (:a, :b)"
            ),
            {"a": int(sample[0]), "b": int(sample[1])},
        )
        await conn.execute(
            sa.text("UPDATE dev_r_worker_queue SET status = 'done' WHERE id IN (:a, :b, :c)"),
            {"a": int(sample[2]), "b": int(sample[3]), "c": int(sample[4])},
        )
    await tick(shop)
    assert (await shop.plans.view(number=number)).state is PlanState.HALTED

    async def by_id() -> Any:
        return await shop.changes.request(
            kind=ChangeKind.REDRIVE,
            queue="workers",
            selector=Selector(ids=(sample[0],)),
            reason="spawn host drained",
            actor=ALICE,
        )

    view = await by_id()
    _name, verdict, detail = growth_check(view)
    assert verdict == "ok", detail
    assert detail.endswith(
        f"(+2); 2 of the dead now are jobs queuebot redrove (P-{number}) that may have been "
        "out of the dead letters at 03:00 UTC and died again since: the rise is not counted "
        "as growth"
    )
    await shop.changes.reject(
        number=view.number, actor=ALICE, reason="not yet", may_reject_others=False
    )
    async with shop.engine.begin() as conn:  # a row queuebot never touched fails
        await conn.execute(
            sa.text(
                "UPDATE dev_r_worker_queue SET status = 'failed', error_message = 'oom' "
                "WHERE id = (SELECT min(id) FROM dev_r_worker_queue WHERE status = 'queued')"
            )
        )
    with pytest.raises(PreconditionFailed) as growing:
        await by_id()
    refusal = said(growing.value)
    assert (
        f"(+3); 2 of the dead now are jobs queuebot redrove (P-{number}) that may have been "
        "out of the dead letters at 03:00 UTC and died again since, not counted: +1 counted "
        "as growth; retry after 03:23 UTC at the latest, when the count compared with is one "
        "written after the rise (a count at least 10 min old; [redrive] growth_window_minutes "
        "sets it); if you know the outage is over, add --override-growth"
    ) in refusal
