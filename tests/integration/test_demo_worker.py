"""The demo's simulated worker over the demo estate: it finishes what queuebot put back,
fails the jobs the demo's story says are still broken, and leaves the backlog alone."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from services.estate.demo_worker import DemoWorker
from services.estate.ops import Selector
from services.plans.model import PlanState
from services.reads import samples
from tests.helpers.people import ALICE, BOB
from tests.integration.support import Shop
from tests.kinds import ChangeKind


async def plan(shop: Shop, selector: Selector) -> int:
    view = await shop.changes.request(
        kind=ChangeKind.PLAN,
        queue="clips",
        selector=selector,
        reason="transcoder fixed",
        actor=ALICE,
    )
    decision = await shop.changes.approve(number=view.number, actor=BOB)
    assert decision.view.result is not None and decision.view.result.plan is not None
    return decision.view.result.plan


async def run(shop: Shop, worker: DemoWorker, plan_no: int, passes: int = 30) -> PlanState:
    """The worker and the scheduler take turns until the plan stops running."""
    for _ in range(passes):
        await worker.step()
        shop.clock.advance(seconds=5)
        await shop.scheduler.run_due()
        state = (await shop.plans.view(number=plan_no)).state
        if state is not PlanState.RUNNING:
            return state
    return PlanState.RUNNING


async def scalar(shop: Shop, sql: str) -> int:
    async with shop.engine.connect() as conn:
        return int((await conn.execute(sa.text(sql))).scalar_one())


async def test_a_plan_goes_sample_waves_done_and_another_halts_on_a_job_that_dies_again(
    shop: Shop,
) -> None:
    worker = DemoWorker(shop.estate, delay=0)
    backlog = await scalar(shop, "SELECT count(*) FROM queue_messages WHERE status = 'PENDING'")
    assert (await worker.step()).idle  # nothing of queuebot's yet: the backlog stays

    first = await plan(shop, Selector(error_like="ffmpeg", sample=2))
    assert await run(shop, worker, first) is PlanState.COMPLETED
    done = await shop.plans.view(number=first)
    assert done.succeeded == 14 and [w.size for w in done.waves] == [2, 10, 2]

    second = await plan(shop, Selector(all_dead=True))  # what is left: 3 "upstream timeout"
    assert await run(shop, worker, second) is PlanState.HALTED
    halted = await shop.plans.view(number=second)
    assert halted.redead == 3
    assert (
        halted.note is not None
        and "the same signature as before: the fix did not hold" in halted.note
    )
    assert (
        await scalar(shop, "SELECT count(*) FROM queue_messages WHERE status = 'PENDING'")
        == backlog
    )
    assert (
        await scalar(
            shop,
            "SELECT count(*) FROM job_events WHERE event_type = 'DLQ' AND message LIKE '%redrive%'",
        )
        == 3
    )  # the estate's record of the deaths, which the growth check reads


async def test_requeued_rows_finish_and_the_broken_job_type_fails_again(shop: Shop) -> None:
    worker = DemoWorker(shop.estate, delay=0)
    async with shop.engine.connect() as conn:
        rows = (
            await conn.execute(
                sa.text(
                    "SELECT id, job_type, error_message FROM dev_r_worker_queue "
                    "WHERE failure_reason = 'implementation_error' ORDER BY id"
                )
            )
        ).all()
    ids = [str(r[0]) for r in rows]
    before = {str(r[0]): r[2] for r in rows if r[1] == "continue-issue"}
    async with shop.engine.begin() as conn:
        await samples.record(
            conn, profile=shop.estate.profile("workers"), now=shop.clock.now - timedelta(minutes=15)
        )
    request = await shop.changes.request(
        kind=ChangeKind.REQUEUE,
        queue="workers",
        selector=Selector(ids=tuple(ids)),
        reason="allowlist fixed in PR #2081",
        actor=ALICE,
    )
    await shop.changes.approve(number=request.number, actor=BOB)
    for _ in range(3):
        await worker.step()
    async with shop.engine.connect() as conn:
        after = {
            str(r[0]): (r[1], r[2], r[3])
            for r in await conn.execute(
                sa.text(
                    "SELECT id, status, failure_reason, error_message FROM dev_r_worker_queue "
                    f"WHERE id IN ({', '.join(ids)})"
                )
            )
        }
    assert len(before) == 4
    for job, (status, reason, error) in after.items():
        if job in before:  # failed again, with the error it had
            assert (status, reason, error) == ("failed", "implementation_error", before[job])
        else:
            assert status == "done"


async def test_a_deployed_fix_lets_the_halted_plan_resume_to_success(shop: Shop) -> None:
    """`/demo fix transcoder` stands in for the deploy: the jobs that halted the plan
    succeed when it resumes, and the demo lists the fault as fixed."""
    worker = DemoWorker(shop.estate, delay=0)
    assert worker.faults().keys() == {"transcoder", "allowlist"}
    number = await plan(shop, Selector(error_like="upstream timeout", sample=2))
    assert await run(shop, worker, number) is PlanState.HALTED

    worker.fixed.add("transcoder")
    resume = await shop.changes.request(
        kind=ChangeKind.RESUME,
        queue=None,
        selector=Selector(plan=number),
        reason="transcoder fixed for real",
        actor=ALICE,
    )
    await shop.changes.approve(number=resume.number, actor=BOB)
    assert await run(shop, worker, number) is PlanState.COMPLETED
    done = await shop.plans.view(number=number)
    assert done.succeeded == 1 and done.redead == 2  # the sample's two stay dead: not rerun
