"""The incident use cases: declare, notify an audience, mark a restore step or a
validation done, and the timers (reminders, then escalation at the deadline).

Each use case is one transaction: the incident's rows, its timeline, its audit event,
its scheduled timers and its chat posts (through the outbox) commit together, so a
declaration is never half made and a post never reports what did not happen. The timers
live in the durable scheduler: they survive restarts and fire once across replicas.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services import outbox as relay
from services import scheduler
from services.alerts.model import AlertRecord
from services.alerts.store import GROUPS
from services.audit import Actor, AuditTrail, NewEvent, incident_match
from services.audit.anchors import Anchors
from services.audit.incident_match import declared_obligation
from services.config.incidents import OPERATORS, IncidentsConfig
from services.db import reading, transaction
from services.errors import Conflict, NotFound, NotReadyToResolve, OutOfOrder, UsageError
from services.estate.estate import Estate
from services.incidents import checks, delivery, messages, store
from services.incidents.audiences import Reach
from services.incidents.confirm import MEASURED_BY, refuse_if_measured_failing
from services.incidents.export import postmortem
from services.incidents.model import IncidentView, ObligationView, number_text
from services.incidents.store import INCIDENTS, OBLIGATIONS, STEPS
from services.message import message_json
from services.notify import MessageRef
from services.outbox import Outbox
from services.runbooks import Runbook, fill_draft
from services.scheduler import FollowUp

log = logging.getLogger("queuebot.incidents")
INCIDENT_POST = "incident.post"  # the outbox kind of an incident's posts
REMIND = incident_match.REMIND  # the timers' kinds, which audit verify reads too
DEADLINE = incident_match.DEADLINE
SYNTHETIC = "synthetic-job"
SYSTEM = Actor.system("incident")


@dataclass(frozen=True)
class Declared:
    incident: IncidentView
    linked: bool  # an open incident of the scenario and queue existed: this is it


def subject(number: int) -> str:
    return f"incident:{number}"


class Incidents:
    def __init__(
        self,
        *,
        engine: AsyncEngine,
        clock: Callable[[], datetime],
        outbox: Outbox,
        audit: AuditTrail,
        config: IncidentsConfig,
        runbook: Callable[[str], Runbook],
        authority: Callable[[Runbook], Sequence[str]],
        estate: Estate | None = None,
        anchors: Anchors | None = None,
        channels: Collection[str] = (),
    ) -> None:
        """``runbook`` finds a scenario's runbook (NotFound lists the known ones);
        ``authority`` names the people who hold a runbook's declaration authority;
        ``anchors`` posts the trail's head to the audit channel after each incident
        event (None: no audit channel); ``channels``: the ``[channels]`` names that have
        an id on some platform (an audience none of whose channels is among them is told
        nowhere, so its runbook is not declared)."""
        self.engine = engine
        self.clock = clock
        self.outbox = outbox
        self.audit = audit
        self.config = config
        self.runbook = runbook
        self.authority = authority
        self.estate = estate
        self.anchors = anchors
        self.reach = Reach(config, frozenset(channels))

    # -- declaring -----------------------------------------------------------------

    async def declare(
        self,
        *,
        scenario: str,
        summary: str,
        actor: Actor,
        queue: str | None = None,
        origin: Mapping[str, Any] | None = None,
        alert_group: int | None = None,
    ) -> Declared:
        runbook = self.runbook(scenario)
        self.reach.refuse_declaring(runbook)
        now = self.clock()
        async with transaction(self.engine, subject="the incident") as conn:
            fault_at: datetime | None = None
            if alert_group is not None:
                queue, fault_at = await self._from_alert(conn, alert_group, queue)
            existing = await store.open_for(conn, runbook.scenario_id, queue)
            if existing is not None:
                text = f"{_who(actor)} declared it again: {summary}"
                await store.note(
                    conn, existing, at=now, kind="linked", text=text, actor=actor.person
                )
                await self._post(
                    conn, existing, "thread", messages.linked(existing, actor, summary), now
                )
                view = await store.view(conn, existing)
                return Declared(view, linked=True)
            number, obligations = await self._insert(
                conn, runbook, summary, actor, queue, origin, alert_group, fault_at, now
            )
            view = await store.view(conn, number)
            await self.audit.append(
                conn,
                action="incident.declared",
                actor=actor,
                at=now,
                subject=view.name,
                queue=queue,
                incident=view.name,
                reason=summary,
                details={
                    "scenario": runbook.scenario_id,
                    "runbook": runbook.id,
                    "version": runbook.version,
                    "fault_at": fault_at.isoformat() if fault_at else None,
                    "alert_group": alert_group,
                    # each communication and its timers: verify holds the tables to them
                    "obligations": obligations,
                },
            )
            await self._anchor(conn, now)
            await self._post(
                conn,
                number,
                "open",
                messages.checklist(view, runbook, self.authority(runbook)),
                now,
            )
        self.outbox.wake()
        return Declared(view, linked=False)

    async def _from_alert(
        self, conn: AsyncConnection, group: int, queue: str | None
    ) -> tuple[str | None, datetime | None]:
        """The queue and the fault time (the earliest startsAt of its alerts)."""
        found = (
            await conn.execute(
                sa.select(GROUPS.c.queue, GROUPS.c.alerts).where(GROUPS.c.id == group)
            )
        ).first()
        if found is None:
            raise NotFound(f"alert group {group} does not exist")
        records = [AlertRecord.from_json(fp, data) for fp, data in (found[1] or {}).items()]
        starts = [r.starts_at for r in records if r.starts_at is not None]
        return queue or found[0], min(starts) if starts else None

    async def _insert(  # noqa: PLR0917 - one call site, every value named there
        self,
        conn: AsyncConnection,
        runbook: Runbook,
        summary: str,
        actor: Actor,
        queue: str | None,
        origin: Mapping[str, Any] | None,
        alert_group: int | None,
        fault_at: datetime | None,
        now: datetime,
    ) -> tuple[int, list[dict[str, Any]]]:
        """The incident's rows and timers; its number and its communications as its
        declaration records them."""
        number = int(
            (
                await conn.execute(
                    INCIDENTS.insert()
                    .values(
                        scenario=runbook.scenario_id,
                        summary=summary,
                        state="open",
                        # redriving into a queue that is being restored is not safe
                        blocks_redrive="dep:job-queue" in runbook.restore_order,
                        queue=queue,
                        declared_at=now,
                        runbook=runbook.id,
                        runbook_version=runbook.version,
                        lead=actor.person,
                        lead_platform=actor.platform,
                        lead_account=actor.account,
                        fault_at=fault_at,
                        alert_group=alert_group,
                        origin=dict(origin or {}),
                        thread=None,
                    )
                    .returning(INCIDENTS.c.id)
                )
            ).scalar_one()
        )
        obligations: list[dict[str, Any]] = []
        for communication in runbook.communications:
            due = now + communication.within
            inserted = await conn.execute(
                OBLIGATIONS.insert()
                .values(
                    incident_id=number,
                    audience=communication.audience,
                    channel_dependency=communication.channel_dependency_id,
                    within_ms=communication.within_ms,
                    due_at=due,
                    state="pending",
                    reminders=0,
                )
                .returning(OBLIGATIONS.c.id)
            )
            obligation = int(inserted.scalar_one())
            reminders = [
                (f"{obligation}:{round(fraction * 100)}", now + communication.within * fraction)
                for fraction in self.config.remind_at
            ]
            for reminder, at in reminders:
                await scheduler.schedule(
                    conn, kind=REMIND, subject=reminder, due_at=at, created_at=now
                )
            await scheduler.schedule(
                conn, kind=DEADLINE, subject=str(obligation), due_at=due, created_at=now
            )
            obligations.append(
                declared_obligation(obligation, communication.audience, due, reminders)
            )
        steps: list[tuple[str, str, str | None]] = [
            ("restore", name, None) for name in runbook.restore_order
        ]
        steps += [("validation", item.text, item.check) for item in runbook.validation]
        for position, (kind, name, check) in enumerate(steps):
            await conn.execute(
                STEPS.insert().values(
                    incident_id=number,
                    kind=kind,
                    position=position,
                    name=name,
                    check_id=check,
                    state="pending",
                )
            )
        where = f"from alert group {alert_group}" if alert_group else "from chat"
        await store.note(
            conn,
            number,
            at=now,
            kind="declared",
            text=f"{_who(actor)} declared {runbook.scenario_id} {where}: {summary}",
            actor=actor.person,
        )
        if fault_at is not None:
            await store.note(
                conn, number, at=fault_at, kind="fault", text="the alert started firing", actor=None
            )
        return number, obligations

    async def alert_context(self, group: int) -> tuple[str, str, str | None]:
        """From an alert thread's button: the scenario (its route's), a summary (the
        alert's name and queue) and the queue."""
        async with reading(self.engine) as conn:
            found = (
                await conn.execute(
                    sa.select(GROUPS.c.route, GROUPS.c.alertname, GROUPS.c.queue).where(
                        GROUPS.c.id == group
                    )
                )
            ).first()
        if found is None:
            raise NotFound(f"alert group {group} does not exist")
        scenario = (found[0] or {}).get("scenario")
        if not scenario:
            raise UsageError(
                f"the route of {found[1]} names no scenario; declare with "
                '/incident declare SCENARIO "SUMMARY"'
            )
        where = f" on {found[2]}" if found[2] else ""
        return str(scenario), f"{found[1]}{where}", found[2]

    # -- communications ------------------------------------------------------------

    def draft(self, view: IncidentView, audience: str) -> str:
        runbook = self.runbook(view.scenario)
        for communication in runbook.communications:
            if communication.audience == audience and communication.draft:
                return fill_draft(
                    communication.draft,
                    {
                        "incident": view.name,
                        "lead": view.lead or "-",
                        "queue": view.queue or "-",
                        "summary": view.summary,
                        "scenario": view.scenario,
                    },
                )
        raise UsageError(
            f"the runbook of {view.name} has no draft for {audience}; write the message: "
            f'/incident notify {audience} "..." --incident {view.name}'
        )

    async def notify(
        self, *, number: int, audience: str, text: str | None, actor: Actor
    ) -> IncidentView:
        """Queue the message to the audience's channels. Its communication is met when the
        message is delivered (``delivered``), not when it is queued; where no channel
        carries the audience nobody is told: refused, and it stays pending."""
        now = self.clock()
        async with transaction(self.engine, subject=number_text(number)) as conn:
            incident = await store.row(conn, number, lock=True)
            if incident["state"] != "open":
                raise Conflict(f"{number_text(number)} is resolved; nothing more is sent for it")
            view = await store.view(conn, number)
            found = next((o for o in view.obligations if o.audience == audience), None)
            if found is None:
                known = ", ".join(o.audience for o in view.obligations)
                raise NotFound(
                    f"{view.name}'s runbook tells no audience {audience!r}; it tells: {known}"
                )
            channels = self.reach.refuse_telling(audience, f"{found.due_at:%H:%M:%S} UTC")
            message_text = text if text is not None else self.draft(view, audience)
            item = _post_item(
                number,
                "audience",
                messages.to_audience(view, audience, message_text, actor),
                channels=channels,
            )
            item["payload"].update(delivery.told(found.id, audience, actor, message_text))
            await relay.add_many(conn, kind=INCIDENT_POST, items=[item], now=now)
            await store.note(
                conn,
                number,
                at=now,
                kind="queued",
                text=f"{_who(actor)} sent a message for the {audience} ({', '.join(channels)}): "
                "queued, not yet delivered",
                actor=actor.person,
            )
            view = await store.view(conn, number)
        self.outbox.wake()
        return view

    async def delivered(self, payload: Mapping[str, Any], refs: Sequence[MessageRef]) -> None:
        """The outbox delivered (``refs``: where) or could not deliver (no refs) a message
        ``notify`` queued: delivered, the audience is told and its communication met (late
        past its deadline), with the latency from the declaration to the delivery."""
        told = delivery.Told.of(payload)
        now = self.clock()
        async with transaction(self.engine, subject=number_text(told.incident)) as conn:
            view = await store.view(conn, told.incident)
            if not refs:
                await store.note(
                    conn, view.number, at=now, kind="undelivered", text=told.nowhere(), actor=None
                )
                await self._post(conn, view.number, "thread", told.nowhere_message(view), now)
            else:
                # the timers first, then the obligation: the order the scheduler takes them
                await self._cancel_timers(conn, view.number, told.audience)
                late, latency = await delivery.meet(conn, told, view, now)
                said = told.said(refs, latency, late)
                await store.note(
                    conn, view.number, at=now, kind="notified", text=said, actor=told.actor.person
                )
                await self.audit.append(
                    conn, **delivery.event(told, view, refs, latency, late, now)
                )
                await self._anchor(conn, now)
                message = messages.notified(view, told.audience, told.actor, latency, late)
                await self._post(conn, view.number, "thread", message, now)
        self.outbox.wake()

    async def _cancel_timers(self, conn: AsyncConnection, number: int, audience: str) -> None:
        """Unschedule the reminders and the deadline of the audience's communication."""
        obligation = (
            await conn.execute(
                sa.select(OBLIGATIONS.c.id).where(
                    OBLIGATIONS.c.incident_id == number, OBLIGATIONS.c.audience == audience
                )
            )
        ).scalar_one_or_none()
        if obligation is None:
            return
        for fraction in self.config.remind_at:
            await scheduler.unschedule(
                conn, kind=REMIND, subject=f"{obligation}:{round(fraction * 100)}"
            )
        await scheduler.unschedule(conn, kind=DEADLINE, subject=str(obligation))

    # -- restore order and validation ----------------------------------------------

    async def step_done(
        self, *, number: int, step: str, actor: Actor, result: str | None = None
    ) -> IncidentView:
        now = self.clock()
        async with transaction(self.engine, subject=number_text(number)) as conn:
            await store.row(conn, number, lock=True)
            view = await store.view(conn, number)
            target = _find_step(view, step)
            if target.state == "done":
                raise Conflict(f"{view.name}: {target.name} is done already")
            await refuse_if_measured_failing(conn, view, target)
            if target.kind == "restore":
                before = [
                    s for s in view.restore() if s.position < target.position and s.state != "done"
                ]
                if before:
                    raise OutOfOrder(
                        f"{view.name}: {target.name} rests on {before[-1].name}, which is not "
                        f"done; the runbook restores {_order(view)}"
                    )
            await conn.execute(
                STEPS.update()
                .where(
                    STEPS.c.incident_id == number,
                    STEPS.c.kind == target.kind,
                    STEPS.c.position == target.position,
                )
                .values(
                    state="done", done_at=now, done_by=actor.person or actor.account, result=result
                )
            )
            what = "restored" if target.kind == "restore" else "confirmed"
            await store.note(
                conn,
                number,
                at=now,
                kind=f"{target.kind}.done",
                text=f"{_who(actor)} {what}: {target.name}",
                actor=actor.person,
            )
            await self.audit.append(
                conn,
                action=f"incident.{target.kind}_done",
                actor=actor,
                at=now,
                subject=view.name,
                queue=view.queue,
                incident=view.name,
                details={"step": target.name, "result": result},
            )
            anchored = await self._anchor(conn, now)
            view = await store.view(conn, number)
        if anchored:
            self.outbox.wake()
        return view

    async def validate(
        self, *, number: int, actor: Actor, default_queue: str | None
    ) -> IncidentView:
        """Measure the validation items queuebot can measure; each that passes is done.
        A synthetic-job item submits its job (where ``[incidents] synthetic_job`` says how)
        the first time, and passes once that job is in a terminal state."""
        synthetic = await self._synthetic(number)
        now = self.clock()
        async with transaction(self.engine, subject=number_text(number)) as conn:
            await store.row(conn, number, lock=True)
            view = await store.view(conn, number)
            queue = view.queue or default_queue
            if queue is None:
                raise UsageError(f"{view.name} names no queue to measure")
            before = view.fault_at or view.declared_at
            for position, step in enumerate(view.validation()):
                if step.state == "done" or step.check_id not in (*checks.MEASURED, SYNTHETIC):
                    continue
                if step.check_id == SYNTHETIC:
                    if synthetic is None:
                        continue
                    verdict = synthetic
                elif step.check_id == "count-restored":
                    verdict = await checks.count_restored(conn, queue=queue, before=before, now=now)
                else:
                    verdict = await checks.backlog_falling(conn, queue=queue, now=now)
                values: dict[str, Any] = {"result": verdict.says}
                if verdict.passed:
                    values.update(state="done", done_at=now, done_by=MEASURED_BY)
                await conn.execute(
                    STEPS.update()
                    .where(
                        STEPS.c.incident_id == number,
                        STEPS.c.kind == "validation",
                        STEPS.c.name == step.name,
                    )
                    .values(**values)
                )
                state = (
                    "passed"
                    if verdict.passed
                    else "not yet"
                    if verdict.passed is None
                    else "failed"
                )
                await store.note(
                    conn,
                    number,
                    at=now,
                    kind="validation",
                    text=f"v{position + 1} {state}: {verdict.says}",
                    actor=actor.person,
                )
            view = await store.view(conn, number)
        return view

    async def _synthetic(self, number: int) -> checks.Verdict | None:
        """The synthetic job's verdict: submitted now, or how the one submitted is doing;
        None where no synthetic job is configured (a person confirms that item)."""
        setting = self.config.synthetic_job
        if setting is None or self.estate is None:
            return None
        async with reading(self.engine) as conn:
            view = await store.view(conn, number)
        step = next((s for s in view.validation() if s.check_id == SYNTHETIC), None)
        if step is None or step.state == "done":
            return None
        profile = self.estate.profile(setting.queue)
        submitted = checks.synthetic_id(step.result)
        if submitted is None:
            async with self.estate.engine.begin() as conn:
                job = (
                    await conn.execute(sa.text(setting.insert), {"incident": view.name})
                ).scalar_one()
            return checks.Verdict(
                None,
                f"synthetic job {job} submitted to {setting.queue} at {self.clock():%H:%M:%S} UTC",
            )
        async with self.estate.connect() as conn:
            detail = await profile.show(conn, job_id=submitted)
        return checks.synthetic_verdict(submitted, detail.status, detail.canonical, setting.queue)

    async def resolve(self, *, number: int, actor: Actor) -> IncidentView:
        """Close the incident: every validation item must be done (or overridden through
        a change request another person approves: ``resolve_overridden``)."""
        now = self.clock()
        async with transaction(self.engine, subject=number_text(number)) as conn:
            view = await self._open(conn, number)
            missing = _unvalidated(view)
            if missing:
                raise NotReadyToResolve(
                    f"{view.name} cannot be resolved: not validated yet: "
                    f"{'; '.join(n for n, _, _ in missing)}. /incident validate {view.name} "
                    "measures what queuebot can; /incident step vN done confirms the rest; "
                    f'/incident resolve {view.name} --override --reason "WHY" asks another '
                    "person to approve resolving it without them"
                )
            view = await self._close(conn, view, actor, now, said_more="")
        self.outbox.wake()
        return view

    async def unvalidated(self, conn: AsyncConnection, number: int) -> list[tuple[str, str, str]]:
        """The validation items an override would skip, as (item, verdict, detail); the
        incident must be open and have at least one."""
        view = await self._open(conn, number)
        missing = _unvalidated(view)
        if not missing:
            raise Conflict(
                f"{view.name} is validated: /incident resolve {view.name} resolves it, "
                "no override needed"
            )
        return missing

    async def resolve_overridden(
        self,
        conn: AsyncConnection,
        *,
        number: int,
        request: str,
        requester: str,
        approvers: list[str],
        reason: str,
        actor: Actor,
        now: datetime,
    ) -> list[FollowUp]:
        """Resolve on an approved override (in the approval's transaction): the items not
        validated are marked overridden, with who asked, who approved and why."""
        view = await self._open(
            conn, number, hint=f"; {request} has nothing left to do: /queue reject {request}"
        )
        skipped = _unvalidated(view)
        approved = ", ".join(approvers)
        await conn.execute(  # every item not done, in one statement
            STEPS.update()
            .where(
                STEPS.c.incident_id == number,
                STEPS.c.kind == "validation",
                STEPS.c.state != "done",
            )
            .values(
                state="overridden",
                done_at=now,
                done_by=approved,
                result=f"not validated: overridden by {request}",
            )
        )
        names = ", ".join(n.split(" ", 1)[0] for n, _, _ in skipped) or "none"
        await self._close(
            conn,
            view,
            actor,
            now,
            said_more=(
                f", without validating {names}: {request} asked by {requester} "
                f"({reason}), approved by {approved}"
            ),
            override={
                "request": request,
                "requester": requester,
                "approvers": approvers,
                "reason": reason,
                "unvalidated": [n for n, _, _ in skipped],
            },
        )
        return [self._kick()]

    async def _open(self, conn: AsyncConnection, number: int, *, hint: str = "") -> IncidentView:
        """The incident, locked, which must be open."""
        incident = await store.row(conn, number, lock=True)
        if incident["state"] != "open":
            raise Conflict(f"{number_text(number)} is resolved already{hint}")
        return await store.view(conn, number)

    async def _close(
        self,
        conn: AsyncConnection,
        view: IncidentView,
        actor: Actor,
        now: datetime,
        *,
        said_more: str,
        override: dict[str, Any] | None = None,
    ) -> IncidentView:
        """Resolve: cancel the pending timers, write the timeline, the audit event and
        the thread's post."""
        number = view.number
        await conn.execute(
            INCIDENTS.update()
            .where(INCIDENTS.c.id == number)
            .values(state="resolved", resolved_at=now)
        )
        pending = (
            (
                await conn.execute(
                    sa.select(OBLIGATIONS.c.id).where(
                        OBLIGATIONS.c.incident_id == number, OBLIGATIONS.c.state == "pending"
                    )
                )
            )
            .scalars()
            .all()
        )
        for obligation in pending:
            for fraction in self.config.remind_at:
                await scheduler.unschedule(
                    conn, kind=REMIND, subject=f"{obligation}:{round(fraction * 100)}"
                )
            await scheduler.unschedule(conn, kind=DEADLINE, subject=str(obligation))
        since = view.fault_at or view.declared_at
        said = f"{_who(actor)} resolved it, {messages.duration(now - since)} after the " + (
            "fault" if view.fault_at else "declaration"
        )
        await store.note(
            conn, number, at=now, kind="resolved", text=said + said_more, actor=actor.person
        )
        details: dict[str, Any] = {"fault_to_recovery_s": int((now - since).total_seconds())}
        if override is not None:
            details["override"] = override
        await self.audit.append(
            conn,
            action="incident.resolved",
            actor=actor,
            at=now,
            subject=view.name,
            queue=view.queue,
            incident=view.name,
            details=details,
        )
        if override is None:  # an override's approval posts the head after its change
            await self._anchor(conn, now)
        await self._post(conn, number, "thread", messages.resolved(view, actor, now - since), now)
        return await store.view(conn, number)

    # -- reads ---------------------------------------------------------------------

    async def view(self, number: int) -> IncidentView:
        async with reading(self.engine) as conn:
            return await store.view(conn, number)

    async def export(self, number: int) -> str:
        async with reading(self.engine) as conn:
            return await postmortem(conn, number)

    async def newest(
        self, *, platform: str, channel: str | None
    ) -> tuple[IncidentView, bool] | None:
        """The newest incident declared in this channel (True), else the newest of all
        (False); None where none was ever declared."""
        async with reading(self.engine) as conn:
            here = await store.newest_from(conn, platform, channel)
            number = here or await store.newest(conn)
            return None if number is None else (await store.view(conn, number), here is not None)

    async def open_incidents(self) -> list[IncidentView]:
        async with reading(self.engine) as conn:
            return [await store.view(conn, n) for n in await store.open_numbers(conn)]

    # -- the timers (scheduler handlers, in the scheduler's transaction) -------------

    async def fire(
        self, conn: AsyncConnection, items: Sequence[scheduler.Due], now: datetime
    ) -> list[FollowUp]:
        """The reminders (``incident.remind``, subject ``OBLIGATION:PERCENT``) and the
        deadlines (``incident.deadline``, subject ``OBLIGATION``) that came due, in due
        order, as one batch: their obligations read and locked in one statement, their
        timeline entries and posts written a statement each, their audit events in one
        round trip (``AuditTrail.append_many``). An obligation met or missed since, or of an
        incident resolved since, says nothing; a reminder whose deadline passed says
        nothing either (the deadline's escalation says it)."""
        ids = [_obligation_of(item) for item in items]
        pending = await store.pending_obligations(conn, ids)
        reminded: dict[int, int] = {}
        missed: dict[int, None] = {}  # in due order
        notes: list[dict[str, Any]] = []
        posts: list[dict[str, Any]] = []
        events: list[NewEvent] = []
        for item, obligation_id in zip(items, ids, strict=True):
            found = pending.get(obligation_id)
            if found is None or obligation_id in missed:
                continue  # met, missed already, or the incident is over: nothing to say
            view, obligation = found
            if item.kind == REMIND:
                if now >= obligation.due_at:
                    continue  # due already (queuebot was down past it): the escalation says it
                reminded[obligation_id] = reminded.get(obligation_id, 0) + 1
                self._remind(view, obligation, now, notes, posts)
            else:
                missed[obligation_id] = None
                self._escalate(view, obligation, now, notes, posts, events)
        by_count: dict[int, list[int]] = {}
        for obligation_id, count in reminded.items():
            by_count.setdefault(count, []).append(obligation_id)
        for count, obligations in sorted(by_count.items()):
            await conn.execute(
                OBLIGATIONS.update()
                .where(OBLIGATIONS.c.id.in_(obligations))
                .values(reminders=OBLIGATIONS.c.reminders + count)
            )
        if missed:
            await conn.execute(
                OBLIGATIONS.update()
                .where(OBLIGATIONS.c.id.in_(list(missed)), OBLIGATIONS.c.state == "pending")
                .values(state="missed", escalated_at=now)
            )
        await store.note_many(conn, notes)
        if posts:
            await relay.add_many(conn, kind=INCIDENT_POST, items=posts, now=now)
        await self.audit.append_many(conn, events)  # the chain stays locked till commit
        anchored = await self._anchor(conn, now) if events else False
        return [self._kick()] if posts or anchored else []

    def _remind(
        self,
        view: IncidentView,
        obligation: ObligationView,
        now: datetime,
        notes: list[dict[str, Any]],
        posts: list[dict[str, Any]],
    ) -> None:
        """A reminder to the lead: its timeline entry and its post in the thread."""
        notes.append(
            _entry(
                view,
                now,
                "reminder",
                f"reminded {view.lead or 'the lead'}: the {obligation.audience} are due by "
                f"{obligation.due_at:%H:%M:%S} UTC",
            )
        )
        draft = self._has_draft(view, obligation.audience)
        posts.append(
            _post_item(view.number, "thread", messages.reminder(view, obligation, now, draft))
        )

    def _escalate(  # noqa: PLR0917 - the batch's lists, filled in due order
        self,
        view: IncidentView,
        obligation: ObligationView,
        now: datetime,
        notes: list[dict[str, Any]],
        posts: list[dict[str, Any]],
        events: list[NewEvent],
    ) -> None:
        """A missed deadline: recorded as missed on the timeline and in the audit trail,
        and escalated to the declaration authority in the thread and the operators
        channel."""
        runbook = self.runbook(view.scenario)
        holders = self.authority(runbook)
        notes.append(
            _entry(
                view,
                now,
                "missed",
                f"the {obligation.audience} were not told within "
                f"{messages.duration(obligation.within)}: escalated to {runbook.declaration_role}",
            )
        )
        events.append(
            NewEvent(
                action="incident.deadline_missed",
                actor=SYSTEM,
                at=now,
                subject=view.name,
                queue=view.queue,
                incident=view.name,
                details={
                    "audience": obligation.audience,
                    "due_at": obligation.due_at.isoformat(),
                    "escalated_to": list(holders),
                },
            )
        )
        escalation = messages.escalation(view, obligation, runbook.declaration_role, holders)
        channels = self.config.channels_of(OPERATORS)
        posts.append(_post_item(view.number, "thread", escalation))
        posts.append(_post_item(view.number, "audience", escalation, channels=channels))

    async def _anchor(self, conn: AsyncConnection, now: datetime) -> bool:
        """After an incident event, in its transaction: the trail's head to the audit
        channel (through the outbox, posted once this commits and the relay is woken).
        False where there is no audit channel."""
        if self.anchors is None:
            return False
        return await self.anchors.record(conn, now=now) is not None

    def _has_draft(self, view: IncidentView, audience: str) -> bool:
        return any(
            c.audience == audience and c.draft for c in self.runbook(view.scenario).communications
        )

    def _kick(self) -> FollowUp:
        """Wake the outbox relays once the transaction commits."""

        async def wake() -> None:
            self.outbox.wake()

        return wake

    async def _post(
        self,
        conn: AsyncConnection,
        number: int,
        action: str,
        message: Any,
        now: datetime,
        *,
        channels: Sequence[str] = (),
    ) -> None:
        item = _post_item(number, action, message, channels=channels)
        await relay.add_many(conn, kind=INCIDENT_POST, items=[item], now=now)


def _unvalidated(view: IncidentView) -> list[tuple[str, str, str]]:
    """Validation items not done, as (item, verdict, detail)."""
    return [
        (f"v{i + 1} ({s.name})", "not validated", s.result or "nobody confirmed it")
        for i, s in enumerate(view.validation())
        if s.state != "done"
    ]


def _obligation_of(item: scheduler.Due) -> int:
    """The obligation a timer is for: ``OBLIGATION`` or ``OBLIGATION:PERCENT``."""
    return int(item.subject.split(":", 1)[0])


def _entry(view: IncidentView, at: datetime, kind: str, text: str) -> dict[str, Any]:
    """A timeline entry of the scheduler's (no actor)."""
    return {"incident_id": view.number, "at": at, "kind": kind, "actor": None, "text": text}


def _post_item(
    number: int, action: str, message: Any, *, channels: Sequence[str] = ()
) -> dict[str, Any]:
    """An incident's post as the outbox holds it (``relay.add``, ``relay.add_many``):
    urgent, so a storm of alert posts never holds it back; an audience's post in the lane
    of its first channel, the thread's in the incident's own."""
    item: dict[str, Any] = {
        "subject": subject(number),
        "payload": {
            "action": action,
            "incident": number,
            "message": message_json(message),
            "channels": list(channels),
        },
        "priority": relay.URGENT,
    }
    if action == "audience" and channels:
        item["lane"] = relay.channel_lane(channels[0])
    return item


def _order(view: IncidentView) -> str:
    return " then ".join(s.name for s in view.restore())


def _who(actor: Actor) -> str:
    return actor.person or f"{actor.platform}:{actor.account}"


def _find_step(view: IncidentView, step: str) -> Any:
    wanted = step.strip().casefold()
    validation = view.validation()
    if wanted[:1] == "v" and wanted[1:].isdigit() and 1 <= int(wanted[1:]) <= len(validation):
        return validation[int(wanted[1:]) - 1]
    for candidate in view.steps:
        if (
            candidate.name.casefold() == wanted
            or candidate.name.casefold().removeprefix("dep:") == wanted
        ):
            return candidate
    names = ", ".join(s.name for s in view.restore()) or "none"
    raise NotFound(
        f"{view.name} has no step {step!r}; its restore order: {names}; its validation "
        f"items: v1-v{len(validation)} (/incident status)"
    )
