"""A message_job change whose rows stay in PostgreSQL: the request copies each frozen
message and its job, as one JSON image, into the request's items with one statement, and
the approval changes the queue from those items with one statement (data-modifying CTEs:
find the rows still in their frozen state and lock them, put the messages back to PENDING
and their jobs to QUEUED, or cancel the jobs, write a job event per job, and record each
changed item with its image from just before the change where that is not the frozen
one). A redrive whose rows are all still at their frozen versions skips the locking
ahead (``apply_kept`` says how). Nothing of the rows but the ids changed comes back to
queuebot; both statements return the digest of the images they kept or changed.

Table and column names come from validated configuration and are quoted; every value is
a bound parameter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from services.audit import row_digest
from services.audit.row_digest import Digest, sql_digest, sql_key_hash, sql_row_hash
from services.errors import PreconditionFailed
from services.estate.message_job.events import CANCEL_EVENT, REDRIVE_EVENT, event_id
from services.estate.message_job.schema import CANCELLED, PENDING, QUEUED
from services.estate.ops import Action, Kept, Target
from services.estate.tables import BoundTable
from services.identifiers import quote_identifier as q

# What a redrive resets on the job, where the team's table has the column.
RESET_JOB = (
    ("attempt_count", 0),
    ("progress_percent", 0),
    ("finished_at", None),
    ("error_message", None),
)


def _array(name: str, values: Sequence[str], params: dict[str, Any]) -> str:
    """A text[] parameter: one comma-joined text the server splits where no value holds a
    comma or is empty (the driver then sends one string instead of quoting each element)."""
    if any("," in v or not v for v in values):  # '' would vanish from the split
        params[name] = list(values)
        return f"CAST(:{name} AS text[])"
    params[name] = ",".join(values)
    return f"string_to_array(:{name}, ',')"


def _type(conn: AsyncConnection, column: sa.Column[Any]) -> str:
    return str(column.type.compile(dialect=conn.dialect))


def _image(m: str, j: str) -> str:
    return f"json_build_object('message', to_json({m}), 'job', to_json({j}))::text"


async def keep(
    conn: AsyncConnection,
    *,
    m: BoundTable,
    j: BoundTable,
    request: int,
    targets: list[Target],
    first: int = 0,
) -> Digest:
    params: dict[str, Any] = {"request": request, "first": first}
    pairs = {s: s.partition("/") for s in {t.state for t in targets}}
    states = [pairs[t.state] for t in targets]
    signatures = list(dict.fromkeys(t.signature for t in targets))
    index = {s: n for n, s in enumerate(signatures, start=1)}
    params["signatures"] = signatures
    # each array unnested in the select list, all in step (one row each per target, in
    # order, numbered by generate_series): streamed, where unnest in FROM would first
    # write every row out to a tuplestore (spilled to disk past work_mem at 100,000)
    params["count"] = len(targets)
    unnest = ",\n           ".join(
        f"unnest({_array(name, values, params)}) AS {column}"
        for name, column, values in (
            ("jobs", "job", [t.id for t in targets]),
            ("parts", "part", [str(t.part) for t in targets]),
            ("mstates", "mstate", [s[0] for s in states]),
            ("jstates", "jstate", [s[2] for s in states]),
            ("sigs", "sig", [str(index[t.signature]) for t in targets]),
            ("versions", "version", [t.version or "" for t in targets]),
        )
    )
    mt, jt = q(m.name), q(j.name)
    mid, mjob, mstatus = (q(m.c(c).name) for c in ("id", "job_id", "status"))
    jid, jstatus = q(j.c("id").name), q(j.c("status").name)
    mtype, jtype = _type(conn, m.c("status")), _type(conn, j.c("status"))
    # each row as the freeze judged it: in its status and at the version it was read in
    rows_frozen = f"""SELECT :request, t.seq, t.job, t.part,
           json_build_object('job_id', t.job, 'message_id', t.part)::text,
           t.mstate || '/' || t.jstate, (CAST(:signatures AS text[]))[t.sig],
           x.image, encode({sql_row_hash("x.image")}, 'hex'),
           m.v::text || '/' || j.v::text
    FROM t
    -- each row looked up by its key, one at a time (OFFSET 0 keeps the database from
    -- turning the lookups into a join that reads the whole queue for a page of rows)
    CROSS JOIN LATERAL (
        SELECT m0 AS r, m0.xmin AS v FROM {mt} AS m0
        WHERE m0.{mid} = CAST(t.part AS {_type(conn, m.c("id"))}) OFFSET 0
    ) AS m
    CROSS JOIN LATERAL (
        SELECT j0 AS r, j0.xmin AS v FROM {jt} AS j0 WHERE j0.{jid} = (m.r).{mjob} OFFSET 0
    ) AS j
    -- the image built once (OFFSET 0: not pulled up into the two places that use it,
    -- the item and its digest, which would build it twice)
    CROSS JOIN LATERAL (SELECT {_image("m.r", "j.r")} AS image OFFSET 0) AS x
    WHERE (m.r).{mstatus} = CAST(t.mstate AS {mtype})
      AND (j.r).{jstatus} = CAST(t.jstate AS {jtype})
      AND m.v::text || '/' || j.v::text = t.version"""
    kept = row_digest.sql_keep(
        rows_frozen, returning=f"seq, image_sha256, {sql_key_hash('job_id', 'part', 'state')} AS kh"
    )
    sql = f"""
