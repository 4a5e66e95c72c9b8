"""What ``GET /readyz`` answers: whether this process can do its work, and if not, why.

Ready means both databases answer, every configured queue's tables and columns are there
(reflected afresh, not from the reflection commands keep) and, on PostgreSQL, readable by
the role queuebot runs as (SELECT on every column it reads), and Slack, where it is
configured, can work (Slack said who the bot is; Socket Mode holds its connection). The
databases are asked at each probe; the tables, their privileges and Slack at most every
few seconds, so a probe every second stays cheap. The answer names no secret: queue
problems say which table, column or privilege, Slack's say Slack's error code.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from bot.bootstrap import App
from services.db import error_line
from services.errors import QueuebotError

log = logging.getLogger("queuebot.http")
TIMEOUT = 2.0  # seconds for each part of a check
FRESH_FOR = 5.0  # seconds an answer is reused

SlackProblem = Callable[[], Awaitable[str | None]]


class Readiness:
    def __init__(
        self,
        app: App,
        *,
        slack: SlackProblem | None,
        discord: Callable[[], str | None] | None = None,
        fresh_for: float = FRESH_FOR,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app = app
        self.slack = slack
        self.discord = discord
        self.fresh_for = fresh_for
        self.clock = clock
        self._setup: tuple[float, dict[str, str], str] | None = None
        self._checking = asyncio.Lock()

    async def check(self) -> tuple[bool, dict[str, Any]]:
        """(ready, the JSON body). The databases are asked every time (one ``SELECT 1``
        each, so an outage shows at once); the queues' tables and Slack, whose problems
        wait for a person, are checked at most every ``fresh_for`` seconds."""
        async with self._checking:  # probes that arrive together share one check
            databases = {
                "state": await self._database(self.app.state_engine, "state"),
                "estate": await self._database(self.app.estate.engine, "estate"),
            }
            problems = [
                f"the {name} database is unreachable"
                for name, said in databases.items()
                if said != "ok"
            ]
            queues: dict[str, str] = {}
            slack = "off"
            if databases["estate"] == "ok":
                queues, slack = await self._queues_and_slack()
            problems += [said for said in queues.values() if said != "ok"]
            if slack not in ("ok", "off"):
                problems.append(f"Slack: {slack}")
            discord = "off" if self.discord is None else (self.discord() or "ok")
            if discord not in ("ok", "off"):
                problems.append(f"Discord: {discord}")
        body: dict[str, Any] = {
            "status": "not ready" if problems else "ready",
            "databases": databases,
            "queues": queues,
            "slack": slack,
            "discord": discord,
        }
        if problems:
            body["problems"] = problems
        return not problems, body

    async def _queues_and_slack(self) -> tuple[dict[str, str], str]:
        if self._setup is not None and self.clock() - self._setup[0] < self.fresh_for:
            return self._setup[1], self._setup[2]
        queues = {
            name: await self._queue(profile.check_access)
            for name, profile in self.app.estate.profiles.items()
        }
        slack = "off"
        if self.slack is not None:
            try:
                async with asyncio.timeout(TIMEOUT):
                    slack = await self.slack() or "ok"
            except TimeoutError:
                slack = f"Slack did not answer within {TIMEOUT:g} s"
        self._setup = (self.clock(), queues, slack)
        return queues, slack

    async def _database(self, engine: Any, name: str) -> str:
        try:
            async with asyncio.timeout(TIMEOUT), engine.connect() as conn:
                await conn.execute(sa.text("SELECT 1"))
            return "ok"
        except Exception as exc:  # any failure means not ready; say which, not why
            log.warning("readiness: %s database unreachable: %s", name, type(exc).__name__)
            return "unreachable"

    async def _queue(self, check: Callable[[Any], Awaitable[object]]) -> str:
        """The queue's tables and columns reflected afresh (not the reflection commands
        keep: a column renamed since would not show there), and on PostgreSQL the
        runtime role's SELECT privilege on every column queuebot reads."""
        try:
            async with asyncio.timeout(TIMEOUT), self.app.estate.connect() as conn:
                await check(conn)
            return "ok"
        except QueuebotError as exc:  # a missing table, column or privilege names the fix
            return exc.message
        except TimeoutError:
            return f"reading the queue's tables took over {TIMEOUT:g} s"
        except DBAPIError as exc:  # e.g. a table dropped between two statements
            return f"reading the queue's tables failed: {error_line(exc)}"
