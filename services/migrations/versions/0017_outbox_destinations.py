"""An outbox item may name its destination: the one place its post can be shown, so only a
relay whose process reaches that place claims it.

- ``destination``: ``platform:channel`` where the post must go (a Slack or Discord channel
  a command was typed in; for the console, ``console:SESSION``, the session that asked);
  NULL for a post any relay delivers through its own notifier (an alert to a channel named
  in the configuration). Rows from before have none, and go as they did.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-09
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("qb_outbox") as batch:
        batch.add_column(sa.Column("destination", sa.String(160), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("qb_outbox") as batch:
        batch.drop_column("destination")
