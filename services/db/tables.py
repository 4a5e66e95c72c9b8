"""queuebot's own tables (SQLAlchemy 2.0 typed models). Migrations live in
``services/migrations``; change a model only together with a new migration."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


class Base(DeclarativeBase):
    type_annotation_map = {
        datetime: sa.DateTime(timezone=True),
        dict[str, Any]: sa.JSON(),
    }


class AuditEvent(Base):
    """One append-only, chained record of something queuebot did, sealed with ``scheme``:
    ``sha256`` (unkeyed) or ``hmac-sha256`` (keyed with QUEUEBOT_AUDIT_KEY)."""

    __tablename__ = "qb_audit_events"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    occurred_at: Mapped[datetime]
    action: Mapped[str] = mapped_column(sa.String(64))
    actor_person: Mapped[str | None] = mapped_column(sa.String(64))
    actor_platform: Mapped[str] = mapped_column(sa.String(16))
    actor_account: Mapped[str] = mapped_column(sa.String(64))
    subject: Mapped[str | None] = mapped_column(sa.String(64), index=True)
    queue: Mapped[str | None] = mapped_column(sa.String(64))
    incident: Mapped[str | None] = mapped_column(sa.String(32))
    reason: Mapped[str | None] = mapped_column(sa.Text)
    evidence: Mapped[str | None] = mapped_column(sa.Text)
    details: Mapped[str] = mapped_column(sa.Text)  # canonical JSON, exactly as hashed
    prev_hash: Mapped[str] = mapped_column(sa.String(64))
    hash: Mapped[str] = mapped_column(sa.String(64), unique=True)  # the seal: hash or MAC
    scheme: Mapped[str] = mapped_column(sa.String(16), server_default="sha256")


class AuditHead(Base):
    """The tip of the audit chain: detects deletion of the latest events. Triggers
    (migration 0006) let it only move forward, to the newest event, with its seal."""

    __tablename__ = "qb_audit_head"

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True)
    last_id: Mapped[int] = mapped_column(BigId)
    last_hash: Mapped[str] = mapped_column(sa.String(64))


class ChangeRequest(Base):
    """A frozen, two-person-approved change to queue rows (``CR-N``)."""

    __tablename__ = "qb_change_requests"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(sa.String(32))
    queue: Mapped[str] = mapped_column(sa.String(64))
    profile: Mapped[str] = mapped_column(sa.String(32))
    state: Mapped[str] = mapped_column(sa.String(16), index=True)
    requested_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    requester_person: Mapped[str] = mapped_column(sa.String(64))
    requester_platform: Mapped[str] = mapped_column(sa.String(16))
    requester_account: Mapped[str] = mapped_column(sa.String(64))
    reason: Mapped[str] = mapped_column(sa.Text)
    incident: Mapped[str | None] = mapped_column(sa.String(32))
    evidence: Mapped[str | None] = mapped_column(sa.Text)
    selector: Mapped[dict[str, Any]]
    targets: Mapped[dict[str, Any]]
    ineligible: Mapped[dict[str, Any]]
    snapshot_hash: Mapped[str] = mapped_column(sa.String(64))  # full rows: in the audit event
    preview: Mapped[dict[str, Any]]  # counts by failure signature, for replies
    eligible_count: Mapped[int] = mapped_column(sa.Integer)
    approvals_required: Mapped[int] = mapped_column(sa.Integer)
    decided_at: Mapped[datetime | None]
    result: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)
    origin: Mapped[dict[str, Any]]


class ChangeItem(Base):
    """One row a change request froze, kept in the database rather than in the request or
    its audit event: its key, the state execution holds it to and its image when frozen.
    The audit events carry the images as a digest (``services.audit.row_digest``), which
    ``audit verify`` recomputes from here."""

    __tablename__ = "qb_change_items"

    # no foreign key: written only beside the request, in its transaction (a check per row
    # cost a large request as much as writing its rows)
    request_id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=False)
    seq: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=False)
    job_id: Mapped[str] = mapped_column(sa.Text)
    part: Mapped[str | None] = mapped_column(sa.Text)  # the row within the job, if several
    key: Mapped[str] = mapped_column(sa.Text)  # canonical JSON of the profile's keys
    state: Mapped[str] = mapped_column(sa.Text)
    signature: Mapped[str] = mapped_column(sa.Text)
    image: Mapped[str] = mapped_column(sa.Text)  # JSON text, exactly as digested
    image_sha256: Mapped[str] = mapped_column(sa.String(64))  # of the image's UTF-8 text
    # the row's version where the database has one (PostgreSQL: the xmin of each row
    # imaged): an unchanged version at execution means the image is still the frozen one
    version: Mapped[str | None] = mapped_column(sa.Text)


class ChangeOutcome(Base):
    """An item the executed request changed, with its image from just before the change:
    ``before`` is NULL where that image is the frozen one, byte for byte (the common case:
    the guard held the row to its frozen state, and nothing else about it moved)."""

    __tablename__ = "qb_change_outcomes"

    request_id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=False)
    seq: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=False)
    before: Mapped[str | None] = mapped_column(sa.Text)


class Approval(Base):
    """One person's decision on a change request; a person decides once."""

    __tablename__ = "qb_approvals"
    __table_args__ = (sa.UniqueConstraint("request_id", "person"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    request_id: Mapped[int] = mapped_column(sa.ForeignKey("qb_change_requests.id"))
    person: Mapped[str] = mapped_column(sa.String(64))
    platform: Mapped[str] = mapped_column(sa.String(16))
    account: Mapped[str] = mapped_column(sa.String(64))
    decision: Mapped[str] = mapped_column(sa.String(16))
    at: Mapped[datetime]
    # what the approval rested on: {"grounds": [...], "owner_of": [teams]} (0019)
    basis: Mapped[dict[str, Any] | None]


class Delivery(Base):
    """A platform delivery (Slack retries, double clicks, event ids), or a piece of work to
    be done once: claimed by one owner while in progress, then done."""

    __tablename__ = "qb_deliveries"
    __table_args__ = (
        sa.Index(
            "ix_qb_deliveries_unanswered",
            "seen_at",
            postgresql_where=sa.text("answered_at IS NULL AND request IS NOT NULL"),
            sqlite_where=sa.text("answered_at IS NULL AND request IS NOT NULL"),
        ),
    )

    key: Mapped[str] = mapped_column(sa.String(200), primary_key=True)
    seen_at: Mapped[datetime] = mapped_column(index=True)  # claimed, or last heartbeat
    state: Mapped[str] = mapped_column(sa.String(16), server_default="done")
    owner: Mapped[str | None] = mapped_column(sa.String(64))
    done_at: Mapped[datetime | None]
    # what an acknowledged command or click asked and where to answer it (written before
    # the acknowledgement); when its answer went out; what a change it made did
    request: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON(none_as_null=True))
    answered_at: Mapped[datetime | None]
    outcome: Mapped[str | None] = mapped_column(sa.String(200))
    # how many times the acknowledged delivery was adopted after its owner died: one that
    # kept killing its process is given up (answered, never run again) past a limit
    adoptions: Mapped[int] = mapped_column(sa.Integer, server_default="0")


class OutboxItem(Base):
    """A chat post to make, written in the same transaction as the change it reports and
    delivered (retried until done) by the outbox relay."""

    __tablename__ = "qb_outbox"
    __table_args__ = (
        sa.Index(
            "ix_qb_outbox_due",
            "due_at",
            "id",
            postgresql_where=sa.text("done_at IS NULL"),
            sqlite_where=sa.text("done_at IS NULL"),
        ),
        sa.Index(
            "ix_qb_outbox_subject",
            "kind",
            "subject",
            "id",
            postgresql_where=sa.text("done_at IS NULL"),
            sqlite_where=sa.text("done_at IS NULL"),
        ),
        sa.Index(
            "ix_qb_outbox_collapse",
            "kind",
            "subject",
            "collapse",
            "id",
            postgresql_where=sa.text("done_at IS NULL AND collapse IS NOT NULL"),
            sqlite_where=sa.text("done_at IS NULL AND collapse IS NOT NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(sa.String(64))
    subject: Mapped[str] = mapped_column(sa.String(64))
    payload: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]
    due_at: Mapped[datetime]
    attempts: Mapped[int] = mapped_column(sa.Integer, server_default="0")
    last_error: Mapped[str | None] = mapped_column(sa.Text)
    done_at: Mapped[datetime | None]
    lane: Mapped[str | None] = mapped_column(sa.String(160))  # the channel it posts to
    priority: Mapped[int] = mapped_column(sa.SmallInteger, server_default="1")
    collapse: Mapped[str | None] = mapped_column(sa.String(64))
    superseded_by: Mapped[int | None] = mapped_column(BigId)
    leased_by: Mapped[str | None] = mapped_column(sa.String(64))
    # where it must be shown (platform:channel; a console session): only a relay that
    # reaches it claims it. NULL: any relay, through its own notifier
    destination: Mapped[str | None] = mapped_column(sa.String(160))


class ScheduledItem(Base):
    """A durable scheduler entry: due work that survives restarts and runs exactly once
    across replicas (claimed with FOR UPDATE SKIP LOCKED, done in the same transaction)."""

    __tablename__ = "qb_schedule"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(sa.String(64))
    subject: Mapped[str] = mapped_column(sa.String(64))
    due_at: Mapped[datetime] = mapped_column(index=True)
    attempts: Mapped[int] = mapped_column(sa.Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(sa.Text)
    created_at: Mapped[datetime]


class QueueSample(Base):
    """The queue's counts, written down periodically (the baseline of the growth checks)."""

    __tablename__ = "qb_queue_samples"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    queue: Mapped[str] = mapped_column(sa.String(64))
    at: Mapped[datetime]
    total: Mapped[int] = mapped_column(sa.BigInteger)
    dead: Mapped[int] = mapped_column(sa.BigInteger)
    pending: Mapped[int] = mapped_column(sa.BigInteger)
    counts: Mapped[dict[str, Any]]
    # By canonical state, failed by failure reason, failed-actionable and the oldest
    # pending row (services/reads/gauges.py: QueueSnapshot.detail); None before 0007.
    detail: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)


class Incident(Base):
    """An incident. An open one whose runbook holds redrives (``blocksRedrivesUntil``)
    blocks them on its queue (``blocks_redrive``) until that restore step
    (``blocks_redrive_until``) is marked done."""

    __tablename__ = "qb_incidents"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    scenario: Mapped[str] = mapped_column(sa.String(64))
    summary: Mapped[str] = mapped_column(sa.Text)
    state: Mapped[str] = mapped_column(sa.String(16), index=True)
    blocks_redrive: Mapped[bool] = mapped_column(sa.Boolean, default=True)
    blocks_redrive_until: Mapped[str | None] = mapped_column(sa.String(80))  # 0016
    queue: Mapped[str | None] = mapped_column(sa.String(64))
    declared_at: Mapped[datetime]
    runbook: Mapped[str | None] = mapped_column(sa.String(200))
    runbook_version: Mapped[str | None] = mapped_column(sa.String(32))
    lead: Mapped[str | None] = mapped_column(sa.String(64))
    lead_platform: Mapped[str | None] = mapped_column(sa.String(16))
    lead_account: Mapped[str | None] = mapped_column(sa.String(64))
    fault_at: Mapped[datetime | None]
    alert_group: Mapped[int | None] = mapped_column(BigId)
    origin: Mapped[dict[str, Any] | None]
    thread: Mapped[dict[str, Any] | None]
    resolved_at: Mapped[datetime | None]


class IncidentObligation(Base):
    """One audience's communication of an incident: due ``within_ms`` after declaration;
    pending until someone notifies the audience (met) or the deadline passes (missed)."""

    __tablename__ = "qb_incident_obligations"
    __table_args__ = (
        sa.UniqueConstraint("incident_id", "audience", name="uq_qb_incident_obligation"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    incident_id: Mapped[int] = mapped_column(BigId, index=True)
    audience: Mapped[str] = mapped_column(sa.String(64))
    channel_dependency: Mapped[str] = mapped_column(sa.String(200))
    within_ms: Mapped[int] = mapped_column(sa.BigInteger)
    due_at: Mapped[datetime]
    state: Mapped[str] = mapped_column(sa.String(16))
    met_at: Mapped[datetime | None]
    met_by: Mapped[str | None] = mapped_column(sa.String(64))
    reminders: Mapped[int] = mapped_column(sa.Integer, server_default="0")
    escalated_at: Mapped[datetime | None]


class IncidentStep(Base):
    """A restore step (in the runbook's order) or a validation item of an incident."""

    __tablename__ = "qb_incident_steps"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    incident_id: Mapped[int] = mapped_column(BigId, index=True)
    kind: Mapped[str] = mapped_column(sa.String(16))  # restore | validation
    position: Mapped[int] = mapped_column(sa.Integer)
    name: Mapped[str] = mapped_column(sa.Text)
    check_id: Mapped[str | None] = mapped_column(sa.String(32))
    state: Mapped[str] = mapped_column(sa.String(16))
    done_at: Mapped[datetime | None]
    done_by: Mapped[str | None] = mapped_column(sa.String(64))
    result: Mapped[str | None] = mapped_column(sa.Text)


class IncidentEvent(Base):
    """One line of an incident's timeline (every step is also an audit event)."""

    __tablename__ = "qb_incident_timeline"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    incident_id: Mapped[int] = mapped_column(BigId, index=True)
    at: Mapped[datetime]
    kind: Mapped[str] = mapped_column(sa.String(32))
    actor: Mapped[str | None] = mapped_column(sa.String(64))
    text: Mapped[str] = mapped_column(sa.Text)


class Plan(Base):
    """A staged redrive: a sample, then growing waves that start only while they succeed."""

    __tablename__ = "qb_plans"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    queue: Mapped[str] = mapped_column(sa.String(64))
    profile: Mapped[str] = mapped_column(sa.String(32))
    request_id: Mapped[int] = mapped_column(BigId)
    state: Mapped[str] = mapped_column(sa.String(16))
    reason: Mapped[str] = mapped_column(sa.Text)
    incident: Mapped[str | None] = mapped_column(sa.String(32))
    requester: Mapped[str] = mapped_column(sa.String(64))
    approvers: Mapped[dict[str, Any]]
    sample: Mapped[int] = mapped_column(sa.Integer)
    max_wave: Mapped[int] = mapped_column(sa.Integer)
    velocity: Mapped[float] = mapped_column(sa.Float)
    poll_seconds: Mapped[float] = mapped_column(sa.Float)
    total: Mapped[int] = mapped_column(sa.Integer)
    cursor: Mapped[int] = mapped_column(sa.Integer)
    wave: Mapped[int] = mapped_column(sa.Integer)
    wave_size: Mapped[int] = mapped_column(sa.Integer)
    wave_started_at: Mapped[datetime | None]
    dead_at_wave_start: Mapped[int] = mapped_column(sa.BigInteger)
    waves: Mapped[dict[str, Any]]
    note: Mapped[str | None] = mapped_column(sa.Text)
    origin: Mapped[dict[str, Any]]
    message_ref: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class PlanItem(Base):
    """One job of a plan, in plan order, with what it looked like before the plan."""

    __tablename__ = "qb_plan_items"

    plan_id: Mapped[int] = mapped_column(BigId, primary_key=True)
    seq: Mapped[int] = mapped_column(sa.Integer, primary_key=True)
    job_id: Mapped[str] = mapped_column(sa.String(64))
    message_id: Mapped[str | None] = mapped_column(sa.String(64))
    wave: Mapped[int | None] = mapped_column(sa.Integer)
    state: Mapped[str] = mapped_column(sa.String(16))
    signature: Mapped[str] = mapped_column(sa.Text)
    original: Mapped[dict[str, Any]]


class RedriveLog(Base):
    """Every job queuebot redrove, to cap redrives per job where the estate keeps no
    events (worker_queue); message_job counts its own REDRIVE_REQUESTED events."""

    __tablename__ = "qb_redrive_log"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    queue: Mapped[str] = mapped_column(sa.String(64))
    job_id: Mapped[str] = mapped_column(sa.String(64))
    at: Mapped[datetime]


class AlertInbox(Base):
    """A notification as it arrived (Alertmanager's, or a detector's), stored before it is
    acknowledged; ``processed_at`` is set once its changes went into the group's thread,
    ``set_aside_at`` and ``error`` when its processing failed on its own (it is kept, and
    no longer tried)."""

    __tablename__ = "qb_alert_inbox"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    source: Mapped[str] = mapped_column(sa.String(32))
    received_at: Mapped[datetime]
    receiver: Mapped[str] = mapped_column(sa.String(200))
    group_key: Mapped[str] = mapped_column(sa.Text)
    status: Mapped[str] = mapped_column(sa.String(16))
    payload: Mapped[dict[str, Any]]
    processed_at: Mapped[datetime | None]
    set_aside_at: Mapped[datetime | None]
    error: Mapped[str | None] = mapped_column(sa.Text)


class AlertGroup(Base):
    """One alert group (Alertmanager's groupKey per receiver, or one detector on one
    queue): what is firing, and where its chat thread is."""

    __tablename__ = "qb_alert_groups"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    key_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
    source: Mapped[str] = mapped_column(sa.String(32))
    receiver: Mapped[str] = mapped_column(sa.String(200))
    group_key: Mapped[str] = mapped_column(sa.Text)
    alertname: Mapped[str] = mapped_column(sa.String(200))
    queue: Mapped[str | None] = mapped_column(sa.String(64))
    route: Mapped[dict[str, Any]]
    labels: Mapped[dict[str, Any]]
    annotations: Mapped[dict[str, Any]]
    links: Mapped[dict[str, Any]]
    status: Mapped[str] = mapped_column(sa.String(16))
    alerts: Mapped[dict[str, Any]]
    episode: Mapped[int] = mapped_column(sa.Integer)
    opened_at: Mapped[datetime]
    changed_at: Mapped[datetime]
    resolved_at: Mapped[datetime | None]
    notifications: Mapped[int] = mapped_column(sa.Integer)
    # alerts Alertmanager's max_alerts left out of the latest notification (truncatedAlerts)
    truncated: Mapped[int] = mapped_column(sa.Integer, server_default=sa.text("0"))
    roots: Mapped[dict[str, Any]]


class BoardView(Base):
    """Where the board is shown (a Slack user's App Home; a Discord channel's status
    message, ``message_id``) and the digest of what it last showed there."""

    __tablename__ = "qb_board_views"
    platform: Mapped[str] = mapped_column(sa.String(16), primary_key=True)
    account: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    seen_at: Mapped[datetime]  # when the person last opened it (Discord: when posted)
    digest: Mapped[str | None] = mapped_column(sa.String(64))
    shown_at: Mapped[datetime | None]
    message_id: Mapped[str | None] = mapped_column(sa.String(64))
