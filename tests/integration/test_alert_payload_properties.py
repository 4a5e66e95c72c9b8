"""Whatever reaches the Alertmanager webhook, the answer is 200 (stored, exactly once)
or 400 with a reason (nothing stored), never a 500: valid notifications with one part
broken, and JSON of any shape, in process on SQLite."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
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
