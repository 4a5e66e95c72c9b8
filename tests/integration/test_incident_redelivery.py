"""An audience's message delivered again after its relay died (the outbox delivers at
least once) tells the audience once: one timeline entry, one audit event. The incidents
service records a delivery (``Incidents.delivered``) in the transaction that marks the
outbox item done (``services.outbox.finish``): a relay that died after recording left the
item done, and one overtaken after its lease ran out records nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from services.incidents.publish import INCIDENT_POST
from services.outbox import LEASE, Outbox
from tests.helpers.people import DORA_TOML, DUTY_OFFICER_TOML
from tests.integration.alerting import alert_bot
from tests.integration.incident_support import ACTORS, say

PEOPLE = DORA_TOML + DUTY_OFFICER_TOML

pytestmark = [pytest.mark.usefixtures("db_url"), pytest.mark.demo_db]


async def test_a_delivery_redone_after_its_relay_died_tells_the_audience_once(
    db_url: str, tmp_path: Path
) -> None:
    async with alert_bot(db_url, tmp_path, extra=PEOPLE + ACTORS) as bot:
        await say(bot, '/incident declare gd:queue-loss "jobs stopped" --queue workers')
        await bot.settle()
        bot.clock.advance(seconds=30)
        await say(bot, '/incident notify operators "we are on it"')
        dying = Outbox(engine=bot.app.state_engine, clock=bot.clock)
        dying.register(INCIDENT_POST, bot.app.outbox.posters[INCIDENT_POST])
        claimed = await dying._claim(INCIDENT_POST, None)
        assert claimed is not None and "we are on it" in str(claimed.payload)
        await dying.posters[INCIDENT_POST](claimed)  # delivered and recorded, then killed

        bot.clock.advance(seconds=LEASE.total_seconds() + 1)
        await bot.settle()  # its lease ran out: another relay delivers it again
        timeline = await say(bot, "/incident timeline")
        assert timeline.count("dora told the operators") == 1, timeline
        async with bot.app.state_engine.connect() as conn:
            events = (
                await conn.execute(
                    text("SELECT count(*) FROM qb_audit_events WHERE action = 'incident.notified'")
                )
            ).scalar_one()
        assert events == 1
