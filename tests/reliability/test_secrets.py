"""Secrets never leave queuebot: recognisable fake ones (a bot token, a signing secret, an
app token, a database password in the URL of a role made for the test) are set, a mix of
commands is driven through serve over HTTP and Socket Mode (failing ones too, and a
database outage), and every log, reply, chat post, health answer and CLI output is
searched for them. Every other test of this suite has its serve logs searched too
(``harness.cluster``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from bot.demo import record_history
from services.config import default_queues
from services.db import create_engine
from services.db.migrate import upgrade
from services.estate.demo import build_demo_estate
from services.estate.estate import Estate
from testkit import web
from tests.conftest import PG_ADMIN, _pg_conninfo, need_postgres
from tests.e2e.fake_socket_mode import FakeSocketMode
from tests.helpers.people import SLACK_ALICE, SLACK_BOB, SLACK_STRANGER
from tests.reliability.harness import (
    APP_TOKEN,
    AUDIT_KEY,
    BOT_TOKEN,
    DB_PASSWORD,
    MARK,
    SIGNING_SECRET,
    Cluster,
    Delivery,
    Figures,
    Serve,
    answers,
    buttons,
    click,
    cluster,
    new_tag,
    send,
    slash,
    wait_answer,
)

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
SECRETS = (BOT_TOKEN, SIGNING_SECRET, APP_TOKEN, DB_PASSWORD, AUDIT_KEY)


@contextlib.contextmanager
def database_with_password() -> Iterator[tuple[str, str]]:
    """A role with a password and a fresh database it owns, holding the demo estate;
    (its URL with the password, the role). Both are dropped after."""
    need_postgres()
    role = f"qbrel_{secrets.token_hex(4)}"
    name = f"qb_test_{secrets.token_hex(4)}"
    with psycopg.connect(_pg_conninfo(PG_ADMIN), autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{DB_PASSWORD}'")
        admin.execute(f'CREATE DATABASE "{name}" OWNER {role}')
    url = (
        make_url(PG_ADMIN)
        .set(drivername="postgresql+psycopg", username=role, password=DB_PASSWORD, database=name)
        .render_as_string(hide_password=False)
    )
    try:

        async def build() -> None:
            engine = create_engine(url)
            try:
                await upgrade(engine)
                async with engine.begin() as conn:
                    await build_demo_estate(conn, now=datetime.now(UTC))
                await record_history(
                    engine,
                    Estate(engine=engine, queues=default_queues()),
                    ago=timedelta(minutes=15),
                )
            finally:
                await engine.dispose()

        asyncio.run(build())
        yield url, role
    finally:
        with psycopg.connect(_pg_conninfo(PG_ADMIN), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.execute(f"DROP ROLE IF EXISTS {role}")


def leaks(text: str) -> list[str]:
    found = [s for s in SECRETS if s in text]
    return found + ([MARK] if MARK in text and not found else [])


class Mix:
    """A mix of commands and clicks, good and bad, through one serve."""

    def __init__(self, c: Cluster, served: Serve, socket: FakeSocketMode, role: str) -> None:
        self.c, self.served, self.socket, self.role = c, served, socket, role
        self.sent: list[Delivery] = []
        self.seen: list[str] = []  # every other answer that left queuebot: searched too
        self.metrics = ""

    def command(self, text: str, *, user: str = SLACK_ALICE) -> Delivery:
        d = slash(self.c.fake, text, user=user, tag=new_tag("s"))
        assert send(self.served.url, d).status_code == 200
        wait_answer(self.c.fake, d)
        self.sent.append(d)
        return d

    def run(self) -> None:
        c = self.c
        dead = " ".join(
            r[0]
            for r in c.sql(
                "SELECT CAST(job_id AS text) FROM queue_messages WHERE status = 'DLQ' "
                "AND last_error LIKE '%ffmpeg%' ORDER BY job_id LIMIT 2"
            )
        )
        self.command("help")
        self.command("triage --queue workers")
        self.command("dlq --limit")  # usage
        self.command("frobnicate --now")  # no such command
        self.command('requeue 1 --queue workers --reason "let me in"', user=SLACK_STRANGER)
        self.command('redrive --error-like "no such error anywhere" --reason "nothing"')
        self.command("show 999999999 --queue workers")
        self.command("approve CR-999999")
        c.fake.fail_answers(2)  # Slack answers 503 twice: the answer is sent again
        ask = self.command(f'redrive {dead} --queue clips --reason "secret test"')
        approve, _ = buttons(wait_answer(c.fake, ask))
        for user in (SLACK_ALICE, SLACK_BOB):  # her own request: refused; Bob's: executed
            d = click(c.fake, approve, user=user, tag=new_tag("s-click"))
            assert send(self.served.url, d).status_code == 200
            wait_answer(c.fake, d)
            self.sent.append(d)
        forged = slash(c.fake, "triage", user=SLACK_ALICE, tag=new_tag("s-forged"))
        refused = send(self.served.url, forged, secret="not-the-secret")
        assert refused.status_code == 401
        self.seen.append(refused.text)
        # over Socket Mode: a read and a refusal
        for text in ("stuck --queue workers", "cancel --reason x"):
            tag = new_tag("s-sock")
            payload = {
                "token": "legacy",
                "team_id": "T0FAKE",
                "channel_id": "C0OPS",
                "user_id": SLACK_ALICE,
                "command": "/queue",
                "text": text,
                "response_url": c.fake.response_url(tag),
                "trigger_id": f"{time.time_ns()}.{tag}",
            }
            envelope = self.socket.send("slash_commands", payload)
            self.seen.append(json.dumps(self.socket.wait_ack(envelope)))
            wait_answer(c.fake, Delivery("", "", tag))
        # the database goes away (the role may no longer log in, its sessions are ended)
        for get in ("/readyz", "/metrics", "/healthz"):
            got = web.get(f"{self.served.url}{get}", timeout=10)
            self.seen.append(got.text)
            if get == "/metrics":  # the Prometheus series: searched like every answer
                assert got.status_code == 200, got.text
                self.metrics = f"HTTP {got.status_code}"
        with psycopg.connect(_pg_conninfo(PG_ADMIN), autocommit=True) as admin:
            admin.execute(f"ALTER ROLE {self.role} NOLOGIN")
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (self.role,),
            )
        try:
            down = web.get(f"{self.served.url}/readyz", timeout=10)
            assert down.status_code == 503
            self.seen.append(down.text)
            gone = self.command("triage --queue clips")
            assert "Database unavailable" in json.dumps(answers(c.fake, gone)[-1].body)
            self.command('requeue 1 --queue workers --reason "while the database is away"')
        finally:
            with psycopg.connect(_pg_conninfo(PG_ADMIN), autocommit=True) as admin:
                admin.execute(f"ALTER ROLE {self.role} LOGIN")
        deadline = time.monotonic() + 30
        while web.get(f"{self.served.url}/readyz", timeout=10).status_code != 200:
            assert time.monotonic() < deadline, "serve never became ready again"
            time.sleep(0.2)


def test_secrets_never_appear(tmp_path: Path, figures: Figures) -> None:
    started = time.monotonic()
    with (
        database_with_password() as (url, role),
        FakeSocketMode().start() as socket,
        cluster(
            tmp_path,
            db_url=url,
            env={"SLACK_APP_TOKEN": APP_TOKEN, "QUEUEBOT_AUDIT_KEY": AUDIT_KEY},
            tracebacks=True,
        ) as c,
    ):
        c.fake.socket_url = socket.url
        mixes = []
        for level in ("INFO", "DEBUG"):
            served = c.start(f"serve-{level.lower()}", QUEUEBOT_LOG_LEVEL=level)
            socket.wait_connected()
            mix = Mix(c, served, socket, role)
            mix.run()
            mixes.append(mix)
            served.stop()
        cli = [c.cli(*args) for args in (["audit", "verify"], ["config", "check"])]
        assert cli[0].returncode == 0, cli[0].stderr
        # the secrets were in use: Slack was asked who the bot is, requests were verified,
        # the socket was opened, the database answered
        assert c.fake.recorded("/api/auth.test") and c.fake.recorded("/api/apps.connections.open")
        assert socket.connections >= 2
        # the database URL is logged, and its answers name it, with the password hidden
        redacted = f"{role}:***@"
        assert redacted in c.serves[0].log.read_text()
        assert any(redacted in json.dumps(call.body) for call in c.fake.recorded("/response/"))
        outputs = {
            "serve logs": [s.log.read_text(errors="replace") for s in c.serves],
            "answers and chat posts": [json.dumps(call.body) for call in c.fake.recorded()],
            "health, readiness, metrics, 401s, socket acks": [t for m in mixes for t in m.seen],
            "command line": [p.stdout + p.stderr for p in cli],
        }
        found = {
            what: sorted({leak for text in texts for leak in leaks(text)})
            for what, texts in outputs.items()
        }
        facts = {
            "secrets set": [
                "SLACK_BOT_TOKEN",
                "SLACK_SIGNING_SECRET",
                "SLACK_APP_TOKEN",
                "database password (QUEUEBOT_DATABASE_URL)",
                "QUEUEBOT_AUDIT_KEY",
            ],
            "/metrics": {m.served.name: m.metrics for m in mixes},
            "commands and clicks answered": sum(len(m.sent) for m in mixes),
            "log levels": ["INFO", "DEBUG"],
            "texts searched": {what: len(texts) for what, texts in outputs.items()},
            "characters searched": sum(len(t) for texts in outputs.values() for t in texts),
            "secrets found": found,
        }
    facts["seconds"] = round(time.monotonic() - started, 1)
    stored = figures.record("secrets", facts)
    assert stored["secrets found"] == {what: [] for what in outputs}
