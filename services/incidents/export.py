"""``/incident export``: the incident as a Markdown postmortem — what happened when, how
long from the fault to recovery (to when its validation passed: an incident resolved by
an override without it has no recovery time to give), each communication with its latency
or its miss, the changes made under it with who approved them, and the validation
results."""

from __future__ import annotations

from datetime import datetime
from typing import cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.db.tables import Approval, ChangeRequest
from services.incidents import housekeeping_changes, store
from services.incidents.confirm import how_validated
from services.incidents.messages import duration
from services.incidents.model import IncidentView, Lead

REQUESTS = cast(sa.Table, ChangeRequest.__table__)
APPROVALS = cast(sa.Table, Approval.__table__)


def _when(at: datetime) -> str:
    return f"{at:%Y-%m-%d %H:%M:%S} UTC"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


async def postmortem(conn: AsyncConnection, number: int) -> str:
    view = await store.view(conn, number)
    lines = [f"# {view.name}: {view.summary}", ""]
    lines += [
        f"- Scenario: {view.scenario} (runbook {view.runbook})",
        f"- Queue: {view.queue or '-'}",
        f"- Lead: {Lead.of(view).shown()}",
        f"- Fault: {f'{view.fault_at:%Y-%m-%d %H:%M:%S} UTC' if view.fault_at else 'not known'}",
        f"- Declared: {view.declared_at:%Y-%m-%d %H:%M:%S} UTC"
        + (
            f" ({duration(view.declared_at - view.fault_at)} after the fault)"
            if view.fault_at
            else ""
        ),
    ]
    lines += await _resolution(conn, view)
    lines += ["", "## Lead", "", *leads(view)]
    lines += ["", "## Communications", "", "| audience | within | due | state | told after |"]
    lines.append("|---|---|---|---|---|")
    for o in view.obligations:
        told = duration(o.latency) if o.latency is not None else "never"
        lines.append(
            f"| {o.audience} | {duration(o.within)} | {o.due_at:%H:%M:%S} UTC | {o.state} "
            f"| {told} |"
        )
    lines += ["", "## Restore order", ""]
    for i, step in enumerate(view.restore()):
        done = (
            f"done by {step.done_by} at {step.done_at:%H:%M:%S} UTC" if step.done_at else "not done"
        )
        lines.append(f"{i + 1}. {step.name}: {done}")
    lines += ["", "## Validation", ""]
    for i, step in enumerate(view.validation()):
        mark = "x" if step.state == "done" else " "
        result = f": {step.result}" if step.result else ""
        lines.append(f"- [{mark}] v{i + 1} {step.name}: {how_validated(step)}{result}")
    lines += ["", "## Changes made under this incident", ""]
    changes = (
        (
            await conn.execute(
                sa.select(REQUESTS).where(REQUESTS.c.incident == view.name).order_by(REQUESTS.c.id)
            )
        )
        .mappings()
        .all()
    )
    if not changes:
        lines.append("No change request was made under it.")
    else:
        lines += [
            "| request | kind | queue | requested by | approved by | state | rows |",
            "|---|---|---|---|---|---|---|",
        ]
        for change in changes:
            approvers = (
                (
                    await conn.execute(
                        sa.select(APPROVALS.c.person).where(
                            APPROVALS.c.request_id == change["id"],
                            APPROVALS.c.decision == "approve",
                        )
                    )
                )
                .scalars()
                .all()
            )
            lines.append(
                f"| CR-{change['id']} | {change['kind']} | {change['queue']} | "
                f"{change['requester_person']} | {', '.join(approvers) or '-'} | "
                f"{change['state']} | {change['eligible_count']} |"
            )
    lines += ["", *housekeeping_changes.lines(view, await housekeeping_changes.during(conn, view))]
    lines += ["", "## Timeline", "", "| UTC | what | who | detail |", "|---|---|---|---|"]
    for entry in sorted(view.timeline, key=lambda e: e.at):
        lines.append(
            f"| {_when(entry.at)} | {entry.kind} | {entry.actor or '-'} | {_cell(entry.text)} |"
        )
    return "\n".join(lines) + "\n"


def leads(view: IncidentView) -> list[str]:
    """Who led when: the declarer from the declaration, then each handoff (the timeline's
    ``lead`` lines) from its time, each until the next one, the resolution or now."""
    ordered = sorted(view.timeline, key=lambda e: e.at)
    declared = next((e for e in ordered if e.kind == "declared"), None)
    handoffs = [e for e in ordered if e.kind == "lead"]
    first = declared.actor if declared is not None and declared.actor else None
    spans: list[tuple[datetime, str]] = [
        (view.declared_at, f"{first or 'the declarer'} (declared it)")
    ]
    spans += [(e.at, e.text) for e in handoffs]
    out: list[str] = []
    for n, (start, what) in enumerate(spans):
        if n + 1 < len(spans):
            end = f"until {_when(spans[n + 1][0])}"
        elif view.resolved_at is not None:
            end = f"until the resolution at {_when(view.resolved_at)}"
        else:
            end = "still leading"
        out.append(f"- from {_when(start)}: {what}; {end}")
    if not handoffs:
        out.append(f"- the lead was never handed over: {Lead.of(view).shown()} led it throughout")
    return out


async def _resolution(conn: AsyncConnection, view: IncidentView) -> list[str]:
    """When it was resolved and by whom (on an override, who asked and who approved),
    and the time to recovery: to when its validation passed, where it did."""
    if view.resolved_at is None:
        return ["- Resolved: not yet"]
    what = "fault" if view.fault_at else "declaration"
    since = view.fault_at or view.declared_at
    override = await _override(conn, view)
    if override is not None:
        request, requester, approvers = override
        unvalidated = ", ".join(
            f"v{i + 1}" for i, s in enumerate(view.validation()) if s.state != "done"
        )
        return [
            f"- Resolved: {_when(view.resolved_at)}, on {request}: requested by {requester}, "
            f"approved by {', '.join(approvers) or '-'}",
            f"- From the {what} to recovery: not measured: resolved by override without "
            f"validating {unvalidated}",
        ]
    resolved = next((e for e in reversed(view.timeline) if e.kind == "resolved"), None)
    by = f", by {resolved.actor}" if resolved is not None and resolved.actor else ""
    lines = [f"- Resolved: {_when(view.resolved_at)}{by}"]
    validated = view.validated_at()
    if validated is None:  # not validated, and no override on the record
        return [*lines, f"- From the {what} to recovery: not measured: not validated"]
    return [
        *lines,
        f"- Validated: {_when(validated)} (the last validation item passed)",
        f"- From the {what} to recovery (validated): {duration(validated - since)}",
    ]


async def _override(conn: AsyncConnection, view: IncidentView) -> tuple[str, str, list[str]] | None:
    """The executed request that resolved the incident without its validation: its
    reference, who asked and who approved; None where it was resolved without one."""
    found = (
        await conn.execute(
            sa.select(REQUESTS.c.id, REQUESTS.c.requester_person)
            .where(
                REQUESTS.c.incident == view.name,
                REQUESTS.c.kind == "resolve",
                REQUESTS.c.state == "executed",
            )
            .order_by(REQUESTS.c.id.desc())
            .limit(1)
        )
    ).first()
    if found is None:
        return None
    approvers = (
        (
            await conn.execute(
                sa.select(APPROVALS.c.person)
                .where(APPROVALS.c.request_id == found[0], APPROVALS.c.decision == "approve")
                .order_by(APPROVALS.c.id)
            )
        )
        .scalars()
        .all()
    )
    return f"CR-{found[0]}", str(found[1]), [str(a) for a in approvers]
