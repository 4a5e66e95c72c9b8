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
    """One append-only, hash-chained record of something queuebot did (SPEC §11)."""

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
    hash: Mapped[str] = mapped_column(sa.String(64), unique=True)


class AuditHead(Base):
    """The tip of the audit chain: detects deletion of the latest events."""

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


class Delivery(Base):
    """A platform delivery already acted on (Slack retries, double clicks, event ids)."""

    __tablename__ = "qb_deliveries"

    key: Mapped[str] = mapped_column(sa.String(200), primary_key=True)
    seen_at: Mapped[datetime] = mapped_column(index=True)
