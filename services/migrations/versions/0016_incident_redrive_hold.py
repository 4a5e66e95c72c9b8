"""Which restore step an open incident holds redrives on its queue until
(``blocks_redrive_until``, the runbook's ``blocksRedrivesUntil``); ``blocks_redrive`` is
cleared when that step is marked done.

Before, every incident whose runbook restored the job queue held redrives until it was
resolved, the dead-letter redrive and failed-jobs runbooks' included. Of the incidents
open now, those of the shipped queue-loss runbook (the one that sets the field) keep
holding them until their ``dep:job-queue`` step is done; every other is released.
Resolved incidents hold nothing and are left as they were.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-14
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

QUEUE_LOSS = "gd:queue-loss"
JOB_QUEUE = "dep:job-queue"

incidents = sa.table(
    "qb_incidents",
    sa.column("id", sa.BigInteger()),
    sa.column("scenario", sa.String()),
    sa.column("state", sa.String()),
    sa.column("blocks_redrive", sa.Boolean()),
    sa.column("blocks_redrive_until", sa.String()),
)
steps = sa.table(
    "qb_incident_steps",
    sa.column("incident_id", sa.BigInteger()),
    sa.column("kind", sa.String()),
    sa.column("name", sa.Text()),
    sa.column("state", sa.String()),
)


def upgrade() -> None:
    with op.batch_alter_table("qb_incidents") as batch:
        batch.add_column(sa.Column("blocks_redrive_until", sa.String(80), nullable=True))
    holding = sa.and_(incidents.c.state == "open", incidents.c.blocks_redrive.is_(sa.true()))
    op.execute(
        incidents.update()
        .where(holding, incidents.c.scenario == QUEUE_LOSS)
        .values(blocks_redrive_until=JOB_QUEUE)
    )
    restored = (
        sa.select(steps.c.incident_id)
        .where(
            steps.c.incident_id == incidents.c.id,
            steps.c.kind == "restore",
            steps.c.name == JOB_QUEUE,
            steps.c.state == "done",
        )
        .exists()
    )
    op.execute(
        incidents.update()
        .where(holding, sa.or_(incidents.c.scenario != QUEUE_LOSS, restored))
        .values(blocks_redrive=False)
    )


def downgrade() -> None:
    with op.batch_alter_table("qb_incidents") as batch:
        batch.drop_column("blocks_redrive_until")
