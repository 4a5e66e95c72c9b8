"""An incident's lead handed over, as its people see it: the lead hands it to another who
holds the declaration authority, or that person takes it; a third person, and a new lead
without the authority, are refused in one line that says who could. The handoff is on
the timeline, in the postmortem (who led when) and in the audit trail; the reminders
after it call the new lead, and an escalation calls the lead and the declaration rota's
secondary: the next one on shift of a schedule, a Slack user group's own mention, never
the whole channel. On the real clock of the scheduler, frozen by the tests."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from services.access import Source
from services.audit import AuditTrail
from services.errors import Conflict, PermissionDenied
from services.jsonable import loads
from services.message import Message, message_from_json
from tests.helpers.text import in_order
from tests.integration.alerting import AlertBot, alert_bot
from tests.integration.incident_support import say, say_as

pytestmark = [pytest.mark.usefixtures("db_url"), pytest.mark.demo_db]

DECLARE = '/incident declare gd:queue-loss "jobs stopped" --queue workers'


def people(duty_officers: tuple[str, ...] = ()) -> str:
    """dora, bob (on Discord too), alice and carol, operators; ``duty_officers`` also hold
    the role [roles] maps the runbooks' "operations duty officer" to."""
    accounts = {"dora": "U0DORA", "bob": "U0BOB", "alice": "U0ALICE", "carol": "U0CAROL"}
    lines = ['[channels.actors]\nslack = "C0ACTORS"\n']
    for name, slack in accounts.items():
        roles = ["operator", *(["duty-officer"] if name in duty_officers else [])]
        discord = 'discord = "100000000000000002"\n' if name == "bob" else ""
        lines.append(f'[people.{name}]\nslack = "{slack}"\n{discord}roles = {json.dumps(roles)}\n')
    return "\n".join(lines)


PEOPLE = people()
# dora and bob hold the duty officer's role; alice and carol do not
BY_ROLE = people(("dora", "bob")) + '[roles]\n"operations duty officer" = "duty-officer"\n'
# the runbook's authority is a rota: a weekly-style schedule of dora (on shift at START,
# 03:00 UTC), then bob, then alice, a day each
BY_SCHEDULE = PEOPLE + (
    '[rotas."operations duty officer"]\n'
    'schedule = { start = "2026-11-30T00:00:00Z", every = "1d", people = ["dora", "bob", '
    '"alice"] }\n'
)
# ... or whoever is in the Slack user group S0DUTY
BY_SLACK_GROUP = PEOPLE + '[rotas."operations duty officer"]\nslack_usergroup = "S0DUTY"\n'
WHOLE_CHANNEL = ("<!channel>", "<!here>", "<!everyone>", "@channel", "@here", "@everyone")


class GroupReader:
    """Slack's user groups as the test sets them (``usergroups.users.list``'s answer)."""

    def __init__(self, groups: Mapping[str, set[str]]) -> None:
        self.groups = {k: set(v) for k, v in groups.items()}

    async def members(self, source: Source) -> frozenset[str]:
        return frozenset(self.groups[source.id])


async def thread_messages(bot: AlertBot, summary: str = "") -> list[tuple[str, Message]]:
    """The incident's posts as queued in the outbox ("thread" or "audience", message),
    those whose summary holds ``summary``."""
    async with bot.app.state_engine.connect() as conn:
        found = await conn.execute(
            sa.text("SELECT payload FROM qb_outbox WHERE kind = 'incident.post' ORDER BY id")
        )
        payloads = [p if isinstance(p, dict) else loads(p) for p in found.scalars()]
    out = [(str(p["action"]), message_from_json(p["message"])) for p in payloads]
    return [(action, m) for action, m in out if summary in m.summary]


async def events(bot: AlertBot, action: str) -> list[dict[str, Any]]:
    async with bot.app.state_engine.connect() as conn:
        found = await conn.execute(
            sa.text(
                "SELECT actor_person, details FROM qb_audit_events WHERE action = :a ORDER BY id"
            ),
            {"a": action},
        )
        return [{"actor": a, **json.loads(d)} for a, d in found]


async def lead_row(bot: AlertBot) -> tuple[Any, ...]:
    async with bot.app.state_engine.connect() as conn:
        found = await conn.execute(
            sa.text("SELECT lead, lead_platform, lead_account FROM qb_incidents WHERE id = 1")
        )
        return tuple(found.one())


