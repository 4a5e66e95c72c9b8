"""queuebot's first table: the hash-chained audit trail.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "qb_audit_events",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("actor_person", sa.String(64)),
        sa.Column("actor_platform", sa.String(16), nullable=False),
        sa.Column("actor_account", sa.String(64), nullable=False),
        sa.Column("subject", sa.String(64)),
        sa.Column("queue", sa.String(64)),
        sa.Column("incident", sa.String(32)),
        sa.Column("reason", sa.Text()),
        sa.Column("evidence", sa.Text()),
        # Canonical JSON text: the exact bytes the hash covers, and no JSON parsing of
        # megabyte snapshots on insert. Cast to json to query it.
        sa.Column("details", sa.Text(), nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False, unique=True),
    )
    op.create_index("ix_qb_audit_events_subject", "qb_audit_events", ["subject"])


def downgrade() -> None:
    op.drop_table("qb_audit_events")
