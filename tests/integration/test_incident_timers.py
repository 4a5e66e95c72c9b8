"""An incident's timers as its lead and its audiences see them: every reminder and every
escalation exactly once, across a restart and across two replicas, and none for an
audience that was told.

The runbooks here are drills: the shipped queue-loss runbook with windows of seconds, so
the real scheduler (``run_forever``, sleeping until the next item) runs them on the real
clock. What is counted is what a user would notice: the incident's timeline, the audit
trail's ``incident.deadline_missed`` events, the posts written to the outbox and the
posts delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import subprocess
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.bootstrap import App, build_app
from bot.demo import DEMO_CONFIG
from bot.render_text import render_message
from bot.running import running_scheduler
from commands.context import Invocation
from services.config import default_queues, load_config
from services.db import create_engine
from services.db.migrate import upgrade
from services.estate.demo import build_demo_estate
from services.estate.estate import Estate
from services.outbox import Outbox
from services.runbooks.library import shipped_runbooks
from tests.helpers.people import DORA
from tests.helpers.processes import clean_environ, interactive
from tests.integration.support import START, Clock, RecordingNotifier, Shop, build_services

Tally = Counter[tuple[str, int, str]]  # (what, incident number, audience) -> how many
REMINDED = "reminded"  # a reminder on the timeline and its post in the incident's thread
MISSED = "missed"  # "missed" on the timeline, the audit event, and its two posts


def drill_runbook(folder: Path, scenario: str, *, operators_ms: int, actors_ms: int) -> None:
    """The shipped queue-loss runbook as ``scenario``, its windows in milliseconds."""
    (source,) = [r for r in shipped_runbooks() if r.scenario_id == "gd:queue-loss"]
    text = (
        Path(__file__).resolve().parents[2] / "services" / "runbooks" / source.source
    ).read_text()
    name = scenario.removeprefix("gd:")
    text = text.replace('"gd:queue-loss"', f'"{scenario}"').replace(
        '"runbook:queue-loss"', f'"runbook:{name}"'
    )
    text = text.replace('"withinMs": 900000', f'"withinMs": {actors_ms}').replace(
        '"withinMs": 300000', f'"withinMs": {operators_ms}'
    )
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.md").write_text(text)


def write_config(workdir: Path) -> Path:
    """The demo configuration (dora declares) with the drills of ``workdir/runbooks``."""
    path = workdir / "queuebot.toml"
    path.write_text(DEMO_CONFIG.format(config=path) + '\n[runbooks]\ndir = "runbooks"\n')
    return path


async def prepare(db_url: str) -> None:
    """queuebot's tables and the demo estate (which the housekeeping jobs read)."""
    engine = create_engine(db_url)
    await upgrade(engine)
    async with engine.begin() as conn:
        await build_demo_estate(conn, now=datetime.now(UTC))
    await engine.dispose()


async def say(app: App, line: str, who: str = "dora") -> str:
    """One chat line through the router, as a person of the demo's [people]."""
    inv = Invocation(person=app.directory.by_name(who), platform="console", account=who)
    return render_message((await app.router.handle_line(line, inv)).message)


