"""Restoring, validating and resolving an incident: mark a restore step or a validation
item done, measure the validation items queuebot can, and resolve (or resolve on an
approved override). Each use case is one transaction, as ``Incidents``' are; ``Incidents``
hands these to ``Resolution``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.audit import Actor, AuditTrail
from services.audit.anchors import Anchors
from services.config.incidents import IncidentsConfig
from services.db import reading, transaction
from services.errors import Conflict, NotFound, NotReadyToResolve, OutOfOrder, UsageError
from services.estate.estate import Estate
from services.incidents import checks, messages, obligations, store, timeline, timers
from services.incidents.confirm import MEASURED_BY, refuse_if_measured_failing
from services.incidents.measure import Measure
from services.incidents.model import IncidentView, Override, StepView, number_text, who
from services.incidents.publish import anchor, queue_post, wake_after
from services.outbox import Outbox

SYNTHETIC = "synthetic-job"


class Resolution:
    def __init__(
        self,
        *,
        engine: AsyncEngine,
        clock: Callable[[], datetime],
        outbox: Outbox,
        audit: AuditTrail,
        config: IncidentsConfig,
        estate: Estate | None,
        anchors: Anchors | None,
        alert_threshold: int | None = None,
    ) -> None:
        """The collaborators as ``Incidents`` has them (its constructor says what each
        is)."""
        self.engine = engine
        self.clock = clock
        self.outbox = outbox
        self.audit = audit
        self.config = config
        self.estate = estate
        self.anchors = anchors
        self.measure = Measure(engine=engine, estate=estate, alert_threshold=alert_threshold)

    async def step_done(
        self, *, number: int, step: str, actor: Actor, result: str | None = None
    ) -> IncidentView:
        now = self.clock()
        async with transaction(self.engine, subject=number_text(number)) as conn:
            await store.state(conn, number, lock=True)
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
            by = actor.person or actor.account
            await store.step_done(conn, number, target, at=now, by=by, result=result)
            # the step its runbook holds redrives until: they may run again, from now
            releases = (
                target.kind == "restore"
                and view.blocks_redrive
                and target.name == view.blocks_redrive_until
            )
            if releases:
                await store.release_redrives(conn, number)
            what = "restored" if target.kind == "restore" else "confirmed"
            said = f"{who(actor)} {what}: {target.name}"
            if releases:
                said += f"; redrives {messages.on_queue(view)} may run again"
            await timeline.note(
                conn, number, at=now, kind=f"{target.kind}.done", text=said, actor=actor.person
            )
            details: dict[str, Any] = {"step": target.name, "result": result}
            if target.kind == "restore":
                details["redrives_released"] = releases
            await self.audit.append(
                conn,
                action=f"incident.{target.kind}_done",
                actor=actor,
                at=now,
                subject=view.name,
                queue=view.queue,
                incident=view.name,
                details=details,
            )
            anchored = await anchor(self.anchors, conn, now)
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
        now = self.clock()
        async with reading(self.engine) as conn:
            view = await store.view(conn, number)
        queue = view.queue or default_queue
        if queue is None:
            raise UsageError(f"{view.name} names no queue to measure")
        wanted = {s.check_id for s in view.validation() if s.state != "done" and s.check_id}
        # the queue as it is, before a synthetic job of queuebot's own joins its backlog
        measured = await self.measure.verdicts(
            view, queue=queue, now=now, wanted=wanted & set(checks.MEASURED)
        )
        synthetic = await self._synthetic(number)
        if synthetic is not None:
            measured[SYNTHETIC] = synthetic
        async with transaction(self.engine, subject=number_text(number)) as conn:
            await store.state(conn, number, lock=True)
            view = await store.view(conn, number)
            for position, step in enumerate(view.validation()):
                verdict = measured.get(step.check_id or "")
                if step.state == "done" or verdict is None:
                    continue
                passed_at = now if verdict.passed else None
                await store.measured(
                    conn, number, step, says=verdict.says, passed_at=passed_at, by=MEASURED_BY
                )
                state = (
                    "passed"
                    if verdict.passed
                    else "not yet"
                    if verdict.passed is None
                    else "failed"
                )
                await timeline.note(
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
            view = await self._close(conn, view, actor, now)
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
    ) -> None:
        """Resolve on an approved override (in the approval's transaction): the items not
        validated are marked overridden, with who asked, who approved and why."""
        view = await self._open(
            conn, number, hint=f"; {request} has nothing left to do: /queue reject {request}"
        )
        skipped = _unvalidated(view)
        approved = ", ".join(approvers)
        await store.override_unvalidated(
            conn, number, at=now, by=approved, result=f"not validated: overridden by {request}"
        )
        await self._close(
            conn,
            view,
            actor,
            now,
            override=Override(request, requester, approvers, reason, [n for n, _, _ in skipped]),
        )
        wake_after(conn, self.outbox)

    async def _open(self, conn: AsyncConnection, number: int, *, hint: str = "") -> IncidentView:
        """The incident, locked, which must be open."""
        if await store.state(conn, number, lock=True) != "open":
            raise Conflict(f"{number_text(number)} is resolved already{hint}")
        return await store.view(conn, number)

    async def _close(
        self,
        conn: AsyncConnection,
        view: IncidentView,
        actor: Actor,
        now: datetime,
        *,
        override: Override | None = None,
    ) -> IncidentView:
        """Resolve: cancel the pending timers, write the timeline, the audit event and
        the thread's post. Recovery is when the validation passed (``validated_at``), not
        now; an override resolves without it, so its recovery time is not known."""
        number = view.number
        await store.resolved(conn, number, now)
        await timers.cancel(conn, await obligations.pending_of(conn, number), self.config.remind_at)
        since = view.fault_at or view.declared_at
        validated = None if override is not None else view.validated_at()
        said = messages.resolution_said(view, who(actor), now, validated, override)
        await timeline.note(conn, number, at=now, kind="resolved", text=said, actor=actor.person)
        details: dict[str, Any] = {
            "fault_to_recovery_s": (
                None if validated is None else int((validated - since).total_seconds())
            ),
            "validated_at": None if validated is None else validated.isoformat(),
        }
        if override is not None:
            details["override"] = asdict(override)
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
            await anchor(self.anchors, conn, now)
        post = messages.resolved(view, who(actor), now, validated, override)
        await queue_post(conn, number, "thread", post, now)
        return await store.view(conn, number)


def _unvalidated(view: IncidentView) -> list[tuple[str, str, str]]:
    """Validation items not done, as (item, verdict, detail)."""
    return [
        (f"v{i + 1} ({s.name})", "not validated", s.result or "nobody confirmed it")
        for i, s in enumerate(view.validation())
        if s.state != "done"
    ]


def _order(view: IncidentView) -> str:
    return " then ".join(s.name for s in view.restore())


def _find_step(view: IncidentView, step: str) -> StepView:
    """The step as ``/incident status`` numbers it (1, 2, ... a restore step; v1, v2, ...
    a validation item), or by its name (``dep:job-queue``, or ``job-queue``)."""
    wanted = step.strip().casefold()
    validation = view.validation()
    restore = view.restore()
    if wanted[:1] == "v" and wanted[1:].isdigit() and 1 <= int(wanted[1:]) <= len(validation):
        return validation[int(wanted[1:]) - 1]
    if wanted.isdigit() and 1 <= int(wanted) <= len(restore):
        return restore[int(wanted) - 1]
    for candidate in view.steps:
        if (
            candidate.name.casefold() == wanted
            or candidate.name.casefold().removeprefix("dep:") == wanted
        ):
            return candidate
    names = ", ".join(f"{n + 1} ({s.name})" for n, s in enumerate(restore)) or "none"
    raise NotFound(
        f"{view.name} has no step {step!r}; its restore steps: {names}; its validation "
        f"items: v1-v{len(validation)} (/incident status)"
    )
