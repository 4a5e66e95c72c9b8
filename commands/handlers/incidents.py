"""``/incident declare | notify | status | timeline | step``.

Resolving without every validation item is a change request another person approves.
Declaring is allowed only to the people who hold the runbook's declaration authority
([roles] maps the runbook's name for it to a queuebot role); everyone else is told who
may declare."""

from __future__ import annotations

from commands.auth import may_declare
from commands.catalog import spec_for
from commands.context import Invocation
from commands.deps import Deps, IncidentService
from commands.handlers.changes import actor_of, origin_of
from commands.messages.changes import change_message
from commands.model import (
    Declare,
    Export,
    IncidentCommand,
    IncidentStatus,
    IncidentTimeline,
    Notify,
    Resolve,
    StepDone,
    Validate,
)
from commands.reply import Reply
from services.errors import ConfigError, Conflict, UsageError
from services.estate.ops import Selector
from services.incidents.approvable import RESOLVE
from services.incidents.model import IncidentView
from services.incidents.report import status_message, timeline_message
from services.message import Message, Text


def _service(deps: Deps) -> IncidentService:
    if deps.incidents is None or deps.runbooks is None:
        raise ConfigError("this queuebot process runs no incidents (no runbooks were loaded)")
    return deps.incidents


async def handle_declare(cmd: Declare, inv: Invocation, deps: Deps) -> Reply:
    incidents = _service(deps)
    scenario, summary, queue = cmd.scenario, cmd.summary, cmd.queue
    if cmd.alert_group is not None and (scenario is None or summary is None):
        # what the declaration does not say, the alert's (its queue: the service's)
        alert_scenario, alert_summary, _ = await incidents.alert_context(cmd.alert_group)
        scenario, summary = scenario or alert_scenario, summary or alert_summary
    assert scenario is not None and summary is not None and deps.runbooks is not None
    runbook = deps.runbooks.get(scenario)
    await may_declare(runbook, inv, deps)
    if queue is not None and queue not in deps.reads.queue_names:
        raise UsageError(
            f"no queue {queue!r}; configured: {', '.join(deps.reads.queue_names)}",
            usage='/incident declare SCENARIO "SUMMARY" [--queue Q]',
        )
    declared = await incidents.declare(
        scenario=runbook.scenario_id,
        summary=summary,
        actor=actor_of(inv),
        queue=queue,
        origin={"platform": inv.platform, "channel": inv.channel, "thread": inv.thread},
        alert_group=cmd.alert_group,
        basis=inv.person.basis() if inv.person else (),
    )
    view = declared.incident
    if declared.linked:
        text = (
            f"{view.name} ({view.scenario}) is already open for this queue: your declaration "
            f"is on its timeline. /incident status {view.name}"
        )
        return Reply(Message(f"{view.name} is already open", (Text(text),)), ephemeral=False)
    due = ", ".join(f"{o.audience} by {o.due_at:%H:%M:%S} UTC" for o in view.obligations)
    text = (
        f"{view.name} declared ({view.scenario}), led by {view.lead or inv.account}. "
        f"Communications due: {due}. The checklist is in the incident's thread."
    )
    return Reply(Message(f"{view.name} declared", (Text(text),)), ephemeral=False)


def _naming(cmd: IncidentCommand) -> str:
    """How this command names an incident."""
    spec = spec_for(cmd)
    if any(p.field == "incident" for p in spec.positionals):
        return f"{spec.path} INC-N"
    return f"{spec.path} ... --incident INC-N"


async def _which(cmd: IncidentCommand, incidents: IncidentService) -> IncidentView:
    """The incident named (whatever its state), else the one open incident."""
    if cmd.number is not None:
        return await incidents.view(cmd.number)
    open_ = await incidents.open_incidents()
    if len(open_) == 1:
        return open_[0]
    if not open_:
        raise UsageError(f"no incident is open; name one: {_naming(cmd)}")
    names = ", ".join(f"{v.name} ({v.scenario})" for v in open_)
    raise UsageError(f"{len(open_)} incidents are open ({names}); name one: {_naming(cmd)}")


