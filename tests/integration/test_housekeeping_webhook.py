"""Housekeeping's webhook is called outside any transaction: one that never answers
holds up only the run that called it, never another audited change; a row it did not
take stays failed and the run says why. Each notice carries an idempotency key that is
the same in every run that tells of it, so a repeat (at-least-once delivery) can be
dropped by the receiver."""

from __future__ import annotations

import asyncio
import time

from pydantic import SecretStr
from sqlalchemy.ext.asyncio import AsyncEngine

from services.audit import Actor
from services.config.housekeeping import HousekeepingConfig
from services.estate.model import DeadFilter
from services.estate.ops import Selector
from services.housekeeping.run import Housekeeper
from services.housekeeping.webhook import Webhook
from tests.helpers.people import ALICE
from tests.integration.housekeeping_support import (
    build_estate,
    fake_webhook,
    housekeeper,
    table_rows,
)
from tests.integration.support import Shop
from tests.kinds import ChangeKind

ACTOR = Actor.system("housekeeping")
NO_ANSWER = 3.0  # seconds the webhook is given


async def test_a_webhook_that_never_answers_holds_no_other_audited_change(shop: Shop) -> None:
    dead = await shop.reads.list_dead(queue="clips", filters=DeadFilter(limit=1))
    async with fake_webhook(hang=True) as hook:
        keeper = Housekeeper(
            engine=shop.engine,
            estate=shop.estate,
            audit=shop.services.audit,
            config=HousekeepingConfig(),
            clock=shop.clock,
            chat=False,
            webhook=Webhook(SecretStr(hook.url), timeout=NO_ANSWER),
        )
        run = asyncio.create_task(keeper.run(actor=ACTOR))
        await asyncio.wait_for(hook.arrived.wait(), 30)  # the run waits for the webhook now

        started = time.monotonic()
        requested = await shop.changes.request(
            kind=ChangeKind.REDRIVE,
            queue="clips",
            selector=Selector(ids=(dead.rows[0].id,)),
            reason="fixed upstream",
            actor=ALICE,
        )
        took = time.monotonic() - started
        assert requested.ref == "CR-1"
        assert took < 2.0 and not run.done(), f"the change request waited {took:.1f} s"

        report = await run
    said = "\n".join(report.lines())
    assert f"not told to anyone (the webhook gave no answer within {NO_ANSWER:g} s)" in said
    assert report.changed > 0  # the rest of the run went on
    async with shop.engine.connect() as conn:
        assert (await shop.services.audit.verify(conn)).ok


async def test_a_notice_has_the_same_idempotency_key_in_every_run(engine: AsyncEngine) -> None:
    estate = await build_estate(engine)
    async with fake_webhook(refuse={999}) as hook:  # row 14 (issue 999) is refused
        keeper = housekeeper(engine, estate, chat=False, webhook=hook.url)
        await keeper.run(actor=ACTOR, only=("B",))
        first = {
            b["id"]: (key, b["idempotency_key"])
            for b, key in zip(hook.bodies, hook.keys, strict=True)
        }
        hook.bodies.clear()
        hook.keys.clear()
        await keeper.run(actor=ACTOR, only=("B",))  # 14 stayed failed: told again
        again = {
            b["id"]: (key, b["idempotency_key"])
            for b, key in zip(hook.bodies, hook.keys, strict=True)
        }
    assert sorted(first) == ["13", "14"] and sorted(again) == ["14"]
    assert again["14"] == first["14"]  # the header, and the body says the same
    assert first["14"][0] == first["14"][1] and first["14"][0]
    assert first["13"][0] != first["14"][0]
    rows = await table_rows(engine)
    assert (rows[13]["status"], rows[14]["status"]) == ("failed_permanently", "failed")