WITH t AS (
    SELECT n - 1 + :first AS seq, job, part, mstate, jstate, sig::int AS sig, version
    FROM (
        SELECT generate_series(1, CAST(:count AS integer)) AS n,
           {unnest}
    ) AS u
), ins AS (
    {kept}
)
SELECT count(*), {sql_digest("decode(image_sha256, 'hex')", "seq")}, {sql_digest("kh", "seq")}
FROM ins
"""
    rows, sha, keys = (await conn.execute(sa.text(sql), params)).one()
    if int(rows) != len(targets):
        raise PreconditionFailed(
            f"{len(targets) - int(rows)} of the {len(targets)} rows changed while the request "
            "was being made; ask again to freeze them as they are now"
        )
    return Digest(int(rows), str(sha), str(keys))


async def apply_kept(
    conn: AsyncConnection,
    *,
    m: BoundTable,
    j: BoundTable,
    e: BoundTable | None,
    request: int,
    action: Action,
    now: datetime,
    note: str,
) -> Kept:
    """Change the request's items still in their frozen state (see the module's text).

    A redrive first tries the common case in one statement without locking ahead: every
    message and job still at the version frozen, so updating each one only where its
    version (``xmin``) is the frozen one changes exactly what the locking statement would,
    and every image before the change is the frozen one. The statement first looks (without
    locks) for an item whose rows are no longer at their frozen versions, and writes
    nothing where it finds one. The update takes the row locks itself, and a row another
    session changes meanwhile fails that version check (read committed re-checks the row
    it waited for). Where any item or job was not changed that way (moved on, or changed
    by someone else in between), or PostgreSQL broke a deadlock or a lock wait in it, a
    savepoint undoes the attempt and the statement that locks first and re-images what
    moved does the change instead: where nothing moved, both change the same rows and
    keep the same outcomes and digest."""
    params = {"request": request, "now": now, "note": note}
    w = _Writes.of(conn, m=m, j=j, e=e, action=action, params=params)
    if action is Action.REDRIVE:
        attempt = await conn.begin_nested()
        try:
            done = await _unmoved(conn, w)
        except DBAPIError as exc:
            if getattr(exc.orig, "sqlstate", None) not in _TRY_AGAIN:
                raise
            done = None
        if done is not None:
            await attempt.commit()
            return done
        await attempt.rollback()
    return await _locking(conn, w)


# deadlock broken, lock wait timed out: the locking statement may still get through
_TRY_AGAIN = ("40P01", "55P03")


@dataclass(frozen=True)
class _Writes:
    """What both statements of ``apply_kept`` share: the tables' quoted names and
    columns, the columns each change sets, and the bound values."""

    conn: AsyncConnection
    m: BoundTable
    j: BoundTable
    e: BoundTable | None
    action: Action
    params: dict[str, Any]
    message_sets: str  # empty for a cancel: its messages stay as they are
    job_sets: str

    @classmethod
    def of(
        cls,
        conn: AsyncConnection,
        *,
        m: BoundTable,
        j: BoundTable,
        e: BoundTable | None,
        action: Action,
        params: dict[str, Any],
    ) -> _Writes:
        mtype, jtype = _type(conn, m.c("status")), _type(conn, j.c("status"))
        message_sets = ""
        if action is Action.REDRIVE:
            message = {
                "status": f"CAST(:pending AS {mtype})",
                "available_at": ":now",
                "claimed_at": "NULL",
                "last_error": "NULL",
            }
            if m.has("attempt_count"):
                message["attempt_count"] = "0"
            params["pending"] = PENDING
            message_sets = ", ".join(f"{q(m.c(c).name)} = {v}" for c, v in message.items())
            job = {"status": f"CAST(:job_to AS {jtype})"}
            for n, (column, value) in enumerate(RESET_JOB):
                if j.has(column):
                    job[column] = f":reset{n}"
                    params[f"reset{n}"] = value
            params["job_to"] = QUEUED
        else:  # cancel a dead-lettered job on purpose: its messages stay as they are
            job = {"status": f"CAST(:job_to AS {jtype})"}
            params["job_to"] = CANCELLED
        job_sets = ", ".join(f"{q(j.c(c).name)} = {v}" for c, v in job.items())
        return cls(conn, m, j, e, action, params, message_sets, job_sets)

    def items(self, *, images: bool) -> str:
        """The request's items with their frozen statuses, as the columns' own type (a
        team's may be an enum; a state without "/" is from requests that kept DLQ/FAILED
        as "DLQ"), their frozen versions and (``images``) their frozen images."""
        m, j = self.m, self.j
        mtype, jtype = _type(self.conn, m.c("status")), _type(self.conn, j.c("status"))
        columns = f"""seq, CAST(part AS {_type(self.conn, m.c("id"))}) AS mid,
           CAST(CASE WHEN strpos(state, '/') = 0 THEN 'DLQ'
                     ELSE split_part(state, '/', 1) END AS {mtype}) AS mstate,
           CAST(CASE WHEN strpos(state, '/') = 0 THEN 'FAILED'
                     ELSE substr(state, strpos(state, '/') + 1) END AS {jtype}) AS jstate,
           {"image, " if images else ""}image_sha256, version,
           split_part(version, '/', 1) AS mversion, split_part(version, '/', 2) AS jversion"""
        return f"""i AS (
    {row_digest.sql_of_request(columns)}
)"""

    def tail(self, ctes: list[str], *, versioned: bool) -> list[str]:
        """The job update (from ``done``; ``versioned``: only a job at its frozen version),
        the job events and the outcomes."""
        jt, jid, jstatus = q(self.j.name), q(self.j.c("id").name), q(self.j.c("status").name)
        version = " AND j.xmin::text = l.jversion" if versioned else ""
        pick = "jid, jstate, jversion" if version else "jid, jstate"
        ctes.append(
            # each job once (with the version it was frozen at), counted by the caller too
            f"""l AS (
    SELECT DISTINCT {pick} FROM done
), uj AS (
    UPDATE {jt} AS j SET {self.job_sets}
    FROM l
    WHERE j.{jid} = l.jid AND j.{jstatus} = l.jstate{version}
    RETURNING j.{jid} AS id
)"""
        )
        if self.e is not None:
            ctes.append(_events_cte(self.conn, self.e, self.action, self.params))
        ctes.append(
            f"""mk AS (
    {row_digest.sql_record_outcomes("done")}
)"""
        )
        return ctes

    def events(self) -> str:
        return "(SELECT count(*) FROM ev)" if self.e is not None else "0"


async def _unmoved(conn: AsyncConnection, w: _Writes) -> Kept | None:
    """The redrive where every item and job is still at its frozen version, without
    locking ahead; None where any was not (the caller undoes what this did)."""
    m, j = w.m, w.j
    mt, mid, mjob = q(m.name), q(m.c("id").name), q(m.c("job_id").name)
    mstatus = q(m.c("status").name)
    jt, jid = q(j.name), q(j.c("id").name)
    ctes = [
        w.items(images=False),  # referenced once: read as the update goes, not kept aside
        # an item whose message or job is gone or not at its frozen version: where there
        # is one, nothing is written (the locking statement does the change instead)
        f"""moved AS (
    SELECT 1 FROM ({row_digest.sql_of_request("part, version")}) AS c
    LEFT JOIN {mt} AS m ON m.{mid} = CAST(c.part AS {_type(w.conn, m.c("id"))})
    LEFT JOIN {jt} AS j ON j.{jid} = m.{mjob}
    WHERE j.{jid} IS NULL OR m.xmin::text || '/' || j.xmin::text IS DISTINCT FROM c.version
    LIMIT 1
)""",
        # a message changes only at its frozen version: the row frozen, in its status
        f"""done AS (
    UPDATE {mt} AS m SET {w.message_sets}
    FROM i
    WHERE m.{mid} = i.mid AND m.{mstatus} = i.mstate AND m.xmin::text = i.mversion
      AND NOT EXISTS (SELECT 1 FROM moved)
    RETURNING i.seq, m.{mjob} AS jid, i.jstate, i.jversion, i.image_sha256,
              CAST(NULL AS text) AS differs
)""",
    ]
    sql = (
        "WITH "
        + ",\n".join(w.tail(ctes, versioned=True))
        + f"""
