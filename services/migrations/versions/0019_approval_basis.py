"""What each approval rested on (``qb_approvals.basis``): the grounds of the approver's
standing when they approved (which [people] entry, user group, Discord role or schedule,
read when) and the owner teams of the queue they approved for. A queue with owners takes
a change only with one owner's approval; the column is where the request's later
approvals find whether an owner already approved. Rows from before hold NULL.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("qb_approvals") as batch:
        batch.add_column(sa.Column("basis", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("qb_approvals") as batch:
        batch.drop_column("basis")
