"""The delivery ledger lets each platform delivery through once, also under concurrency,
and loses none: a claim whose owner died is taken over, and a change marks its delivery
done in its own transaction."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
import sqlalchemy as sa

from services.changes.model import RequestState
from services.errors import ConcurrentChange
from services.estate.model import DeadFilter
from services.estate.ops import Selector
from services.ledger import MAX_ADOPTIONS, STALE, DeliveryLedger, complete_in
from tests.helpers.people import ALICE_ON_SLACK
from tests.integration.support import Shop
from tests.kinds import ChangeKind


def ledger_of(shop: Shop) -> DeliveryLedger:
    """A ledger as one process has it (each process, one owner)."""
    return DeliveryLedger(engine=shop.engine, clock=shop.clock)


async def test_a_finished_delivery_is_not_acted_on_again(shop: Shop) -> None:
    ledger = ledger_of(shop)
    first = await ledger.claim("slack:command:1.abc")
    assert first is not None
    assert await ledger.claim("slack:command:1.abc") is None  # in hand
    await ledger.finish(first)
    shop.clock.advance(hours=1)
    assert await ledger.claim("slack:command:1.abc") is None  # done, however late
    assert await ledger.claim("slack:command:2.abc") is not None


async def test_simultaneous_deliveries_yield_one_winner(shop: Shop) -> None:
    replicas = [ledger_of(shop) for _ in range(8)]
    results = await asyncio.gather(
        *(r.claim("slack:action:9:U0BOB:cr:approve:1") for r in replicas)
    )
    assert len([r for r in results if r is not None]) == 1


async def test_a_claim_kept_fresh_is_not_taken_over_and_a_dead_owners_is(shop: Shop) -> None:
    alive, other = ledger_of(shop), ledger_of(shop)
    claim = await alive.claim("slack:command:7.abc")
    assert claim is not None
    shop.clock.advance(seconds=STALE.total_seconds() - 1)
    assert await alive.heartbeat(claim)  # still working
    shop.clock.advance(seconds=STALE.total_seconds() - 1)
    assert await other.claim("slack:command:7.abc") is None
    shop.clock.advance(seconds=STALE.total_seconds() + 1)  # its owner stopped beating: gone
    taken = await other.claim("slack:command:7.abc")
    assert taken is not None
    assert not await alive.heartbeat(claim)  # and the old owner learns it


async def test_a_ledger_told_a_shorter_staleness_takes_over_sooner(shop: Shop) -> None:
    quick = timedelta(seconds=5)  # QUEUEBOT_CLAIM_STALE_SECONDS=5
    dead = DeliveryLedger(engine=shop.engine, clock=shop.clock, stale_after=quick)
    other = DeliveryLedger(engine=shop.engine, clock=shop.clock, stale_after=quick)
    assert await dead.claim("slack:command:8.abc") is not None
    shop.clock.advance(seconds=4)
    assert await other.claim("slack:command:8.abc") is None
    shop.clock.advance(seconds=2)
    assert await other.claim("slack:command:8.abc") is not None


async def test_a_change_and_its_delivery_commit_together_so_a_redelivery_acts_once(
    shop: Shop,
) -> None:
    dead = await shop.reads.list_dead(queue="clips", filters=DeadFilter(error_like="ffmpeg"))
    ids = tuple(r.id for r in dead.rows)
    crashed, replica = ledger_of(shop), ledger_of(shop)
    # A process claims the delivery, then dies before its transaction commits: nothing
    # was requested, and the claim is left behind.
    lost = await crashed.claim("slack:command:trigger-1")
    assert lost is not None
    assert await shop.changes.pending() == []

    # Slack redelivers; while the claim is fresh the redelivery waits its turn ...
    assert await replica.claim("slack:command:trigger-1") is None
    shop.clock.advance(seconds=STALE.total_seconds() + 1)
    # ... and once it is stale, the replica takes it over and acts, exactly once.
    claim = await replica.claim("slack:command:trigger-1")
    assert claim is not None
    view = await shop.changes.request(
        kind=ChangeKind.REDRIVE,
        queue="clips",
        selector=Selector(ids=ids),
        reason="transcoder fixed",
        actor=ALICE_ON_SLACK,
        delivery=claim,
    )
    assert view.state is RequestState.PENDING
    # The crashed owner, had it only been stalled, cannot act on the same delivery now:
    with pytest.raises(ConcurrentChange):
        await shop.changes.request(
            kind=ChangeKind.REDRIVE,
            queue="clips",
            selector=Selector(ids=ids),
            reason="transcoder fixed",
            actor=ALICE_ON_SLACK,
            delivery=lost,
        )
    # and a later redelivery finds the key done, in the same commit as the request.
    shop.clock.advance(minutes=5)
    assert await replica.claim("slack:command:trigger-1") is None
    assert len(await shop.changes.pending()) == 1


async def test_old_keys_are_forgotten(shop: Shop) -> None:
    ledger = ledger_of(shop)
    old = await ledger.claim("old")
    assert old is not None
    await ledger.finish(old)
    shop.clock.advance(days=3)
    new = await ledger.claim("new")
    assert new is not None
    await ledger.finish(new)
    await ledger.forget_older_than(timedelta(days=2))
    assert await ledger.claim("old") is not None
    assert await ledger.claim("new") is None
    async with shop.engine.connect() as conn:
        kept = (await conn.execute(sa.text("SELECT count(*) FROM qb_deliveries"))).scalar_one()
    assert kept == 2  # "new", and "old" claimed again


ASKED = {"platform": "slack", "user": "U0BOB", "text": "approve CR-1"}


async def test_an_acknowledged_delivery_whose_owner_died_is_adopted_once(shop: Shop) -> None:
    dead, replicas = ledger_of(shop), [ledger_of(shop) for _ in range(6)]
    acked_at = shop.clock()
    claim = await dead.claim("slack:command:o1", request=ASKED)
    assert claim is not None
    await dead.claim("slack:command:plain")  # nothing written down: never an orphan
    assert await replicas[0].adopt_orphans(prefixes=("slack:",)) == []  # still fresh
    shop.clock.advance(seconds=STALE.total_seconds() + 1)
    adopted = await asyncio.gather(*(r.adopt_orphans(prefixes=("slack:",)) for r in replicas))
    taken = [o for found in adopted for o in found]
    assert [(o.claim.key, o.state, o.request, o.acked_at) for o in taken] == [
        ("slack:command:o1", "claimed", ASKED | {"acked_at": acked_at.isoformat()}, acked_at)
    ]  # the ledger stamps when it was written down, just before the ack
    assert taken[0].adoptions == 1  # six sweeps at once count one adoption
    assert not await dead.heartbeat(claim)  # the dead owner's claim is no longer its own
    assert await replicas[0].adopt_orphans(prefixes=("slack:",)) == []  # kept fresh now


async def test_only_unanswered_orphans_of_the_platforms_asked_are_adopted(shop: Shop) -> None:
    dead, alive = ledger_of(shop), ledger_of(shop)
    answered = await dead.claim("slack:command:o2", request=ASKED)
    assert answered is not None
    await dead.finish(answered)
    assert await dead.claim("discord:interaction:3", request=ASKED) is not None
    shop.clock.advance(seconds=STALE.total_seconds() + 1)
    assert await alive.adopt_orphans(prefixes=("slack:",)) == []
    found = await alive.adopt_orphans(prefixes=("discord:",))
    assert [o.claim.key for o in found] == ["discord:interaction:3"]


async def test_an_orphan_whose_change_committed_says_what_it_did(shop: Shop) -> None:
    dead, alive = ledger_of(shop), ledger_of(shop)
    claim = await dead.claim("slack:command:o3", request=ASKED)
    assert claim is not None
    beats = STALE.total_seconds() - 1
    shop.clock.advance(seconds=beats)
    assert await dead.heartbeat(claim)
    view = await shop.changes.request(
        kind=ChangeKind.REDRIVE,
        queue="clips",
        selector=Selector(error_like="ffmpeg"),
        reason="codec fixed",
        actor=ALICE_ON_SLACK,
        delivery=claim,
    )
    shop.clock.advance(seconds=beats)
    assert await dead.heartbeat(claim)  # done, not yet answered: still kept fresh
    shop.clock.advance(seconds=STALE.total_seconds() + 1)
    (orphan,) = await alive.adopt_orphans(prefixes=("slack:",))
    assert (orphan.state, orphan.outcome) == ("done", f"CR-{view.number} requested")
    await alive.finish(orphan.claim)
    shop.clock.advance(seconds=STALE.total_seconds() + 1)
    assert await alive.adopt_orphans(prefixes=("slack:",)) == []


async def adoptions(shop: Shop, key: str) -> int:
    async with shop.engine.connect() as conn:
        return int(
            (
                await conn.execute(
                    sa.text("SELECT adoptions FROM qb_deliveries WHERE key = :k"), {"k": key}
                )
            ).scalar_one()
        )


async def test_each_adoption_is_counted_with_it_and_past_the_limit_the_work_is_given_up(
    shop: Shop,
) -> None:
    # each adopter dies right after adopting (no heartbeat, no finish): the count is in
    # the database already, so the next process sees it
    assert await ledger_of(shop).claim("slack:command:poison", request=ASKED) is not None
    for adoption in range(1, MAX_ADOPTIONS + 2):
        shop.clock.advance(seconds=STALE.total_seconds() + 1)
        (orphan,) = await ledger_of(shop).adopt_orphans(prefixes=("slack:",))
        assert (orphan.adoptions, await adoptions(shop, "slack:command:poison")) == (
            adoption,
            adoption,
        )
        assert orphan.given_up == (adoption > MAX_ADOPTIONS)
    last = ledger_of(shop)
    shop.clock.advance(seconds=STALE.total_seconds() + 1)
    (orphan,) = await last.adopt_orphans(prefixes=("slack:",))
    assert orphan.given_up
    await last.finish(orphan.claim)  # answered that it was not retried
    shop.clock.advance(days=1)
    assert await ledger_of(shop).adopt_orphans(prefixes=("slack:",)) == []
    assert await ledger_of(shop).claim("slack:command:poison") is None  # done


async def test_a_delivery_adopted_before_is_adopted_alone_so_a_poison_one_kills_no_other(
    shop: Shop,
) -> None:
    # a command that kills its process and an innocent one, orphaned together
    for key in ("slack:command:poison", "slack:command:innocent"):
        assert await ledger_of(shop).claim(key, request=ASKED) is not None
    shop.clock.advance(seconds=STALE.total_seconds() + 1)
    together = await ledger_of(shop).adopt_orphans(prefixes=("slack:",))
    assert len(together) == 2  # both die with the process that adopted them
    # then each is adopted alone, the one waiting longest first, never beside the other
    seen: list[str] = []
    for _ in range(2):
        shop.clock.advance(seconds=STALE.total_seconds() + 1)
        (alone,) = await ledger_of(shop).adopt_orphans(prefixes=("slack:",))
        seen.append(alone.claim.key)
        if alone.claim.key.endswith("innocent"):
            await ledger_of(shop).finish(alone.claim)  # run alone, it finishes
    assert sorted(seen) == ["slack:command:innocent", "slack:command:poison"]
    # a new orphan meanwhile waits for the one adopted before, which comes alone
    assert await ledger_of(shop).claim("slack:command:fresh", request=ASKED) is not None
    shop.clock.advance(seconds=STALE.total_seconds() + 1)
    (alone,) = await ledger_of(shop).adopt_orphans(prefixes=("slack:",))
    assert alone.claim.key == "slack:command:poison" and alone.adoptions == 3
    shop.clock.advance(seconds=STALE.total_seconds() + 1)
    (alone,) = await ledger_of(shop).adopt_orphans(prefixes=("slack:",))
    assert alone.claim.key == "slack:command:poison"
    assert alone.given_up  # answered, not run: the fresh one is next, by itself
    await ledger_of(shop).finish(alone.claim)
    shop.clock.advance(seconds=STALE.total_seconds() + 1)
    (fresh,) = await ledger_of(shop).adopt_orphans(prefixes=("slack:",))
    assert (fresh.claim.key, fresh.adoptions) == ("slack:command:fresh", 1)


async def test_a_committed_change_is_never_given_up_however_often_its_process_died(
    shop: Shop,
) -> None:
    dead = ledger_of(shop)
    claim = await dead.claim("slack:command:committed", request=ASKED)
    assert claim is not None
    async with shop.engine.begin() as conn:
        await complete_in(conn, claim, now=shop.clock(), outcome="CR-7 approved and executed")
    for _ in range(MAX_ADOPTIONS + 2):
        shop.clock.advance(seconds=STALE.total_seconds() + 1)
        (orphan,) = await ledger_of(shop).adopt_orphans(prefixes=("slack:",))
    assert (orphan.state, orphan.outcome, orphan.adoptions) == (
        "done",
        "CR-7 approved and executed",
        MAX_ADOPTIONS + 2,
    )
    assert not orphan.given_up  # answered with what it did
