"""The periodic queue sample keeps its detail: rows by canonical state, failed rows by
failure reason, how many of those are actionable, and when the oldest pending row was
queued (JSON, ``QueueSnapshot.detail``).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-08

Samples written before this revision have none (NULL); they age out after 14 days.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("qb_queue_samples") as batch:
        batch.add_column(sa.Column("detail", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("qb_queue_samples") as batch:
        batch.drop_column("detail")