async def verified(bot: AlertBot) -> None:
    """`audit verify` holds: the lead columns say what the trail says."""
    async with bot.app.state_engine.connect() as conn:
        result = await AuditTrail().verify(conn, now=bot.clock.now)
    assert result.ok, result.problem


def slack_mentions(message: Message) -> list[str | None]:
    return [m.on("slack") for m in message.mentions]


async def test_the_lead_hands_over_and_the_next_reminder_calls_the_new_lead(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path, extra=BY_ROLE) as bot:
        assert "led by dora" in await say(bot, DECLARE)
        bot.clock.advance(minutes=1)
        said = await say(bot, "/incident lead bob")
        assert "INC-1 is led by bob now (before: dora)" in said
        assert await lead_row(bot) == ("bob", "slack", "U0BOB")

        # the timeline and the status say who leads since when
        assert "03:01:00  lead      dora handed the lead to bob" in await say(
            bot, "/incident timeline INC-1"
        )
        assert "Lead: bob (since 03:01:00 UTC)" in await say(bot, "/incident status INC-1")
        # the thread is told, calling bob
        ((_, handoff),) = await thread_messages(bot, "handed the lead")
        assert slack_mentions(handoff) == ["<@U0BOB>"]
        (changed,) = await events(bot, "incident.lead_changed")
        assert changed["actor"] == "dora"
        assert changed["from"] == {"person": "dora", "platform": "console", "account": "dora"}
        assert changed["to"] == {"person": "bob", "platform": "slack", "account": "U0BOB"}
        assert {"gives": "role duty-officer", "source": "[people.bob]"} in changed["basis"]
        await verified(bot)

        # the operators' first reminder comes at half their 5 minutes: to bob, not dora
        bot.clock.advance(minutes=1, seconds=30)
        assert await bot.app.scheduler.run_due() == 1
        ((_, reminder),) = await thread_messages(bot, "tell the operators")
        assert slack_mentions(reminder) == ["<@U0BOB>"]
        assert [m.on("discord") for m in reminder.mentions] == ["<@100000000000000002>"]
        assert "reminded bob: the operators are due by 03:05:00 UTC" in await say(
            bot, "/incident timeline INC-1"
        )

        # the postmortem says who led when
        export = await say(bot, "/incident export INC-1")
        lead = export.split("## Lead", 1)[1].split("\n## ", 1)[0]
        in_order(
            lead,
            "- from 2026-11-30 03:00:00 UTC: dora (declared it); until 2026-11-30 03:01:00 UTC",
            "- from 2026-11-30 03:01:00 UTC: dora handed the lead to bob; still leading",
        )
        assert "| 2026-11-30 03:01:00 UTC | lead | dora | dora handed the lead to bob |" in export
        assert "- Lead: bob" in export


async def test_the_new_lead_takes_it_and_a_slack_mention_names_them(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path, extra=BY_ROLE) as bot:
        await say(bot, DECLARE)
        said = await say_as(bot, "bob", "/incident lead <@U0BOB|bob> --incident INC-1")
        assert "INC-1 is led by bob now (before: dora)" in said
        assert "bob took the lead from dora" in await say(bot, "/incident timeline")
        # and back: dora names herself by her Slack mention as Slack escapes it
        await say(bot, "/incident lead <@U0DORA>")
        assert await lead_row(bot) == ("dora", "slack", "U0DORA")
        with pytest.raises(Conflict, match="dora already leads INC-1"):
            await say(bot, "/incident lead dora")
        assert len(await events(bot, "incident.lead_changed")) == 2
        await verified(bot)


async def test_a_third_person_and_a_lead_without_the_authority_are_refused(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path, extra=BY_ROLE) as bot:
        await say(bot, DECLARE)
        with pytest.raises(PermissionDenied) as third:
            await say_as(bot, "carol", "/incident lead bob")
        assert third.value.message == (
            "only dora, who leads INC-1, may hand its lead over, or bob may take it: ask dora, "
            "or bob types /incident lead bob --incident INC-1"
        )
        with pytest.raises(PermissionDenied) as unentitled:
            await say(bot, "/incident lead alice")
        assert unentitled.value.message == (
            "alice cannot lead INC-1: only the operations duty officer may lead INC-1 "
            "(queuebot role duty-officer: dora, bob); hand it to one of them"
        )
        with pytest.raises(PermissionDenied, match=r"^carol cannot lead INC-1: "):
            await say_as(bot, "carol", "/incident lead carol")  # taking it needs it too
        with pytest.raises(Exception, match="nobody is named 'zed' under"):
            await say(bot, "/incident lead zed")
        assert await lead_row(bot) == ("dora", "console", "dora")
        assert await events(bot, "incident.lead_changed") == []
        assert " the lead" not in await say(bot, "/incident timeline")


