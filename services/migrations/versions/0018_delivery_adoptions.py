"""How many times an acknowledged delivery was adopted after the process carrying it out
died (``adoptions``), so that one which kills every process that runs it is given up
after a few tries instead of killing every replica, one after another, forever.

The count is raised in the statement that adopts the delivery, and kept in the database
because the processes that could count it are the ones that die. Rows from before start
at 0.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-16
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("qb_deliveries") as batch:
        batch.add_column(
            sa.Column("adoptions", sa.Integer(), nullable=False, server_default=sa.text("0"))
        )


def downgrade() -> None:
    with op.batch_alter_table("qb_deliveries") as batch:
        batch.drop_column("adoptions")
