"""Staged redrive on SQLite and PostgreSQL with a simulated worker: a sample, then waves of
10, 20, 40 ... that start only after success; a re-failure halts; rollback; audit."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
import sqlalchemy as sa

from bot.render_text import render_message
from services.audit import Actor
from services.changes.model import ChangeKind, RequestState
from services.errors import Conflict, NotFound, PreconditionFailed
from services.estate.model import DeadFilter
from services.estate.ops import Selector
from services.plans.messages import plan_message
from services.plans.model import PlanState, WaveOutcome
from services.reads import samples
from tests.integration.support import (
    START,
    Shop,
    add_dead_letters,
    assert_trail_holds,
    said,
    simulated_worker,
)

ALICE = Actor("alice", "console", "alice")
BOB = Actor("bob", "console", "bob")
DORA = Actor("dora", "console", "dora")
ERROR = "transcoder pod evicted while rendering clip 77"


@pytest.fixture(autouse=True)
async def trail_holds(shop: Shop) -> AsyncIterator[None]:
    """After every test here, the audit trail holds, cross-checked with the state tables."""
    yield
    await assert_trail_holds(shop)


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

    first = await shop.changes.approve(number=number, actor=BOB)  # 200 rows: two approvers
    assert not first.executed and await pending_count(shop) == before
    decision = await shop.changes.approve(number=number, actor=DORA)
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
    await add_dead_letters(shop.engine, count=60, error=ERROR)
    await flat_history(shop)
    number = await request_plan(shop)
    plan_no = (await shop.changes.approve(number=number, actor=BOB)).view.result.plan
    await simulated_worker(shop.engine, now=shop.clock.now)
    await tick(shop)  # wave 1 (10) starts and stays unclaimed
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
    await add_dead_letters(shop.engine, count=60, error=ERROR)
    await flat_history(shop)
    number = await request_plan(shop)
    plan_no = (await shop.changes.approve(number=number, actor=BOB)).view.result.plan
    await simulated_worker(shop.engine, now=shop.clock.now)
    await tick(shop)  # the sample succeeded: wave 1 (10) starts
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

    resume = await shop.changes.request(
        kind=ChangeKind.RESUME,
        queue=None,
        selector=Selector(plan=plan_no),
        reason="the one failure was a flaky node",
        actor=ALICE,
    )
    await shop.changes.approve(number=resume.number, actor=BOB)
    await tick(shop, 60)
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
    rollback = await shop.changes.request(
        kind=ChangeKind.ROLLBACK,
        queue=None,
        selector=Selector(plan=plan_no),
        reason="fix did not hold",
        actor=ALICE,
    )
    await shop.changes.approve(number=rollback.number, actor=BOB)
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


async def test_refused_when_every_source_object_is_gone(shop: Shop) -> None:
    await flat_history(shop)
    with pytest.raises(PreconditionFailed, match="source object exists: FAILED") as refused:
        await request_plan(shop, error_like="NoSuchKey")
    assert "8 job(s) without their source object excluded" in refused.value.message


async def test_refused_when_the_error_is_permanent(shop: Shop) -> None:
    await flat_history(shop)
    with pytest.raises(
        PreconditionFailed, match="failure not classified permanent: FAILED"
    ) as refused:
        await request_plan(shop, error_like="moov atom")
    assert "5 job(s) with a permanent error excluded" in refused.value.message


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
    await add_dead_letters(shop.engine, count=60, error=ERROR)
    await flat_history(shop)
    number = await request_plan(shop)
    plan_no = (await shop.changes.approve(number=number, actor=BOB)).view.result.plan
    await simulated_worker(shop.engine, now=shop.clock.now)
    await tick(shop)  # the sample succeeded; wave 1 (10) starts and stays unclaimed
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
    rollback = await shop.changes.request(
        kind=ChangeKind.ROLLBACK,
        queue=None,
        selector=Selector(plan=plan_no),
        reason="fix did not hold",
        actor=ALICE,
    )
    await shop.changes.approve(number=rollback.number, actor=BOB)
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
