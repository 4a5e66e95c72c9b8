"""A third queue profile, for tests only: one table ``tasks`` where a row is a task and
``state`` says where it is (ready, working, finished, dead, cancelled).

It exists to show that a queue design neither shipped profile knows can be written in one
file and pass the same contract tests (tests/integration/test_profile_contract.py). It is
deliberately simple but complete: every read, the guarded writes (``changes``) and the
staged-redrive operations (``plan_ops``) work on SQLite and PostgreSQL. Its contract-test
adapter, ``SingleTableAdapter``, is at the end of this file.

The design, and how it differs from the shipped ones:

* one table, integer ids, no failure reason, no job type, no tenant, no dedup key;
* a dead task is redriven to ``ready`` with its attempts and error cleared, and is
  cancelled to ``cancelled``; there is no requeue (nothing is "failed but retrying");
* the table keeps no events, so redrives are counted in queuebot's ``qb_redrive_log``
  (where the worker_queue profile counts them too);
* ``dead_order`` is by ``updated_at``: the most recently dead task first.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, ClassVar, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.config import QueueConfig
from services.db.tables import RedriveLog
from services.errors import NotFound, UsageError
from services.estate.model import (
    CanonicalState,
    Count,
    DeadFilter,
    DuplicateGroup,
    JobDetail,
    JobList,
    JobSummary,
    StatusCount,
    Triage,
)
from services.estate.ops import (
    Action,
    Applied,
    Death,
    Frozen,
    Ineligible,
    ItemRef,
    Selector,
    Target,
    WaveStatus,
    chunk_for,
    chunks,
    restored,
)
from services.estate.profile import QueueProfile, as_utc, count_map, plain, row_dict
from services.estate.signature import (
    SIGNATURE_SAMPLE,
    display_signature,
    error_signature,
    top_signatures,
)
from services.estate.tables import BoundTable, IndexPlan, TableSpec
from tests.integration.profile_adapters import ProfileAdapter

ROLE = "tasks"
DDL = {
    "postgresql": """
