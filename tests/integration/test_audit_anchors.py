"""The trail's head goes to the audit channel after each executed change and, when it
moved, on a schedule: a copy outside the database that `audit verify --anchor` checks."""

from __future__ import annotations

from pydantic import SecretStr

from bot.bootstrap import Services
from services.audit import Anchor, AuditTrail
from services.estate.model import DeadFilter
from services.estate.ops import Selector
from tests.helpers.people import ALICE, BOB_ON_SLACK
from tests.integration.support import RecordingNotifier, Shop, build_services
from tests.kinds import ChangeKind

KEY = SecretStr("an audit key for the tests, long enough")


def anchors_posted(chat: RecordingNotifier) -> list[str]:
    return [p.message.summary.split()[3] for p in chat.posts if p.where == "audit"]


async def test_each_executed_change_posts_the_head_and_the_trail_holds_it(shop: Shop) -> None:
    chat = RecordingNotifier()
    trail = AuditTrail(key=KEY)
    services = build_services(
        shop.engine, shop.estate, shop.clock, chat, audit=trail, audit_channel=True
    )
    dead = await shop.reads.list_dead(queue="clips", filters=DeadFilter(error_like="ffmpeg"))
    view = await services.changes.request(
        kind=ChangeKind.REDRIVE,
        queue="clips",
        selector=Selector(ids=tuple(r.id for r in dead.rows[:3])),
        reason="transcoder fixed",
        actor=ALICE,
    )
    assert anchors_posted(chat) == []  # a request changes nothing yet
    await services.changes.approve(number=view.number, actor=BOB_ON_SLACK)
    (posted,) = anchors_posted(chat)
    async with shop.engine.connect() as conn:
        head = await trail.head(conn)
        assert head is not None and str(head) == posted
        assert (await trail.verify(conn, anchors=[Anchor.parse(posted)])).ok

    # The schedule posts again only when the head moved.
    await services.scheduler.seed()
    await later_on(shop, services)
    assert anchors_posted(chat) == [posted]
    async with shop.engine.begin() as conn:
        await trail.append(
            conn, action="test.event", actor=ALICE, at=shop.clock.now, details={"n": 1}
        )
    await later_on(shop, services)
    later = anchors_posted(chat)
    assert len(later) == 2 and later[0] == posted and later[1] != posted
    async with shop.engine.connect() as conn:
        assert (await trail.verify(conn, anchors=[Anchor.parse(a) for a in later])).ok


async def later_on(shop: Shop, services: Services) -> None:
    """A quarter hour and a bit later, once the scheduler has run what came due."""
    shop.clock.advance(minutes=16)
    await services.scheduler.run_due()
