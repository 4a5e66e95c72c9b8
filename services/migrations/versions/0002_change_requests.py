"""Change requests, approvals, the audit head, and append-only triggers on the audit trail.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TS = sa.DateTime(timezone=True)

PG_TRIGGER = """
CREATE OR REPLACE FUNCTION qb_audit_append_only() RETURNS trigger AS $$
BEGIN
  RAISE EXCEPTION 'qb_audit_events is append-only: % refused', TG_OP;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER qb_audit_events_append_only BEFORE UPDATE OR DELETE ON qb_audit_events
  FOR EACH ROW EXECUTE FUNCTION qb_audit_append_only();
"""
SQLITE_TRIGGERS = (
    "CREATE TRIGGER qb_audit_events_no_update BEFORE UPDATE ON qb_audit_events "
    "BEGIN SELECT RAISE(ABORT, 'qb_audit_events is append-only: UPDATE refused'); END",
    "CREATE TRIGGER qb_audit_events_no_delete BEFORE DELETE ON qb_audit_events "
    "BEGIN SELECT RAISE(ABORT, 'qb_audit_events is append-only: DELETE refused'); END",
)


def upgrade() -> None:
    op.create_table(
        "qb_audit_head",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("last_id", BigId, nullable=False),
        sa.Column("last_hash", sa.String(64), nullable=False),
    )
    op.create_table(
        "qb_change_requests",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("queue", sa.String(64), nullable=False),
        sa.Column("profile", sa.String(32), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("requested_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=False),
        sa.Column("requester_person", sa.String(64), nullable=False),
        sa.Column("requester_platform", sa.String(16), nullable=False),
        sa.Column("requester_account", sa.String(64), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("incident", sa.String(32)),
        sa.Column("evidence", sa.Text()),
        sa.Column("selector", sa.JSON(), nullable=False),
        sa.Column("targets", sa.JSON(), nullable=False),
        sa.Column("ineligible", sa.JSON(), nullable=False),
        sa.Column("snapshot_hash", sa.String(64), nullable=False),
        sa.Column("preview", sa.JSON(), nullable=False),
        sa.Column("eligible_count", sa.Integer(), nullable=False),
        sa.Column("approvals_required", sa.Integer(), nullable=False),
        sa.Column("decided_at", TS),
        sa.Column("result", sa.JSON()),
        sa.Column("origin", sa.JSON(), nullable=False),
    )
    op.create_index("ix_qb_change_requests_state", "qb_change_requests", ["state"])
    op.create_table(
        "qb_approvals",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("request_id", BigId, sa.ForeignKey("qb_change_requests.id"), nullable=False),
        sa.Column("person", sa.String(64), nullable=False),
        sa.Column("platform", sa.String(16), nullable=False),
        sa.Column("account", sa.String(64), nullable=False),
        sa.Column("decision", sa.String(16), nullable=False),
        sa.Column("at", TS, nullable=False),
        sa.UniqueConstraint("request_id", "person"),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(PG_TRIGGER)
    else:
        for statement in SQLITE_TRIGGERS:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS qb_audit_events_append_only ON qb_audit_events")
        op.execute("DROP FUNCTION IF EXISTS qb_audit_append_only()")
    else:
        op.execute("DROP TRIGGER IF EXISTS qb_audit_events_no_update")
        op.execute("DROP TRIGGER IF EXISTS qb_audit_events_no_delete")
    op.drop_table("qb_approvals")
    op.drop_table("qb_change_requests")
    op.drop_table("qb_audit_head")
