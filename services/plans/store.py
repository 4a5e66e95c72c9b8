"""The plan's rows: ``qb_plans`` and ``qb_plan_items``, read and written as typed records.

Every function here runs inside the caller's transaction: it takes the caller's
connection and never begins or commits.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services import scheduler
from services.audit import row_digest
from services.db.tables import Plan, PlanItem
from services.errors import NotFound, PlanActive, PlanStateConflict
from services.estate.ops import ItemRef
from services.plans.model import (
    ACTIVE,
    REDRIVEN_STATES,
    ItemState,
    PlanItemRow,
    PlanRow,
    PlanState,
    PlanView,
    Waves,
)

TICK = "plan.tick"
PLANS = cast(sa.Table, Plan.__table__)
ITEMS = cast(sa.Table, PlanItem.__table__)
# the items a plan redrove and did not return itself (redriven, succeeded, dead again...)
_REDRIVEN_KEPT = [s.value for s in REDRIVEN_STATES if s is not ItemState.ROLLED_BACK]
_ACTIVE = sa.select(PLANS).where(PLANS.c.state.in_([s.value for s in ACTIVE])).order_by(PLANS.c.id)
COPY_BATCH = 50_000  # request items copied into a plan's by one statement
_MARK_CHUNK = 5000


async def lock(conn: AsyncConnection, number: int) -> PlanRow:
    """The plan's row, locked for this transaction (``UPDATE ... SET state = state``), so
    ticks from several replicas, a halt and an approval take turns."""
    row = (
        (
            await conn.execute(
                PLANS.update()
                .where(PLANS.c.id == number)
                .values(state=PLANS.c.state)
                .returning(*PLANS.c)
            )
        )
        .mappings()
        .first()
    )
    if row is None:
        raise NotFound(f"no plan P-{number}; plans are numbered P-1, P-2, ...")
    return PlanRow.from_row(row)


async def lock_in(
    conn: AsyncConnection, number: int, *, states: Sequence[PlanState], action: str
) -> PlanRow:
    """The plan, locked (see ``lock``), which must be in one of ``states`` for ``action``."""
    plan = await lock(conn, number)
    if plan.state not in states:
        raise PlanStateConflict(
            number=number, state=plan.state, needed=tuple(states), action=action
        )
    return plan


async def require(
    conn: AsyncConnection, *, number: int, states: Sequence[PlanState], action: str
) -> PlanRow:
    """The plan, which must be in one of ``states`` for ``action``."""
    row = (await conn.execute(sa.select(PLANS).where(PLANS.c.id == number))).mappings().first()
    if row is None:
        raise NotFound(f"no plan P-{number}; plans are numbered P-1, P-2, ...")
    plan = PlanRow.from_row(row)
    if plan.state not in states:
        raise PlanStateConflict(
            number=number, state=plan.state, needed=tuple(states), action=action
        )
    return plan


async def active_plan(conn: AsyncConnection, queue: str) -> int | None:
    found = await conn.execute(
        sa.select(PLANS.c.id).where(
            PLANS.c.queue == queue, PLANS.c.state.in_([s.value for s in ACTIVE])
        )
    )
    row = found.first()
    return int(row[0]) if row else None


async def halted(conn: AsyncConnection) -> list[int]:
    """The halted plans' numbers."""
    found = await conn.execute(
        sa.select(PLANS.c.id).where(PLANS.c.state == PlanState.HALTED.value).order_by(PLANS.c.id)
    )
    return [int(r[0]) for r in found.all()]


async def ensure_no_active_plan(conn: AsyncConnection, queue: str) -> None:
    """One plan per queue: refuse while a running or halted plan exists."""
    running = await active_plan(conn, queue)
    if running is not None:
        raise PlanActive(queue=queue, plan=running)


async def queue_of(conn: AsyncConnection, number: int) -> str:
    queue = (
        await conn.execute(sa.select(PLANS.c.queue).where(PLANS.c.id == number))
    ).scalar_one_or_none()
    if queue is None:
        raise NotFound(f"no plan P-{number}; plans are numbered P-1, P-2, ...")
    return str(queue)


