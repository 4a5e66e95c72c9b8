"""The outbox relay schedules by channel and priority, collapses superseded alert posts,
and leases what it delivers for a short, renewed while in hand, time.

- ``lane``: where an item posts (a channel), so a channel waiting out its pace or a 429
  holds only its own items; rows from before get their subject's own lane.
- ``priority``: higher goes first among due items (an incident's posts before alert
  updates); rows from before are ordinary (1).
- ``collapse``: items of one subject with the same collapse key supersede each other:
  an undelivered one with a newer one behind it is marked done, unposted.
- ``superseded_by``: the newer item that made a collapsed item unnecessary.
- ``leased_by``: the relay delivering the item (it renews its lease, ``due_at``, while
  it does); NULL when nobody holds it.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("qb_outbox") as batch:
        batch.add_column(sa.Column("lane", sa.String(160), nullable=True))
        batch.add_column(
            sa.Column("priority", sa.SmallInteger(), nullable=False, server_default="1")
        )
        batch.add_column(sa.Column("collapse", sa.String(64), nullable=True))
        batch.add_column(sa.Column("superseded_by", BigId, nullable=True))
        batch.add_column(sa.Column("leased_by", sa.String(64), nullable=True))
    op.execute("UPDATE qb_outbox SET lane = kind || '/' || subject WHERE lane IS NULL")
    op.create_index(  # the undelivered items a newer one may supersede
        "ix_qb_outbox_collapse",
        "qb_outbox",
        ["kind", "subject", "collapse", "id"],
        postgresql_where=sa.text("done_at IS NULL AND collapse IS NOT NULL"),
        sqlite_where=sa.text("done_at IS NULL AND collapse IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_qb_outbox_collapse", table_name="qb_outbox")
    with op.batch_alter_table("qb_outbox") as batch:
        batch.drop_column("leased_by")
        batch.drop_column("superseded_by")
        batch.drop_column("collapse")
        batch.drop_column("priority")
        batch.drop_column("lane")
