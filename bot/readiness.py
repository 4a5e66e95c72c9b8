"""What ``GET /readyz`` answers: whether this process can do its work, and if not, why.

Ready means both databases answer, every configured queue's tables and columns are there
(reflected afresh, not from the reflection commands keep) and, on PostgreSQL, readable by
the role queuebot runs as (SELECT on every column it reads), and Slack, where it is
configured, can work (Slack said who the bot is; Socket Mode holds its connection). The
databases, and that each queue's tables exist (a catalog lookup per table), are asked at
each probe; the columns, their privileges and Slack at most every few seconds, so a probe
every second stays cheap. The answer names no secret: queue
problems say which table, column or privilege, Slack's say Slack's error code.

Alert notifications set aside (stored, but their processing failed on their own) are
shown under ``alerts``: how many, the oldest one's id, when and why. They do not make the
process unready: every other notification is processed, and an unready answer would have
a load balancer take away the webhook those go through, or an orchestrator restart a
process whose restart changes nothing (a set-aside notification stays set aside). The
way they are seen is this body, the gauge ``queuebot_alert_notifications_set_aside`` of
``GET /metrics`` and one error line in the log each.

``alert_path`` says what the Alertmanager webhook asks of a sender: the bearer token, or
nothing, where ``[alerts] allow_unauthenticated = true`` opened it on purpose (still ready:
that is the operator's choice, said where the probes and people look).

serve's background work (alert processing, posting, the scheduler) is shown under
``worker``: running, or not and when it starts again, and how often it ended in the last
ten minutes. A worker that is down does not make the process unready either: the front
still stores and acknowledges what comes, the work waits in the database, and serve
starts the worker again itself (another replica's worker takes the work meanwhile).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from bot.alertmanager import guard
from bot.bootstrap import App
from services.db import error_line
from services.db.bounds import bounded
from services.errors import QueuebotError
from services.estate import hints

log = logging.getLogger("queuebot.http")
TIMEOUT = 2.0  # seconds for each part of a check
FRESH_FOR = 5.0  # seconds an answer is reused (serve: [http] readyz_fresh_seconds)

SlackProblem = Callable[[], Awaitable[str | None]]


class Readiness:
    def __init__(
        self,
        app: App,
        *,
        slack: SlackProblem | None,
        discord: Callable[[], str | None] | None = None,
        worker: Callable[[], str] | None = None,
        fresh_for: float = FRESH_FOR,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app = app
        self.slack = slack
        self.discord = discord
        self.worker = worker
        self.fresh_for = fresh_for
        self.clock = clock
        self._setup: tuple[float, dict[str, str], str] | None = None
        self._checking = asyncio.Lock()

    async def check(self) -> tuple[bool, dict[str, Any]]:
        """(ready, the JSON body). The databases are asked every time (one ``SELECT 1``
        each, so an outage shows at once); the queues' tables and Slack, whose problems
        wait for a person, are checked at most every ``fresh_for`` seconds."""
        # Every wait of a probe on a database is cut by the connection itself before the
        # probe's own timeout would cancel it: a cancelled wait on a silent database
        # first tries to cancel its query there, which can take seconds more.
        with bounded(TIMEOUT * 0.75):
            return await self._check()

    async def _check(self) -> tuple[bool, dict[str, Any]]:
        async with self._checking:  # probes that arrive together share one check
            state, estate = await asyncio.gather(  # side by side: a silent one costs TIMEOUT once
                self._database(self.app.state_engine, "state"),
                self._database(self.app.estate.engine, "estate"),
            )
            databases = {"state": state, "estate": estate}
            problems = [
                f"the {name} database is unreachable"
                for name, said in databases.items()
                if said != "ok"
            ]
            queues: dict[str, str] = {}
            slack = "off"
            if databases["estate"] == "ok":
                gone = await self._tables_gone()
                queues, slack = await self._queues_and_slack()
                queues = {**queues, **gone}
                if gone:  # the fuller check runs again at the next probe
                    self._setup = None
            problems += [said for said in queues.values() if said != "ok"]
            if slack not in ("ok", "off"):
                problems.append(f"Slack: {slack}")
            discord = "off" if self.discord is None else (self.discord() or "ok")
            if discord not in ("ok", "off"):
                problems.append(f"Discord: {discord}")
            alerts = await self._alerts() if databases["state"] == "ok" else "unknown"
        body: dict[str, Any] = {
            "status": "not ready" if problems else "ready",
            "databases": databases,
            "queues": queues,
            "slack": slack,
            "discord": discord,
            "alerts": alerts,
            "alert_path": guard(self.app.config),
        }
        if self.worker is not None:
            body["worker"] = self.worker()
        if problems:
            body["problems"] = problems
        return not problems, body

    async def _tables_gone(self) -> dict[str, str]:
        """Each queue whose tables are not all there, and why: asked at every probe (a
        catalog lookup per table, in one connection), so a table renamed or dropped
        while serving shows at once, not when the fuller check comes round again."""
        wanted = {
            name: [
                (spec.role, profile.table_name(spec.role))
                for spec in profile.specs
                if spec.absent is None or spec.role in profile.config.tables
            ]
            for name, profile in self.app.estate.profiles.items()
        }

        def missing(conn: Any) -> dict[str, tuple[str, str]]:
            inspector = sa.inspect(conn)
            found: dict[str, tuple[str, str]] = {}
            for name, tables in wanted.items():
                for role, full in tables:
                    schema, _, table = full.rpartition(".")
                    if not inspector.has_table(table, schema=schema or None):
                        found[name] = (role, full)
                        break
            return found

        try:
            async with asyncio.timeout(TIMEOUT), self.app.estate.connect() as conn:
                gone = await conn.run_sync(missing)
        except (QueuebotError, TimeoutError, DBAPIError):
            return {}  # the fuller check says why the tables cannot be read
        profiles = self.app.estate.profiles
        return {
            name: hints.missing_table(
                name,
                profiles[name].name,
                profiles[name].config,
                role,
                full,
                existing=[],
                main=profiles[name].specs[0].role,
            )
            for name, (role, full) in gone.items()
        }

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

    async def _alerts(self) -> dict[str, Any] | str:
        """The alert notifications set aside: shown, never a reason to be unready."""
        try:
            async with asyncio.timeout(TIMEOUT):
                aside = await self.app.alerts.set_aside()
        except Exception as exc:  # shown as unknown; the databases' own check says why
            log.warning("readiness: set-aside alert notifications unread: %s", type(exc).__name__)
            return "unknown"
        if not aside.count:
            return {"set_aside": 0}
        at = aside.oldest_at.isoformat() if aside.oldest_at else None
        many = aside.count != 1
        return {
            "set_aside": aside.count,
            "oldest": {"id": aside.oldest_id, "set_aside_at": at, "error": aside.oldest_error},
            "note": (
                f"{aside.count} alert notification{'s' if many else ''} could not be "
                f"processed and {'are' if many else 'is'} set aside (kept in qb_alert_inbox, "
                "no longer tried); every other notification is processed. See "
                "docs/alerts.md, 'Set aside'"
            ),
        }

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
