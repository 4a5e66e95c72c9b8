"""Alertmanager's notifications become one thread per alert group: a root message, news
only for real changes, the resolution in the thread and on the root."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import sqlalchemy as sa

from bot.slack.render import blocks as slack_blocks
from commands.handlers.queue_read import triage_message
from services.reads.gate import ReadGate
from services.reads.service import QueueReads
from tests.integration.alerting import alert, alert_bot, notification

# Each test starts the bot over the demo estate built at START: a copy of the template.
pytestmark = [pytest.mark.usefixtures("db_url"), pytest.mark.demo_db]

FAILED = {"alertname": "FailedJobsAccumulating", "queue": "workers"}
STUCK = {"alertname": "QueueStuck", "queue": "clips"}


def failed_alert(status: str = "firing", **kw: str) -> dict[str, object]:
    return alert(
        "a1b2c3d4e5f60001",
        labels={**FAILED, "severity": "warning"},
        status=status,
        summary="15 failed jobs with an actionable reason",
        **kw,
    )


async def test_a_group_gets_one_root_with_triage_and_repeats_post_nothing(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path) as bot:
        body = notification(group=FAILED, alerts=[failed_alert()])
        for _ in range(3):  # the first send, then two repeat intervals
            response = await bot.send(body)
            assert response.status_code == 200, response.text
            await bot.settle()
        (root,) = bot.roots("C0ALERTS")
        assert "FIRING: FailedJobsAccumulating · queue workers" in str(root.body["blocks"])
        (triage,) = bot.replies(root)
        shown = str(triage.body["blocks"])
        # the alert thread's triage is /queue triage's reply, with the thread's buttons
        report = await QueueReads(bot.app.estate, gate=ReadGate(fresh_for=0.0)).triage(
            queue="workers"
        )
        same = slack_blocks(triage_message(report))
        assert triage.body["blocks"][: len(same)] == same
        assert "Triage: queue workers (worker_queue)" in shown and "oldest pending" in shown
        assert "q:triage:workers" in shown and "q:failed:workers" in shown
        assert bot.updates() == []
        assert await bot.stored() == 3


async def test_added_then_partly_then_wholly_resolved_lands_in_the_thread(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path) as bot:
        one = alert("f000000000000001", labels={**STUCK, "instance": "a"})
        two = alert("f000000000000002", labels={**STUCK, "instance": "b"})
        await bot.send(notification(group=STUCK, alerts=[one]))
        await bot.settle()
        (root,) = bot.roots("C0OPS")
        assert bot.replies(root) == []  # no triage on this route

        await bot.send(notification(group=STUCK, alerts=[one, two]))
        await bot.settle()
        (added,) = bot.replies(root)
        assert "1 more alert(s) firing" in str(added.body["blocks"])
        assert "instance=b" in str(added.body["blocks"])
        assert len(bot.updates()) == 1

        gone = {**one, "status": "resolved", "endsAt": "2026-11-30T12:05:00Z"}
        await bot.send(notification(group=STUCK, alerts=[gone, two]))
        await bot.settle()
        partly = bot.replies(root)[-1]
        assert "1 alert(s) resolved" in str(partly.body["blocks"])
        assert "All alerts" not in str(partly.body["blocks"])

        both = {**two, "status": "resolved", "endsAt": "2026-11-30T12:07:00Z"}
        for _ in range(2):  # the resolution, then a repeat of it
            await bot.send(notification(group=STUCK, alerts=[gone, both]))
            await bot.settle()
        replies = bot.replies(root)
        assert len(replies) == 3
        assert "All alerts of this group are resolved" in str(replies[-1].body["blocks"])
        last_update = bot.updates()[-1]
        assert last_update.body["ts"] == root.ts
        assert "RESOLVED: QueueStuck" in str(last_update.body["blocks"])
        assert len(bot.roots()) == 1


async def test_alerts_alertmanager_left_out_are_counted_in_the_root_and_the_thread(
    db_url: str, tmp_path: Path
) -> None:
    """A notification cut by the receiver's max_alerts (truncatedAlerts) says how many
    alerts it left out: in the root, and in the thread at once and with each news."""
    async with alert_bot(db_url, tmp_path) as bot:
        one = alert("f000000000000001", labels={**STUCK, "instance": "a"})
        two = alert("f000000000000002", labels={**STUCK, "instance": "b"})
        first = {**notification(group=STUCK, alerts=[one]), "truncatedAlerts": 2400}
        await bot.send(first)
        await bot.settle()
        (root,) = bot.roots("C0OPS")
        assert "2,400 more alert(s) Alertmanager left out" in str(root.body["blocks"])
        (note,) = bot.replies(root)
        assert "2,400 more alert(s) not shown" in str(note.body["blocks"])
        assert note.body["text"] == "2,400 more alert(s) not shown"

        await bot.send(first)  # a repeat: nothing new, nothing said again
        await bot.settle()
        assert len(bot.replies(root)) == 1

        await bot.send({**notification(group=STUCK, alerts=[one, two]), "truncatedAlerts": 2500})
        await bot.settle()
        news = bot.replies(root)[-1]
        assert "1 more alert(s) firing" in str(news.body["blocks"])
        assert "2,500 more alert(s) not shown" in str(news.body["blocks"])
        assert "2,500 more alert(s) Alertmanager left out" in str(bot.updates()[-1].body["blocks"])


async def test_two_groups_two_roots_and_unrouted_alerts_go_to_alerts(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path) as bot:
        other = {"alertname": "DiskFull", "queue": "clips"}
        await bot.send(notification(group=other, alerts=[alert("d1", labels=other)]))
        await bot.send(notification(group=STUCK, alerts=[alert("e1", labels=STUCK)]))
        await bot.settle()
        assert len(bot.roots("C0ALERTS")) == 1
        assert len(bot.roots("C0OPS")) == 1


async def test_tokens_are_checked(db_url: str, tmp_path: Path) -> None:
    async with alert_bot(db_url, tmp_path) as bot:
        body = notification(group=STUCK, alerts=[alert("e1", labels=STUCK)])
        assert (await bot.send(body, token=None)).status_code == 401
        wrong = await bot.send(body, token="not-the-token")
        assert wrong.status_code == 401
        assert wrong.headers["www-authenticate"].startswith("Bearer")
        assert await bot.stored() == 0
        assert (await bot.send(body)).status_code == 200
        assert await bot.stored() == 1


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "not JSON"),
        (b"[]", "JSON object"),
        (
            b'{"version": "4", "receiver": "r", "status": "firing", "groupKey": "k"}',
            "alerts: required",
        ),
        (
            b'{"version": "4", "receiver": "r", "status": "firing", "groupKey": "k", '
            b'"alerts": [{"status": "firing", "labels": {"a": 1}, "startsAt": "x", '
            b'"fingerprint": "f"}]}',
            "alerts[0].labels.a",
        ),
        (
            b'{"version": "3", "receiver": "r", "status": "firing", "groupKey": "k", "alerts": []}',
            'expected "4"',
        ),
    ],
)
async def test_bad_payloads_get_400_with_the_reason_and_nothing_is_stored(
    db_url: str, tmp_path: Path, body: bytes, reason: str
) -> None:
    async with alert_bot(db_url, tmp_path) as bot:
        response = await bot.send(body)
        assert response.status_code == 400
        assert reason in response.json()["error"]
        assert await bot.stored() == 0


async def test_oversized_bodies_get_413(db_url: str, tmp_path: Path) -> None:
    async with alert_bot(db_url, tmp_path, extra="[http]\nmax_body_kb = 16\n") as bot:
        big = notification(
            group=STUCK,
            alerts=[alert(f"f{i}", labels={**STUCK, "i": "x" * 900}) for i in range(40)],
        )
        assert (await bot.send(big)).status_code == 413
        assert await bot.stored() == 0


async def test_a_store_that_fails_answers_503_and_the_retry_is_stored_once(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path) as bot:
        body = notification(group=STUCK, alerts=[alert("e1", labels=STUCK)])
        async with bot.app.state_engine.begin() as conn:  # the inbox is gone for a moment
            await conn.execute(sa.text("ALTER TABLE qb_alert_inbox RENAME TO qb_alert_away"))
        failed = await bot.send(body)
        assert failed.status_code == 503
        assert "send it again" in failed.json()["error"]
        async with bot.app.state_engine.begin() as conn:
            await conn.execute(sa.text("ALTER TABLE qb_alert_away RENAME TO qb_alert_inbox"))
        assert await bot.stored() == 0
        assert (await bot.send(body)).status_code == 200  # Alertmanager's retry
        assert await bot.stored() == 1
        await bot.settle()
        assert len(bot.roots("C0OPS")) == 1


async def test_a_group_firing_again_soon_continues_its_thread_later_starts_anew(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path) as bot:
        one = alert("e1", labels=STUCK)
        await bot.send(notification(group=STUCK, alerts=[one]))
        await bot.settle()
        over = {**one, "status": "resolved", "endsAt": "2026-11-30T12:10:00Z"}
        await bot.send(notification(group=STUCK, alerts=[over]))
        await bot.settle()
        again = alert("e1", labels=STUCK, starts="2026-11-30T13:00:00Z")
        await bot.send(notification(group=STUCK, alerts=[again]))
        await bot.settle()
        (root,) = bot.roots("C0OPS")
        assert "Firing again" in str(bot.replies(root)[-1].body["blocks"])
        assert "FIRING" in str(bot.updates()[-1].body["blocks"])

        over = {**again, "status": "resolved", "endsAt": "2026-11-30T13:10:00Z"}
        await bot.send(notification(group=STUCK, alerts=[over]))
        await bot.settle()
        bot.clock.advance(hours=25)  # longer than [alerts] reopen_hours
        later = alert("e1", labels=STUCK, starts="2026-12-01T14:00:00Z")
        await bot.send(notification(group=STUCK, alerts=[later]))
        await bot.settle()
        assert len(bot.roots("C0OPS")) == 2


@pytest.mark.slow  # a burst paced at real 429s and Retry-After
async def test_a_burst_of_groups_is_paced_per_channel_and_survives_429s(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path) as bot:
        bot.pacer.interval = 0.2  # the Slack notifier's pace per channel, for the test
        for n in range(6):
            group = {"alertname": f"Burst{n}", "queue": "clips"}
            assert (
                await bot.send(notification(group=group, alerts=[alert(f"b{n}", labels=group)]))
            ).status_code == 200
        bot.fake.rate_limit(2)  # Slack says 429 twice: waited out, nothing lost
        await bot.settle()
        roots = bot.roots("C0ALERTS")
        assert len(roots) == 6
        gaps = [b.at - a.at for a, b in itertools.pairwise(roots)]
        assert min(gaps) >= 0.19
        assert len(bot.fake.recorded("/api/chat.postMessage#429")) == 2
