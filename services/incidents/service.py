"""The incident use cases: declare, notify an audience, mark a restore step or a
validation done, validate, resolve, and the reads.

Each use case is one transaction: the incident's rows, its timeline, its audit event,
its scheduled timers and its chat posts (through the outbox) commit together, so a
declaration is never half made and a post never reports what did not happen. The timers
themselves (reminders, then escalation at the deadline) are ``timers``'.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services import outbox as relay
from services.alerts import store as alert_store
from services.audit import Actor, AuditTrail
from services.audit.anchors import Anchors
from services.audit.incident_match import declared_obligation
from services.config.incidents import IncidentsConfig
from services.db import reading, transaction
from services.errors import Conflict, NotFound, UsageError
from services.estate.estate import Estate
from services.incidents import lead, messages, obligations, store, telling, timeline, timers
from services.incidents.audiences import Reach
from services.incidents.authority import Authority
from services.incidents.export import postmortem
from services.incidents.model import Declared, IncidentView, Lead, number_text, who
from services.incidents.publish import INCIDENT_POST, anchor, post_item, queue_post
from services.incidents.resolution import Resolution
from services.incidents.timers import Timers
from services.notify import MessageRef
from services.outbox import Outbox
from services.runbooks import Runbook, fill_draft


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
        authority: Authority,
        estate: Estate | None = None,
        anchors: Anchors | None = None,
        channels: Collection[str] = (),
        alert_threshold: int | None = None,
    ) -> None:
        """``runbook`` finds a scenario's runbook (NotFound lists the known ones);
        ``authority`` says who holds a runbook's declaration authority now and how to
        call the lead and the authority's secondary;
        ``anchors`` posts the trail's head to the audit channel after each incident
        event (None: no audit channel); ``channels``: the ``[channels]`` names that have
        an id on some platform (an audience none of whose channels is among them is told
        nowhere, so its runbook is not declared); ``alert_threshold``: the
        FailedJobsAccumulating alert's threshold of failed rows with an actionable reason,
        which ``dead-letters-low`` holds a queue that keeps failure reasons to."""
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
        self.resolution = Resolution(
            engine=engine,
            clock=clock,
            outbox=outbox,
            audit=audit,
            config=config,
            estate=estate,
            anchors=anchors,
            alert_threshold=alert_threshold,
        )
        self.timers = Timers(
            outbox=outbox,
            audit=audit,
            config=config,
            runbook=runbook,
            authority=authority,
            anchors=anchors,
        )

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
        basis: Sequence[Mapping[str, Any]] = (),
    ) -> Declared:
        """Open an incident led by its declarer; ``basis``: what the declarer's authority
        rested on (which [people] entry, group or schedule, read when), kept in the
        declaration's audit event."""
        runbook = self.runbook(scenario)
        self.reach.refuse_declaring(runbook)
        held = await self.authority.held(runbook)  # asked before the transaction: it may read chat
        now = self.clock()
        async with transaction(self.engine, subject="the incident") as conn:
            fault_at: datetime | None = None
            if alert_group is not None:
                queue, fault_at = await self._from_alert(conn, alert_group, queue)
            existing = await store.open_for(conn, runbook.scenario_id, queue)
            if existing is not None:
                text = f"{who(actor)} declared it again: {summary}"
                await timeline.note(
                    conn, existing, at=now, kind="linked", text=text, actor=actor.person
                )
                await queue_post(
                    conn, existing, "thread", messages.linked(existing, actor, summary), now
                )
                view = await store.view(conn, existing)
                return Declared(view, linked=True)
            number, owed = await self._insert(
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
                    # redrives on its queue held until this restore step is done (or None)
                    "blocks_redrives_until": runbook.blocks_redrives_until,
                    # each communication and its timers: verify holds the tables to them
                    "obligations": owed,
                    "basis": [dict(b) for b in basis],
                },
            )
            await anchor(self.anchors, conn, now)
            await queue_post(
                conn,
                number,
                "open",
                messages.checklist(view, runbook, held.names),
                now,
            )
        self.outbox.wake()
        return Declared(view, linked=False)

    async def _from_alert(
        self, conn: AsyncConnection, group: int, queue: str | None
    ) -> tuple[str | None, datetime | None]:
        """The queue and the fault time (the earliest startsAt of its alerts)."""
        found = await alert_store.read_group(conn, group)
        if found is None:
            raise NotFound(f"alert group {group} does not exist")
        return queue or found.queue, found.started_at

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
        number = await store.insert_incident(
            conn, runbook, summary, actor, queue, origin, alert_group, fault_at, now
        )
        owed: list[dict[str, Any]] = []
        for communication in runbook.communications:
            due = now + communication.within
            obligation = await obligations.insert_obligation(conn, number, communication, due)
            reminders = await timers.schedule(
                conn, obligation, communication.within, now, self.config.remind_at
            )
            owed.append(declared_obligation(obligation, communication.audience, due, reminders))
        await store.insert_steps(conn, number, runbook)
        where = f"from alert group {alert_group}" if alert_group else "from chat"
        await timeline.note(
            conn,
            number,
            at=now,
            kind="declared",
            text=f"{who(actor)} declared {runbook.scenario_id} {where}: {summary}",
            actor=actor.person,
        )
        if fault_at is not None:
            await timeline.note(
                conn, number, at=fault_at, kind="fault", text="the alert started firing", actor=None
            )
        return number, owed

    async def alert_context(self, group: int) -> tuple[str, str, str | None]:
        """From an alert thread's button: the scenario (its route's), a summary (the
        alert's name and queue) and the queue."""
        async with reading(self.engine) as conn:
            found = await alert_store.read_group(conn, group)
        if found is None:
            raise NotFound(f"alert group {group} does not exist")
        scenario = found.route.scenario
        if not scenario:
            raise UsageError(
                f"the route of {found.alertname} names no scenario; declare with "
                '/incident declare SCENARIO "SUMMARY"'
            )
        where = f" on {found.queue}" if found.queue else ""
        return scenario, f"{found.alertname}{where}", found.queue

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
            if await store.state(conn, number, lock=True) != "open":
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
            item = post_item(
                number,
                "audience",
                messages.to_audience(view, audience, message_text, actor),
                channels=channels,
            )
            item["payload"].update(telling.told(found.id, audience, actor, message_text))
            await relay.add_many(conn, kind=INCIDENT_POST, items=[item], now=now)
            await timeline.note(
                conn,
                number,
                at=now,
                kind="queued",
                text=f"{who(actor)} sent a message for the {audience} ({', '.join(channels)}): "
                "queued, not yet delivered",
                actor=actor.person,
            )
            view = await store.view(conn, number)
        self.outbox.wake()
        return view

    async def delivered(self, item: relay.Item, refs: Sequence[MessageRef]) -> None:
        """The outbox delivered (``refs``: where) or could not deliver (no refs) a message
        ``notify`` queued: delivered, the audience is told and its communication met (late
        past its deadline), with the latency from the declaration to the post. Recorded
        once: the item is marked done in the same transaction, and a relay whose claim was
        overtaken (or that died after recording) finds it done and records nothing."""
        told = telling.Told.of(item.payload)
        now = self.clock()
        async with transaction(self.engine, subject=number_text(told.incident)) as conn:
            if not await relay.finish(conn, item, now=now):
                return  # another relay claimed it since: its delivery is recorded there
            view = await store.view(conn, told.incident)
            if not refs:
                await timeline.note(
                    conn, view.number, at=now, kind="undelivered", text=told.nowhere(), actor=None
                )
                await queue_post(conn, view.number, "thread", told.nowhere_message(view), now)
            else:
                # the timers first, then the obligation: the order the scheduler takes them
                await self._cancel_timers(conn, view.number, told.audience)
                late, latency = await telling.meet(conn, told, view, now)
                said = told.said(refs, latency, late)
                await timeline.note(
                    conn, view.number, at=now, kind="notified", text=said, actor=told.actor.person
                )
                await self.audit.append(conn, **telling.event(told, view, refs, latency, late, now))
                await anchor(self.anchors, conn, now)
                message = messages.notified(view, told.audience, told.actor, latency, late)
                await queue_post(conn, view.number, "thread", message, now)
        self.outbox.wake()

    async def _cancel_timers(self, conn: AsyncConnection, number: int, audience: str) -> None:
        """Unschedule the reminders and the deadline of the audience's communication."""
        obligation = await obligations.obligation_to(conn, number, audience)
        if obligation is not None:
            await timers.cancel(conn, [obligation], self.config.remind_at)

    # -- the lead ------------------------------------------------------------------

    async def hand_over(
        self,
        *,
        number: int,
        to: Lead,
        expected: Lead,
        actor: Actor,
        basis: Sequence[Mapping[str, Any]] = (),
    ) -> IncidentView:
        """Hand the lead of an open incident to ``to``, as long as ``expected`` still
        leads it; ``basis``: what the new lead's declaration authority rests on."""
        now = self.clock()
        async with transaction(self.engine, subject=number_text(number)) as conn:
            view = await lead.hand_over(
                conn,
                self.audit,
                self.authority,
                number,
                to=to,
                expected=expected,
                actor=actor,
                basis=basis,
                now=now,
            )
            await anchor(self.anchors, conn, now)
        self.outbox.wake()
        return view

    # -- restore order, validation and resolving (``Resolution``'s) -------------------

    async def step_done(
        self, *, number: int, step: str, actor: Actor, result: str | None = None
    ) -> IncidentView:
        return await self.resolution.step_done(number=number, step=step, actor=actor, result=result)

    async def validate(
        self, *, number: int, actor: Actor, default_queue: str | None
    ) -> IncidentView:
        return await self.resolution.validate(
            number=number, actor=actor, default_queue=default_queue
        )

    async def resolve(self, *, number: int, actor: Actor) -> IncidentView:
        return await self.resolution.resolve(number=number, actor=actor)

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
