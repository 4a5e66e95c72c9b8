"""An in-process queuebot with the alert webhook, over the demo estate, posting to the
local fake Slack: what the alert tests drive."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from bot.bootstrap import App, build_app
from bot.http import build_http_app
from bot.slack.app import web_client
from bot.slack.notifier import SlackNotifier
from bot.slack.pacing import ChannelPacer
from services.config import load_config
from services.db import create_engine
from services.db.migrate import upgrade
from services.estate.demo import build_demo_estate
from services.notify import FanoutNotifier
from testkit.fake_slack import Call, FakeSlack
from tests.conftest import holds_demo
from tests.integration.support import START, Clock

TOKEN = "alert-token-for-tests-0123456789"
CONFIG = """\
[queues.clips]
profile = "message_job"
[queues.workers]
profile = "worker_queue"

[channels.alerts]
slack = "C0ALERTS"
[channels.operators]
slack = "C0OPS"

[[alerts.routes]]
name = "stuck-to-operators"
alertname = "QueueStuck"
channels = ["operators"]
"""


@dataclass
class AlertBot:
    app: App
    client: httpx.AsyncClient
    fake: FakeSlack
    clock: Clock
    pacer: ChannelPacer

    async def send(
        self, body: dict[str, Any] | bytes, *, token: str | None = TOKEN
    ) -> httpx.Response:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers = {"content-type": "application/json"}
        if token is not None:
            headers["authorization"] = f"Bearer {token}"
        return await self.client.post("/alerts/alertmanager", content=content, headers=headers)

    async def settle(self) -> None:
        """Process what is stored and deliver every post it made."""
        while await self.app.alerts.process_due():
            pass
        while await self.app.outbox.run_due():
            pass

    async def stored(self) -> int:
        async with self.app.state_engine.connect() as conn:
            return int(
                (await conn.execute(sa.text("SELECT count(*) FROM qb_alert_inbox"))).scalar_one()
            )

    def posts(self, channel: str | None = None) -> list[Call]:
        return [
            c
            for c in self.fake.recorded("/api/chat.postMessage")
            if c.path == "/api/chat.postMessage"
            and (channel is None or c.body.get("channel") == channel)
        ]

    def roots(self, channel: str | None = None) -> list[Call]:
        return [c for c in self.posts(channel) if not c.body.get("thread_ts")]

    def replies(self, root: Call) -> list[Call]:
        return [c for c in self.posts() if c.body.get("thread_ts") == root.ts]

    def updates(self) -> list[Call]:
        return self.fake.recorded("/api/chat.update")


@contextlib.asynccontextmanager
async def alert_bot(
    db_url: str,
    workdir: Path,
    *,
    extra: str = "",
    token: str | None = TOKEN,
    build: bool = True,
) -> AsyncIterator[AlertBot]:
    """``build=False`` starts it again over the database an earlier one built (a restart)."""
    config_path = workdir / "queuebot.toml"
    config_path.write_text(CONFIG + extra)
    clock = Clock()
    environ = {"QUEUEBOT_DATABASE_URL": db_url}
    if token:
        environ["QUEUEBOT_ALERT_TOKEN"] = token
    config = load_config(config_path, environ=environ)
    if build and not holds_demo(db_url):
        engine = create_engine(db_url)
        await upgrade(engine)
        async with engine.begin() as conn:
            await build_demo_estate(conn, now=START)
        await engine.dispose()
    with FakeSlack().start() as fake:
        slack_env = load_config(
            config_path,
            environ={**environ, "SLACK_BOT_TOKEN": "xoxb-fake", "SLACK_API_BASE_URL": fake.api_url},
        ).env
        pacer = ChannelPacer(0)
        notifier = FanoutNotifier(
            [
                (
                    "slack",
                    SlackNotifier(
                        web_client(slack_env),
                        {n: c.slack for n, c in config.file.channels.items() if c.slack},
                        pacer=pacer,
                    ),
                )
            ]
        )
        app = await build_app(config, clock=clock, notifier=notifier, announce=False)
        http = build_http_app(app=app, slack=None)
        transport = httpx.ASGITransport(app=http)
        async with httpx.AsyncClient(transport=transport, base_url="http://queuebot") as client:
            try:
                yield AlertBot(app, client, fake, clock, pacer)
            finally:
                await app.close()
                await notifier.close()  # the Slack client's kept-alive connections


def notification(
    *,
    group: dict[str, str],
    alerts: Sequence[dict[str, Any]],
    status: str | None = None,
    receiver: str = "queuebot",
) -> dict[str, Any]:
    """Alertmanager's webhook body for ``group`` (its labels) holding ``alerts``."""
    inner = ", ".join(f'{k}="{v}"' for k, v in group.items())
    firing = any(a["status"] == "firing" for a in alerts)
    common = dict(group)
    return {
        "receiver": receiver,
        "status": status or ("firing" if firing else "resolved"),
        "alerts": list(alerts),
        "groupLabels": dict(group),
        "commonLabels": common,
        "commonAnnotations": {},
        "externalURL": "http://alertmanager.example:9093",
        "version": "4",
        "groupKey": f"{{}}:{{{inner}}}",
        "truncatedAlerts": 0,
    }


def alert(
    fingerprint: str,
    *,
    labels: dict[str, str],
    status: str = "firing",
    starts: str = "2026-11-30T12:00:00.123456789Z",
    ends: str = "0001-01-01T00:00:00Z",
    summary: str = "",
) -> dict[str, Any]:
    return {
        "status": status,
        "labels": labels,
        "annotations": {"summary": summary} if summary else {},
        "startsAt": starts,
        "endsAt": ends,
        "generatorURL": "http://prometheus.example:9090/graph?g0.expr=x",
        "fingerprint": fingerprint,
    }
