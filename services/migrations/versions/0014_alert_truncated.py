"""An alert group keeps how many of its alerts Alertmanager left out of its latest
notification (``truncatedAlerts``, when the receiver's ``max_alerts`` cut the list), so
its root and thread can say so instead of counting only the alerts that came.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02

Groups from before this revision count 0 until their next notification.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("qb_alert_groups") as batch:
        batch.add_column(
            sa.Column("truncated", sa.Integer(), nullable=False, server_default=sa.text("0"))
        )


def downgrade() -> None:
    with op.batch_alter_table("qb_alert_groups") as batch:
        batch.drop_column("truncated")
