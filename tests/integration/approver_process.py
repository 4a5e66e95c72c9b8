"""One process of the concurrent-approval test: many approvals of one request at once.

Usage: python approver_process.py URL NUMBER START_AT PERSON... ; prints one JSON line per
attempt. Every process waits for START_AT (a Unix time) once it is ready, so the
processes' approvals really overlap instead of following each one's start-up.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from bot.bootstrap import wire_services
from commands.messages import describe
from services.audit import Actor, AuditTrail
from services.changes.requests import ChangeRequests
from services.config import ApprovalConfig, RedriveConfig, default_queues
from services.db import create_engine
from services.errors import QueuebotError
from services.estate.estate import Estate


async def attempt(changes: ChangeRequests, number: int, person: str) -> dict[str, str]:
    try:
        decision = await changes.approve(
            number=number, actor=Actor(person, "slack", f"U0{person.upper()}")
        )
    except QueuebotError as exc:
        return {"person": person, "outcome": type(exc).__name__, "message": describe(exc)[1]}
    return {
        "person": person,
        "outcome": "executed" if decision.executed else "recorded",
        "message": "",
    }


async def main(url: str, number: int, start_at: float, people: list[str]) -> None:
    engine = create_engine(url, pool_size=len(people))
    estate = Estate(engine=engine, queues=default_queues())
    changes = wire_services(
        state_engine=engine,
        estate=estate,
        clock=estate.clock,
        approval=ApprovalConfig(),
        redrive=RedriveConfig(),
        notifier=None,
        audit=AuditTrail(),
    ).changes
    await asyncio.sleep(max(0.0, start_at - time.time()))
    results = await asyncio.gather(*(attempt(changes, number, p) for p in people))
    await engine.dispose()
    for result in results:
        print(json.dumps(result))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]))
