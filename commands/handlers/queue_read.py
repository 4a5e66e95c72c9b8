"""Handlers of the read-only queue commands: help, triage, show, dlq, stuck."""

from __future__ import annotations

from commands import messages
from commands.context import Invocation
from commands.deps import Deps
from commands.model import MAX_LIMIT, Dlq, Help, Show, Stuck, Triage
from commands.reply import Reply
from commands.show_lookup import find_job
from services import format as fmt
from services.estate.model import DeadFilter, JobList, JobSummary
from services.message import Block, Heading, Message, Table, Text
from services.reads.view import triage_message

__all__ = ["triage_message"]  # /queue triage's reply, shared with alert threads


async def handle_help(cmd: Help, inv: Invocation, deps: Deps) -> Reply:
    return messages.help_reply(cmd.topic, cmd.group)


async def handle_triage(cmd: Triage, inv: Invocation, deps: Deps) -> Reply:
    t = await deps.reads.triage(
        queue=cmd.queue, since=cmd.since, job_type=cmd.job_type, exact=cmd.exact
    )
    return Reply(triage_message(t))


async def handle_show(cmd: Show, inv: Invocation, deps: Deps) -> Reply:
    d, elsewhere = await find_job(deps.reads, queue=cmd.queue, job_id=cmd.job_id)
    blocks: list[Block] = [
        Heading(f"Job {d.job_id} in queue {d.queue}: {d.status} ({d.canonical.value})"),
        *([Text(elsewhere)] if elsewhere else []),
        Table(("column", "value"), tuple((k, fmt.value(v)) for k, v in d.row.items())),
    ]
    for section in d.sections:
        for row in section.rows:
            blocks.append(
                Table(
                    ("column", "value"),
                    tuple((k, fmt.value(v)) for k, v in row.items()),
                    title=section.title,
                )
            )
    if d.events:
        blocks.append(
            Table(
                ("at", "event", "message"),
                tuple(
                    (fmt.when(e.created_at), e.event_type, fmt.clip(e.message, 100))
                    for e in d.events
                ),
                title=f"Events ({len(d.events)})",
            )
        )
    elif d.events_note:
        blocks.append(Text(d.events_note))
    else:
        blocks.append(Text("No job events recorded."))
    summary = f"Job {d.job_id} in queue {d.queue}: {d.status}"
    return Reply(Message(summary, tuple(blocks)))


async def handle_dlq(cmd: Dlq, inv: Invocation, deps: Deps) -> Reply:
    filters = DeadFilter(
        error_like=cmd.error_like,
        tenant=cmd.tenant,
        reason=cmd.reason,
        job_type=cmd.job_type,
        limit=cmd.limit,
    )
    found = await deps.reads.list_dead(queue=cmd.queue, filters=filters)
    queue = cmd.queue or deps.reads.queue_names[0]
    return Reply(
        _listing(
            f"Dead letters in queue {queue}",
            found,
            empty="No dead-lettered or failed jobs match.",
            unit="dead letters",
            more=["narrow them with a filter (/queue help dlq)", _more_with_limit(found)],
        )
    )


async def handle_stuck(cmd: Stuck, inv: Invocation, deps: Deps) -> Reply:
    found = await deps.reads.list_stuck(queue=cmd.queue, limit=cmd.limit)
    queue = cmd.queue or deps.reads.queue_names[0]
    return Reply(
        _listing(
            f"Stuck jobs in queue {queue}",
            found,
            empty="Nothing is stuck: every claimed job is making progress.",
            unit="stuck jobs",
            more=[_more_with_limit(found)],
        )
    )


def _more_with_limit(found: JobList) -> str | None:
    if len(found.rows) >= MAX_LIMIT:
        return None
    return f"list more with --limit (at most {MAX_LIMIT})"


def _listing(
    title: str, found: JobList, *, empty: str, unit: str, more: list[str | None]
) -> Message:
    if not found.rows:
        return Message(f"{title}: none", (Heading(title), Text(empty)))
    shown = len(found.rows)
    head = f"{title}: {fmt.count(found.total)}" + (
        f" (showing {shown})" if shown < found.total else ""
    )
    has_msg = any(r.message_id for r in found.rows)
    columns = (
        "job",
        *(("message",) if has_msg else ()),
        "status",
        "group",
        "tries",
        "at",
        "reason / error",
    )
    rows = tuple(_listing_row(r, has_msg) for r in found.rows)
    blocks: list[Block] = [Heading(head), Table(columns, rows, numeric=(4 if has_msg else 3,))]
    unlisted = fmt.not_listed(shown, found.total, unit)
    if unlisted:
        ways = " or ".join(w for w in more if w)
        blocks.append(Text(f"{unlisted}" + (f": {ways}" if ways else "")))
    return Message(head, tuple(blocks))


def _listing_row(r: JobSummary, has_msg: bool) -> tuple[str, ...]:
    detail = (
        r.note
        or " ".join(p for p in (r.reason, fmt.clip(r.error, 70) if r.error else None) if p)
        or "-"
    )
    return (
        r.id,
        *((r.message_id or "-",) if has_msg else ()),
        r.status,
        r.group or "-",
        fmt.value(r.attempts),
        fmt.when(r.at),
        detail,
    )
