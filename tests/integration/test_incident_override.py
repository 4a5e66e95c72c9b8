"""Resolving an incident without every validation item: a change request another person
approves. The requester cannot approve it; the items skipped stay on the record as
overridden, with who asked, who approved and why; the postmortem and the audit trail say
so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from bot.render_text import render_message
from commands.messages import describe, error_reply
from services.errors import Conflict, OwnRequest, QueuebotError
from tests.helpers.people import BOB_TOML, DORA_APPROVER_TOML, DUTY_OFFICER_TOML
from tests.integration.alerting import alert_bot
from tests.integration.incident_support import ACTORS, say_as, thread_posts

# Each test starts the bot over the demo estate built at START: a copy of the template.
pytestmark = [pytest.mark.usefixtures("db_url"), pytest.mark.demo_db]

PEOPLE = DORA_APPROVER_TOML + BOB_TOML + ACTORS + DUTY_OFFICER_TOML


async def test_override_needs_another_person_and_stays_on_the_record(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path, extra=PEOPLE) as bot:
        await say_as(bot, "dora", '/incident declare gd:queue-loss "jobs stopped" --queue workers')
        await say_as(bot, "dora", '/incident step v1 done --result "counted by hand"')
        with pytest.raises(Conflict, match="--override"):
            await say_as(bot, "dora", "/incident resolve")
        with pytest.raises(QueuebotError, match="--reason"):
            await say_as(bot, "dora", "/incident resolve --override")

        asked = await say_as(
            bot, "dora", '/incident resolve INC-1 --override --reason "tenant confirmed by phone"'
        )
        assert "CR-1: resolve INC-1 without 2 validation item(s)" in asked
        assert "waiting for approval" in asked
        assert "v2" in asked and "v3" in asked and "v1 (" not in asked
        with pytest.raises(Conflict, match="CR-1 already asks"):
            await say_as(bot, "bob", '/incident resolve --override --reason "again, from bob"')
        with pytest.raises(OwnRequest):
            await say_as(bot, "dora", "/queue approve CR-1")
        status = await say_as(bot, "dora", "/incident status INC-1")
        assert "open" in status  # nothing happens before the approval

        approved = await say_as(bot, "bob", "/queue approve CR-1")
        assert "approved by bob and executed" in approved
        assert "INC-1 resolved" in approved

        status = await say_as(bot, "dora", "/incident status INC-1")
        assert "resolved" in status
        assert status.count("overridden (bob)") == 2
        timeline = await say_as(bot, "dora", "/incident timeline INC-1")
        assert (
            "resolved on CR-1, requested by dora (tenant confirmed by phone) and approved by "
            "bob, 0 s after the declaration, without validating v2, v3"
        ) in timeline
        export = await say_as(bot, "dora", "/incident export INC-1")
        assert "not validated: overridden by CR-1" in export
        assert "- [x] v1" in export and "- [ ] v2" in export
        assert "| CR-1 | resolve |" in export

        async with bot.app.state_engine.connect() as conn:
            rows = (
                await conn.execute(
                    sa.text(
                        "SELECT action, details FROM qb_audit_events WHERE subject IN "
                        "('INC-1', 'CR-1') ORDER BY id"
                    )
                )
            ).all()
        actions = [r[0] for r in rows]
        assert actions[-3:] == ["change.approved", "incident.resolved", "change.executed"]
        resolved = rows[-2][1]
        details = json.loads(resolved) if isinstance(resolved, str) else resolved
        assert details["override"]["request"] == "CR-1"
        assert details["override"]["approvers"] == ["bob"]
        assert details["override"]["requester"] == "dora"
        assert len(details["override"]["unvalidated"]) == 2

        with pytest.raises(Conflict, match="resolved already"):
            await say_as(bot, "dora", '/incident resolve INC-1 --override --reason "once more"')


async def test_a_validated_incident_needs_no_override(db_url: str, tmp_path: Path) -> None:
    async with alert_bot(db_url, tmp_path, extra=PEOPLE) as bot:
        await say_as(bot, "dora", '/incident declare gd:queue-loss "jobs stopped" --queue workers')
        for step in ("v1", "v2", "v3"):
            await say_as(bot, "dora", f'/incident step {step} done --result "seen"')
        with pytest.raises(Conflict, match="no override needed"):
            await say_as(bot, "dora", '/incident resolve --override --reason "just in case"')
        assert "INC-1 resolved" in await say_as(bot, "dora", "/incident resolve")


async def test_refusals_carry_headings_that_say_why(db_url: str, tmp_path: Path) -> None:
    """A step asked for out of the runbook's order and a resolve before validation are
    not "Already changed": nothing changed; each heading says what is wrong."""
    async with alert_bot(db_url, tmp_path, extra=PEOPLE) as bot:
        await say_as(bot, "dora", '/incident declare gd:queue-loss "jobs stopped" --queue workers')
        with pytest.raises(QueuebotError) as out_of_order:
            await say_as(bot, "dora", "/incident step dep:job-worker-pool done")
        title, text = describe(out_of_order.value)
        assert title == "Out of order" and "rests on" in text
        with pytest.raises(QueuebotError) as early:
            await say_as(bot, "dora", "/incident resolve")
        assert describe(early.value)[0] == "Not ready to resolve"
        reply = render_message(error_reply(early.value).message)
        assert "Not ready to resolve" in reply and "Already changed" not in reply


async def test_an_override_names_who_asked_for_it_and_who_approved_it(
    db_url: str, tmp_path: Path
) -> None:
    """dora asks, bob approves: neither is "the one who resolved it" alone; the reply,
    the thread, the timeline and the postmortem name both."""
    async with alert_bot(db_url, tmp_path, extra=PEOPLE) as bot:
        await say_as(bot, "dora", '/incident declare gd:queue-loss "jobs stopped" --queue workers')
        bot.clock.advance(minutes=4)
        await say_as(bot, "dora", '/incident resolve --override --reason "tenant confirmed"')
        bot.clock.advance(minutes=6)
        approved = await say_as(bot, "bob", "/queue approve CR-1")
        assert "INC-1 resolved, requested by dora and approved by bob" in approved

        (post,) = [p for p in await thread_posts(bot) if "resolved" in p]
        assert (
            "✅ INC-1 resolved on CR-1, requested by dora and approved by bob, 10 min after "
            "the declaration, without validating v1, v2, v3: recovery not measured."
        ) in post
        assert "resolved by bob" not in post

        timeline = await say_as(bot, "dora", "/incident timeline INC-1")
        assert (
            "resolved on CR-1, requested by dora (tenant confirmed) and approved by bob, "
            "10 min after the declaration, without validating v1, v2, v3"
        ) in timeline
        assert "bob resolved it" not in timeline

        export = await say_as(bot, "dora", "/incident export INC-1")
        assert (
            "- Resolved: 2026-11-30 03:10:00 UTC, on CR-1: requested by dora, approved by bob"
        ) in export