async def incident_of(conn: AsyncConnection, number: int) -> str | None:
    """The incident the plan was asked under (``--incident``), if any: a request about the
    plan belongs to it too."""
    found = (await conn.execute(sa.select(PLANS.c.incident).where(PLANS.c.id == number))).first()
    if found is None:
        raise NotFound(f"no plan P-{number}; plans are numbered P-1, P-2, ...")
    return None if found[0] is None else str(found[0])


async def view(conn: AsyncConnection, number: int) -> PlanView:
    row = (await conn.execute(sa.select(PLANS).where(PLANS.c.id == number))).mappings().first()
    if row is None:
        raise NotFound(f"no plan P-{number}; plans are numbered P-1, P-2, ...")
    grouped = await conn.execute(
        sa.select(ITEMS.c.state, sa.func.count())
        .where(ITEMS.c.plan_id == number)
        .group_by(ITEMS.c.state)
    )
    return _view(PlanRow.from_row(row), {str(k): int(n) for k, n in grouped.all()})


async def active_views(conn: AsyncConnection) -> list[PlanView]:
    """Every running or halted plan, oldest first, in one statement: its jobs counted as
    its waves keep them (each wave's counts move with its items, in the same transaction,
    and its posts say them), so a plan of a million jobs costs what one of ten does."""
    rows = (await conn.execute(_ACTIVE)).mappings()
    return [_view(plan, _counted(plan)) for plan in map(PlanRow.from_row, rows.all())]


def _counted(plan: PlanRow) -> dict[str, int]:
    """The plan's items by state as its waves counted them: those redriven and not yet
    settled are the rest of what its waves took out of the dead letters."""
    waves = plan.waves.waves
    counts = {
        ItemState.SUCCEEDED.value: sum(w.succeeded for w in waves),
        ItemState.REDEAD.value: sum(w.redead for w in waves),
        ItemState.ROLLED_BACK.value: sum(w.rolled_back for w in waves),
        ItemState.UNKNOWN.value: sum(w.unknown for w in waves),
    }
    counts[ItemState.REDRIVEN.value] = max(0, sum(w.changed for w in waves) - sum(counts.values()))
    return counts


def _view(plan: PlanRow, counts: dict[str, int]) -> PlanView:
    return PlanView(
        number=plan.id,
        queue=plan.queue,
        state=plan.state,
        request=plan.request_id,
        reason=plan.reason,
        requester=plan.requester,
        approvers=plan.approvers,
        total=plan.total,
        redriven=sum(counts.get(s.value, 0) for s in REDRIVEN_STATES),
        succeeded=counts.get(ItemState.SUCCEEDED.value, 0),
        redead=counts.get(ItemState.REDEAD.value, 0),
        rolled_back=counts.get(ItemState.ROLLED_BACK.value, 0),
        unknown=counts.get(ItemState.UNKNOWN.value, 0),
        schedule=list(plan.waves.schedule),
        waves=list(plan.waves.waves),
        note=plan.note,
        updated_at=plan.updated_at,
        incident=plan.incident,
        message_ref=plan.message_ref,
    )


async def insert_plan(conn: AsyncConnection, values: dict[str, Any]) -> int:
    return int(
        (await conn.execute(PLANS.insert().values(**values).returning(PLANS.c.id))).scalar_one()
    )


async def request_items(conn: AsyncConnection, request: int) -> int:
    """How many rows the change request froze (its items)."""
    return await row_digest.count(conn, request)


async def items_from_request(conn: AsyncConnection, *, plan: int, request: int, total: int) -> None:
    """The plan's items, copied by the database from its approved request's ``total``
    items: in the same order (each job's rows next to one another, as the freeze kept
    them), waiting, each with the state it was frozen in, which a rollback puts back. A
    statement per ``COPY_BATCH`` items, so none grows with the plan (each stays well
    within the statement timeout); none of the rows comes through queuebot."""
    build = "json_build_object" if conn.dialect.name == "postgresql" else "json_object"

    def waiting(c: sa.ColumnCollection[str, sa.Column[Any]]) -> list[Any]:
        return [
            sa.literal(plan, sa.BigInteger),
            c.seq,
            c.job_id,
            c.part,
            sa.null(),
            sa.literal(ItemState.WAITING.value),
            c.signature,
            getattr(sa.func, build)("status", c.state),
        ]

    columns = ["plan_id", "seq", "job_id", "message_id", "wave", "state", "signature", "original"]
    for first in range(0, total, COPY_BATCH):
        batch = row_digest.copied(request, waiting, first=first, end=first + COPY_BATCH)
        await conn.execute(ITEMS.insert().from_select(columns, batch))


