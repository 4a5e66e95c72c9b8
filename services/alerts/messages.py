"""What alert threads say: the root message of a group, the news posted in its thread,
and the triage breakdown that comes with FailedJobsAccumulating."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from services import button_ids
from services.alerts.groups import AlertRecord, distinct_labels
from services.estate.model import Triage
from services.message import (
    Actions,
    Block,
    Button,
    Fields,
    Heading,
    Message,
    Text,
    message_from_json,
    message_json,
)
from services.triage_view import triage_message

to_json = message_json
from_json = message_from_json

MOST_LISTED = 10
HOUSEKEEPING = "housekeeping"  # the source of queuebot's housekeeping notices
# Who raised a group, by its source; any other source is Alertmanager.
_FROM = {"detector": "queuebot's own detector", HOUSEKEEPING: "queuebot's housekeeping"}


def _ago(since: datetime | None, now: datetime) -> str:
    if since is None:
        return "unknown"
    minutes = max(0, int((now - since).total_seconds() // 60))
    if minutes < 90:
        return f"{since:%H:%M} UTC ({minutes} min ago)"
    return f"{since:%Y-%m-%d %H:%M} UTC ({minutes // 60} h ago)"


def lasted(start: datetime | None, end: datetime | None) -> str:
    if start is None or end is None:
        return "unknown"
    minutes = max(0, int((end - start).total_seconds() // 60))
    return f"{minutes} min" if minutes < 90 else f"{minutes // 60} h {minutes % 60} min"


def describe_alert(record: AlertRecord, common: Mapping[str, str]) -> str:
    own = distinct_labels(record, common)
    words = record.annotations.get("summary") or record.annotations.get("description") or ""
    tag = ", ".join(f"{k}={v}" for k, v in own.items() if k != "alertname")
    name = record.labels.get("alertname", "alert")
    parts = [name + (f" ({tag})" if tag else "")]
    if words:
        parts.append(words)
    return " — ".join(parts)


def _listed(records: Sequence[AlertRecord], common: Mapping[str, str], mark: str) -> str:
    lines = [f"{mark} {describe_alert(r, common)}" for r in records[:MOST_LISTED]]
    if len(records) > MOST_LISTED:
        lines.append(f"… and {len(records) - MOST_LISTED} more")
    return "\n".join(lines)


def _not_shown_text(count: int) -> str:
    return (
        f"{count:,} more alert(s) not shown: Alertmanager left them out of its notification "
        "(the receiver's max_alerts); its own UI lists them all."
    )


def not_shown(count: int) -> Message:
    """For the thread: how many alerts of the group Alertmanager cut (truncatedAlerts)."""
    return Message(
        summary=f"{count:,} more alert(s) not shown", blocks=(Text(_not_shown_text(count)),)
    )


def root(group: Mapping[str, Any], alerts: Sequence[AlertRecord], *, now: datetime) -> Message:
    """The group's own message, kept current: firing or resolved, and how many."""
    name = str(group["alertname"])
    queue = group.get("queue")
    firing = [a for a in alerts if a.status == "firing"]
    where = f" · queue {queue}" if queue else ""
    annotations: Mapping[str, str] = group.get("annotations") or {}
    words = annotations.get("summary") or annotations.get("description")
    started = min((a.starts_at for a in alerts if a.starts_at), default=None)
    fields: list[tuple[str, str]] = []
    cut = int(group.get("truncated") or 0)
    source = str(group["source"])
    if source == HOUSEKEEPING:  # queuebot's own notices: not styled as Alertmanager's
        title, fields = _notice_head(
            name, where, alerts=alerts, firing=firing, group=group, now=now
        )
    elif firing:
        title = f"🔴 FIRING: {name}{where}"
        fields.append(("Firing", f"{len(firing)} of {len(alerts)} alert(s)"))
        if cut:
            fields.append(("Not shown", f"{cut:,} more alert(s) Alertmanager left out"))
        fields.append(
            ("Since", _ago(min((a.starts_at for a in firing if a.starts_at), default=started), now))
        )
    else:
        title = f"✅ RESOLVED: {name}{where}"
        fields.append(("Lasted", lasted(started, group.get("resolved_at") or now)))
        fields.append(("Resolved", _ago(group.get("resolved_at") or now, now)))
    fields.append(("From", _FROM.get(source) or f"Alertmanager ({group['receiver']})"))
    blocks: list[Block] = [Heading(title)]
    if words:
        blocks.append(Text(words))
    blocks.append(Fields(tuple(fields)))
    links: Mapping[str, str] = group.get("links") or {}
    shown = [f"{label}: {url}" for label, url in links.items() if url]
    if shown:
        blocks.append(Text(" · ".join(shown)))
    blocks.append(
        Text(
            "Later notices of this kind are posted in this thread."
            if source == HOUSEKEEPING
            else "Updates and the resolution are posted in this thread."
        )
    )
    scenario = (group.get("route") or {}).get("scenario")
    if firing and scenario:
        blocks.append(
            Actions(
                (
                    Button(
                        button_ids.declare(group["id"]),
                        "Declare incident",
                        style="danger",
                        command=f'/incident declare {scenario} "{name}{where}"'
                        + (f" --queue {queue}" if queue else ""),
                    ),
                )
            )
        )
    state = "firing" if firing else "resolved"
    if source == HOUSEKEEPING:
        state = f"housekeeping notice{'' if firing else ', resolved'}"
    return Message(summary=f"{name}{where}: {state}", blocks=tuple(blocks))