async def test_an_escalation_calls_the_lead_and_the_next_on_shift_of_the_schedule(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path, extra=BY_SCHEDULE) as bot:
        await say(bot, DECLARE)  # dora is on shift
        with pytest.raises(PermissionDenied) as refused:
            await say(bot, "/incident lead alice")
        assert refused.value.message.startswith(
            "alice cannot lead INC-1: only whoever holds operations duty officer may lead "
            "INC-1 (now: dora, until 2026-12-01 00:00 UTC, then bob); hand it to one of them"
        )
        bot.clock.advance(minutes=6)  # past the operators' 5 minutes
        await bot.app.scheduler.run_due()
        escalations = await thread_messages(bot, "were not told in time")
        assert [action for action, _ in escalations] == ["thread", "audience"]
        for _, escalation in escalations:
            assert slack_mentions(escalation) == ["<@U0DORA>", "<@U0BOB>"]
            text = "\n".join(
                [*(m.on("slack") or "" for m in escalation.mentions), escalation.summary]
                + [getattr(b, "text", "") for b in escalation.blocks]
            )
            assert "Secondary: bob, next on shift of operations duty officer." in text
            assert not any(whole in text for whole in WHOLE_CHANNEL), text
        (missed,) = await events(bot, "incident.deadline_missed")
        assert (missed["lead"], missed["secondary"], missed["escalated_to"]) == (
            "dora",
            "bob",
            ["dora"],
        )
        await verified(bot)


async def test_an_escalation_calls_a_slack_group_rota_by_its_own_mention(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path, extra=BY_SLACK_GROUP) as bot:
        reader = GroupReader({"S0DUTY": {"U0DORA"}})
        assert bot.app.standings is not None
        bot.app.standings.membership.add_reader("slack", reader)
        await say(bot, DECLARE)  # dora is in the group
        with pytest.raises(PermissionDenied) as refused:
            await say(bot, "/incident lead bob")
        assert refused.value.message == (
            "bob cannot lead INC-1: only whoever holds operations duty officer may lead INC-1 "
            "(now: dora); hand it to one of them"
        )
        # bob joins the group (Slack says so): now he may lead, and his authority's basis
        # names the group
        reader.groups["S0DUTY"].add("U0BOB")
        bot.app.standings.membership.forget(Source("slack_usergroup", "S0DUTY"))
        bot.clock.advance(minutes=1)
        await say(bot, "/incident lead bob")
        (changed,) = await events(bot, "incident.lead_changed")
        (basis,) = [b for b in changed["basis"] if b["gives"] == "rota operations duty officer"]
        assert basis["source"] == "Slack user group S0DUTY (rota operations duty officer)"

        bot.clock.advance(minutes=5)  # past the operators' 5 minutes
        await bot.app.scheduler.run_due()
        escalations = await thread_messages(bot, "were not told in time")
        assert len(escalations) == 2
        for _, escalation in escalations:
            assert slack_mentions(escalation) == ["<@U0BOB>", "<!subteam^S0DUTY>"]
            shown = "\n".join(getattr(b, "text", "") for b in escalation.blocks)
            assert "Lead: bob." in shown
            assert "Secondary: operations duty officer (Slack user group S0DUTY)." in shown
            assert not any(whole in shown for whole in WHOLE_CHANNEL), shown
        await verified(bot)
        # as Slack receives it in the operators channel: the lead and the group called
        await bot.settle()
        (posted,) = [p for p in bot.posts("C0OPS") if "were not told in time" in p.body["text"]]
        called = posted.body["blocks"][0]["text"]["text"]
        assert called == "<@U0BOB> <!subteam^S0DUTY>"
        assert posted.body["text"].startswith("<@U0BOB> <!subteam^S0DUTY> INC-1: ")
        assert not any(whole in json.dumps(posted.body) for whole in WHOLE_CHANNEL)
