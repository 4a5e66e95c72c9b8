"""Alert posts queued by an earlier queuebot still go out: the outbox keeps an alert post as
JSON (``{"action": "root" | "update" | "reply" | "triage", "group": N, "episode": N, ...}``),
and items written in that shape before an upgrade are delivered after it. The payloads
here are written out literally, as the earlier version wrote them, not built by today's
code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from services import outbox
from tests.integration.alerting import AlertBot, alert, alert_bot, notification

# Each test starts the bot over the demo estate built at START: a copy of the template.
pytestmark = [pytest.mark.usefixtures("db_url"), pytest.mark.demo_db]

FAILED = {"alertname": "FailedJobsAccumulating", "queue": "workers"}


def _text(words: str) -> dict[str, Any]:
    """A message as the earlier version kept it in a reply's payload."""
    return {"summary": words, "blocks": [{"type": "Text", "text": words}]}


async def _queue(bot: AlertBot, payload: dict[str, Any]) -> None:
    async with bot.app.state_engine.begin() as conn:
        await outbox.add(
            conn, kind="alert.post", subject="alert:1", payload=payload, now=bot.clock.now
        )


async def test_posts_queued_in_the_earlier_shape_are_delivered(db_url: str, tmp_path: Path) -> None:
    async with alert_bot(db_url, tmp_path) as bot:
        body = notification(group=FAILED, alerts=[alert("a1", labels=FAILED, summary="15")])
        assert (await bot.send(body)).status_code == 200
        await bot.settle()
        (root,) = bot.roots("C0ALERTS")
        assert len(bot.replies(root)) == 1  # the route's triage
        updates = len(bot.updates())

        # news, as processing wrote it: with "turn"
        news = _text("news from the earlier version")
        await _queue(
            bot, {"action": "reply", "group": 1, "episode": 1, "message": news, "turn": False}
        )
        # the note of alerts not shown, as a new episode wrote it: no "turn"
        note = _text("a note without a turn")
        await _queue(bot, {"action": "reply", "episode": 1, "message": note, "group": 1})
        await _queue(bot, {"action": "update", "group": 1, "episode": 1})
        await _queue(bot, {"action": "triage", "episode": 1, "group": 1})
        # no "episode": the group's own
        await _queue(bot, {"action": "update", "group": 1})
        # the root of the episode already posted: brought up to date, not posted again
        await _queue(bot, {"action": "root", "episode": 1, "group": 1})
        while await bot.app.outbox.run_due():
            pass

        replies = [str(r.body) for r in bot.replies(root)]
        assert len(replies) == 4, replies
        assert "news from the earlier version" in replies[1]
        assert "a note without a turn" in replies[2]
        assert "q:triage:workers" in replies[3]
        assert len(bot.updates()) == updates + 3
        assert bot.roots("C0ALERTS") == [root]