def _notice_head(
    name: str,
    where: str,
    *,
    alerts: Sequence[AlertRecord],
    firing: Sequence[AlertRecord],
    group: Mapping[str, Any],
    now: datetime,
) -> tuple[str, list[tuple[str, str]]]:
    """A housekeeping notice's heading and facts: its severity's colour, how many notices
    (and how many still stand, where some are resolved), since when."""
    started = min((a.starts_at for a in alerts if a.starts_at), default=None)
    # housekeeping's run summary is named "Housekeeping": not "Housekeeping notice: Housekeeping"
    what = "Housekeeping summary" if name == "Housekeeping" else f"Housekeeping notice: {name}"
    if not firing:
        resolved = group.get("resolved_at") or now
        return f"✅ {what} resolved{where}", [
            ("Lasted", lasted(started, resolved)),
            ("Resolved", _ago(resolved, now)),
        ]
    severity = next((a.labels.get("severity") for a in firing if a.labels.get("severity")), "")
    icon = {"critical": "🔴", "warning": "🟡"}.get(str(severity), "🔵")
    count = (
        f"{len(alerts)}"
        if len(firing) == len(alerts)
        else f"{len(firing)} of {len(alerts)} still standing"
    )
    return f"{icon} {what}{where}", [
        ("Notices", count),
        ("First", _ago(started, now)),
    ]


def news(
    *,
    started: Sequence[AlertRecord],
    resolved: Sequence[AlertRecord],
    common: Mapping[str, str],
    group_resolved: bool,
    refired: bool,
    lasted: str | None = None,
    not_shown: int = 0,
    notices: bool = False,
) -> Message:
    """What changed, for the thread; ``not_shown``: how many alerts of the group
    Alertmanager left out of the notification (its truncatedAlerts). ``notices``: the
    group is queuebot's housekeeping notices, which the thread calls notices, not alerts."""
    what = "notice" if notices else "alert"
    blocks: list[Block] = []
    if refired:
        blocks.append(Heading("🔴 Raised again" if notices else "🔴 Firing again"))
    if started:
        if not refired:
            more = (
                f"{len(started)} more notice(s)"
                if notices
                else f"{len(started)} more alert(s) firing"
            )
            blocks.append(Heading(f"🔴 {more}"))
        blocks.append(Text(_listed(started, common, "🔴")))
    if resolved:
        blocks.append(Heading(f"✅ {len(resolved)} {what}(s) resolved"))
        blocks.append(Text(_listed(resolved, common, "✅")))
    if group_resolved:
        blocks.append(
            Text(f"All {what}s of this group are resolved{f' after {lasted}' if lasted else ''}.")
        )
    if not_shown:
        blocks.append(Text(_not_shown_text(not_shown)))
    summary = (
        f"All {what}s resolved"
        if group_resolved
        else ("Raised again" if notices else "Firing again")
        if refired
        else f"{len(started)} {'new' if notices else 'firing'}, {len(resolved)} resolved"
    )
    return Message(summary=summary, blocks=tuple(blocks))


def triage(report: Triage, *, queue: str) -> Message:
    """The triage that comes with FailedJobsAccumulating: ``/queue triage``'s own reply
    (one renderer, so the thread and the command show one layout), with buttons for a
    fresh triage and the dead letters."""
    shown = triage_message(report)
    buttons = Actions(
        (
            Button(button_ids.triage(queue), "Triage", command=f"/queue triage --queue {queue}"),
            Button(button_ids.failed(queue), "Show failed", command=f"/queue dlq --queue {queue}"),
        )
    )
    return Message(summary=shown.summary, blocks=(*shown.blocks, buttons))


def triage_unavailable(queue: str | None, why: str) -> Message:
    what = f"of {queue} " if queue else ""
    return Message(
        summary="Triage unavailable",
        blocks=(Text(f"The triage {what}could not be read: {why}. Try /queue triage."),),
    )