-- single_table estate (tests only): one table, tasks.
CREATE TABLE IF NOT EXISTS tasks (
  id          BIGSERIAL PRIMARY KEY,
  state       TEXT NOT NULL DEFAULT 'ready' CHECK (state IN (
                'ready', 'working', 'finished', 'dead', 'cancelled')),
  last_error  TEXT,
  attempts    INTEGER NOT NULL DEFAULT 0,
  enqueued_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  locked_at   TIMESTAMPTZ,
  updated_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
""",
    "sqlite": """
-- single_table estate (tests only) for SQLite: timestamps are UTC text.
CREATE TABLE IF NOT EXISTS tasks (
  id          INTEGER PRIMARY KEY AUTOINCREMENT,
  state       TEXT NOT NULL DEFAULT 'ready' CHECK (state IN (
                'ready', 'working', 'finished', 'dead', 'cancelled')),
  last_error  TEXT,
  attempts    INTEGER NOT NULL DEFAULT 0,
  enqueued_at DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
  locked_at   DATETIME,
  updated_at  DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
""",
}
# What a redrive or a cancel takes a task out of, and why anything else is not taken.
CHANGEABLE = "dead"
WHY_NOT = {
    "ready": "already waiting to run",
    "working": "a worker holds it right now",
    "finished": "already finished",
    "cancelled": "cancelled on purpose; never redriven",
}
# What a rollback puts back (a redrive changes exactly these).
RESTORED = ("state", "attempts", "last_error", "enqueued_at", "locked_at", "updated_at")
TERMINAL = ("finished", "dead", "cancelled")

_log = cast(sa.Table, RedriveLog.__table__)


class SingleTableProfile(QueueProfile):
    name = "single_table"
    specs = (
        TableSpec(
            ROLE,
            "tasks",
            ("id", "state", "last_error", "attempts", "enqueued_at", "locked_at", "updated_at"),
        ),
    )
    status_column = "state"
    states = {
        "ready": CanonicalState.PENDING,
        "working": CanonicalState.IN_FLIGHT,
        "finished": CanonicalState.SUCCEEDED,
        "dead": CanonicalState.DEAD,
        "cancelled": CanonicalState.CANCELLED,
    }

    @classmethod
    def ddl(cls, dialect: str) -> str:
        return DDL["postgresql" if dialect == "postgresql" else "sqlite"]

    def __init__(self, queue: str, config: QueueConfig) -> None:
        super().__init__(queue, config)
        self.triage_reads = SingleTableTriage(self)
        self.changes = SingleTableChanges(self)
        self.plan_ops = SingleTablePlanOps(self)

    def index_plan(self) -> list[IndexPlan]:
        return [
            (ROLE, "state_updated", ("state", "updated_at"), None, "counts; newest dead first"),
            (ROLE, "working_locked", ("state", "locked_at"), ("state", ("working",)), "stuck"),
        ]

    async def table(self, conn: AsyncConnection) -> BoundTable:
        return (await self.tables(conn))[ROLE]

    def _no_groups(self, what: str) -> UsageError:
        return UsageError(
            f"queue {self.queue!r} ({self.name}) has no {what}; its tasks are one table with "
            "no types, tenants or failure reasons: filter dead tasks with --error-like TEXT"
        )

    # -- reads ---------------------------------------------------------------------------

    async def show(self, conn: AsyncConnection, *, job_id: str) -> JobDetail:
        t = await self.table(conn)
        key = self.coerce_id(t.c("id"), job_id)
        row = (await conn.execute(sa.select(t.table).where(t.c("id") == key))).first()
        if row is None:
            raise NotFound(f"no task {job_id} in queue {self.queue!r} ({t.name}.id)")
        data = row_dict(row)
        status = str(data[t.c("state").name])
        return JobDetail(
            queue=self.queue,
            job_id=str(plain(row._mapping[t.c("id").name])),
            status=status,
            canonical=self.canonical(status),
            row=data,
            sections=[],
            events=[],
            events_note=f"{t.name} keeps no events; queuebot's own audit trail records "
            "every change it makes",
        )

    def dead_where(
        self, tables: dict[str, BoundTable], filters: DeadFilter
    ) -> list[sa.ColumnElement[bool]]:
        t = tables[ROLE]
        for what, value in (
            ("tenants", filters.tenant),
            ("failure reasons", filters.reason),
            ("job types", filters.job_type),
        ):
            if value is not None:
                raise self._no_groups(what)
        where: list[sa.ColumnElement[bool]] = [t.c("state").in_(self.dead_letter_statuses)]
        if filters.error_like is not None:
            where.append(t.c("last_error").icontains(filters.error_like, autoescape=True))
        if filters.job_ids is not None:
            where.append(t.isin("id", [self.coerce_id(t.c("id"), j) for j in filters.job_ids]))
        if filters.args_like is not None:  # it keeps no arguments: refused, saying so
            where.append(self.args_where(tables, filters.args_like))
        return where

    def dead_order(self, tables: dict[str, BoundTable]) -> list[sa.ColumnElement[Any]]:
        t = tables[ROLE]
        return [t.c("updated_at").desc(), t.c("id").desc()]

    def _summary(self, t: BoundTable, row: sa.Row[Any], note: str | None = None) -> JobSummary:
        m = row._mapping
        status = str(m[t.c("state").name])
        return JobSummary(
            id=str(plain(m[t.c("id").name])),
            status=status,
            canonical=self.canonical(status),
            reason=None,
            error=m[t.c("last_error").name],
            group=None,
            attempts=m[t.c("attempts").name],
            at=as_utc(m[t.c("updated_at").name]),
            note=note,
        )

    async def dead(self, conn: AsyncConnection, *, filters: DeadFilter) -> JobList:
        tables = await self.tables(conn)
        t = tables[ROLE]
        where = self.dead_where(tables, filters)
        total = (await conn.execute(sa.select(sa.func.count()).where(*where))).scalar_one()
        listing = (
            sa.select(t.table).where(*where).order_by(*self.dead_order(tables)).limit(filters.limit)
        )
        rows = [self._summary(t, r) for r in (await conn.execute(listing)).all()]
        return JobList(total=int(total), rows=rows)

    async def stuck(self, conn: AsyncConnection, *, now: datetime, limit: int) -> JobList:
        t = await self.table(conn)
        cond = self.triage_reads.stuck_where({ROLE: t}, now)
        total = (await conn.execute(sa.select(sa.func.count()).where(*cond))).scalar_one()
        listing = sa.select(t.table).where(*cond).order_by(t.c("locked_at")).limit(limit)
        rows = []
        for r in (await conn.execute(listing)).all():
            locked = as_utc(r._mapping[t.c("locked_at").name])
            minutes = int((now - locked).total_seconds() // 60) if locked else 0
            rows.append(self._summary(t, r, note=f"locked by a worker {minutes}m ago"))
        return JobList(total=int(total), rows=rows)

    async def duplicates(self, conn: AsyncConnection, *, limit: int) -> list[DuplicateGroup]:
        """Always none: a task row carries no key (issue, message, payload hash) that two
        rows of the same piece of work would share, so there is nothing to match on."""
        return []


class SingleTableTriage:
    """The profile's triage (its ``triage_reads``), as every profile's is a class of its
    own: counts by state, the oldest ready task, the stuck ones and the newest dead tasks'
    errors."""

    def __init__(self, profile: SingleTableProfile) -> None:
        self.profile = profile

    async def triage(
        self,
        conn: AsyncConnection,
        *,
        now: datetime,
        since: datetime | None,
        job_type: str | None,
        exact: bool = False,
    ) -> Triage:
        p = self.profile
        if job_type is not None:
            raise p._no_groups("job types")
        t = await p.table(conn)
        state = t.c("state")
        where: list[sa.ColumnElement[bool]] = []
        if since is not None:
            where.append(t.c("enqueued_at") >= since)
        grouped = sa.select(state, sa.func.count()).where(*where).group_by(state)
        counts = count_map((await conn.execute(grouped)).all())
        extras = sa.select(
            self._oldest(t, where).scalar_subquery(),
            sa.select(sa.func.count())
            .where(*self.stuck_where({ROLE: t}, now), *where)
            .scalar_subquery(),
        )
        oldest, stuck = (await conn.execute(extras)).one()
        newest = (
            sa.select(t.c("last_error"))
            .where(state == "dead", *where)
            .order_by(t.c("updated_at").desc())
            .limit(SIGNATURE_SAMPLE)
        )
        sig_rows = top_signatures(r[0] for r in await conn.execute(newest))
        dead_total = p.dead_count(counts)
        return Triage(
            queue=p.queue,
            profile=p.name,
            unit="tasks",
            dead_title="Dead tasks",
            duplicate_label="duplicate tasks (tasks carry no key to match on)",
            taken_at=now,
            since=since,
            total=sum(counts.values()),
            status_title="state",
            by_status=[
                StatusCount(s, p.canonical(s), n)
                for s, n in sorted(counts.items(), key=lambda kv: -kv[1])
            ],
            by_signature=[Count(display_signature(s), n) for s, n in sig_rows],
            signatures_of=min(dead_total, SIGNATURE_SAMPLE),
            signatures_total=dead_total,
            oldest_pending_at=as_utc(oldest),
            stuck=int(stuck or 0),
        )

    async def oldest_pending_at(self, conn: AsyncConnection) -> datetime | None:
        t = await self.profile.table(conn)
        return as_utc((await conn.execute(self._oldest(t, []))).scalar_one())

    @staticmethod
    def _oldest(t: BoundTable, where: list[sa.ColumnElement[bool]]) -> sa.Select[Any]:
        return sa.select(sa.func.min(t.c("enqueued_at"))).where(t.c("state") == "ready", *where)

    def stuck_where(
        self, tables: Mapping[str, BoundTable], now: datetime
    ) -> list[sa.ColumnElement[bool]]:
        t = tables[ROLE]
        return [t.c("state") == "working", t.c("locked_at") < self.profile.stuck_cutoff(now)]


class SingleTableChanges:
    """Redrive (dead -> ready, attempts and error cleared) and cancel (dead -> cancelled),
    each guarded on the state the row was frozen in."""

    def __init__(self, profile: SingleTableProfile) -> None:
        self.profile = profile

    async def freeze(self, conn: AsyncConnection, *, action: Action, selector: Selector) -> Frozen:
        p = self.profile
        if action is Action.REQUEUE:
            raise UsageError(
                f"queue {p.queue!r} ({p.name}) has no requeue: its tasks are never failed "
                "and waiting for a retry, only dead; use /queue redrive ID --reason ..."
            )
        if selector.duplicates or selector.failure_reason is not None:
            raise UsageError(
                f"--duplicates and --failure-reason do not apply to queue {p.queue!r} "
                f"({p.name}): its tasks have no dedup key or failure reason; name the task ids"
            )
        t = await p.table(conn)
        keys = {raw: p.coerce_id(t.c("id"), raw) for raw in selector.ids}
        found: dict[Any, sa.Row[Any]] = {}
        for part in chunks(list(keys.values()), chunk_for(t.dialect)):
            for r in (await conn.execute(sa.select(t.table).where(t.isin("id", part)))).all():
                found[r._mapping[t.c("id").name]] = r
        targets: list[Target] = []
        ineligible: list[Ineligible] = []
        for raw, key in keys.items():
            row = found.get(key)
            if row is None:
                ineligible.append(Ineligible(raw, "not found"))
                continue
            state = str(row._mapping[t.c("state").name])
            if state == CHANGEABLE:
                targets.append(self._target(t, row))
            else:
                ineligible.append(Ineligible(raw, f"{state}: {WHY_NOT.get(state, 'not dead')}"))
        return Frozen(targets, ineligible)

    def _target(self, t: BoundTable, row: sa.Row[Any]) -> Target:
        m = row._mapping
        key = plain(m[t.c("id").name])
        return Target(
            id=str(key),
            key={"id": key},
            state=str(m[t.c("state").name]),
            signature=display_signature(error_signature(m[t.c("last_error").name])),
            row=dict(m),
        )

    async def apply(
        self,
        conn: AsyncConnection,
        *,
        action: Action,
        targets: list[Target],
        now: datetime,
        note: str,
        duplicates: bool,
    ) -> Applied:
        p = self.profile
        t = await p.table(conn)
        if action is Action.REDRIVE:
            values: dict[str, Any] = {
                t.c("state").name: "ready",
                t.c("attempts").name: 0,
                t.c("last_error").name: None,
                t.c("locked_at").name: None,
                t.c("enqueued_at").name: now,
                t.c("updated_at").name: now,
            }
        elif action is Action.CANCEL:
            values = {t.c("state").name: "cancelled", t.c("updated_at").name: now}
        else:
            raise UsageError(f"queue {p.queue!r} ({p.name}) has no requeue; use redrive")
        by_state: dict[str, list[Target]] = defaultdict(list)
        for target in targets:
            by_state[target.state].append(target)
        changed: list[str] = []
        before: list[tuple[str, dict[str, Any]]] = []
        id_name = t.c("id").name
        for state, group in by_state.items():
            ids = [p.coerce_id(t.c("id"), x.id) for x in group]
            for part in chunks(ids, chunk_for(t.dialect)):
                guard = sa.and_(t.isin("id", part), t.c("state") == state)
                rows = await conn.execute(sa.select(t.table).where(guard).with_for_update())
                before.extend(
                    (str(plain(r._mapping[id_name])), dict(r._mapping)) for r in rows.all()
                )
                done = await conn.execute(
                    t.table.update().where(guard).values(values).returning(t.c("id"))
                )
                changed.extend(str(plain(r[0])) for r in done.all())
        moved = set(changed)
        skipped = [
            Ineligible(x.id, f"moved on since the request (was {x.state})")
            for x in targets
            if x.id not in moved
        ]
        return Applied(changed=changed, skipped=skipped, before=before)


class SingleTablePlanOps:
    has_sources = False  # a task names no stored object

    def __init__(self, profile: SingleTableProfile) -> None:
        self.profile = profile

    def _keys(self, t: BoundTable, job_ids: Sequence[str]) -> list[Any]:
        return [self.profile.coerce_id(t.c("id"), j) for j in job_ids]

    async def candidate_query(self, conn: AsyncConnection, *, selector: Selector) -> sa.Select[Any]:
        tables = await self.profile.tables(conn)
        return (
            sa.select(tables[ROLE].c("id"))
            .where(*self.profile.dead_where(tables, selector.dead_filter()))
            .order_by(*self.profile.dead_order(tables))
        )

    async def candidate_ids(self, conn: AsyncConnection, *, selector: Selector) -> list[str]:
        rows = await conn.execute(await self.candidate_query(conn, selector=selector))
        return [str(plain(r[0])) for r in rows.all()]

    async def source_missing(
        self, conn: AsyncConnection, *, targets: list[Target]
    ) -> dict[str, str]:
        return {}

    async def redrive_counts(
        self, conn: AsyncConnection, *, targets: list[Target]
    ) -> dict[str, int]:
        counts: dict[str, int] = {}
        ids = [x.id for x in targets]
        for part in chunks(ids, chunk_for(conn.dialect.name)):
            rows = await conn.execute(
                sa.select(_log.c.job_id, sa.func.count())
                .where(_log.c.queue == self.profile.queue, _log.c.job_id.in_(part))
                .group_by(_log.c.job_id)
            )
            counts.update({str(j): int(n) for j, n in rows.all()})
        return counts

    async def originals(
        self, conn: AsyncConnection, *, items: list[ItemRef]
    ) -> dict[str, dict[str, Any]]:
        t = await self.profile.table(conn)
        cols = [t.c("id"), *(t.c(c) for c in RESTORED)]
        out: dict[str, dict[str, Any]] = {}
        for part in chunks(self._keys(t, [i.job_id for i in items]), chunk_for(t.dialect)):
            for r in (await conn.execute(sa.select(*cols).where(t.isin("id", part)))).all():
                out[str(plain(r[0]))] = dict(zip(RESTORED, (plain(v) for v in r[1:]), strict=True))
        return out

    async def wave_status(self, conn: AsyncConnection, *, items: list[ItemRef]) -> WaveStatus:
        t = await self.profile.table(conn)
        terminal = open_ = 0
        redead: list[tuple[str, str | None]] = []
        succeeded: list[str] = []
        open_jobs: list[str] = []
        for part in chunks(self._keys(t, [i.job_id for i in items]), chunk_for(t.dialect)):
            rows = await conn.execute(
                sa.select(t.c("id"), t.c("state"), t.c("last_error")).where(t.isin("id", part))
            )
            for job, state, error in rows.all():
                if state not in TERMINAL:
                    open_ += 1
                    open_jobs.append(str(plain(job)))
                    continue
                terminal += 1
                if state in self.profile.dead_letter_statuses:
                    redead.append((str(plain(job)), error))
                elif state == "finished":
                    succeeded.append(str(plain(job)))
        return WaveStatus(
            terminal=terminal, open=open_, redead=redead, succeeded=succeeded, open_jobs=open_jobs
        )

    async def unclaimed(self, conn: AsyncConnection, *, items: list[ItemRef]) -> list[str]:
        t = await self.profile.table(conn)
        out: list[str] = []
        for part in chunks(self._keys(t, [i.job_id for i in items]), chunk_for(t.dialect)):
            rows = await conn.execute(
                sa.select(t.c("id")).where(
                    t.isin("id", part), t.c("state") == "ready", t.c("locked_at").is_(None)
                )
            )
            out.extend(str(plain(r[0])) for r in rows.all())
        return out

    async def rollback(
        self, conn: AsyncConnection, *, items: list[ItemRef], now: datetime, note: str
    ) -> list[str]:
        """Redriven tasks no worker locked yet go back to dead with the values they had."""
        t = await self.profile.table(conn)
        back: list[str] = []
        for item in items:
            if not item.original:
                continue
            values = {t.c(c).name: restored(c, item.original.get(c)) for c in RESTORED}
            done = await conn.execute(
                t.table.update()
                .where(
                    t.c("id") == self.profile.coerce_id(t.c("id"), item.job_id),
                    t.c("state") == "ready",
                    t.c("locked_at").is_(None),
                )
                .values(values)
                .returning(t.c("id"))
            )
            if done.first() is not None:
                back.append(item.job_id)
        return back

    async def log_redrives(
        self, conn: AsyncConnection, *, job_ids: list[str], now: datetime
    ) -> None:
        if job_ids:
            await conn.execute(
                _log.insert(),
                [{"queue": self.profile.queue, "job_id": j, "at": now} for j in job_ids],
            )

    async def dead_since(self, conn: AsyncConnection, *, since: datetime) -> list[Death] | None:
        return None  # no record of when a row died: the counts queuebot writes decide


# -- the contract tests' adapter -----------------------------------------------------------


class SingleTableAdapter(ProfileAdapter):
    """Builds known ``tasks`` rows and plays the worker, for the contract tests."""

    profile_class: ClassVar[type[QueueProfile]] = SingleTableProfile
    dead_state: ClassVar[CanonicalState] = CanonicalState.DEAD
    failure_reason: ClassVar[str | None] = None
    missing_id: ClassVar[str] = "987654321"

    @staticmethod
    def config() -> QueueConfig:
        # QueueConfig's profile name is a Literal of the shipped profiles: build it unchecked.
        return QueueConfig.model_construct(profile="single_table")  # type: ignore[arg-type]

    def __init__(self, profile: QueueProfile) -> None:
        assert isinstance(profile, SingleTableProfile)
        self.profile = profile

    async def _insert(self, conn: AsyncConnection, state: str, at: datetime, **values: Any) -> str:
        t = await self.profile.table(conn)
        row = {"state": state, "enqueued_at": at, "updated_at": at, **values}
        done = await conn.execute(
            t.table.insert().values({t.c(k).name: v for k, v in row.items()}).returning(t.c("id"))
        )
        return str(done.scalar_one())

    async def insert(
        self, conn: AsyncConnection, kind: str, at: datetime, error: str | None
    ) -> str:
        if kind == "dead":
            early = at - timedelta(minutes=5)
            return await self._insert(
                conn, "dead", early, attempts=3, last_error=error, locked_at=at, updated_at=at
            )
        if kind == "pending":
            return await self._insert(conn, "ready", at)
        if kind == "done":
            return await self._insert(conn, "finished", at, attempts=1, locked_at=at)
        return await self._insert(conn, "working", at, attempts=1, locked_at=at)

    async def _where(self, conn: AsyncConnection, ids: list[str]) -> tuple[BoundTable, Any]:
        t = await self.profile.table(conn)
        return t, t.c("id").in_([self.profile.coerce_id(t.c("id"), i) for i in ids])

    async def waiting(self, conn: AsyncConnection) -> list[str]:
        t = await self.profile.table(conn)
        rows = await conn.execute(sa.select(t.c("id")).where(t.c("state") == "ready"))
        return [str(r[0]) for r in rows.all()]

    async def claim(self, conn: AsyncConnection, ids: list[str], *, now: datetime) -> None:
        t, where = await self._where(conn, ids)
        await conn.execute(
            t.table.update()
            .where(where, t.c("state") == "ready")
            .values({t.c("state").name: "working", t.c("locked_at").name: now})
        )

    async def complete(self, conn: AsyncConnection, ids: list[str], *, now: datetime) -> None:
        t, where = await self._where(conn, ids)
        await conn.execute(
            t.table.update()
            .where(where, t.c("state").in_(("ready", "working")))
            .values(
                {
                    t.c("state").name: "finished",
                    t.c("attempts").name: t.c("attempts") + 1,
                    t.c("locked_at").name: now,
                    t.c("updated_at").name: now,
                }
            )
        )

    async def fail(
        self, conn: AsyncConnection, ids: list[str], *, now: datetime, error: str
    ) -> None:
        t, where = await self._where(conn, ids)
        await conn.execute(
            t.table.update()
            .where(where, t.c("state").in_(("ready", "working")))
            .values(
                {
                    t.c("state").name: "dead",
                    t.c("attempts").name: t.c("attempts") + 1,
                    t.c("last_error").name: error,
                    t.c("locked_at").name: now,
                    t.c("updated_at").name: now,
                }
            )
        )