SELECT ({row_digest.sql_of_request("count(*)")}),
       (SELECT count(*) FROM mk),
       (SELECT count(*) FROM l), (SELECT count(*) FROM uj),
       {w.events()},
       (SELECT {sql_digest("decode(image_sha256, 'hex')", "seq")} FROM done),
       ARRAY(SELECT CAST(id AS text) FROM uj)"""
    )
    frozen, marked, jobs, jobs_changed, written, sha, changed = (
        await conn.execute(sa.text(sql), w.params)
    ).one()
    if int(marked) != int(frozen) or int(jobs_changed) != int(jobs):
        return None
    return Kept(
        items=int(frozen),
        changed=list(changed),
        job_events=int(written),
        before=Digest(int(marked), str(sha)),
    )


async def _locking(conn: AsyncConnection, w: _Writes) -> Kept:
    """The change that locks every row still in its frozen state first, then changes
    them, imaging again any row not at its frozen version."""
    m, j = w.m, w.j
    mt, jt = q(m.name), q(j.name)
    mid, mjob, mstatus = (q(m.c(c).name) for c in ("id", "job_id", "status"))
    jid, jstatus = q(j.c("id").name), q(j.c("status").name)
    ctes = [
        w.items(images=True),
        # each row still in its frozen state, locked (messages and jobs: a job changes
        # only together with every one of its messages named), with the hash of its image
        # now: a row whose version (xmin) is the frozen one is the frozen row, and its
        # image is built again only where it is not; that image is kept only if it differs
        f"""locked AS MATERIALIZED (
    SELECT i.seq, m.{mid} AS mid, m.{mjob} AS jid, i.mstate, i.jstate,
           coalesce({sql_row_hash("x.image")}, decode(i.image_sha256, 'hex')) AS h,
           CASE WHEN x.image <> i.image THEN x.image END AS differs
    FROM i
    JOIN {mt} AS m ON m.{mid} = i.mid
    JOIN {jt} AS j ON j.{jid} = m.{mjob}
    CROSS JOIN LATERAL (
        SELECT CASE WHEN m.xmin::text || '/' || j.xmin::text IS DISTINCT FROM i.version
               THEN {_image("m", "j")} END AS image
    ) AS x
    WHERE m.{mstatus} = i.mstate AND j.{jstatus} = i.jstate
    FOR UPDATE OF m, j
)""",
    ]
    if w.action is Action.REDRIVE:
        ctes.append(
            # the messages changed, with what the rest of the statement needs of each
            f"""done AS (
    UPDATE {mt} AS m SET {w.message_sets}
    FROM locked
    WHERE m.{mid} = locked.mid AND m.{mstatus} = locked.mstate
    RETURNING locked.seq, locked.jid, locked.jstate, locked.h, locked.differs
)""",
        )
    else:
        ctes.append("done AS (SELECT * FROM locked)")
    sql = (
        "WITH "
        + ",\n".join(w.tail(ctes, versioned=False))
        + f"""
