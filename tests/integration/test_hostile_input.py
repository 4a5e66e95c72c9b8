"""Hostile command texts (injection, wildcards, control characters, huge values) get a
clear answer, never an unexpected error, and change no queue row: through the real
router and services on SQLite and PostgreSQL, and through a real console process."""

from __future__ import annotations

import hashlib
import random
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.boundary import answer
from bot.demo import DEMO_CONFIG
from commands import messages
from commands.context import Invocation
from commands.deps import Deps
from commands.reply import Reply
from commands.router import Router
from services.config import AccessConfig
from services.people import Directory, Person
from services.reads.gate import ReadGate
from services.reads.service import QueueReads
from tests.helpers import launch
from tests.helpers.people import ALICE_APPROVER_ON_SLACK, DORA_DUTY_ON_SLACK
from tests.integration.support import Shop

PEOPLE = Directory([ALICE_APPROVER_ON_SLACK, DORA_DUTY_ON_SLACK])
HOSTILE = (
    "'; DROP TABLE dev_r_worker_queue; --",
    "1 OR 1=1",
    "%",
    "_",
    "%%'%%",
    "\\",
    "\x00",
    "\x1b[31mred",
    "\u202eevil",
    "CR-0",
    "CR--1",
    "P-99999999999999999999",
    "-1",
    "0",
    "9" * 40,
    "x" * 5000,
    '"',
    '"unclosed',
    "--reason",
    "--queue",
    "$(reboot)",
    "{}",
    "null",
    "ø∂ƒ",
)
TEMPLATES = (
    "/queue triage {v}",
    "/queue triage --queue {v}",
    "/queue triage --since {v}",
    "/queue triage --type {v}",
    "/queue show {v}",
    "/queue show {v} --queue workers",
    "/queue dlq --error-like {v}",
    "/queue dlq --tenant {v} --queue clips",
    "/queue dlq --reason {v} --queue workers",
    "/queue dlq --limit {v}",
    "/queue stuck --limit {v}",
    "/queue requeue {v} --reason {v}",
    '/queue requeue {v} --queue workers --reason "fixed it"',
    '/queue cancel --failure-reason {v} --queue workers --reason "why"',
    '/queue redrive {v} --reason "fixed"',
    '/queue redrive --error-like {v} --reason "fixed"',
    "/queue approve {v}",
    "/queue reject {v} --reason {v}",
    "/queue plan {v}",
    "/queue halt {v}",
    '/queue resume {v} --reason "x"',
    '/queue rollback {v} --reason "x"',
    "/queue help {v}",
    "/queue {v}",
    "{v}",
)
lines = st.builds(
    lambda template, values: template.format(v=values[0]).replace("{v}", values[1]),
    st.sampled_from(TEMPLATES),
    st.tuples(
        st.one_of(st.sampled_from(HOSTILE), st.text(max_size=60)),
        st.one_of(st.sampled_from(HOSTILE), st.text(max_size=20)),
    ),
)


async def queue_fingerprint(shop: Shop) -> str:
    """Every queue row, as the database holds it: any change shows."""
    digest = hashlib.sha256()
    async with shop.engine.connect() as conn:
        for table, key in (
            ("dev_r_worker_queue", "id"),
            ("queue_messages", "id"),
            ("clip_jobs", "id"),
            ("job_events", "id"),
        ):
            rows = await conn.execute(sa.text(f"SELECT * FROM {table} ORDER BY {key}"))
            for row in rows.all():
                digest.update(repr(tuple(row)).encode())
    return digest.hexdigest()


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(line=lines, person=st.sampled_from([ALICE_APPROVER_ON_SLACK, DORA_DUTY_ON_SLACK, None]))
async def test_hostile_command_texts_get_clear_answers_and_change_no_row(
    shop: Shop, line: str, person: Person | None
) -> None:
    router = Router(
        Deps(
            reads=QueueReads(shop.estate, gate=ReadGate(fresh_for=0.0)),
            changes=shop.changes,
            plans=shop.plans,
            directory=PEOPLE,
            access=AccessConfig(),
        )
    )
    before = await queue_fingerprint(shop)
    inv = Invocation(person=person, platform="slack", account=person.slack if person else "U0X")
    reply = await answer(router.handle_line(line, inv), correlation_id="fuzz", where="fuzz")
    assert isinstance(reply, Reply)
    assert not reply.message.summary.startswith(messages.UNEXPECTED_TITLE), (line, reply)
    assert reply.message.summary.strip()
    assert await queue_fingerprint(shop) == before, line


@pytest.mark.slow  # three thousand lines through a real console process
def test_a_console_fed_three_thousand_hostile_lines_answers_each_and_never_crashes(
    tmp_path: Path,
) -> None:
    rng = random.Random(20261130)
    people = ("", "@alice ", "@dora ", "@nobody ")
    fed = []
    for _ in range(3000):
        value = (
            rng.choice(HOSTILE)
            if rng.random() < 0.7
            else "".join(chr(rng.randrange(1, 0x2FF)) for _ in range(rng.randrange(0, 30)))
        )
        line = rng.choice(TEMPLATES).replace("{v}", value, 1).replace("{v}", rng.choice(HOSTILE))
        fed.append(rng.choice(people) + line.replace("\n", " ").replace("\r", " "))
    db = tmp_path / "queuebot.db"
    config = tmp_path / "queuebot.toml"
    config.write_text(DEMO_CONFIG.format(config=config))
    build = launch.run(
        [sys.executable, "-m", "bot.cli", "demo", "--db", str(db), "--fresh"],
        input="",
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert build.returncode == 0, build.stderr
    url = f"sqlite:///{db}"
    run = launch.run(
        [sys.executable, "-m", "bot.cli", "--config", str(config), "console"],
        input="\n".join(fed) + "\n",
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"QUEUEBOT_DATABASE_URL": url, "QUEUEBOT_QUEUE_DATABASE_URL": url, "PATH": ""},
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Traceback" not in run.stdout + run.stderr
    assert messages.UNEXPECTED_TITLE not in run.stdout
    assert run.stdout.count("\n> ") + run.stdout.startswith("> ") >= len(fed) - 5
