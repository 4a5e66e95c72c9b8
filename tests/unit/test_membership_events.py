"""A group's change told while its members are being read: the read under way may carry
the members from before the change, so the next question reads the group again. The
reader here stands at the platform's edge (``services.access.Reader``), answering what
the platform said when it was asked, later."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from services.access import Membership, Source

GROUP = Source("slack_usergroup", "S0APPROVE")
NOW = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


class SlowPlatform:
    """Answers with the members as they were when asked, once ``answer`` is set."""

    def __init__(self, held: set[str]) -> None:
        self.held = held
        self.asked = asyncio.Event()
        self.answer = asyncio.Event()

    async def members(self, source: Source) -> frozenset[str]:
        said = frozenset(self.held)  # what the platform held when asked
        self.asked.set()
        await self.answer.wait()
        return said


async def test_a_change_told_while_a_read_is_under_way_is_read_again() -> None:
    platform = SlowPlatform({"U0BOB"})
    membership = Membership({"slack": platform}, clock=lambda: NOW)
    reading = asyncio.create_task(membership.read(GROUP))
    await platform.asked.wait()
    platform.held.discard("U0BOB")  # bob leaves the group while it is being read
    membership.forget(GROUP)  # Slack's subteam_members_changed
    platform.answer.set()
    assert (await reading).members == {"U0BOB"}  # the read from before the change

    assert "U0BOB" not in (await membership.read(GROUP)).members