async def fired(engine: AsyncEngine) -> Tally:
    """Every trace of the timers: per incident and audience, reminders on the timeline and
    their thread posts, and for a missed deadline its timeline entry, its audit event,
    its thread post and its post to the operators channel."""
    tally: Tally = Counter()
    async with engine.connect() as conn:
        timeline = await conn.execute(
            sa.text(
                "SELECT incident_id, kind, text FROM qb_incident_timeline "
                "WHERE kind IN ('reminder', 'missed')"
            )
        )
        for number, kind, text in timeline:
            audience = re.search(r"the (\w+) (?:are due|were not told)", text)
            assert audience, text
            tally[(f"timeline {kind}", int(number), audience.group(1))] += 1
        audit = await conn.execute(
            sa.text(
                "SELECT incident, details FROM qb_audit_events "
                "WHERE action = 'incident.deadline_missed'"
            )
        )
        for incident, details in audit:
            number = int(str(incident).removeprefix("INC-"))
            tally[("audit deadline_missed", number, json.loads(details)["audience"])] += 1
        posts = await conn.execute(
            sa.text("SELECT payload FROM qb_outbox WHERE kind = 'incident.post'")
        )
        for (raw,) in posts:
            payload = raw if isinstance(raw, dict) else json.loads(raw)
            summary = payload["message"]["summary"]
            told = re.fullmatch(r"INC-(\d+): tell the (\w+)", summary)
            missed = re.fullmatch(r"INC-(\d+): the (\w+) were not told in time", summary)
            if told:
                tally[("post reminder", int(told[1]), told[2])] += 1
            elif missed:
                where = "operators channel" if payload["action"] == "audience" else "thread"
                tally[(f"post escalation to the {where}", int(missed[1]), missed[2])] += 1
    return tally


ESCALATION = (
    "timeline missed",
    "audit deadline_missed",
    "post escalation to the thread",
    "post escalation to the operators channel",
)


def expected(timers: dict[int, dict[str, bool]]) -> Tally:
    """What ``fired`` counts when every incident's audiences were told (True) or not:
    an audience not told is reminded twice (at 50% and 80%) and escalated once."""
    tally: Tally = Counter()
    for number, audiences in timers.items():
        for audience, told in audiences.items():
            if told:
                continue
            tally[("timeline reminder", number, audience)] = 2
            tally[("post reminder", number, audience)] = 2
            tally[("timeline missed", number, audience)] = 1
            tally[("audit deadline_missed", number, audience)] = 1
            tally[("post escalation to the thread", number, audience)] = 1
            tally[("post escalation to the operators channel", number, audience)] = 1
    return tally


def delivered(*notifiers: RecordingNotifier) -> Counter[str]:
    """The reminder and escalation posts the chat received, by summary."""
    return Counter(
        post.message.summary
        for notifier in notifiers
        for post in notifier.posts
        if re.fullmatch(
            r"INC-\d+: (tell the \w+|the \w+ were not told in time)", post.message.summary
        )
    )


def delivered_expected(timers: dict[int, dict[str, bool]]) -> Counter[str]:
    posts: Counter[str] = Counter()
    for number, audiences in timers.items():
        for audience, told in audiences.items():
            if not told:
                posts[f"INC-{number}: tell the {audience}"] = 2
                posts[f"INC-{number}: the {audience} were not told in time"] = 2
    return posts


async def deliver(outbox: Outbox) -> None:
    """Deliver what the outbox holds (an incident's posts go out one at a time)."""
    for _ in range(50):
        await outbox.run_due()


