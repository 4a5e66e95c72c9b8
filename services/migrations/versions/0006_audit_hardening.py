"""The audit trail hardened: each event's scheme (unkeyed sha256 or keyed hmac-sha256),
TRUNCATE refused, and the head moved only the way the append moves it.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-07

Events written before this revision keep verifying: they get the scheme ``sha256``.

The rules the triggers keep (they bind every role but the tables' owner, who may disable
triggers, and superusers; docs/audit.md says what catches those):

- ``qb_audit_events``: UPDATE and DELETE refused (0002); TRUNCATE refused; a new event
  must follow the head (its ``prev_hash`` is the head's hash) and, on PostgreSQL, come
  after the newest event.
- ``qb_audit_head``: TRUNCATE and DELETE refused; a write must leave it pointing at the
  newest event, with that event's hash, and an UPDATE must move it forward.

PostgreSQL's functions name the tables through the schema of the table that fired them,
so a temporary table of the same name cannot stand in for the real one.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

PG_UP = r"""
CREATE OR REPLACE FUNCTION qb_audit_no_truncate() RETURNS trigger AS $$
BEGIN
  RAISE EXCEPTION '% is append-only: TRUNCATE refused', TG_TABLE_NAME;
END $$ LANGUAGE plpgsql;

CREATE TRIGGER qb_audit_events_no_truncate BEFORE TRUNCATE ON qb_audit_events
  FOR EACH STATEMENT EXECUTE FUNCTION qb_audit_no_truncate();
CREATE TRIGGER qb_audit_head_no_truncate BEFORE TRUNCATE ON qb_audit_head
  FOR EACH STATEMENT EXECUTE FUNCTION qb_audit_no_truncate();

CREATE OR REPLACE FUNCTION qb_audit_extend_tip() RETURNS trigger AS $$
DECLARE
  tip text;
  newest bigint;
BEGIN
  EXECUTE format('SELECT last_hash FROM %I.qb_audit_head WHERE id = 1', TG_TABLE_SCHEMA)
    INTO tip;
  IF NEW.prev_hash IS DISTINCT FROM coalesce(tip, repeat('0', 64)) THEN
    RAISE EXCEPTION 'qb_audit_events: a new event must follow the head (its prev_hash is '
      'not the head''s hash)';
  END IF;
  EXECUTE format('SELECT max(id) FROM %I.qb_audit_events', TG_TABLE_SCHEMA) INTO newest;
  IF newest IS NOT NULL AND NEW.id <= newest THEN
    RAISE EXCEPTION 'qb_audit_events: a new event must come after event %', newest;
  END IF;
  RETURN NEW;
END $$ LANGUAGE plpgsql;

CREATE TRIGGER qb_audit_events_extend_tip BEFORE INSERT ON qb_audit_events
  FOR EACH ROW EXECUTE FUNCTION qb_audit_extend_tip();

CREATE OR REPLACE FUNCTION qb_audit_head_guard() RETURNS trigger AS $$
DECLARE
  found boolean;
BEGIN
  IF TG_OP = 'DELETE' THEN
    RAISE EXCEPTION 'qb_audit_head: DELETE refused';
  END IF;
  IF NEW.id <> 1 THEN
    RAISE EXCEPTION 'qb_audit_head holds one row, id 1';
  END IF;
  IF TG_OP = 'UPDATE' AND NEW.last_id <= OLD.last_id THEN
    RAISE EXCEPTION 'qb_audit_head: the head only moves forward (% to % refused)',
      OLD.last_id, NEW.last_id;
  END IF;
  EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.qb_audit_events WHERE id = $1 '
    'AND hash = $2)', TG_TABLE_SCHEMA) INTO found USING NEW.last_id, NEW.last_hash;
  IF NOT found THEN
    RAISE EXCEPTION 'qb_audit_head must name an event with that event''s hash';
  END IF;
  EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.qb_audit_events WHERE id > $1)',
    TG_TABLE_SCHEMA) INTO found USING NEW.last_id;
  IF found THEN
    RAISE EXCEPTION 'qb_audit_head must name the newest event';
  END IF;
  RETURN NEW;