async def next_items(conn: AsyncConnection, plan: PlanRow, size: int) -> list[PlanItemRow]:
    """The next ``size`` items in plan order, from the plan's cursor, and any more items
    of the last one's job: a job's items are next to one another, and a wave takes a job
    whole (the first wave to redrive a job's dead letter would otherwise leave its next
    one to a wave that finds the job no longer failed). Items are numbered 0, 1, 2, ...
    within their plan, so each read is a range bounded on both sides: whatever plan the
    database picks (statistics taken while the table was empty expect a handful of rows
    and chose a scan and sort of every remaining item), it reads one wave."""
    items = await _items_between(conn, plan.id, plan.cursor, plan.cursor + size)
    ahead = 1  # past the wave's end: one item (the next job's, nearly always), then more
    while items:
        start = items[-1].seq + 1
        after = await _items_between(conn, plan.id, start, start + ahead)
        same = list(itertools.takewhile(lambda i: i.job_id == items[-1].job_id, after))
        items.extend(same)
        if len(same) < ahead:
            break
        ahead *= 2
    return items


async def _items_between(
    conn: AsyncConnection, plan: int, first: int, end: int
) -> list[PlanItemRow]:
    rows = await conn.execute(
        sa.select(ITEMS)
        .where(ITEMS.c.plan_id == plan, ITEMS.c.seq >= first, ITEMS.c.seq < end)
        .order_by(ITEMS.c.seq)
    )
    return [PlanItemRow.from_row(r) for r in rows.mappings().all()]


async def items_in(
    conn: AsyncConnection, number: int, *, state: ItemState, wave: int | None = None
) -> list[PlanItemRow]:
    """The plan's items in ``state`` (of one wave, when given)."""
    query = sa.select(ITEMS).where(ITEMS.c.plan_id == number, ITEMS.c.state == state.value)
    if wave is not None:
        query = query.where(ITEMS.c.wave == wave)
    return [PlanItemRow.from_row(r) for r in (await conn.execute(query)).mappings().all()]


async def redriven_refs(conn: AsyncConnection, number: int) -> list[ItemRef]:
    """The items the plan redrove and did not return itself (redriven, succeeded or dead
    again; not rolled back), in plan order, as the profile reads their rows (the job and
    its part; what a rollback puts back is not needed to read a row's state)."""
    rows = await conn.execute(
        sa.select(ITEMS.c.job_id, ITEMS.c.message_id)
        .where(ITEMS.c.plan_id == number, ITEMS.c.state.in_(_REDRIVEN_KEPT))
        .order_by(ITEMS.c.seq)
    )
    return [ItemRef(str(job), part, {}) for job, part in rows.all()]


async def redriven_ref_pages(
    conn: AsyncConnection, number: int, size: int
) -> AsyncIterator[list[ItemRef]]:
    """``redriven_refs`` a page of about ``size`` at a time, each job's items in one page
    (a job's items are next to one another: a full page leaves its last job to the next,
    unless that job fills the page alone)."""
    after = -1
    while True:
        rows = (
            await conn.execute(
                sa.select(ITEMS.c.seq, ITEMS.c.job_id, ITEMS.c.message_id)
                .where(
                    ITEMS.c.plan_id == number,
                    ITEMS.c.state.in_(_REDRIVEN_KEPT),
                    ITEMS.c.seq > after,
                )
                .order_by(ITEMS.c.seq)
                .limit(size)
            )
        ).all()
        full = len(rows) == size
        if full:
            last, cut = rows[-1].job_id, len(rows)
            while cut > 0 and rows[cut - 1].job_id == last:
                cut -= 1
            rows = rows[:cut] or rows
        if rows:
            yield [ItemRef(str(job), part, {}) for _, job, part in rows]
            after = rows[-1].seq
        if not full:
            return


