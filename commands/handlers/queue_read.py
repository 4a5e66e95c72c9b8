"""Handlers of the read-only queue commands: help, triage, show (by ID or by its
arguments), dlq, stuck."""

from __future__ import annotations

from dataclasses import replace

from commands import messages
from commands.context import Invocation
from commands.deps import Deps
from commands.model import MAX_LIMIT, Dlq, Help, Show, Stuck, Triage
from commands.reply import Reply
from commands.show_lookup import ArgsLookup, find_by_args, find_job
from services import format as fmt
from services.estate.args_like import COUNTED
from services.estate.model import DeadFilter, JobDetail, JobList, JobSummary
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
    if cmd.args_like is not None:
        found = await find_by_args(deps.reads, queue=cmd.queue, text=cmd.args_like)
        if found.job is not None:
            note = f"The one job in queue {found.queue} whose arguments contain {cmd.args_like!r}."
            return Reply(_detail(found.job, note))
        return Reply(_args_listing(found))
    assert cmd.job_id is not None  # the model takes an ID or --args-like
    d, elsewhere = await find_job(deps.reads, queue=cmd.queue, job_id=cmd.job_id)
    return Reply(_detail(d, elsewhere))


def _detail(d: JobDetail, note: str | None) -> Message:
    """One job as /queue show ID shows it, with a note above its row where there is one."""
    blocks: list[Block] = [
        Heading(f"Job {d.job_id} in queue {d.queue}: {d.status} ({d.canonical.value})"),
        *([Text(note)] if note else []),
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
    return Message(summary, tuple(blocks))


def _args_listing(lookup: ArgsLookup) -> Message:
    """/queue show --args-like when it does not come down to one job: the matches listed
    with the part of their arguments that matched and how to narrow them, or none and
    where it looked."""
    found, queue, text = lookup.found, lookup.queue, lookup.found.text
    if not found.rows:
        title = f"No job in queue {queue} has arguments containing {text!r}"
        blocks: list[Block] = [
            Heading(title),
            Text(
                "The arguments are matched as the database prints them (JSON as its text), "
                "ignoring case."
            ),
        ]
        if lookup.not_looked:
            blocks.append(
                Text(
                    f"Only queue {queue} (the default queue) was looked in; to look in "
                    f"another ({', '.join(lookup.not_looked)}), add --queue NAME."
                )
            )
        return Message(title, tuple(blocks))
    many = f"More than {COUNTED:,}" if found.capped else fmt.count(found.counted)
    title = f"{many} jobs in queue {queue} have arguments containing {text!r}"
    rows = tuple((r.id, r.status, r.group or "-", r.excerpt) for r in found.rows)
    blocks = [Heading(title), Table(("job", "state", "type", "arguments"), rows)]
    if found.more:
        at_least = "at least " if found.capped else ""
        blocks.append(Text(f"…and {at_least}{fmt.count(found.more)} more, not listed."))
    blocks.append(
        Text(
            "Narrow it with a longer or more distinctive part of the arguments (--args-like "
            f'"..."), or show one of them by its ID: /queue show {found.rows[0].id} '
            f"--queue {queue}"
        )
    )
    return Message(title, tuple(blocks))


async def handle_dlq(cmd: Dlq, inv: Invocation, deps: Deps) -> Reply:
    filters = DeadFilter(
        error_like=cmd.error_like,
        tenant=cmd.tenant,
        reason=cmd.reason,
        job_type=cmd.job_type,
        limit=cmd.limit,
        args_like=cmd.args_like,
    )
    if cmd.from_plan is not None:
        return await _dlq_from_plan(cmd.from_plan, cmd.queue, filters, deps)
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


async def _dlq_from_plan(plan: int, queue: str | None, filters: DeadFilter, deps: Deps) -> Reply:
    """The plan's jobs that are dead again now (in the plan's queue unless one is named),
    with the other filters applied to them."""
    again = await deps.plans.dead_again(number=plan, queue=queue)
    title = f"P-{plan}'s jobs dead again in queue {again.queue}"
    if not again.jobs:
        text = (
            f"No job of P-{plan} is dead again now (of the {fmt.count(again.redriven)} it "
            f"redrove). /queue plan P-{plan} shows how they ended."
        )
        return Reply(Message(f"{title}: none", (Heading(title), Text(text))))
    found = await deps.reads.list_dead(
        queue=again.queue, filters=replace(filters, job_ids=again.jobs)
    )
    empty = f"None of P-{plan}'s {fmt.count(len(again.jobs))} job(s) dead again match the filters."
    return Reply(
        _listing(
            title,
            found,
            empty=empty,
            unit="dead letters",
            more=[_more_with_limit(found)],
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
        found.attempts_label,
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
