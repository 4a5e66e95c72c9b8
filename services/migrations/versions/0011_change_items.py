"""A change request's frozen rows in a table of their own (``qb_change_items``) instead
of inside the request's JSON and its audit events, and the rows its execution changed
(``qb_change_outcomes``), with their images from just before the change where these
differ from the frozen ones.

A redrive of 100,000 jobs used to carry every row's image from the database to queuebot
and back three times (the freeze, the request's audit event, the approval's audit event)
and hold all of them in memory at once. The rows now stay in the database: the request
copies them here with one ``INSERT ... SELECT`` where the database can, the approval
changes the queue from here with one statement, and the audit events carry digests of
the images, which ``audit verify`` recomputes from this table. The image columns are
compressed with lz4 where the server has it, as the audit details are.

The two tables name their request without a foreign key: they are written only in the
transaction that writes or locks the request, and a foreign key's check per row cost a
100,000-row request as much again as writing the rows.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy import text

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "qb_change_items",
        sa.Column("request_id", BigId, nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False, autoincrement=False),
        sa.Column("job_id", sa.Text(), nullable=False),
        sa.Column("part", sa.Text(), nullable=True),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("signature", sa.Text(), nullable=False),
        sa.Column("image", sa.Text(), nullable=False),
        sa.Column("image_sha256", sa.String(64), nullable=False),
        sa.Column("version", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("request_id", "seq", name="pk_qb_change_items"),
    )
    op.create_table(
        "qb_change_outcomes",
        sa.Column("request_id", BigId, nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False, autoincrement=False),
        sa.Column("before", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("request_id", "seq", name="pk_qb_change_outcomes"),
    )
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    lz4 = bind.execute(
        text(
            "SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' "
            "AND 'lz4' = ANY(enumvals)"
        )
    ).first()
    if lz4 is not None:
        for table, column in (("qb_change_items", "image"), ("qb_change_outcomes", "before")):
            op.execute(f'ALTER TABLE {table} ALTER COLUMN "{column}" SET COMPRESSION lz4')


def downgrade() -> None:
    op.drop_table("qb_change_outcomes")
    op.drop_table("qb_change_items")
