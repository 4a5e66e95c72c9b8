"""Staged redrive plans, the durable scheduler, queue count samples, incidents.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TS = sa.DateTime(timezone=True)
ACTIVE = "state IN ('running', 'halted')"


def upgrade() -> None:
    op.create_table(
        "qb_schedule",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("subject", sa.String(64), nullable=False),
        sa.Column("due_at", TS, nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("last_error", sa.Text()),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_index("ix_qb_schedule_due_at", "qb_schedule", ["due_at"])
    op.create_index("ux_qb_schedule_kind_subject", "qb_schedule", ["kind", "subject"], unique=True)
    op.create_table(
        "qb_queue_samples",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("queue", sa.String(64), nullable=False),
        sa.Column("at", TS, nullable=False),
        sa.Column("total", sa.BigInteger(), nullable=False),
        sa.Column("dead", sa.BigInteger(), nullable=False),
        sa.Column("pending", sa.BigInteger(), nullable=False),
        sa.Column("counts", sa.JSON(), nullable=False),
    )
    op.create_index("ix_qb_queue_samples_queue_at", "qb_queue_samples", ["queue", "at"])
    op.create_table(
        "qb_incidents",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("scenario", sa.String(64), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("blocks_redrive", sa.Boolean(), nullable=False),
        sa.Column("queue", sa.String(64)),
        sa.Column("declared_at", TS, nullable=False),
    )
    op.create_index("ix_qb_incidents_state", "qb_incidents", ["state"])
    op.create_table(
        "qb_plans",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("queue", sa.String(64), nullable=False),
        sa.Column("profile", sa.String(32), nullable=False),
        sa.Column("request_id", BigId, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("incident", sa.String(32)),
        sa.Column("requester", sa.String(64), nullable=False),
        sa.Column("approvers", sa.JSON(), nullable=False),
        sa.Column("sample", sa.Integer(), nullable=False),
        sa.Column("max_wave", sa.Integer(), nullable=False),
        sa.Column("velocity", sa.Float(), nullable=False),
        sa.Column("poll_seconds", sa.Float(), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("cursor", sa.Integer(), nullable=False),
        sa.Column("wave", sa.Integer(), nullable=False),
        sa.Column("wave_size", sa.Integer(), nullable=False),
        sa.Column("wave_started_at", TS),
        sa.Column("dead_at_wave_start", sa.BigInteger(), nullable=False),
        sa.Column("waves", sa.JSON(), nullable=False),
        sa.Column("note", sa.Text()),
        sa.Column("origin", sa.JSON(), nullable=False),
        sa.Column("message_ref", sa.JSON()),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
    )
    # One active plan per queue, enforced by the database across replicas.
    op.create_index(
        "ux_qb_plans_one_active_per_queue",
        "qb_plans",
        ["queue"],
        unique=True,
        postgresql_where=sa.text(ACTIVE),
        sqlite_where=sa.text(ACTIVE),
    )
    op.create_table(
        "qb_plan_items",
        sa.Column("plan_id", BigId, primary_key=True),
        sa.Column("seq", sa.Integer(), primary_key=True),
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("message_id", sa.String(64)),
        sa.Column("wave", sa.Integer()),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("signature", sa.Text(), nullable=False),
        sa.Column("original", sa.JSON(), nullable=False),
    )
    op.create_index("ix_qb_plan_items_wave", "qb_plan_items", ["plan_id", "wave"])
    op.create_table(
        "qb_redrive_log",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("queue", sa.String(64), nullable=False),
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("at", TS, nullable=False),
    )
    op.create_index("ix_qb_redrive_log_job", "qb_redrive_log", ["queue", "job_id"])


def downgrade() -> None:
    for table in (
        "qb_redrive_log",
        "qb_plan_items",
        "qb_plans",
        "qb_incidents",
        "qb_queue_samples",
        "qb_schedule",
    ):
        op.drop_table(table)
