"""One notification never stops the others. Text a database cannot keep (a NUL character,
a lone surrogate) is refused at the webhook with 400 naming the field, before anything is
stored, so it never fails the commit it would have shared with good notifications; and a
stored notification whose processing fails for a reason of its own is set aside (kept,
with its error), shown in /metrics and /readyz, while every later one is posted, also
after a restart."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from services.alerts.store import INBOX
from tests.integration.alerting import AlertBot, alert, alert_bot, notification

# Each test starts the bot over the demo estate built at START: a copy of the template.
pytestmark = [pytest.mark.usefixtures("db_url"), pytest.mark.demo_db]

STUCK = {"alertname": "QueueStuck", "queue": "clips"}
NUL = "\x00"


def _fingerprint(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:16]


def good(name: str) -> dict[str, Any]:
    group = {"alertname": name, "queue": "clips"}
    return notification(group=group, alerts=[alert(_fingerprint(name), labels=group)])


def with_nul(where: str) -> dict[str, Any]:
    """A good notification but for a NUL in ``where`` (the groupKey stays clean unless it
    is the place)."""
    body = good("QueueStuck")
    if where == "groupLabels.alertname":
        body["groupLabels"]["alertname"] = f"Queue{NUL}Stuck"
    elif where == "groupKey":
        body["groupKey"] = f'{{}}:{{alertname="Queue{NUL}Stuck"}}'
    elif where == "receiver":
        body["receiver"] = f"queue{NUL}bot"
    elif where == "alerts[0].labels.alertname":
        body["alerts"][0]["labels"]["alertname"] = f"Queue{NUL}Stuck"
    elif where == "commonAnnotations.summary":
        body["commonAnnotations"]["summary"] = f"stuck{NUL}"
    elif where == "externalURL":
        body["externalURL"] = f"http://am{NUL}.example"
    elif where == 'alerts[0].annotations["sum\\u0000mary"]':
        body["alerts"][0]["annotations"][f"sum{NUL}mary"] = "stuck"
    else:
        raise AssertionError(where)
    return body


PLACES = [
    "groupLabels.alertname",
    "groupKey",
    "receiver",
    "alerts[0].labels.alertname",
    "commonAnnotations.summary",
    "externalURL",
    'alerts[0].annotations["sum\\u0000mary"]',
]


async def test_text_that_cannot_be_stored_is_refused_naming_the_field(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path) as bot:
        for where in PLACES:
            response = await bot.send(with_nul(where))
            assert response.status_code == 400, (where, response.text)
            assert f"{where} contains a NUL character" in response.json()["error"], where
        # a lone surrogate (orjson refuses it as JSON; the answer still names the field)
        body = json.dumps(good("QueueStuck")).replace('"clips"', '"cl\\ud800ips"', 1)
        response = await bot.send(body.encode())
        assert response.status_code == 400
        assert "alerts[0].labels.queue contains a lone surrogate" in response.json()["error"]
        assert await bot.stored() == 0
        assert (await bot.send(good("QueueStuck"))).status_code == 200
        await bot.settle()
        assert len(bot.roots("C0OPS")) == 1


async def test_a_bad_notification_among_30_concurrent_good_ones_fails_none_of_them(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path) as bot:
        bodies = [good(f"Concurrent{n}") for n in range(30)]
        bodies.insert(10, with_nul("groupKey"))
        answers = await asyncio.gather(*(bot.send(body) for body in bodies))
        codes = [a.status_code for a in answers]
        assert codes == [200] * 10 + [400] + [200] * 20, codes
        assert await bot.stored() == 30
        await bot.settle()
        assert len(bot.roots("C0ALERTS")) == 30

        # a row the database refuses at the INSERT fails alone, not the batch it was in
        await _refuse(bot, "qb_alert_inbox", "receiver", "refused")
        bodies = [good(f"Later{n}") for n in range(30)]
        bodies.insert(10, {**good("Refused"), "receiver": "refused"})
        answers = await asyncio.gather(*(bot.send(body) for body in bodies))
        codes = [a.status_code for a in answers]
        assert codes == [200] * 10 + [503] + [200] * 20, codes
        assert await bot.stored() == 60


async def _store_directly(bot: AlertBot, payload: dict[str, Any]) -> int:
    """A row in the inbox that did not come through the webhook (stored by an older
    queuebot, or written by hand)."""
    async with bot.app.state_engine.begin() as conn:
        row = await conn.execute(
            INBOX.insert().returning(INBOX.c.id),
            {
                "source": "alertmanager",
                "received_at": bot.clock(),
                "receiver": "queuebot",
                "group_key": '{}:{alertname="Poison"}',
                "status": "firing",
                "payload": payload,
            },
        )
        return int(row.scalar_one())


async def _refuse(bot: AlertBot, table: str, column: str, value: str) -> None:
    """The database refuses rows of ``table`` whose ``column`` is ``value`` (as it refuses
    a value it cannot keep): a failure that is that one row's own."""
    name = f"refused_{table}"
    async with bot.app.state_engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            await conn.execute(
                sa.text(f"ALTER TABLE {table} ADD CONSTRAINT {name} CHECK ({column} <> '{value}')")
            )
        else:
            await conn.execute(
                sa.text(
                    f"CREATE TRIGGER {name} BEFORE INSERT ON {table} "
                    f"WHEN NEW.{column} = '{value}' BEGIN SELECT RAISE(ABORT, '{name}'); END"
                )
            )


