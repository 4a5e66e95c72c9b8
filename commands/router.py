"""Routes typed commands to their handlers, after authorization."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from commands.auth import authorize
from commands.catalog import spec_for
from commands.context import Invocation
from commands.deps import Deps
from commands.handlers import (
    board,
    changes,
    housekeeping,
    incidents,
    lead,
    oncall,
    queue_read,
    runbooks,
)
from commands.messages import with_notes, with_renamed_flags
from commands.model import (
    Approve,
    Cancel,
    Command,
    Declare,
    Dlq,
    Export,
    Halt,
    HandLead,
    Help,
    Housekeep,
    IncidentStatus,
    IncidentTimeline,
    Notify,
    Oncall,
    Pending,
    Redrive,
    Reject,
    Requeue,
    Resolve,
    Resume,
    Rollback,
    Runbooks,
    Show,
    ShowBoard,
    ShowPlan,
    StepDone,
    Stuck,
    Triage,
    Validate,
    Whois,
)
from commands.parser import Parsed, read, read_line
from commands.reply import Reply
from commands.spec import CommandSpec
from services.errors import PermissionDenied
from services.metrics import Outcome

Handler = Callable[[Any, Invocation, Deps], Awaitable[Reply]]

HANDLERS: dict[type[Command], Handler] = {
    Declare: incidents.handle_declare,
    Notify: incidents.handle_notify,
    HandLead: lead.handle_lead,
    IncidentStatus: incidents.handle_status,
    IncidentTimeline: incidents.handle_timeline,
    StepDone: incidents.handle_step,
    Validate: incidents.handle_validate,
    Resolve: incidents.handle_resolve,
    Export: incidents.handle_export,
    Help: queue_read.handle_help,
    Triage: queue_read.handle_triage,
    Show: queue_read.handle_show,
    Dlq: queue_read.handle_dlq,
    Stuck: queue_read.handle_stuck,
    ShowBoard: board.handle_board,
    Requeue: changes.handle_requeue,
    Cancel: changes.handle_cancel,
    Redrive: changes.handle_redrive,
    Pending: changes.handle_pending,
    Approve: changes.handle_approve,
    Reject: changes.handle_reject,
    ShowPlan: changes.handle_plan,
    Halt: changes.handle_halt,
    Resume: changes.handle_resume,
    Rollback: changes.handle_rollback,
    Runbooks: runbooks.handle_runbooks,
    Oncall: oncall.handle_oncall,
    Whois: oncall.handle_whois,
    Housekeep: housekeeping.handle_housekeep,
}


class Router:
    """The one entry point every adapter calls. Raises ``QueuebotError`` for anything a
    person can fix; the adapter's error boundary renders it."""

    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    async def handle_line(self, line: str, inv: Invocation) -> Reply:
        return await self._handle(read_line(line), inv)

    async def handle_text(self, group: str, text: str, inv: Invocation) -> Reply:
        return await self._handle(read(group, text), inv)

    async def _handle(self, parsed: Parsed, inv: Invocation) -> Reply:
        reply = await self.handle(parsed.command, inv)
        if not parsed.renamed:
            return reply
        return replace(reply, message=with_renamed_flags(reply.message, parsed.renamed))

    async def handle(self, command: Command, inv: Invocation) -> Reply:
        """Authorize and run one command, counting its outcome by the command's name: ok,
        refused (the person may not run it) or error (anything else raised)."""
        spec = spec_for(command)
        try:
            reply = await self._authorized(spec, command, inv)
        except PermissionDenied:
            self._count(spec, "refused")
            raise
        except Exception:
            self._count(spec, "error")
            raise
        self._count(spec, "ok")
        return reply

    def _count(self, spec: CommandSpec, outcome: Outcome) -> None:
        if self.deps.metrics is not None:
            self.deps.metrics.command(spec.name, outcome)

    async def _authorized(self, spec: CommandSpec, command: Command, inv: Invocation) -> Reply:
        shares = bool(getattr(command, "share", False))  # --share on a read command
        inv = await self.admit(spec, inv, shares=shares)
        reply = await HANDLERS[type(command)](command, inv, self.deps)
        if spec.role != "viewer":  # it may have changed rows: reads kept from before are stale
            self.deps.reads.forget_recent()
        if not spec.read_only and inv.person is not None and inv.person.notes:
            # it rested on a group read stale, or one not read: the reply says which
            reply = replace(reply, message=with_notes(reply.message, inv.person.notes))
        return replace(reply, ephemeral=False) if shares else reply

    async def admit(
        self, spec: CommandSpec, inv: Invocation, *, shares: bool = False
    ) -> Invocation:
        """The invocation with the person's standing as the groups hold it now, once they
        may run ``spec``; PermissionDenied (the normal refusal) where they may not. A form
        asks this before it opens."""
        standings = self.deps.standings
        # roles, teams and rotas as the groups hold them now; a read any known person may
        # run waits for no group (an unknown account may be made known by one). A command
        # whose own authority decides (declare, lead: a rota) is no read.
        if standings is not None and (not spec.read_only or inv.person is None):
            inv = replace(
                inv,
                person=await standings.standing(
                    inv.person,
                    platform=inv.platform,
                    account=inv.account,
                    chat_roles=inv.chat_roles,
                ),
            )
        authorize(
            spec,
            inv,
            self.deps.access,
            shares=shares,
            people=self.deps.directory.names(),
            config_file=self.deps.config_file,
        )
        return inv