SELECT ({row_digest.sql_of_request("count(*)")}),
       (SELECT count(*) FROM mk), {w.events()},
       (SELECT {sql_digest("h", "seq")} FROM done),
       ARRAY(SELECT CAST(id AS text) FROM uj)"""
    )
    frozen, marked, written, sha, changed = (await conn.execute(sa.text(sql), w.params)).one()
    return Kept(
        items=int(frozen),
        changed=list(changed),
        job_events=int(written),
        before=Digest(int(marked), str(sha)),
    )


def _events_cte(
    conn: AsyncConnection, e: BoundTable, action: Action, params: dict[str, Any]
) -> str:
    """One job event per job changed, as the manual procedure writes it."""
    columns = [q(e.c("aggregate_id").name), q(e.c("event_type").name)]
    values = [
        f"CAST(uj.id AS {_type(conn, e.c('aggregate_id'))})",
        f"CAST(:event_type AS {_type(conn, e.c('event_type'))})",
    ]
    if e.has("message"):
        columns.append(q(e.c("message").name))
        values.append(":note")
    columns.append(q(e.c("created_at").name))
    values.append(":now")
    made = event_id(e)
    if made is not None:
        columns.insert(0, q(e.c("id").name))
        values.insert(0, "gen_random_uuid()" if made == "uuid" else "gen_random_uuid()::text")
    params["event_type"] = REDRIVE_EVENT if action is Action.REDRIVE else CANCEL_EVENT
    return f"""ev AS (
    INSERT INTO {q(e.name)} ({", ".join(columns)})
    SELECT {", ".join(values)} FROM uj
    RETURNING 1
)"""