async def handle_notify(cmd: Notify, inv: Invocation, deps: Deps) -> Reply:
    incidents = _service(deps)
    view = await _which(cmd, incidents)
    after = await incidents.notify(
        number=view.number, audience=cmd.audience, text=cmd.text, actor=actor_of(inv)
    )
    obligation = next(o for o in after.obligations if o.audience == cmd.audience)
    said = (
        f"{after.name}: the message to the {cmd.audience} is queued, not yet delivered; "
        f"they are told once it is delivered (their communication is {obligation.state}, "
        f"due {obligation.due_at:%H:%M:%S} UTC). /incident status {after.name} shows it."
    )
    return Reply(Message(said, (Text(said),)), ephemeral=False)


async def handle_status(cmd: IncidentStatus, inv: Invocation, deps: Deps) -> Reply:
    view = await _which(cmd, _service(deps))
    return Reply(status_message(view))


async def handle_timeline(cmd: IncidentTimeline, inv: Invocation, deps: Deps) -> Reply:
    view = await _which(cmd, _service(deps))
    return Reply(timeline_message(view))


async def handle_step(cmd: StepDone, inv: Invocation, deps: Deps) -> Reply:
    incidents = _service(deps)
    view = await _which(cmd, incidents)
    after = await incidents.step_done(
        number=view.number, step=cmd.step, actor=actor_of(inv), result=cmd.result
    )
    return Reply(status_message(after), ephemeral=False)


async def handle_validate(cmd: Validate, inv: Invocation, deps: Deps) -> Reply:
    incidents = _service(deps)
    view = await _which(cmd, incidents)
    default = deps.reads.queue_names[0] if deps.reads.queue_names else None
    after = await incidents.validate(number=view.number, actor=actor_of(inv), default_queue=default)
    return Reply(status_message(after), ephemeral=False)


async def handle_resolve(cmd: Resolve, inv: Invocation, deps: Deps) -> Reply:
    incidents = _service(deps)
    view = await _which(cmd, incidents)
    if cmd.override:
        return await _override(cmd, view, inv, deps)
    after = await incidents.resolve(number=view.number, actor=actor_of(inv))
    text = f"{after.name} resolved. /incident export {after.name} writes the postmortem."
    return Reply(Message(f"{after.name} resolved", (Text(text),)), ephemeral=False)


async def _override(cmd: Resolve, view: IncidentView, inv: Invocation, deps: Deps) -> Reply:
    """Resolving without every validation is a change request: another person approves
    it (with the usual Approve and Reject), and the items skipped stay on the record."""
    assert cmd.reason is not None  # the command's model requires it with --override
    for pending in await deps.changes.pending():
        if pending.kind == RESOLVE and pending.incident == view.name:
            raise Conflict(
                f"{pending.ref} already asks to resolve {view.name} without its validation "
                f"(by {pending.requester}); /queue approve {pending.ref}, or /queue reject "
                f"{pending.ref} first"
            )
    request = await deps.changes.request(
        kind=RESOLVE,
        queue=view.queue,
        selector=Selector(),
        reason=cmd.reason,
        actor=actor_of(inv),
        incident=view.name,
        origin=origin_of(inv),
        delivery=inv.delivery,
    )
    return Reply(change_message(request), ephemeral=False)


EXPORT_PART = 2800  # characters per block: chat platforms cut longer ones


async def _exported(cmd: Export, inv: Invocation, incidents: IncidentService) -> IncidentView:
    """The incident named, else the newest declared in this channel (open or resolved),
    else the one open incident."""
    if cmd.number is None:
        found = await incidents.newest(platform=inv.platform, channel=inv.channel)
        if found is not None and found[1]:
            return found[0]
        try:
            return await _which(cmd, incidents)
        except UsageError as exc:
            if found is None:
                raise UsageError("no incident was ever declared; nothing to export") from exc
            newest = found[0]
            raise UsageError(
                f"{exc.message}; none was declared in this channel; the newest is "
                f"{newest.name} ({newest.state}): /incident export {newest.name}"
            ) from exc
    return await _which(cmd, incidents)


async def handle_export(cmd: Export, inv: Invocation, deps: Deps) -> Reply:
    incidents = _service(deps)
    view = await _exported(cmd, inv, incidents)
    markdown = await incidents.export(view.number)
    parts: list[str] = []
    current = ""
    for line in markdown.splitlines(keepends=True):
        if len(current) + len(line) > EXPORT_PART and current:
            parts.append(current)
            current = ""
        current += line[:EXPORT_PART]
    if current:
        parts.append(current)
    blocks = tuple(Text(part.rstrip("\n"), mono=True) for part in parts)
    return Reply(Message(f"Postmortem of {view.name}", blocks))