async def _rename(bot: AlertBot, table: str, to: str) -> None:
    async with bot.app.state_engine.begin() as conn:
        await conn.execute(sa.text(f"ALTER TABLE {table} RENAME TO {to}"))


async def _set_aside(bot: AlertBot) -> dict[int, str]:
    async with bot.app.state_engine.connect() as conn:
        rows = await conn.execute(
            sa.text(
                "SELECT id, error FROM qb_alert_inbox "
                "WHERE set_aside_at IS NOT NULL AND processed_at IS NULL ORDER BY id"
            )
        )
        return {int(i): str(e) for i, e in rows}


async def _unprocessed(bot: AlertBot) -> int:
    async with bot.app.state_engine.connect() as conn:
        return int(
            (
                await conn.execute(
                    sa.text(
                        "SELECT count(*) FROM qb_alert_inbox "
                        "WHERE processed_at IS NULL AND set_aside_at IS NULL"
                    )
                )
            ).scalar_one()
        )


def _posted(bot: AlertBot, name: str) -> bool:
    return any(f"FIRING: {name}" in str(root.body["blocks"]) for root in bot.roots())


async def _shown(bot: AlertBot, first: int, error: str) -> None:
    """/metrics counts the three set aside; /readyz stays ready and names the oldest."""
    metrics = (await bot.client.get("/metrics")).text
    assert "queuebot_alert_notifications_set_aside 3.0" in metrics
    ready = await bot.client.get("/readyz")
    assert ready.status_code == 200, ready.text
    alerts = ready.json()["alerts"]
    assert alerts["set_aside"] == 3
    assert alerts["oldest"]["id"] == first
    assert error in alerts["oldest"]["error"]
    assert "3 alert notifications could not be processed" in alerts["note"]


async def test_a_notification_that_fails_in_processing_is_set_aside_and_the_rest_flow(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path, extra="[metrics]\nrefresh_seconds = 1\n") as bot:
        assert (await bot.send(good("Before"))).status_code == 200
        # a failure the same for every notification (the groups' table is away) is not
        # theirs: the pass fails whole, and nothing is set aside
        await _rename(bot, "qb_alert_groups", "qb_alert_groups_away")
        with pytest.raises(Exception, match="qb_alert_groups"):
            await bot.app.alerts.process_due()
        await _rename(bot, "qb_alert_groups_away", "qb_alert_groups")
        assert await _set_aside(bot) == {}
        await _refuse(bot, "qb_alert_groups", "alertname", "Refused")
        # not a notification at all
        garbled = await _store_directly(bot, {"version": "4", "alerts": "none"})
        # a NUL in the group's alertname, stored as it was before the webhook refused it
        nul = good("Poison")
        nul["groupLabels"]["alertname"] = f"Poi{NUL}son"
        stored_nul = await _store_directly(bot, nul)
        # a good notification the database will not take when its group is written
        assert (await bot.send(good("Refused"))).status_code == 200
        assert (await bot.send(good("After"))).status_code == 200

        await bot.settle()
        assert _posted(bot, "Before") and _posted(bot, "After")
        assert not _posted(bot, "Refused")
        aside = await _set_aside(bot)
        assert list(aside)[:2] == [garbled, stored_nul] and len(aside) == 3
        assert "alerts" in aside[garbled]
        assert "groupLabels.alertname contains a NUL character" in aside[stored_nul]
        assert "refused_qb_alert_groups" in list(aside.values())[2]
        assert await _unprocessed(bot) == 0
        assert await bot.app.alerts.process_due() == 0  # nothing left to try
        await _shown(bot, garbled, "alerts")

    # a restart keeps them set aside and does not try them before the others
    async with alert_bot(db_url, tmp_path, build=False) as again:
        assert (await again.send(good("AfterRestart"))).status_code == 200
        await again.settle()
        assert _posted(again, "AfterRestart")
        assert len(again.roots()) == 1
        assert list(await _set_aside(again)) == list(aside)
        await _shown(again, garbled, "alerts")
