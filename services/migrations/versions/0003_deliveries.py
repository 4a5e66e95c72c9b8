"""The delivery ledger: platform deliveries already acted on, for exactly-once effects.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "qb_deliveries",
        sa.Column("key", sa.String(200), primary_key=True),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_qb_deliveries_seen_at", "qb_deliveries", ["seen_at"])


def downgrade() -> None:
    op.drop_table("qb_deliveries")