async def until(check: Callable[[], Awaitable[bool]], *, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def process(config: Path, db_url: str, notifier: RecordingNotifier) -> AsyncIterator[App]:
    """A queuebot process: the app and everything ``serve`` and ``console`` run beside
    their adapter (the scheduler, the outbox relays, alert processing), then stopped."""
    app = await build_app(
        load_config(config, environ={"QUEUEBOT_DATABASE_URL": db_url}),
        notifier=notifier,
        announce=False,
    )
    try:
        async with running_scheduler(app):
            yield app
    finally:
        await app.close()


# ---------------------------------------------------------------------------------------
# A restart between the timers


@pytest.mark.slow  # waits out real deadlines of up to 10 s
async def test_a_restart_fires_each_reminder_and_escalation_once(
    db_url: str, tmp_path: Path
) -> None:
    """Two incidents; the actors of INC-1 are told. The process stops after the first
    reminders and before any deadline; a new process on the same database fires the rest:
    nothing twice, nothing lost, nothing for the actors of INC-1."""
    # windows long enough that the second process is up well before the operators' second
    # reminder (80% of 8 s): one that comes due after its deadline is rightly never sent
    # (the escalation says it), so a slow start on a busy host must not reach 8 s
    drill_runbook(tmp_path / "runbooks", "gd:drill", operators_ms=8000, actors_ms=10000)
    config = write_config(tmp_path)
    await prepare(db_url)
    probe = create_engine(db_url)
    first_chat, second_chat = RecordingNotifier(), RecordingNotifier()
    timers = {1: {"operators": False, "actors": True}, 2: {"operators": False, "actors": False}}
    try:
        async with process(config, db_url, first_chat) as first:
            started = time.monotonic()
            for queue in ("workers", "clips"):
                said = await say(
                    first, f'/incident declare gd:drill "jobs stopped" --queue {queue}'
                )
                assert "declared (gd:drill)" in said
            assert "the message to the actors is queued" in await say(
                first, "/incident notify actors --incident INC-1"
            )

            async def first_reminders() -> bool:
                done = await fired(probe)
                return done[("timeline reminder", 1, "operators")] >= 1 and (
                    done[("timeline reminder", 2, "operators")] >= 1
                )

            await until(first_reminders, within=10, what="the reminders at half the window")
        stopped = time.monotonic() - started
        assert stopped < 8.0, f"the first process stopped after the deadlines ({stopped:.1f} s)"
        before = await fired(probe)
        assert 0 < sum(before.values()) < sum(expected(timers).values())
        assert before[("timeline missed", 1, "operators")] == 0

        async with process(config, db_url, second_chat):

            async def all_fired() -> bool:
                return await fired(probe) == expected(timers)

            await until(all_fired, within=30, what="every timer")
            await asyncio.sleep(1.0)  # a second replay would show up by now
        assert await fired(probe) == expected(timers)
        assert not [key for key in await fired(probe) if key[1:] == (1, "actors")]
        assert delivered(first_chat, second_chat) == delivered_expected(timers)
        assert delivered(second_chat)  # the new process did fire what came due after
        async with probe.connect() as conn:
            left = await conn.execute(
                sa.text("SELECT count(*) FROM qb_schedule WHERE kind LIKE 'incident.%'")
            )
            assert left.scalar_one() == 0
    finally:
        await probe.dispose()


# ---------------------------------------------------------------------------------------
# A deadline met just before it


async def test_a_deadline_met_a_moment_before_it_never_escalates(shop: Shop) -> None:
    """The operators are told a millisecond before their deadline: they were reminded,
    and are never escalated; the actors, never told, are."""
    incidents, clock = shop.services.incidents, shop.clock
    declared = await incidents.declare(
        scenario="gd:queue-loss", summary="jobs stopped", actor=DORA, queue="workers"
    )
    number = declared.incident.number
    (operators,) = [o for o in declared.incident.obligations if o.audience == "operators"]
    clock.now = operators.due_at - timedelta(milliseconds=1)
    assert await shop.scheduler.run_due() == 2  # the operators' reminders, at 50% and 80%
    view = await incidents.notify(number=number, audience="operators", text="hi", actor=DORA)
    assert [o.state for o in view.obligations if o.audience == "operators"] == ["pending"]
    await deliver(shop.services.outbox)  # told: delivered to the operators' channel
    view = await incidents.view(number)
    assert [o.state for o in view.obligations if o.audience == "operators"] == ["met"]
    clock.now = operators.due_at
    assert await shop.scheduler.run_due() == 0  # its deadline went with the notify
    clock.advance(hours=1)  # past the actors' deadline too (as if queuebot had been down)
    assert await shop.scheduler.run_due() == 3  # their two reminders and their deadline
    want = expected({number: {"operators": False, "actors": False}})
    for what in ESCALATION:
        del want[(what, number, "operators")]
    for what in ("post reminder", "timeline reminder"):  # due already: no stale reminder,
        del want[(what, number, "actors")]  # the escalation says it
    assert await fired(shop.engine) == want
    view = await incidents.view(number)
    notified = [t.text for t in view.timeline if t.kind == "notified"]
    assert len(notified) == 1 and "after its deadline" not in notified[0]


@pytest.mark.postgres
@pytest.mark.slow  # races real deliveries against real deadlines
async def test_a_notify_racing_its_deadline_is_either_in_time_or_late_never_both(
    pg_url: str,
) -> None:
    """Two replicas: one's scheduler fires the deadline while the other delivers the message
    of /incident notify, which marks it met, at the same instant. Either the delivery wins
    (met, no escalation) or the deadline does (escalated once, the delivery recorded
    late); neither fails."""
    clock = Clock()
    engines = [create_engine(pg_url), create_engine(pg_url)]
    await upgrade(engines[0])
    firing, telling = (
        build_services(
            e, Estate(engine=e, queues=default_queues(), clock=clock), clock, RecordingNotifier()
        )
        for e in engines
    )
    outcomes: Counter[str] = Counter()
    rng = random.Random(7)
    try:
        for attempt in range(30):
            clock.now = START + timedelta(hours=attempt)
            declared = await telling.incidents.declare(
                scenario="gd:queue-loss", summary="jobs stopped", actor=DORA, queue=f"q{attempt}"
            )
            number = declared.incident.number
            (operators,) = [o for o in declared.incident.obligations if o.audience == "operators"]
            clock.now = operators.due_at - timedelta(milliseconds=1)
            await firing.scheduler.run_due()  # its reminders (and the last one's actors')
            for _ in range(4):  # the checklist and the reminders go out before the race
                await telling.outbox.run_due(subject=f"incident:{number}")
            clock.now = operators.due_at
            # The message is queued first: an audience is told when it is delivered, so the
            # race is between its delivery and the deadline's firing.
            await telling.incidents.notify(
                number=number, audience="operators", text="hi", actor=DORA
            )

            # A third of the attempts give the delivery a head start, a third the deadline,
            # a third neither: both outcomes come up however the machine's timing leans
            # (on a busy CI host an even race once went 30 times one way).
            lead = (0.0, 0.1, 0.0)[attempt % 3], (0.1, 0.0, 0.0)[attempt % 3]

            async def notify(n: int = number, wait: float = lead[0]) -> None:
                await asyncio.sleep(wait + rng.random() * 0.006)
                for _ in range(4):  # delivered: told (after an escalation that won)
                    await telling.outbox.run_due(subject=f"incident:{n}")

            async def fire(wait: float = lead[1]) -> None:
                await asyncio.sleep(wait + rng.random() * 0.006)
                await firing.scheduler.run_due()

            await asyncio.gather(notify(), fire())  # neither raises
            view = await telling.incidents.view(number)
            (after,) = [o for o in view.obligations if o.audience == "operators"]
            notified = [t.text for t in view.timeline if t.kind == "notified"]
            trace = {
                what: count
                for (what, n, audience), count in (await fired(engines[0])).items()
                if (n, audience) == (number, "operators") and what in ESCALATION
            }
            assert len(notified) == 1
            if after.state == "met":
                assert trace == {} and "after its deadline" not in notified[0]
                outcomes["in time"] += 1
            else:
                assert after.state == "missed" and "after its deadline" in notified[0]
                assert trace == dict.fromkeys(ESCALATION, 1)
                outcomes["late"] += 1
    finally:
        for engine in engines:
            await engine.dispose()
    assert outcomes["in time"] and outcomes["late"], outcomes  # the race went both ways


# ---------------------------------------------------------------------------------------
# Two replicas: two real `queuebot console` processes on one PostgreSQL database


@contextlib.contextmanager
def consoles(workdir: Path, db_url: str, count: int) -> Iterator[list[subprocess.Popen[str]]]:
    config = write_config(workdir)
    env = clean_environ()
    env.update(QUEUEBOT_CONFIG=str(config), QUEUEBOT_DATABASE_URL=db_url)
    started: list[subprocess.Popen[str]] = []
    with contextlib.ExitStack() as files:
        try:
            for n in range(count):
                out = files.enter_context((workdir / f"console-{n}.out").open("w"))
                err = files.enter_context((workdir / f"console-{n}.err").open("w"))
                started.append(
                    interactive(
                        "console", "--as", "dora", cwd=workdir, env=env, stdout=out, stderr=err
                    )
                )
            yield started
        finally:
            for proc in started:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                if proc.stdin is not None:
                    proc.stdin.close()


def output(workdir: Path, n: int) -> str:
    return (workdir / f"console-{n}.out").read_text()


def wait_for_text(workdir: Path, n: int, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in output(workdir, n):
        if time.monotonic() > deadline:
            raise AssertionError(f"console {n} never printed {text!r}")
        time.sleep(0.05)


@pytest.mark.postgres
@pytest.mark.slow  # two processes, deadlines of 8 to 10 s on the real clock
def test_two_replicas_fire_each_reminder_and_escalation_once(pg_url: str, tmp_path: Path) -> None:
    """Two `queuebot console` processes, each running its scheduler and outbox relays,
    on one database; one declares six incidents with deadlines from 8 s to 10 s, the other
    tells the operators of INC-2 as soon as it is declared (well before its first
    reminder, at half of 4 s). Every reminder and escalation is written once and printed
    once, by one of the two."""
    # reminders at half and at 80% of each deadline are at least 2.4 s apart: a late tick on
    # a loaded machine still sends both
    drill_runbook(tmp_path / "runbooks", "gd:drill-a", operators_ms=8000, actors_ms=8000)
    drill_runbook(tmp_path / "runbooks", "gd:drill-b", operators_ms=8000, actors_ms=10000)
    asyncio.run(prepare(pg_url))
    with consoles(tmp_path, pg_url, 2) as (one, two):
        for n, proc in enumerate((one, two)):
            assert proc.stdin is not None
            proc.stdin.write("/incident runbooks gd:drill-a\n")
            proc.stdin.flush()
            wait_for_text(tmp_path, n, "== gd:drill-a", timeout=30)  # up, scheduler running
        assert one.stdin is not None and two.stdin is not None
        declarations = [
            f'/incident declare {scenario} "jobs stopped"{queue}'
            for scenario in ("gd:drill-a", "gd:drill-b")
            for queue in (" --queue workers", " --queue clips", "")
        ]
        one.stdin.write("\n".join(declarations[:2]) + "\n")
        one.stdin.flush()
        wait_for_text(tmp_path, 0, "INC-2 declared", timeout=10)
        two.stdin.write("/incident notify operators --incident INC-2\n")
        two.stdin.flush()
        one.stdin.write("\n".join(declarations[2:]) + "\n")
        one.stdin.flush()
        wait_for_text(tmp_path, 1, "INC-2: the message to the operators is queued", timeout=10)
        wait_for_text(tmp_path, 0, "INC-6 declared", timeout=10)
        timers = {n: {"operators": n == 2, "actors": False} for n in range(1, 7)}
        engine = create_engine(pg_url)

        async def watch() -> Tally:
            try:
                await until(lambda: _equal(engine, expected(timers)), within=30, what="every timer")
                await asyncio.sleep(1.0)  # a second firing would show up by now
                return await fired(engine)
            finally:
                await engine.dispose()

        tally = asyncio.run(watch())
        # The tally counts posts queued; each console prints a post when it delivers it,
        # which on a loaded machine can come seconds later: let the consoles print every
        # one before they are closed.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _chat(tmp_path, timers) != _chat_wanted(timers):
            time.sleep(0.2)
        for proc in (one, two):
            assert proc.stdin is not None
            proc.stdin.close()
        for proc in (one, two):
            assert proc.wait(timeout=30) == 0
    assert tally == expected(timers)
    for n in (0, 1):
        assert "Traceback" not in (tmp_path / f"console-{n}.err").read_text()
    assert _chat(tmp_path, timers) == _chat_wanted(timers)  # what the chat showed


def _chat(
    tmp_path: Path, timers: dict[int, dict[str, bool]]
) -> dict[tuple[int, str], tuple[int, int]]:
    """Per incident and audience, the reminders and escalations the two consoles printed."""
    printed = output(tmp_path, 0) + output(tmp_path, 1)
    seen = {}
    for number, audiences in timers.items():
        for audience in audiences:
            reminded = re.findall(
                rf"the {audience} must be told by [^\n]*--incident INC-{number} ", printed
            )
            escalated = printed.count(f"🔺 INC-{number}: communication to the {audience} missed")
            seen[(number, audience)] = (len(reminded), escalated)
    return seen


def _chat_wanted(timers: dict[int, dict[str, bool]]) -> dict[tuple[int, str], tuple[int, int]]:
    """An audience told: never reminded nor escalated; one not told: reminded twice and
    escalated in its thread and the operators' channel."""
    return {
        (number, audience): (0, 0) if told else (2, 2)
        for number, audiences in timers.items()
        for audience, told in audiences.items()
    }


async def _equal(engine: AsyncEngine, wanted: Tally) -> bool:
    return await fired(engine) == wanted


# ---------------------------------------------------------------------------------------
# Many incidents' timers due together (fired in batches)


async def test_timers_of_many_incidents_due_together_each_fire_once(shop: Shop) -> None:
    """Forty incidents declared together, their timers coming due by the dozen (the
    scheduler fires them in batches): past the operators' deadline each untold operators
    audience is escalated once and not reminded (its reminders are stale by then); both
    reminders of the actors, due together, are each written; then their escalation. An
    audience told is never reminded nor escalated, and the audit trail still verifies."""
    incidents, clock = shop.services.incidents, shop.clock
    numbers = []
    for n in range(40):
        declared = await incidents.declare(
            scenario="gd:queue-loss", summary="jobs stopped", actor=DORA, queue=f"q{n}"
        )
        numbers.append(declared.incident.number)
    told = numbers[::7]
    for number in told:
        await incidents.notify(number=number, audience="actors", text="hi", actor=DORA)
    await deliver(shop.services.outbox)
    clock.advance(minutes=6)  # past the operators' 5 minutes, before the actors' 7.5
    assert await shop.scheduler.run_due() == 40 * 3  # the operators' two reminders, deadline
    clock.advance(minutes=7)  # 13 minutes: past the actors' 80% reminder, before 15
    assert await shop.scheduler.run_due() == (40 - len(told)) * 2
    clock.advance(minutes=3)  # past the actors' deadline
    assert await shop.scheduler.run_due() == 40 - len(told)
    assert await shop.scheduler.run_due() == 0

    want = expected({n: {"operators": False, "actors": n in told} for n in numbers})
    for number in numbers:  # the operators' reminders came due after their deadline
        for what in ("post reminder", "timeline reminder"):
            del want[(what, number, "operators")]
    assert await fired(shop.engine) == want
    for number in numbers:
        view = await incidents.view(number)
        states = {o.audience: o.state for o in view.obligations}
        assert states == {"operators": "missed", "actors": "met" if number in told else "missed"}
    async with shop.engine.connect() as conn:
        reminders = dict(
            (
                await conn.execute(
                    sa.text(
                        "SELECT incident_id, reminders FROM qb_incident_obligations "
                        "WHERE audience = 'actors'"
                    )
                )
            ).all()
        )
        assert reminders == {n: 0 if n in told else 2 for n in numbers}
        verified = await shop.services.audit.verify(conn)
    assert verified.ok, verified.problem
