"""The board on Discord, as a channel's members meet it: one status message in
``[discord] board_channel``, the board for anyone, posted once and then edited in place on
every change (a restart edits the same message; one deleted is posted again), its
sections as embeds within Discord's limits (the local fake Discord refuses what Discord
would). The app is built as serve's worker builds it, its relay run by the test on a
clock the test moves. On SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.fake_discord import FakeDiscord, StoredMessage
from testkit.fake_slack import FakeSlack
from tests.helpers.people import SLACK_ALICE, SLACK_BOB
from tests.integration.test_board_homes import BOARD_CHANNEL, homes_app


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with FakeSlack().start() as fake:
        yield fake


@pytest.fixture
def discord() -> Iterator[FakeDiscord]:
    with FakeDiscord().start() as fake:
        yield fake


def board(discord: FakeDiscord) -> StoredMessage:
    """The one message in the board's channel."""
    shown = discord.channel_messages(BOARD_CHANNEL)
    assert len(shown) == 1, [m.text() for m in shown]
    return shown[0]


async def test_the_board_is_posted_once_then_edited_in_place(
    demo_db_url: str, tmp_path: Path, slack: FakeSlack, discord: FakeDiscord
) -> None:
    async with homes_app(demo_db_url, tmp_path, slack, discord) as homes:
        ref = await homes.request(SLACK_ALICE)
        await homes.relay(seconds=2.0)
        posted = board(discord)
        text = posted.text()
        assert "Board for anyone" in text
        assert "Waiting for approval (1)" in text and ref in text
        assert "your approval" not in text and "Your requests" not in text
        number = ref.removeprefix("CR-")
        assert posted.custom_ids == [f"cr:approve:{number}", f"cr:reject:{number}"]
        assert len(posted.embeds) <= 10

        said = await homes.typed(f"/queue approve {ref}", SLACK_BOB)
        assert "approved" in said.lower(), said
        await homes.relay(seconds=2.0)
        edited = board(discord)
        assert edited.id == posted.id and edited.edits == 1
        assert ref not in edited.text() and "Nothing is waiting." in edited.text()
        assert edited.custom_ids == []

    async with homes_app(demo_db_url, tmp_path, slack, discord) as again:  # a restart
        ref = await again.request(SLACK_ALICE)
        await again.relay(seconds=2.0)
        kept = board(discord)
        assert kept.id == posted.id and kept.edits == 2 and ref in kept.text()

        discord.delete_message(kept.id)  # someone deleted it: posted again
        await again.typed(f"/queue approve {ref}", SLACK_BOB)
        await again.relay(seconds=2.0)
        reposted = board(discord)
        assert reposted.id != kept.id and ref not in reposted.text()
        await again.request(SLACK_ALICE)
        await again.relay(seconds=2.0)
        assert board(discord).id == reposted.id  # and edited in place from then on
