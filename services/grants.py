"""``queuebot db grant ROLE``: the least privilege of the role ``serve`` and ``console``
run as, on queuebot's own tables (PostgreSQL).

Migrations run as the tables' owner; the runtime role is another role. On the audit
tables it may only read and append: INSERT and SELECT on the events, and on the head the
INSERT and column-limited UPDATE the append needs, both held to the append's one move by
triggers (migration 0006). It never gets UPDATE, DELETE or TRUNCATE on the events, and
not being the owner it cannot disable their triggers. The queue tables belong to their
team, who grant on them; queuebot never grants on tables it does not own.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from services.db import error_line, redacted, unreachable
from services.errors import QueuebotError
from services.identifiers import quote_identifier, validate_role

# table -> the privileges the runtime role needs on it, and the sequence its ids come from
RUNTIME: tuple[tuple[str, str, str | None], ...] = (
    ("qb_audit_events", "SELECT, INSERT", "qb_audit_events_id_seq"),
    ("qb_audit_head", "SELECT, INSERT, UPDATE (last_id, last_hash)", None),
    # a request moves on (its state, decision, result); what was asked, by whom and why
    # stays as its change.requested event says (audit verify compares them)
    (
        "qb_change_requests",
        "SELECT, INSERT, UPDATE (state, decided_at, snapshot_hash, result)",
        "qb_change_requests_id_seq",
    ),
    ("qb_approvals", "SELECT, INSERT", "qb_approvals_id_seq"),
    # a request's kept rows are written once, never changed: the audit seals their digest
    ("qb_change_items", "SELECT, INSERT", None),
    ("qb_change_outcomes", "SELECT, INSERT", None),
    ("qb_deliveries", "SELECT, INSERT, UPDATE, DELETE", None),
    # the scheduler deletes each item it runs (and a timer it cancels), moves an item's
    # time and counts its failures; a pending incident timer's presence is held to the
    # incident's events by audit verify
    (
        "qb_schedule",
        "SELECT, INSERT, UPDATE (due_at, attempts, last_error), DELETE",
        "qb_schedule_id_seq",
    ),
    ("qb_queue_samples", "SELECT, INSERT, DELETE", "qb_queue_samples_id_seq"),
    # an incident, a communication and a step change state as the work goes (an incident
    # stops holding redrives when its restore step is done, its lead is handed over); the
    # states and the lead are held to the incident's events by audit verify, the rest is
    # never updated
    (
        "qb_incidents",
        "SELECT, INSERT, UPDATE (state, resolved_at, thread, blocks_redrive, lead, "
        "lead_platform, lead_account)",
        "qb_incidents_id_seq",
    ),
    (
        "qb_incident_obligations",
        "SELECT, INSERT, UPDATE (state, met_at, met_by, reminders, escalated_at)",
        "qb_incident_obligations_id_seq",
    ),
    (
        "qb_incident_steps",
        "SELECT, INSERT, UPDATE (state, done_at, done_by, result)",
        "qb_incident_steps_id_seq",
    ),
    ("qb_incident_timeline", "SELECT, INSERT", "qb_incident_timeline_id_seq"),
    ("qb_plans", "SELECT, INSERT, UPDATE", "qb_plans_id_seq"),
    ("qb_plan_items", "SELECT, INSERT, UPDATE", None),
    ("qb_redrive_log", "SELECT, INSERT", "qb_redrive_log_id_seq"),
    ("qb_outbox", "SELECT, INSERT, UPDATE, DELETE", "qb_outbox_id_seq"),
    ("qb_alert_inbox", "SELECT, INSERT, UPDATE, DELETE", "qb_alert_inbox_id_seq"),
    ("qb_alert_groups", "SELECT, INSERT, UPDATE", "qb_alert_groups_id_seq"),
    ("qb_board_views", "SELECT, INSERT, UPDATE, DELETE", None),  # where the board is shown
    ("alembic_version", "SELECT", None),  # serve and console check the schema on start
)
_SEQUENCES = ("qb_audit_head_id_seq", *(seq for _, _, seq in RUNTIME if seq))

QUEUE_TABLES_NOTE = (
    "-- Your queue tables are yours to grant: the runtime role needs SELECT on every table a\n"
    "-- configured queue reads, and UPDATE (and INSERT, for message_job's job events) on\n"
    "-- those a requeue, cancel or redrive changes. queuebot grants nothing on tables it\n"
    "-- does not own."
)


class GrantRefused(QueuebotError):
    """``db grant`` will not grant: a bad role name, no PostgreSQL, or a role that could
    undo the rules (the tables' owner, a member of it, a superuser)."""


def statements(role: str) -> list[str]:
    """REVOKE everything, then GRANT exactly what the runtime role needs (names quoted)."""
    try:
        who = quote_identifier(validate_role(role))
    except ValueError as exc:
        raise GrantRefused(f"role {role!r}: {exc}") from exc
    tables = ", ".join(quote_identifier(t) for t, _, _ in RUNTIME)
    sequences = ", ".join(quote_identifier(s) for s in _SEQUENCES)
    out = [
        f"REVOKE ALL ON TABLE {tables} FROM {who};",
        f"REVOKE ALL ON SEQUENCE {sequences} FROM {who};",
    ]
    for table, privileges, sequence in RUNTIME:
        out.append(f"GRANT {privileges} ON TABLE {quote_identifier(table)} TO {who};")
        if sequence is not None:
            out.append(f"GRANT USAGE ON SEQUENCE {quote_identifier(sequence)} TO {who};")
    return out


def script(role: str) -> str:
    """The statements as a reviewed script: what they do, then them, then the queue note."""
    body = statements(role)
    return "\n".join(
        [
            f"-- queuebot: the runtime role {quote_identifier(role)} (serve, console) on "
            "queuebot's own tables.",
            "-- Run as the tables' owner (the role `queuebot db upgrade` runs as). The "
            "runtime role must be",
            "-- neither that owner nor a member of it, nor a superuser: those can disable "
            "the audit triggers.",
            "-- It also needs CONNECT on the database and USAGE on the schema of these tables.",
            *body,
            QUEUE_TABLES_NOTE,
        ]
    )


async def apply(engine: AsyncEngine, role: str) -> int:
    """Run the statements as the owner, in one transaction; return how many ran."""
    body = statements(role)
    if engine.dialect.name != "postgresql":
        raise GrantRefused(
            "db grant --apply needs PostgreSQL: SQLite has no roles (whoever can write the "
            "file can change anything; keep anchors, see docs/audit.md)"
        )
    try:
        async with engine.begin() as conn:
            found = (
                await conn.execute(
                    text("SELECT rolsuper FROM pg_roles WHERE rolname = :r"), {"r": role}
                )
            ).first()
            if found is None:
                raise GrantRefused(f"role {role!r} does not exist: create it first")
            if found[0]:
                raise GrantRefused(
                    f"role {role!r} is a superuser: no trigger or grant binds it; run serve "
                    "and console as a role of their own"
                )
            owner = (
                await conn.execute(
                    text(
                        "SELECT tableowner FROM pg_tables WHERE schemaname = current_schema() "
                        "AND tablename = 'qb_audit_events'"
                    )
                )
            ).scalar()
            if owner is None:
                raise GrantRefused(
                    f"queuebot's tables are not in {redacted(engine.url)}: run "
                    "`queuebot db upgrade` first"
                )
            owns = (
                await conn.execute(
                    text("SELECT pg_has_role(:r, :o, 'MEMBER')"), {"r": role, "o": owner}
                )
            ).scalar()
            if owns:
                raise GrantRefused(
                    f"role {role!r} is the owner of queuebot's tables ({owner!r}) or a member "
                    "of it: the owner may disable the audit triggers; run serve and console "
                    "as another role"
                )
            for statement in body:
                await conn.exec_driver_sql(statement)
    except OperationalError as exc:  # no connection: nothing was granted
        raise unreachable(engine, exc) from exc
    except DBAPIError as exc:  # the database's refusal, in one line
        raise GrantRefused(f"granting to {role!r} failed: {error_line(exc)}") from exc
    return len(body)
