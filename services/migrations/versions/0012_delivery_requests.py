"""What each delivery asked, written down before it is acknowledged, so that work a
process acknowledged and then died on is finished by another.

Slack and Discord never send again a slash command or a click they saw acknowledged.
``request`` keeps what the person asked and where to answer (Slack's ``response_url``,
Discord's interaction token), ``answered_at`` says the answer is out, and ``outcome``
says in a few words what a change did, for the answer a restarted process gives when the
change committed and its answer did not go out. The partial index finds the unanswered
ones whose owner stopped refreshing them.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
UNANSWERED = "answered_at IS NULL AND request IS NOT NULL"


def upgrade() -> None:
    with op.batch_alter_table("qb_deliveries") as batch:
        batch.add_column(sa.Column("request", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("answered_at", TS, nullable=True))
        batch.add_column(sa.Column("outcome", sa.String(200), nullable=True))
    op.create_index(
        "ix_qb_deliveries_unanswered",
        "qb_deliveries",
        ["seen_at"],
        postgresql_where=sa.text(UNANSWERED),
        sqlite_where=sa.text(UNANSWERED),
    )


def downgrade() -> None:
    op.drop_index("ix_qb_deliveries_unanswered", table_name="qb_deliveries")
    with op.batch_alter_table("qb_deliveries") as batch:
        batch.drop_column("outcome")
        batch.drop_column("answered_at")
        batch.drop_column("request")
