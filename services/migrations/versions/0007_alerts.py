"""Alerts: the inbox where notifications are stored before they are acknowledged, and
the alert groups with what is firing and where each group's chat thread is.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "qb_alert_inbox",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("source", sa.String(32), nullable=False),
        sa.Column("received_at", TS, nullable=False),
        sa.Column("receiver", sa.String(200), nullable=False),
        sa.Column("group_key", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("processed_at", TS, nullable=True),
    )
    op.create_index(
        "ix_qb_alert_inbox_unprocessed",
        "qb_alert_inbox",
        ["id"],
        postgresql_where=sa.text("processed_at IS NULL"),
        sqlite_where=sa.text("processed_at IS NULL"),
    )
    op.create_index("ix_qb_alert_inbox_received", "qb_alert_inbox", ["received_at"])
    op.create_table(
        "qb_alert_groups",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("source", sa.String(32), nullable=False),
        sa.Column("receiver", sa.String(200), nullable=False),
        sa.Column("group_key", sa.Text(), nullable=False),
        sa.Column("alertname", sa.String(200), nullable=False),
        sa.Column("queue", sa.String(64), nullable=True),
        sa.Column("route", sa.JSON(), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("annotations", sa.JSON(), nullable=False),
        sa.Column("links", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("alerts", sa.JSON(), nullable=False),
        sa.Column("episode", sa.Integer(), nullable=False),
        sa.Column("opened_at", TS, nullable=False),
        sa.Column("changed_at", TS, nullable=False),
        sa.Column("resolved_at", TS, nullable=True),
        sa.Column("notifications", sa.Integer(), nullable=False),
        sa.Column("roots", sa.JSON(), nullable=False),
    )
    op.create_index("ix_qb_alert_groups_status", "qb_alert_groups", ["status", "alertname"])


def downgrade() -> None:
    op.drop_index("ix_qb_alert_groups_status", table_name="qb_alert_groups")
    op.drop_table("qb_alert_groups")
    op.drop_index("ix_qb_alert_inbox_received", table_name="qb_alert_inbox")
    op.drop_index("ix_qb_alert_inbox_unprocessed", table_name="qb_alert_inbox")
    op.drop_table("qb_alert_inbox")
