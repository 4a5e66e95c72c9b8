"""50 approvals of one request at once, from 5 processes and 5 approvers, on PostgreSQL:
exactly one execution, one set of job events, and a clear answer for every other click."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from bot.bootstrap import wire_services
from services.audit import Actor, AuditTrail
from services.changes.model import ChangeKind
from services.config import ApprovalConfig, RedriveConfig, default_queues
from services.db import create_engine
from services.db.migrate import upgrade
from services.estate.demo import build_demo_estate
from services.estate.estate import Estate
from services.estate.model import DeadFilter
from services.estate.ops import Selector
from services.reads.gate import ReadGate
from services.reads.service import QueueReads

APPROVERS = ["bob", "carol", "dave", "erin", "frank"]
SCRIPT = Path(__file__).with_name("approver_process.py")


@pytest.mark.postgres
@pytest.mark.slow  # fifty processes at once
def test_fifty_concurrent_approvals_execute_once(pg_url: str) -> None:
    async def prepare() -> list[str]:
        engine = create_engine(pg_url)
        await upgrade(engine)
        async with engine.begin() as conn:
            await build_demo_estate(conn, now=datetime.now(UTC))
        estate = Estate(engine=engine, queues=default_queues())
        # the 14 ffmpeg dead letters: their sources exist and the error is not permanent
        dead = await QueueReads(estate, gate=ReadGate(fresh_for=0.0)).list_dead(
            queue="clips", filters=DeadFilter(error_like="ffmpeg")
        )
        changes = wire_services(
            state_engine=engine,
            estate=estate,
            clock=estate.clock,
            approval=ApprovalConfig(),
            redrive=RedriveConfig(),
            notifier=None,
            audit=AuditTrail(),
        ).changes
        await changes.request(
            kind=ChangeKind.REDRIVE,
            queue="clips",
            selector=Selector(ids=tuple(r.id for r in dead.rows)),
            reason="transcoder fixed",
            actor=Actor("alice", "slack", "U0A"),
        )
        await engine.dispose()
        return [r.id for r in dead.rows]

    job_ids = asyncio.run(prepare())
    start_at = str(time.time() + 5)  # after every process has started and connected
    procs = [
        subprocess.Popen(
            [sys.executable, str(SCRIPT), pg_url, "1", start_at, *([person] * 10)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for person in APPROVERS
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.extend(json.loads(line) for line in out.splitlines())

    assert len(results) == 50
    executed = [r for r in results if r["outcome"] == "executed"]
    assert len(executed) == 1
    winner = executed[0]["person"]
    others = [r for r in results if r is not executed[0]]
    assert {r["outcome"] for r in others} == {"RequestDecided"}  # a Conflict: decided already
    for r in others:
        assert r["message"].startswith(f"CR-1 was already approved by {winner} at ")
        assert "14 row(s) changed, 0 skipped. Nothing more was done." in r["message"]

    async def check() -> None:
        engine = create_engine(pg_url)
        async with engine.connect() as conn:
            events = (
                await conn.execute(
                    sa.text(
                        "SELECT aggregate_id, count(*) FROM job_events WHERE event_type = "
                        "'REDRIVE_REQUESTED' GROUP BY aggregate_id"
                    )
                )
            ).all()
            assert sorted(str(a) for a, _ in events) == sorted(job_ids)
            assert {n for _, n in events} == {1}
            actions = (
                await conn.execute(
                    sa.text("SELECT action, count(*) FROM qb_audit_events GROUP BY action")
                )
            ).all()
            assert dict(actions) == {
                "change.requested": 1,
                "change.approved": 1,
                "change.executed": 1,
            }
            approvals = (await conn.execute(sa.text("SELECT person FROM qb_approvals"))).all()
            assert [a for (a,) in approvals] == [winner]
            assert (await AuditTrail().verify(conn)).ok
        await engine.dispose()

    asyncio.run(check())
