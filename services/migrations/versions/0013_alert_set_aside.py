"""A stored alert notification that cannot be processed is set aside: kept in the inbox
with when and why (``set_aside_at``, ``error``), and left out of processing, so the
notifications after it go on. The partial index finds the few set aside (for /readyz
and /metrics) without reading the inbox.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-10
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("qb_alert_inbox") as batch:
        batch.add_column(sa.Column("set_aside_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("error", sa.Text(), nullable=True))
    op.create_index(
        "ix_qb_alert_inbox_set_aside",
        "qb_alert_inbox",
        ["id"],
        postgresql_where=sa.text("set_aside_at IS NOT NULL"),
        sqlite_where=sa.text("set_aside_at IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_qb_alert_inbox_set_aside", table_name="qb_alert_inbox")
    with op.batch_alter_table("qb_alert_inbox") as batch:
        batch.drop_column("error")
        batch.drop_column("set_aside_at")
