"""Deliveries become claims (in progress, then done); the transactional outbox.

A delivery's key is claimed when it arrives and marked done in the same transaction as
the change it makes (or once a read's answer is out), so a crash in between leaves a
claim another process can take over instead of a key that swallows the redelivery.
Chat posts a change makes are written to ``qb_outbox`` in the change's transaction and
delivered, retried and marked done by the relay.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("qb_deliveries") as batch:
        # rows from before were acted on already: they are done
        batch.add_column(sa.Column("state", sa.String(16), nullable=False, server_default="done"))
        batch.add_column(sa.Column("owner", sa.String(64), nullable=True))
        batch.add_column(sa.Column("done_at", TS, nullable=True))
    op.create_table(
        "qb_outbox",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("subject", sa.String(64), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("due_at", TS, nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("done_at", TS, nullable=True),
    )
    op.create_index(
        "ix_qb_outbox_due",
        "qb_outbox",
        ["due_at", "id"],
        postgresql_where=sa.text("done_at IS NULL"),
        sqlite_where=sa.text("done_at IS NULL"),
    )
    op.create_index(
        "ix_qb_outbox_subject",
        "qb_outbox",
        ["kind", "subject", "id"],
        postgresql_where=sa.text("done_at IS NULL"),
        sqlite_where=sa.text("done_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_qb_outbox_subject", table_name="qb_outbox")
    op.drop_index("ix_qb_outbox_due", table_name="qb_outbox")
    op.drop_table("qb_outbox")
    with op.batch_alter_table("qb_deliveries") as batch:
        batch.drop_column("done_at")
        batch.drop_column("owner")
        batch.drop_column("state")
