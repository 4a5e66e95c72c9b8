"""Incidents open when queuebot is upgraded: before, every runbook that restored the job
queue held redrives on its queue until it was resolved. The upgrade keeps holding them
only where the shipped queue-loss runbook now says so (until its dep:job-queue step is
done) and releases every other."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from services.db import create_engine
from services.db.migrate import head_revision, upgrade

AT = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


@pytest.mark.empty_db  # migrates from revision 0015 itself
async def test_open_incidents_hold_redrives_only_as_their_runbook_now_says(db_url: str) -> None:
    engine = create_engine(db_url)
    try:
        assert await upgrade(engine, "0015") == "0015"
        async with engine.begin() as conn:  # what queuebot wrote at revision 0015
            for number, scenario, state, job_queue_done in (
                (1, "gd:queue-loss", "open", False),
                (2, "gd:queue-loss", "open", True),
                (3, "gd:dlq-redrive", "open", False),
                (4, "gd:failed-jobs-accumulating", "open", False),
                (5, "gd:queue-loss", "resolved", True),
            ):
                await conn.execute(
                    sa.text(
                        "INSERT INTO qb_incidents (id, scenario, summary, state, "
                        "blocks_redrive, queue, declared_at) VALUES (:n, :s, 'x', :st, :b, "
                        "'clips', :at)"
                    ),
                    {"n": number, "s": scenario, "st": state, "b": True, "at": AT},
                )
                order = ["dep:job-queue", "dep:job-worker-pool"]
                if scenario == "gd:failed-jobs-accumulating":
                    order.reverse()
                for position, name in enumerate(order):
                    done = name == "dep:job-queue" and job_queue_done
                    state = "done" if done else "pending"
                    await conn.execute(
                        sa.text(
                            "INSERT INTO qb_incident_steps (incident_id, kind, position, name, "
                            "state) VALUES (:n, 'restore', :p, :name, :st)"
                        ),
                        {"n": number, "p": position, "name": name, "st": state},
                    )
        assert await upgrade(engine) == head_revision()
        async with engine.connect() as conn:
            rows = (
                await conn.execute(
                    sa.text(
                        "SELECT id, blocks_redrive, blocks_redrive_until FROM qb_incidents "
                        "ORDER BY id"
                    )
                )
            ).all()
        assert [(n, bool(b), until) for n, b, until in rows] == [
            (1, True, "dep:job-queue"),  # its queue is still being restored
            (2, False, "dep:job-queue"),  # restored already: released
            (3, False, None),
            (4, False, None),
            (5, True, None),  # resolved: holds nothing, left as it was
        ]
    finally:
        await engine.dispose()
