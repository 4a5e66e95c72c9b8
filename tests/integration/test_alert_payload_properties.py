"""Whatever reaches the Alertmanager webhook, the answer is 200 (stored, exactly once)
or 400 with a reason (nothing stored), never a 500: valid notifications with one part
broken, JSON of any shape, and any time Alertmanager could send (and garbage in its
place), in process on SQLite."""

from __future__ import annotations

import asyncio
import calendar
import json
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.integration.alerting import AlertBot, alert, alert_bot, notification

GROUP = {"alertname": "QueueStuck", "queue": "clips"}


@pytest.fixture(scope="module")
def bot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[asyncio.Runner, AlertBot]]:
    workdir: Path = tmp_path_factory.mktemp("alert-properties")
    with asyncio.Runner() as runner:
        manager: AbstractAsyncContextManager[AlertBot] = alert_bot(
            f"sqlite+aiosqlite:///{workdir}/queuebot.db", workdir
        )
        entered = runner.run(manager.__aenter__())
        try:
            yield runner, entered
        finally:
            runner.run(manager.__aexit__(None, None, None))


scalar = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12)
)
anything = st.recursive(
    scalar,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
TOP = ["version", "receiver", "status", "groupKey", "groupLabels", "commonLabels",
       "commonAnnotations", "externalURL", "truncatedAlerts", "alerts"]  # fmt: skip
ALERT = ["status", "labels", "annotations", "startsAt", "endsAt", "generatorURL", "fingerprint"]
times = st.sampled_from(
    ["2026-11-30T12:00:00Z", "2026-11-30T12:00:00.1Z", "2026-11-30T12:00:00.123456789+02:00",
     "0001-01-01T00:00:00Z", "2026-13-01T00:00:00Z", "yesterday", "2026-11-30 12:00:00Z"]
)  # fmt: skip


@st.composite
def payloads(draw: st.DrawFn) -> dict[str, Any]:
    body = notification(group=GROUP, alerts=[alert("ab12", labels=GROUP)])
    where = draw(st.sampled_from(["top", "alert", "time", "none"]))
    if where == "top":
        key = draw(st.sampled_from([*TOP, "notification_reason", "extra"]))
        if draw(st.booleans()):
            body.pop(key, None)
        else:
            body[key] = draw(anything)
    elif where == "alert":
        key = draw(st.sampled_from(ALERT))
        body["alerts"][0][key] = draw(anything)
    elif where == "time":
        body["alerts"][0][draw(st.sampled_from(["startsAt", "endsAt"]))] = draw(times)
    return body


async def _count(bot: AlertBot) -> int:
    return await bot.stored()


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=payloads() | anything)
def test_every_body_is_stored_once_or_refused_with_a_reason(
    bot: tuple[asyncio.Runner, AlertBot], body: Any
) -> None:
    runner, alerts = bot
    before = runner.run(_count(alerts))
    response = runner.run(alerts.send(json.dumps(body).encode()))
    after = runner.run(_count(alerts))
    assert response.status_code in (200, 400), response.text
    if response.status_code == 400:
        assert response.json()["error"].startswith("not an Alertmanager notification: ")
        assert after == before
    else:
        assert after == before + 1


Kept = datetime | None  # the UTC time a keepable text stands for (None: Go's zero time)
REFUSED = "refused"


@st.composite
def rfc3339(draw: st.DrawFn) -> tuple[str, Kept | str]:
    """A time as Alertmanager (Go's RFC 3339) could write it, any year 0000..9999, 0 to 9
    fractional digits, any offset -23:59..+23:59 (the first and last days drawn often); and what
    queuebot should make of it: ``REFUSED`` when the date does not exist, is in year 0000
    or in UTC falls past year 9999, else the UTC time (None in year 1, Go's zero time)."""
    end = draw(st.sampled_from(["none", "none", "first", "last"]))
    if end == "none":
        year, month = draw(st.integers(1, 9999)), draw(st.integers(1, 12))
        day = draw(st.sampled_from([28, 29, 30, 31]) | st.integers(1, 31))
    else:  # the first days Go writes (year 1 is its zero time) or the last day there is
        year, month, day = (
            draw(st.sampled_from([(0, 1, 1), (1, 1, 1), (2, 1, 1)]))
            if end == "first"
            else (9999, 12, 31)
        )
    hour, minute, second = (
        draw(st.integers(0, 23)),
        draw(st.integers(0, 59)),
        draw(st.integers(0, 59)),
    )
    digits = draw(st.integers(0, 9))
    fraction = "".join(
        draw(st.lists(st.sampled_from("0123456789"), min_size=digits, max_size=digits))
    )
    most = 23 * 60 + 59
    offset = draw(st.sampled_from([-most, most, 0]) | st.integers(-most, most))
    zone = (
        draw(st.sampled_from(["Z", "z"]))
        if offset == 0 and draw(st.booleans())
        else f"{'-' if offset < 0 else '+'}{abs(offset) // 60:02d}:{abs(offset) % 60:02d}"
    )
    text = (
        f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}"
        f"{'.' + fraction if digits else ''}{zone}"
    )
    if year == 0:
        return text, REFUSED
    if day > calendar.monthrange(year, month)[1]:
        return text, REFUSED
    if year <= 1:
        return text, None
    micro = int(fraction.ljust(6, "0")[:6])
    try:  # naive arithmetic, not the parser's way: overflows past year 9999
        at = datetime(year, month, day, hour, minute, second, micro) - timedelta(minutes=offset)
    except OverflowError:
        return text, REFUSED
    return text, at.replace(tzinfo=UTC)


