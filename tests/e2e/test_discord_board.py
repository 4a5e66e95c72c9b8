"""The Discord status board end to end: the real `queuebot serve` (on PostgreSQL its
background worker edits the board over REST) with `[discord] board_channel` set, its REST
and gateway pointed at the local fake Discord. A request asked on Discord appears on the
board within 5 s; approved with the board's own button (answered to whoever clicked, the
board's message never rewritten with the decision), the board is edited in place (one
message in the channel) and no longer shows it."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from testkit.fake_discord import APPLICATION_ID, EPHEMERAL, FakeDiscord, StoredMessage
from testkit.fake_slack import FakeSlack
from tests.e2e.serving import demo_database
from tests.e2e.test_discord import EXTRA, GUILD, Stack, answered, failed_ids, serving
from tests.e2e.test_late_answers import orphans, row
from tests.helpers.people import DISCORD_ALICE, DISCORD_BOB

BOARD = "200000000000000077"
CHANNELS = ("200000000000000001", "200000000000000009", BOARD)
WITHIN = 5.0


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stack]:
    extra = EXTRA.replace(f'guild = "{GUILD}"', f'guild = "{GUILD}"\nboard_channel = "{BOARD}"')
    with (
        demo_database(request.param, tmp_path) as db_url,
        FakeDiscord(channels=CHANNELS).start() as fake,
        FakeSlack().start() as slack,
        serving(fake, slack, tmp_path, db_url, extra=extra) as served,
    ):
        yield Stack(fake, slack, served, db_url, tmp_path)


def board(fake: FakeDiscord) -> StoredMessage | None:
    shown = [m for m in fake.channel_messages(BOARD) if not m.flags & EPHEMERAL]  # for all
    assert len(shown) <= 1, [m.text() for m in shown]  # one message, edited in place
    return shown[0] if shown else None


def until(what: str, check: object, timeout: float = WITHIN) -> None:
    started = time.monotonic()
    while not check():  # type: ignore[operator]
        assert time.monotonic() - started < timeout, f"not within {timeout} s: {what}"
        time.sleep(0.05)


def test_the_board_shows_a_request_and_is_edited_in_place_once_approved(stack: Stack) -> None:
    fake = stack.fake
    ids = failed_ids(stack, "spawn_ram")
    asked = fake.command(
        "queue",
        "requeue",
        {"ids": ids[0], "queue": "workers", "reason": "RAM freed"},
        user=DISCORD_ALICE,
    )
    text = answered(fake, asked)
    found = re.search(r"CR-(\d+)", text)
    assert found, text
    ref, number = found.group(0), found.group(1)
    # serve's worker may still be starting on PostgreSQL: the first post may take longer
    until(f"{ref} on the board", lambda: (m := board(fake)) is not None and ref in m.text(), 30)
    posted = board(fake)
    assert posted is not None
    assert "Waiting for approval (1)" in posted.text()
    assert f"cr:approve:{number}" in posted.custom_ids

    clicked = fake.click(f"cr:approve:{number}", message_id=posted.id, user=DISCORD_BOB)
    fake.wait_until(lambda: bool(clicked.followups))  # told privately, the board left as it is
    told = clicked.followups[0]
    assert told.flags & EPHEMERAL and "approved by bob" in told.text(), told.text()
    until(f"{ref} gone from the board", lambda: ref not in (board(fake) or posted).text())
    edited = board(fake)
    assert edited is not None and edited.id == posted.id
    assert "Nothing is waiting." in edited.text()


def test_a_board_click_finished_by_a_restarted_serve_is_answered_to_the_clicker_alone(
    tmp_path: Path,
) -> None:
    """Bob approves on the board and the process that wrote his click down dies before
    answering: the serve started after it finishes the approval and answers on the click's
    token, privately, as the live path does; the board is not answered on in public."""
    extra = EXTRA.replace(f'guild = "{GUILD}"', f'guild = "{GUILD}"\nboard_channel = "{BOARD}"')
    with (
        demo_database("sqlite", tmp_path) as db_url,
        FakeDiscord(channels=CHANNELS).start() as fake,
        FakeSlack().start() as slack,
    ):
        with serving(fake, slack, tmp_path, db_url, extra=extra) as served:
            stack = Stack(fake, slack, served, db_url, tmp_path)
            ids = failed_ids(stack, "spawn_ram")
            asked = fake.command(
                "queue",
                "requeue",
                {"ids": ids[0], "queue": "workers", "reason": "RAM freed"},
                user=DISCORD_ALICE,
            )
            found = re.search(r"CR-(\d+)", answered(fake, asked))
            assert found
            ref, number = found.group(0), found.group(1)
            until(f"{ref} on the board", lambda: ref in (((m := board(fake)) and m.text()) or ""))
            posted = board(fake)
            assert posted is not None
        # the click reaches no serve: the one that took it wrote it down and was killed
        # before it did the work (the ledger row below is what it left)
        clicked = fake.click(
            f"cr:approve:{number}", message_id=posted.id, user=DISCORD_BOB, dispatch=False
        )
        seen = datetime.now(UTC) - timedelta(minutes=1)  # its owner's claim long stale
        orphans(
            db_url,
            [
                row(
                    f"discord:interaction:{clicked.id}",
                    {
                        "platform": "discord",
                        "where": f"Discord button cr:approve:{number}",
                        "user": DISCORD_BOB,
                        "channel": BOARD,
                        "application_id": APPLICATION_ID,
                        "token": clicked.token,
                        "component": True,
                        "private": True,
                        "group": None,
                        "name": None,
                        "text": None,
                        "values": {},
                        "action_id": f"cr:approve:{number}",
                        "roles": None,
                    },
                    state="claimed",
                    ago=datetime.now(UTC) - seen,
                )
            ],
        )
        with serving(fake, slack, tmp_path, db_url, extra=extra):
            fake.wait_until(lambda: bool(clicked.followups), 30)
            told = clicked.followups[0]
            assert "approved by bob" in told.text(), told.text()
            assert told.flags & EPHEMERAL, "a board click's answer was shown to the channel"
            until(f"{ref} gone from the board", lambda: ref not in (board(fake) or posted).text())
        public = [m for m in fake.channel_messages(BOARD) if not m.flags & EPHEMERAL]
        assert [m.id for m in public] == [posted.id]  # the board alone, edited in place
