"""The console's notifier: what it prints for a post and an update (bot/console.py)."""

from __future__ import annotations

import io

from bot.console import ConsoleNotifier
from services.message import Message, Text


async def test_message_refs_do_not_collide_across_sessions() -> None:
    """A plan's message may be updated by a later process than the one that posted it: a
    new session's own posts must not take the numbers of an earlier session's."""
    message = Message("hello", (Text("hello"),))
    first, second = io.StringIO(), io.StringIO()
    earlier_notifier = ConsoleNotifier(first)
    earlier = [(await earlier_notifier.post(channel="ops", message=message))[0] for _ in range(3)]
    later_notifier = ConsoleNotifier(second)
    await later_notifier.update(ref=earlier[0], message=message)
    later = [(await later_notifier.post(channel="ops", message=message))[0] for _ in range(3)]
    assert len({r.message_id for r in earlier + later}) == 6
    printed = second.getvalue()
    assert f"(message {earlier[0].message_id} updated)" in printed
    assert f"(message {later[0].message_id})" in printed
