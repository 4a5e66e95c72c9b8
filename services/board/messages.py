"""The board in words: one ``Message`` of headings, lines, tables and buttons, which every
adapter already renders (the console as text, Slack as blocks, Discord as content and
buttons). A request waiting for approval carries the buttons its own message has (the
same action ids), each labelled with the request it decides, since Discord draws every
button of a message together below it.

Each section is cut to its first items, the rest counted on a line that says where to
see them all, so the board stays within what every surface takes however much there is.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from datetime import datetime, timedelta

from services import button_ids
from services import format as fmt
from services.board.model import (
    ActivePlan,
    Board,
    Deadline,
    OpenIncident,
    QueueDead,
    Request,
)
from services.incidents.messages import duration
from services.message import (
    Actions,
    Block,
    Button,
    Heading,
    Message,
    Table,
    Text,
    message_json,
)
from services.plans.model import PlanState

# The cut limits. A Slack message holds at most 50 blocks (an App Home 100) and a
# Discord message 25 buttons; cut so, the whole board is at most 44 blocks and 20
# buttons, and fits every one of them:
WAITING = 10  # requests waiting for your approval: two blocks each (its line, its buttons)
OWN = 10  # your own requests waiting: rows of one table
PLANS = 10  # active plans: a block each
INCIDENTS = 10  # open incidents: a line each, in one block
QUEUES = 20  # queues: rows of one table, the most dead letters first
NAMED = 20  # of the items cut, those named on the line that counts them
BAR = 10  # a plan's bar: a cell per wave, or this many cells for a plan of more waves
FULL, EMPTY = "▰", "▱"


def board_message(board: Board) -> Message:
    who = board.person or "anyone"
    head = f"Board for {who}, {board.at:%Y-%m-%d %H:%M} UTC"
    blocks: list[Block] = [Heading(head)]
    blocks += _waiting(board)
    if board.person is not None:
        blocks += _own(board)
    blocks += _plans(board)
    blocks += _incidents(board)
    blocks += _queues(board)
    counts = [
        f"{len(board.waiting)} waiting for " + ("your approval" if board.person else "approval"),
        *([f"{len(board.own)} of yours waiting"] if board.person else []),
        f"{len(board.plans)} active plan(s)",
        f"{len(board.incidents)} open incident(s)",
    ]
    return Message(f"{head}: {', '.join(counts)}", tuple(blocks))


def digest(message: Message) -> str:
    """What a board shows, as a digest: the same exactly when every block after its
    heading is (the heading and the summary name the minute it was read, which alone is
    no change worth publishing again)."""
    shown = message_json(Message("", message.blocks[1:]))["blocks"]
    return hashlib.sha256(json.dumps(shown, sort_keys=True).encode()).hexdigest()


def _waiting(board: Board) -> list[Block]:
    title = "Waiting for your approval" if board.person else "Waiting for approval"
    blocks: list[Block] = [Heading(f"{title} ({len(board.waiting)})")]
    if not board.approver:
        return [
            *blocks,
            Text("You do not hold the approver role: no request waits for your approval."),
        ]
    if not board.waiting:
        return [*blocks, Text("Nothing is waiting.")]
    for r in board.waiting[:WAITING]:
        blocks.append(Text(_request_line(r, board.at)))
        blocks.append(
            Actions(
                (
                    Button(
                        button_ids.approve(r.number),
                        f"Approve {r.ref}",
                        "primary",
                        f"/queue approve {r.ref}",
                    ),
                    Button(
                        button_ids.reject(r.number),
                        f"Reject {r.ref}",
                        "danger",
                        f"/queue reject {r.ref}",
                    ),
                )
            )
        )
    more = len(board.waiting) - WAITING
    if more > 0:
        blocks.append(Text(f"{more:,} more waiting: /queue pending lists every one."))
    return blocks


def _request_line(r: Request, at: datetime) -> str:
    return (
        f"{r.ref}: {r.headline}. Asked by {r.requester}; {r.approvals} of {r.needed} "
        f"approval(s); expires {_when(r.expires_at, at)}. Reason: {fmt.clip(r.reason, 120)}"
    )


def _own(board: Board) -> list[Block]:
    blocks: list[Block] = [Heading(f"Your requests waiting for approval ({len(board.own)})")]
    if not board.own:
        return [*blocks, Text("None of your requests is waiting.")]
    blocks.append(
        Table(
            ("request", "what", "approvals", "expires"),
            tuple(
                (
                    r.ref,
                    fmt.clip(r.headline, 70),
                    f"{r.approvals} of {r.needed}",
                    _when(r.expires_at, board.at),
                )
                for r in board.own[:OWN]
            ),
        )
    )
    more = len(board.own) - OWN
    if more > 0:
        blocks.append(Text(f"{more:,} more of yours: /queue pending lists every one."))
    return blocks


def _plans(board: Board) -> list[Block]:
    blocks: list[Block] = [Heading(f"Active plans ({len(board.plans)})")]
    if not board.plans:
        return [*blocks, Text("No plan is running or halted.")]
    blocks += [Text(_plan_text(p)) for p in board.plans[:PLANS]]
    left = board.plans[PLANS:]
    if left:
        blocks.append(
            Text(f"{len(left):,} more: {_named(p.ref for p in left)} (/queue plan P-N shows one).")
        )
    return blocks


def progress(done: int, waves: int) -> str:
    """``▰▰▰▱▱``: a cell per wave done of those scheduled, at most ``BAR`` cells."""
    cells = min(max(waves, 1), BAR)
    filled = 0 if waves == 0 else round(cells * done / waves)
    return FULL * filled + EMPTY * (cells - filled)


def _plan_text(p: ActivePlan) -> str:
    state = "running" if p.state is PlanState.RUNNING else "HALTED"
    lines = [
        f"{p.ref} {p.queue}, {state}: {progress(p.waves_done, p.waves)} "
        f"{p.waves_done}/{p.waves} waves, {p.redriven:,}/{p.total:,} jobs redriven; "
        f"{p.succeeded:,} succeeded, {p.redead:,} dead again",
        f"now: {p.now}",
    ]
    if p.halt is not None:
        cause = p.halt.cause.removeprefix("HALTED: ") if p.halt.cause else "no reason given"
        by = p.halt.by or "queuebot"
        lines.append(f"last halt {p.halt.at:%H:%M} UTC, by {by}: {fmt.clip(cause, 240)}")
    return "\n".join(lines)


def _incidents(board: Board) -> list[Block]:
    blocks: list[Block] = [Heading(f"Open incidents ({len(board.incidents)})")]
    if not board.incidents:
        return [*blocks, Text("No incident is open.")]
    blocks.append(Text("\n".join(_incident_line(i, board.at) for i in board.incidents[:INCIDENTS])))
    left = board.incidents[INCIDENTS:]
    if left:
        blocks.append(
            Text(
                f"{len(left):,} more open: {_named(i.ref for i in left)} "
                "(/incident status INC-N shows one)."
            )
        )
    return blocks


def _incident_line(i: OpenIncident, at: datetime) -> str:
    where = f" ({i.queue})" if i.queue else ""
    told = "; ".join(_deadline(d, at) for d in i.deadlines) or "nobody to tell"
    return f"{i.ref}{where} {fmt.clip(i.summary, 60)}: lead {i.lead or 'nobody'}; {told}"


def _deadline(d: Deadline, at: datetime) -> str:
    if d.state == "told" and d.told_at is not None:
        return f"{d.audience} told at {d.told_at:%H:%M} UTC"
    if d.state == "told late" and d.told_at is not None:
        return f"{d.audience} told late, at {d.told_at:%H:%M} UTC (due {d.due_at:%H:%M} UTC)"
    if d.state == "missed":
        return f"{d.audience} missed (due {d.due_at:%H:%M} UTC)"
    return f"{d.audience} due in {duration(d.due_at - at)}"


def _queues(board: Board) -> list[Block]:
    blocks: list[Block] = [Heading("Dead letters by queue")]
    if not board.queues:
        return [*blocks, Text("No queue is configured.")]
    # those that could not be read first, then the most dead letters
    ordered = sorted(board.queues, key=lambda q: (q.now is not None, -(q.now or 0)))
    blocks.append(
        Table(
            ("queue", "dead letters now (the last hour)"),
            tuple((q.queue, _dead(q, board.at)) for q in ordered[:QUEUES]),
        )
    )
    left = ordered[QUEUES:]
    if left:
        blocks.append(
            Text(
                f"{len(left):,} more queues: {_named(q.queue for q in left)} "
                "(/queue triage --queue Q shows one)."
            )
        )
    return blocks


def _dead(q: QueueDead, at: datetime) -> str:
    if q.now is None:
        return f"could not be read: {fmt.clip(q.unread, 100)}"
    if q.before is None or q.before_at is None:
        return f"{q.now:,} (no count from an hour ago)"
    change = q.now - q.before
    moved = "no change" if change == 0 else f"{change:+,}"
    return f"{q.now:,} ({moved} in {_span(at - q.before_at)})"


def _span(span: timedelta) -> str:
    """An hour and some minutes, as "1 h" or "1 h 7 min"."""
    minutes = round(span.total_seconds() / 60)
    hours, rest = divmod(minutes, 60)
    return f"{hours} h" + (f" {rest} min" if rest else "")


def _when(moment: datetime, at: datetime) -> str:
    """A time today as HH:MM UTC, another day's with its date."""
    return f"{moment:%H:%M} UTC" if moment.date() == at.date() else fmt.when(moment)


def _named(refs: Iterable[str]) -> str:
    names = list(refs)
    shown = ", ".join(names[:NAMED])
    return shown + (", …" if len(names) > NAMED else "")
