"""Incidents declared from chat: who leads them, the fault time apart from the declaration
time, where their thread is; each audience's communication as an obligation with a due
time; and the incident's timeline.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("qb_incidents") as batch:
        batch.add_column(sa.Column("runbook", sa.String(200), nullable=True))
        batch.add_column(sa.Column("runbook_version", sa.String(32), nullable=True))
        batch.add_column(sa.Column("lead", sa.String(64), nullable=True))
        batch.add_column(sa.Column("lead_platform", sa.String(16), nullable=True))
        batch.add_column(sa.Column("lead_account", sa.String(64), nullable=True))
        batch.add_column(sa.Column("fault_at", TS, nullable=True))
        batch.add_column(sa.Column("alert_group", BigId, nullable=True))
        batch.add_column(sa.Column("origin", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("thread", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("resolved_at", TS, nullable=True))
    op.create_table(
        "qb_incident_obligations",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("incident_id", BigId, nullable=False, index=True),
        sa.Column("audience", sa.String(64), nullable=False),
        sa.Column("channel_dependency", sa.String(200), nullable=False),
        sa.Column("within_ms", sa.BigInteger(), nullable=False),
        sa.Column("due_at", TS, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("met_at", TS, nullable=True),
        sa.Column("met_by", sa.String(64), nullable=True),
        sa.Column("reminders", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("escalated_at", TS, nullable=True),
        sa.UniqueConstraint("incident_id", "audience", name="uq_qb_incident_obligation"),
    )
    op.create_table(
        "qb_incident_steps",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("incident_id", BigId, nullable=False, index=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("check_id", sa.String(32), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("done_at", TS, nullable=True),
        sa.Column("done_by", sa.String(64), nullable=True),
        sa.Column("result", sa.Text(), nullable=True),
    )
    op.create_table(
        "qb_incident_timeline",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("incident_id", BigId, nullable=False, index=True),
        sa.Column("at", TS, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("actor", sa.String(64), nullable=True),
        sa.Column("text", sa.Text(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("qb_incident_timeline")
    op.drop_table("qb_incident_steps")
    op.drop_table("qb_incident_obligations")
    with op.batch_alter_table("qb_incidents") as batch:
        for column in (
            "resolved_at", "thread", "origin", "alert_group", "fault_at", "lead_account",
            "lead_platform", "lead", "runbook_version", "runbook",
        ):  # fmt: skip
            batch.drop_column(column)
