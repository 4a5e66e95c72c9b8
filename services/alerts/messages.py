"""What alert threads say: the root message of a group, the news posted in its thread,
and the triage breakdown that comes with FailedJobsAccumulating.

How a thread speaks depends on who raised its group (Alertmanager, queuebot's own
detectors, queuebot's housekeeping notices): that is a ``Voice``, one record per source in
``VOICES``, and the messages below read it instead of asking the source."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from services import button_ids
from services.alerts.model import (
    DETECTOR,
    HOUSEKEEPING,
    AlertGroup,
    AlertRecord,
    distinct_labels,
)
from services.estate.model import Triage
from services.message import (
    Actions,
    Block,
    Button,
    Fields,
    Heading,
    Message,
    Text,
)
from services.reads.view import triage_message

MOST_LISTED = 10


@dataclass(frozen=True)
class Voice:
    """How the thread of a group speaks, by who raised it."""

    origin: str | None = None  # the root's "From"; None: Alertmanager and its receiver
    # queuebot's own notices are not styled as Alertmanager's alerts: the root heads them
    # by severity and counts the notices standing
    notices: bool = False
    noun: str = "alert"  # what the thread calls one of the group's alerts
    title: str = ""  # a notice's title, before its name
    titles: Mapping[str, str] = field(default_factory=dict)  # by name, instead of title
    state: tuple[str, str] = ("firing", "resolved")  # the root's summary: firing, resolved
    thread_note: str = "Updates and the resolution are posted in this thread."
    refired: str = "Firing again"  # news: the group fired again
    more: str = "more alert(s) firing"  # news: this many more ...
    new: str = "firing"  # news summary: this many ..., this many resolved

    def notice_title(self, name: str) -> str:
        return self.titles.get(name) or f"{self.title}: {name}"


ALERTMANAGER = Voice()
VOICES = {
    DETECTOR: Voice(origin="queuebot's own detector"),
    HOUSEKEEPING: Voice(
        origin="queuebot's housekeeping",
        notices=True,
        noun="notice",
        title="Housekeeping notice",
        # housekeeping's run summary: not "Housekeeping notice: Housekeeping"
        titles={"Housekeeping": "Housekeeping summary"},
        state=("housekeeping notice", "housekeeping notice, resolved"),
        thread_note="Later notices of this kind are posted in this thread.",
        refired="Raised again",
        more="more notice(s)",
        new="new",
    ),
}


def voice(source: str) -> Voice:
    """How the thread of a group raised by ``source`` speaks (any source not named in
    ``VOICES`` is Alertmanager)."""
    return VOICES.get(source, ALERTMANAGER)


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


def root(group: AlertGroup, *, now: datetime) -> Message:
    """The group's own message, kept current: firing or resolved, and how many."""
    alerts = list(group.alerts.values())
    speaks = voice(group.source)
    name = group.alertname
    queue = group.queue
    firing = group.firing
    where = f" · queue {queue}" if queue else ""
    words = group.annotations.get("summary") or group.annotations.get("description")
    started = group.started_at
    fields: list[tuple[str, str]] = []
    cut = group.truncated
    if speaks.notices:
        title, fields = _notice_head(
            speaks.notice_title(name), where, alerts=alerts, firing=firing, group=group, now=now
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
        fields.append(("Lasted", lasted(started, group.resolved_at or now)))
        fields.append(("Resolved", _ago(group.resolved_at or now, now)))
    fields.append(("From", speaks.origin or f"Alertmanager ({group.receiver})"))
    blocks: list[Block] = [Heading(title)]
    if words:
        blocks.append(Text(words))
    blocks.append(Fields(tuple(fields)))
    shown = [f"{label}: {url}" for label, url in group.links.items() if url]
    if shown:
        blocks.append(Text(" · ".join(shown)))
    blocks.append(Text(speaks.thread_note))
    scenario = group.route.scenario
    if firing and scenario:
        blocks.append(
            Actions(
                (
                    Button(
                        button_ids.declare(group.id),
                        "Declare incident",
                        style="danger",
                        command=f'/incident declare {scenario} "{name}{where}"'
                        + (f" --queue {queue}" if queue else ""),
                    ),
                )
            )
        )
    state = speaks.state[0] if firing else speaks.state[1]
    return Message(summary=f"{name}{where}: {state}", blocks=tuple(blocks))


def _notice_head(
    what: str,
    where: str,
    *,
    alerts: Sequence[AlertRecord],
    firing: Sequence[AlertRecord],
    group: AlertGroup,
    now: datetime,
) -> tuple[str, list[tuple[str, str]]]:
    """A notice's heading (``what``: its title) and facts: its severity's colour, how
    many notices (and how many still stand, where some are resolved), since when."""
    started = min((a.starts_at for a in alerts if a.starts_at), default=None)
    if not firing:
        resolved = group.resolved_at or now
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
    voice: Voice = ALERTMANAGER,
) -> Message:
    """What changed, for the thread; ``not_shown``: how many alerts of the group
    Alertmanager left out of the notification (its truncatedAlerts); ``voice``: how the
    thread speaks (housekeeping's calls its alerts notices)."""
    what = voice.noun
    blocks: list[Block] = []
    if refired:
        blocks.append(Heading(f"🔴 {voice.refired}"))
    if started:
        if not refired:
            blocks.append(Heading(f"🔴 {len(started)} {voice.more}"))
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
        else voice.refired
        if refired
        else f"{len(started)} {voice.new}, {len(resolved)} resolved"
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
