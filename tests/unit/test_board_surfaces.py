"""The board as each surface shows it, at sizes past every cut: a Slack Home tab (read
back through slack_sdk's own view models, which refuse what Slack refuses) and a Discord
status message's embeds (10 at most, 6,000 characters across them, 4,096 a description),
each list cut with a line counting the rest and naming the command that shows them. And
the digest a refresh compares: the same board read a minute later is no change."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bot.discord.board import board_embeds
from bot.slack.home import home_view
from services.board import Board, board_message
from services.board.messages import digest
from services.board.model import ActivePlan, Deadline, Halt, OpenIncident, QueueDead, Request
from services.plans.model import PlanState
from testkit.slack_views import check_view

AT = datetime(2026, 12, 7, 20, 0, tzinfo=UTC)


def huge(person: str | None) -> Board:
    requests = tuple(
        Request(n, "requeue 2 row(s) in queue workers " + "x" * 200, "alice", 0, 1,
                AT + timedelta(hours=1), "because " * 40)
        for n in range(1, 501)
    )  # fmt: skip
    plans = tuple(
        ActivePlan(n, f"queue-{n}", PlanState.HALTED, 3, 9, 35, 725, 15, 2, "wave 2 " * 30,
                   Halt(AT, "bob", "the fix did not hold " * 30))
        for n in range(1, 31)
    )  # fmt: skip
    incidents = tuple(
        OpenIncident(n, "jobs stopped " * 20, "workers", "dora",
                     tuple(Deadline(f"audience-{a}", "due", AT + timedelta(minutes=a))
                           for a in range(12)))
        for n in range(1, 31)
    )  # fmt: skip
    queues = tuple(QueueDead(f"q{n}", n * 10, n * 9, AT - timedelta(hours=1)) for n in range(60))
    return Board(AT, person, True, requests, requests if person else (), plans, incidents, queues)


def test_a_home_of_500_requests_is_a_view_slack_takes() -> None:
    view = home_view(board_message(huge("bob")))
    kept = check_view(view)  # raises where Slack would refuse it
    assert len(kept["blocks"]) <= 100
    text = str(view)
    assert "490 more waiting: /queue pending lists every one." in text
    assert "490 more of yours: /queue pending lists every one." in text
    assert "20 more: P-11, P-12" in text and "/queue plan P-N shows one" in text
    assert "20 more open: INC-11" in text and "/incident status INC-N shows one" in text
    assert all(len(b["text"]["text"]) <= 3000 for b in view["blocks"] if b["type"] == "section")


def test_a_board_of_500_requests_fits_one_discord_message() -> None:
    message = board_message(huge(None))
    content, embeds = board_embeds(message)
    assert content.startswith("**Board for anyone")
    assert len(embeds) <= 10
    size = sum(len(e["title"]) + len(e["description"]) for e in embeds)
    assert size <= 6000
    assert all(len(e["description"]) <= 4096 and len(e["title"]) <= 256 for e in embeds)
    assert [e["title"] for e in embeds] == [
        "Waiting for approval (500)",
        "Active plans (30)",
        "Open incidents (30)",
        "Dead letters by queue",
    ]
    assert any("more line(s): /queue board shows them all" in e["description"] for e in embeds)


def test_the_same_board_a_minute_later_has_the_same_digest() -> None:
    """Only the heading names the minute; a countdown ("due in 12 min") or a trend's span
    that moved is a change, and so is a request more or less."""
    told = (OpenIncident(1, "jobs stopped", "workers", "dora", (Deadline("ops", "told", AT, AT),)),)
    board = Board(AT, "bob", True, huge("bob").waiting[:3], (), (), told, (QueueDead("q", 4),))
    later = Board(AT + timedelta(minutes=1), "bob", True, board.waiting, (), (), told, board.queues)
    assert board_message(board).blocks[0] != board_message(later).blocks[0]  # the heading
    assert digest(board_message(board)) == digest(board_message(later))
    fewer = Board(AT, "bob", True, board.waiting[1:], (), (), told, board.queues)
    assert digest(board_message(fewer)) != digest(board_message(board))