END $$ LANGUAGE plpgsql;

CREATE TRIGGER qb_audit_head_guard BEFORE INSERT OR UPDATE OR DELETE ON qb_audit_head
  FOR EACH ROW EXECUTE FUNCTION qb_audit_head_guard();
"""
PG_DOWN = """
DROP TRIGGER IF EXISTS qb_audit_head_guard ON qb_audit_head;
DROP TRIGGER IF EXISTS qb_audit_events_extend_tip ON qb_audit_events;
DROP TRIGGER IF EXISTS qb_audit_head_no_truncate ON qb_audit_head;
DROP TRIGGER IF EXISTS qb_audit_events_no_truncate ON qb_audit_events;
DROP FUNCTION IF EXISTS qb_audit_head_guard();
DROP FUNCTION IF EXISTS qb_audit_extend_tip();
DROP FUNCTION IF EXISTS qb_audit_no_truncate();
"""

# SQLite has no TRUNCATE: a DELETE without WHERE fires the DELETE triggers (0002).
_HEAD_IS_THE_TIP = (
    "NOT EXISTS (SELECT 1 FROM qb_audit_events WHERE id = NEW.last_id "
    "AND hash = NEW.last_hash) "
    "OR EXISTS (SELECT 1 FROM qb_audit_events WHERE id > NEW.last_id)"
)
SQLITE_UP = (
    "CREATE TRIGGER qb_audit_head_no_delete BEFORE DELETE ON qb_audit_head "
    "BEGIN SELECT RAISE(ABORT, 'qb_audit_head: DELETE refused'); END",
    "CREATE TRIGGER qb_audit_head_guard_insert BEFORE INSERT ON qb_audit_head "
    f"WHEN NEW.id IS NOT 1 OR {_HEAD_IS_THE_TIP} "
    "BEGIN SELECT RAISE(ABORT, 'qb_audit_head must hold one row, id 1, naming the newest "
    "event with its hash'); END",
    "CREATE TRIGGER qb_audit_head_guard_update BEFORE UPDATE ON qb_audit_head "
    f"WHEN NEW.id IS NOT OLD.id OR NEW.last_id <= OLD.last_id OR {_HEAD_IS_THE_TIP} "
    "BEGIN SELECT RAISE(ABORT, 'qb_audit_head: the head only moves forward, to the newest "
    "event with its hash'); END",
    "CREATE TRIGGER qb_audit_events_extend_tip BEFORE INSERT ON qb_audit_events "
    "WHEN NEW.prev_hash IS NOT coalesce((SELECT last_hash FROM qb_audit_head WHERE id = 1), "
    "hex(zeroblob(32))) "  # 64 zeros: what the first event follows
    "BEGIN SELECT RAISE(ABORT, 'qb_audit_events: a new event must follow the head (its "
    "prev_hash is not the head''s hash)'); END",
)
SQLITE_DOWN = (
    "DROP TRIGGER IF EXISTS qb_audit_events_extend_tip",
    "DROP TRIGGER IF EXISTS qb_audit_head_guard_update",
    "DROP TRIGGER IF EXISTS qb_audit_head_guard_insert",
    "DROP TRIGGER IF EXISTS qb_audit_head_no_delete",
)


def upgrade() -> None:
    # Existing events were sealed with plain SHA-256; the default says so for them.
    op.add_column(
        "qb_audit_events",
        sa.Column("scheme", sa.String(16), nullable=False, server_default="sha256"),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(PG_UP)
    else:
        for statement in SQLITE_UP:
            op.execute(statement)


def downgrade() -> None:
    keyed = op.get_bind().execute(
        sa.text("SELECT min(id) FROM qb_audit_events WHERE scheme <> 'sha256'")
    )
    first = keyed.scalar()
    if first is not None:
        raise RuntimeError(
            f"audit event {first} is keyed: below revision 0006 it could not be verified; "
            "refusing to downgrade"
        )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(PG_DOWN)
    else:
        for statement in SQLITE_DOWN:
            op.execute(statement)
    op.drop_column("qb_audit_events", "scheme")