def refs(items: Sequence[PlanItemRow]) -> list[ItemRef]:
    return [ItemRef(i.job_id, i.part, i.original) for i in items]


async def signatures_of_wave(conn: AsyncConnection, number: int, wave: int) -> dict[str, str]:
    rows = await conn.execute(
        sa.select(ITEMS.c.job_id, ITEMS.c.signature).where(
            ITEMS.c.plan_id == number, ITEMS.c.wave == wave
        )
    )
    return {str(job): str(sig) for job, sig in rows.all()}


async def record_wave_items(
    conn: AsyncConnection, *, number: int, updates: list[tuple[int, int, ItemState, Any]]
) -> None:
    """Each (seq, wave, state, original) as the item's new values. One statement per
    item, sent together (psycopg pipelines an executemany): measured three times faster
    on a wave of 1,000 than one UPDATE joining the values sent as arrays."""
    if not updates:
        return
    await conn.execute(
        ITEMS.update()
        .where(ITEMS.c.plan_id == sa.bindparam("p"), ITEMS.c.seq == sa.bindparam("s"))
        .values(wave=sa.bindparam("w"), state=sa.bindparam("st"), original=sa.bindparam("o")),
        [
            {"p": number, "s": seq, "w": wave, "st": state.value, "o": original}
            for seq, wave, state, original in updates
        ],
    )


async def mark(
    conn: AsyncConnection,
    number: int,
    jobs: list[str],
    state: ItemState,
    *,
    wave: int | None = None,
) -> int:
    """Redriven items of ``jobs`` (of one wave, when given) are now in ``state``; how many
    items moved. A tick names its wave, so the statement reads that wave's items through
    the (plan, wave) index instead of every item of the plan: a wave of ten in a plan of
    100,000 reads ten rows."""
    moved = 0
    for start in range(0, len(jobs), _MARK_CHUNK):
        query = ITEMS.update().where(
            ITEMS.c.plan_id == number,
            ITEMS.c.job_id.in_(jobs[start : start + _MARK_CHUNK]),
            ITEMS.c.state == ItemState.REDRIVEN.value,
        )
        if wave is not None:
            query = query.where(ITEMS.c.wave == wave)
        moved += (await conn.execute(query.values(state=state.value))).rowcount
    return moved


async def set_state(
    conn: AsyncConnection, number: int, state: PlanState, note: str, now: datetime
) -> None:
    await conn.execute(
        PLANS.update()
        .where(PLANS.c.id == number)
        .values(state=state.value, note=note, updated_at=now)
    )


async def set_note(conn: AsyncConnection, number: int, note: str, now: datetime) -> None:
    await conn.execute(PLANS.update().where(PLANS.c.id == number).values(note=note, updated_at=now))


async def save_waves(conn: AsyncConnection, number: int, waves: Waves, now: datetime) -> None:
    await conn.execute(
        PLANS.update().where(PLANS.c.id == number).values(waves=waves.as_json(), updated_at=now)
    )


async def wave_started(
    conn: AsyncConnection,
    plan: PlanRow,
    *,
    taken: int,
    waves: Waves,
    dead_before: int,
    now: datetime,
) -> None:
    """A wave of ``taken`` items started now: move the cursor, keep the count before."""
    current = waves.current
    await conn.execute(
        PLANS.update()
        .where(PLANS.c.id == plan.id)
        .values(
            cursor=plan.cursor + taken,
            wave=current.number if current else -1,
            wave_size=taken,
            wave_started_at=now,
            dead_at_wave_start=dead_before,
            note=None,
            waves=waves.as_json(),
            updated_at=now,
        )
    )


async def next_tick(conn: AsyncConnection, number: int, *, due: datetime, now: datetime) -> None:
    await scheduler.schedule(conn, kind=TICK, subject=str(number), due_at=due, created_at=now)


async def no_more_ticks(conn: AsyncConnection, number: int) -> None:
    await scheduler.unschedule(conn, kind=TICK, subject=str(number))
