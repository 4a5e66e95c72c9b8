"""However much is waiting, the board stays within what each surface takes: 500 requests
waiting, 500 of the person's own, 500 plans, 500 incidents and 500 queues make a board
of at most 50 Slack blocks (a message's limit; an App Home takes 100), every request's
buttons right under its line, at most 25 buttons for Discord, and a line per section
that counts what was left out and says where to see it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bot.discord.render import MAX_PER_ROW, MAX_ROWS, usable_buttons
from bot.slack.render import MAX_BLOCKS, block, blocks
from services.board import Board, board_message
from services.board.messages import INCIDENTS, OWN, PLANS, QUEUES, WAITING, progress
from services.board.model import (
    ActivePlan,
    Deadline,
    Halt,
    OpenIncident,
    QueueDead,
    Request,
)
from services.message import Actions, Table, Text
from services.plans.model import PlanState

AT = datetime(2026, 12, 7, 13, 20, tzinfo=UTC)
MANY = 500


def request(n: int, requester: str) -> Request:
    return Request(
        number=n,
        headline=f"staged redrive of {n:,} dead letter(s) in queue clips",
        requester=requester,
        approvals=0,
        needed=1,
        expires_at=AT + timedelta(minutes=30),
        reason="OOM fix deployed " * 20,
    )


def full_board() -> Board:
    return Board(
        at=AT,
        person="bob",
        approver=True,
        waiting=tuple(request(n, "alice") for n in range(1, MANY + 1)),
        own=tuple(request(n, "bob") for n in range(MANY + 1, 2 * MANY + 1)),
        plans=tuple(
            ActivePlan(
                number=n,
                queue=f"queue-{n}",
                state=PlanState.HALTED,
                waves_done=3,
                waves=12,
                redriven=1_200,
                total=20_000,
                succeeded=1_150,
                redead=50,
                now="halted in wave 3 of 11 (40 jobs); wave 4 of 11 (80 jobs) has not started",
                halt=Halt(AT, None, "HALTED: 50 job(s) of wave 3 re-entered the dead-letter "),
            )
            for n in range(1, MANY + 1)
        ),
        incidents=tuple(
            OpenIncident(
                number=n,
                summary="transcoder times out on every clip longer than ten minutes " * 3,
                queue="clips",
                lead="dora",
                deadlines=(
                    Deadline("operators", "told", AT, AT - timedelta(minutes=3)),
                    Deadline("actors", "due", AT + timedelta(minutes=12)),
                    Deadline("customers", "missed", AT - timedelta(minutes=1)),
                ),
            )
            for n in range(1, MANY + 1)
        ),
        queues=tuple(
            QueueDead(f"queue-{n}", n, n - 30, AT - timedelta(hours=1)) for n in range(MANY)
        ),
    )


def test_five_hundred_of_everything_stay_within_every_surface() -> None:
    message = board_message(full_board())
    drawn = [block(b) for b in message.blocks]
    assert len(drawn) <= MAX_BLOCKS <= 100  # nothing for the renderer to leave out
    assert blocks(message) == drawn
    buttons = [b for x in message.blocks if isinstance(x, Actions) for b in x.buttons]
    assert len(buttons) == 2 * WAITING <= MAX_ROWS * MAX_PER_ROW
    assert usable_buttons(message.blocks) == tuple(buttons)  # Discord draws every one
    lines = [b.text for b in message.blocks if isinstance(b, Text)]
    assert f"{MANY - WAITING} more waiting: /queue pending lists every one." in lines
    assert f"{MANY - OWN} more of yours: /queue pending lists every one." in lines
    assert any(t.startswith(f"{MANY - PLANS} more: P-11, P-12,") for t in lines)
    assert any(t.startswith(f"{MANY - INCIDENTS} more open: INC-11,") for t in lines)
    assert any(t.startswith(f"{MANY - QUEUES} more queues: queue-") for t in lines)


def test_each_request_is_followed_by_its_own_buttons() -> None:
    message = board_message(full_board())
    shown = list(message.blocks)
    for i, b in enumerate(shown):
        if isinstance(b, Actions):
            line = shown[i - 1]
            assert isinstance(line, Text)
            ref = line.text.split(":", 1)[0]
            assert [x.label for x in b.buttons] == [f"Approve {ref}", f"Reject {ref}"]
            number = ref.removeprefix("CR-")
            assert [x.action_id for x in b.buttons] == [
                f"cr:approve:{number}",
                f"cr:reject:{number}",
            ]


def test_the_queues_with_the_most_dead_letters_come_first() -> None:
    message = board_message(full_board())
    (table,) = [b for b in message.blocks if isinstance(b, Table) and "queue" in b.columns]
    assert [row[0] for row in table.rows][:3] == ["queue-499", "queue-498", "queue-497"]
    assert table.rows[0][1] == "499 (+30 in 1 h)"


def test_a_plans_bar_has_a_cell_per_wave_up_to_ten() -> None:
    assert progress(3, 5) == "▰▰▰▱▱"
    assert progress(0, 1) == "▱"
    assert progress(6, 12) == "▰▰▰▰▰▱▱▱▱▱"
    assert progress(12, 12) == "▰" * 10
