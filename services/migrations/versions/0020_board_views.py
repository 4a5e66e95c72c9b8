"""Where the board is shown (``qb_board_views``): each Slack user who opened queuebot's
App Home (and when, so only those seen lately are published to), a Discord channel's
status message (its message id, edited in place after a restart), and the digest of what
each last showed, so a refresh publishes only where the view changed.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "qb_board_views",
        sa.Column("platform", sa.String(16), primary_key=True),
        sa.Column("account", sa.String(64), primary_key=True),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("digest", sa.String(64), nullable=True),
        sa.Column("shown_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("message_id", sa.String(64), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("qb_board_views")
