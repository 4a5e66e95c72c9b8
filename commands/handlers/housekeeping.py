"""``/queue housekeep [--dry-run] [--only A,B]``: the retry worker's run from chat. It
needs the operator role (the router checks it, by person and role, before this runs);
it runs at once, with no approval, because every statement is guarded, audited and the
same the timer runs."""

from __future__ import annotations

from commands.context import Invocation
from commands.deps import Deps
from commands.handlers.changes import actor_of
from commands.model import Housekeep
from commands.reply import Reply
from services.errors import PreconditionFailed
from services.housekeeping.run import parse_only

SEPARATE = (
    "housekeeping is off in this process: queuebot's tables and the queue are in different "
    "databases, so its changes could not commit with their audit events (see `queuebot "
    "config check`)"
)


async def handle_housekeep(cmd: Housekeep, inv: Invocation, deps: Deps) -> Reply:
    only = parse_only(cmd.only)
    if deps.housekeeping is None:
        raise PreconditionFailed(SEPARATE)
    report = await deps.housekeeping.run(actor=actor_of(inv), dry_run=cmd.dry_run, only=only)
    if not cmd.dry_run:
        deps.reads.forget_recent()  # rows changed: answers kept from before are stale
    return Reply(report.message(), ephemeral=cmd.dry_run)