near_misses = st.sampled_from(
    ["9999-12-31T23:59:59+24:00", "2026-11-30T12:00:00-99:99", "2026-11-30T12:00:00+05:60",
     "2026-11-30T12:00:00.1234567890Z", "10000-01-01T00:00:00Z", "2026-11-30T23:59:60Z",
     "2026-11-30T12:00:00", "2026-02-30T12:00:00Z", "2026-11-30T12:00:00+0200",
     "2026-11-30T12:00:00\u0000Z", "-001-01-01T00:00:00Z"]
)  # fmt: skip
UNKNOWN = "either"  # garbage and near misses: 200 or 400, never anything else
any_time = (
    rfc3339()
    | near_misses.map(lambda t: (t, UNKNOWN))
    | st.text(max_size=40).map(lambda t: (t, UNKNOWN))
)


async def _last_kept(bot: AlertBot, field: str) -> Kept:
    async with bot.app.state_engine.connect() as conn:
        query = "SELECT payload FROM qb_alert_inbox ORDER BY id DESC LIMIT 1"
        payload = (await conn.execute(sa.text(query))).scalar_one()
    kept = (json.loads(payload) if isinstance(payload, str) else payload)["alerts"][0][field]
    return None if kept is None else datetime.fromisoformat(kept)


async def _set_aside(bot: AlertBot) -> int:
    async with bot.app.state_engine.connect() as conn:
        query = "SELECT count(*) FROM qb_alert_inbox WHERE set_aside_at IS NOT NULL"
        return int((await conn.execute(sa.text(query))).scalar_one())


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(field=st.sampled_from(["startsAt", "endsAt"]), time=any_time)
@example(field="startsAt", time=("9999-12-31T23:59:59-23:59", REFUSED))
@example(field="endsAt", time=("9999-12-31T23:59:59.999999999-00:01", REFUSED))
@example(field="startsAt", time=("0001-01-01T00:00:00+23:59", None))
@example(field="startsAt", time=("0000-01-01T00:00:00Z", REFUSED))  # years run from 0001
@example(field="endsAt", time=("0000-12-31T23:59:59+00:00", REFUSED))
@example(field="startsAt", time=("0001-02-29T00:00:00-23:59", REFUSED))  # no such day
@example(
    field="startsAt", time=("0002-01-01T00:00:00+23:59", datetime(1, 12, 31, 0, 1, tzinfo=UTC))
)
def test_any_time_is_kept_or_refused_naming_its_field_never_a_500(
    bot: tuple[asyncio.Runner, AlertBot], field: str, time: tuple[str, Kept | str]
) -> None:
    runner, alerts = bot
    text, expected = time
    body = notification(group=GROUP, alerts=[alert("ab12", labels=GROUP)])
    body["alerts"][0][field] = text
    before = runner.run(_count(alerts))
    response = runner.run(alerts.send(json.dumps(body).encode()))
    assert response.status_code in (200, 400), response.text
    if expected != UNKNOWN:
        assert response.status_code == (400 if expected == REFUSED else 200), (text, response.text)
    if response.status_code == 400:
        assert f"alerts[0].{field}: " in response.json()["error"], response.text
        assert runner.run(_count(alerts)) == before
        return
    assert runner.run(_count(alerts)) == before + 1
    if expected != UNKNOWN:
        assert runner.run(_last_kept(alerts, field)) == expected, text
    runner.run(alerts.settle())  # what was kept is processed like any other time
    assert runner.run(_set_aside(alerts)) == 0
