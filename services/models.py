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
    details: Mapped[dict[str, Any]]
    prev_hash: Mapped[str] = mapped_column(sa.String(64))
    hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
