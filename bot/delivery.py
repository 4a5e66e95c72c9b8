"""The delivery protocol of every chat adapter, written once: a slash command or a click is
acted on at most once, answered, and never lost to a process that dies after its ack.

1. ``write_down``: before the platform's acknowledgement (Slack's ack, Discord's defer) the
   ledger claims the delivery's key with what it asks and where to answer. A repeat (a
   retry, a double click, another replica) finds the key taken and is ignored. A database
   that does not answer within ``WRITE_DOWN_WITHIN`` is not waited for: the platform wants
   its acknowledgement within 3 s, so it goes out, and the person is told at once that
   the command was not recorded and nothing was done (``take``). The ledger makes sure a
   write it gave up on never acts later (services/ledger/acks.py).
2. ``run``: what was asked is read (a UsageError there is the boundary's to say), the key
   kept fresh until the answer is out, the command routed through the one error
   boundary, the answer given, and the key finished (answered). A change marks the key
   done in its own transaction.
3. ``resume``: a delivery another process acknowledged and died on (its claim went
   stale) is run again (a change still acts once) or, where its change had committed,
   answered with what it did. One whose process died every time it was run, more often
   than the ledger's ``MAX_ADOPTIONS`` allows, is not run again: it is answered that it
   failed while being carried out and was not retried, logged, counted, and finished.

Each adapter supplies only its edges: reading what its platform sent, acknowledging it,
and the ``Answer`` that puts a reply where the person reads it (a response_url or an
interaction's token while the platform takes answers there, the channel after).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from bot.boundary import answer
from bot.ratelimited_log import RateLimitedLog
from commands import messages
from commands.clicks import command_of, words
from commands.context import Invocation, new_correlation_id
from commands.model import Approve, Command, Reject
from commands.options import from_options
from commands.reply import Reply
from commands.router import Router
from services.db import redacted
from services.errors import DatabaseUnavailable, UsageError
from services.ledger import CLAIMED, MAX_ADOPTIONS, Claim, DeliveryLedger, Orphan
from services.metrics import Metrics
from services.people import Directory

# Seconds the ledger may take to write a delivery down before its acknowledgement. A row
# written after all is adopted once stale, like any other orphan.
WRITE_DOWN_WITHIN = 2.0

Answer = Callable[[Reply, bool], Awaitable[None]]
"""The platform's edge that puts a reply where the person reads it; the flag asks it to
rewrite the clicked message instead (a decision on a change request that went through:
who decided and the outcome), where the platform can."""


@dataclass(frozen=True)
class Asked:
    """What a delivery asks, as the ledger keeps it: a button's id, a slash command's text
    (Slack's, read by the router), or a catalogue command's option values (Discord's)."""

    group: str = ""
    text: str | None = None
    name: str = ""
    values: dict[str, Any] = field(default_factory=dict)
    action_id: str = ""

    def command(self) -> Command | None:
        """The typed command; None for a text the router reads. Raises UsageError for
        what names no command (the boundary says so)."""
        if self.action_id:
            decided = command_of(self.action_id)
            if decided is None:
                raise UsageError(f"the button {self.action_id} names nothing queuebot can do")
            return decided
        if self.text is not None:
            return None
        return from_options(self.group, self.name, self.values)

    def words(self) -> str:
        """What the person asked, in their words, for an answer given after a restart."""
        if self.action_id:
            return words(self.action_id)
        if self.text is not None:
            return f"/{self.group} {self.text}".strip()
        shown = " ".join(f"{k}:{v}" for k, v in self.values.items() if v is not None)
        return f"/{self.group} {self.name} {shown}".strip()


@dataclass(frozen=True)
class Work:
    """One acknowledged delivery, ready to run: its ledger key, where it came from (for
    the error boundary's log), who asked, and what."""

    key: str
    where: str
    invocation: Invocation
    asked: Asked


@dataclass(frozen=True)
class WrittenDown:
    """A delivery as the ledger took it before the ack: ``claim`` is this process's, or
    None; ``recorded`` is False when the ledger could not be written (the database is
    away), and ``why`` then says what the database did, for the person."""

    claim: Claim | None
    recorded: bool = True
    why: str = ""

    @property
    def repeated(self) -> bool:
        """Acted on, or in hand, elsewhere already: nothing more to do."""
        return self.recorded and self.claim is None


@dataclass
class Deliveries:
    """What every chat adapter's wiring holds and does: the protocol above, and the tasks
    that answer after the acknowledgement. A subclass names its ``platform`` and adds its
    edges."""

    platform: ClassVar[str]
    router: Router
    directory: Directory
    ledger: DeliveryLedger
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    metrics: Metrics | None = None  # counts the deliveries given up
    log: logging.Logger = field(init=False)
    # a database away refuses every write-down: a few lines a minute say so
    unwritten: RateLimitedLog = field(init=False)

    def __post_init__(self) -> None:
        self.log = logging.getLogger(f"queuebot.{self.platform}")
        self.unwritten = RateLimitedLog(
            self.log, what="deliveries not written down before their ack"
        )

    def invocation(
        self,
        account: str,
        channel: str | None,
        thread: str | None = None,
        chat_roles: frozenset[str] | None = None,
    ) -> Invocation:
        return Invocation(
            person=self.directory.by_account(self.platform, account),
            platform=self.platform,
            account=account,
            channel=channel,
            thread=thread,
            correlation_id=new_correlation_id(),
            chat_roles=chat_roles,
        )

    async def write_down(self, key: str, request: dict[str, Any]) -> WrittenDown:
        """Claim ``key`` with what the delivery asks and where to answer (``request``),
        before the platform gets its acknowledgement: it never sends again what it saw
        acknowledged, so a process that dies after the ack leaves this row for another to
        finish (``resume``)."""
        try:
            async with asyncio.timeout(WRITE_DOWN_WITHIN):  # no task of its own: not wait_for
                claim = await self.ledger.acknowledge(key, request)
        except Exception as exc:  # the person is told it was not recorded (``take``)
            self.unwritten(
                "could not write down %s before the ack (%s): answered that it was not "
                "recorded, and nothing was done",
                key,
                type(exc).__name__,
            )
            where = redacted(self.ledger.engine.url)  # the password hidden
            if isinstance(exc, TimeoutError):
                why = f"{where} did not answer within {WRITE_DOWN_WITHIN:g} s"
            elif isinstance(exc, DatabaseUnavailable):
                why = f"{where} is unavailable ({exc.detail})"
            else:
                why = f"{where} failed ({type(exc).__name__})"
            return WrittenDown(None, recorded=False, why=why)
        return WrittenDown(claim)

    async def take(self, work: Work, written: WrittenDown, answer_with: Answer) -> None:
        """Answer an acknowledged delivery that is not a repeat: run it (``run``), or, when
        the ledger could not record it before the ack, say so at once and do nothing. It
        would not be safe to act on it: a delivery not written down is lost if this
        process dies, and is not the database's to finish; and the database, silent now,
        would only hold the answer back until each wait for it ran out."""
        if written.recorded:
            await self.run(work, written.claim, answer_with)
            return
        await answer_with(messages.not_recorded(work.asked.words(), written.why), False)

    def ignored(self, key: str) -> None:
        self.log.info("repeated delivery %s: acted on or in hand already, ignored", key)

    async def run(self, work: Work, claim: Claim | None, answer_with: Answer) -> None:
        """Answer one acknowledged delivery: once per ledger key, through the one error
        boundary, with ``answer_with``.

        The key is claimed before the ack (``claim``; otherwise here) and kept fresh until
        the answer is out. A change marks it done in its own transaction; the answer marks
        it answered. A crash in between leaves a claim that goes stale, and another process
        adopts it (``resume``): a read is answered again, a change acts once, or is said to
        be done."""
        inv = work.invocation
        command: Command | None = None
        async with contextlib.AsyncExitStack() as fresh:  # the claim, kept fresh until answered

            async def routed() -> Reply | None:
                nonlocal claim, command
                command = work.asked.command()
                if claim is None:
                    claim = await self.ledger.claim(work.key)
                if claim is None:
                    self.ignored(work.key)
                    return None
                await fresh.enter_async_context(self.ledger.kept_fresh(claim))
                held = replace(inv, delivery=claim)
                if command is not None:
                    return await self.router.handle(command, held)
                return await self.router.handle_text(work.asked.group, work.asked.text or "", held)

            reply = await answer(routed(), correlation_id=inv.correlation_id, where=work.where)
            try:
                if reply is not None:
                    # A decision clicked that went through rewrites the request's own
                    # message; a refusal goes only to whoever clicked and leaves the
                    # buttons for someone else.
                    rewrite = (
                        bool(work.asked.action_id)
                        and isinstance(command, Approve | Reject)
                        and not reply.error
                    )
                    await answer_with(reply, rewrite)
            finally:
                if claim is not None:  # answered (or unanswerable): nothing more to do
                    await answer(
                        self.ledger.finish(claim),
                        correlation_id=inv.correlation_id,
                        where=work.where,
                    )

    async def resume(self, work: Work, orphan: Orphan, answer_with: Answer) -> None:
        """Finish a delivery another process acknowledged and died on: do it (a change
        still acts once), or, where its change had committed, say what it did; or, where
        its process died every time it was carried out, say that it was not retried."""
        if orphan.given_up:
            await self.give_up(work, orphan, answer_with)
            return
        if orphan.state == CLAIMED:
            self.log.info(
                "finishing %s, acknowledged by a process that stopped before answering: "
                "run again (taken over %d of at most %d times)",
                work.key,
                orphan.adoptions,
                MAX_ADOPTIONS,
            )
            await self.run(work, orphan.claim, answer_with)
            return
        self.log.info(
            "finishing %s, acknowledged by a process that stopped before answering: its "
            "change had committed, answered with what it did",
            work.key,
        )
        await self._answer_orphan(
            work,
            orphan,
            answer_with,
            messages.done_before_restart(work.asked.words(), orphan.outcome),
        )

    async def give_up(self, work: Work, orphan: Orphan, answer_with: Answer) -> None:
        """A delivery whose process died each time it was carried out (a command that
        runs the process out of memory): instead of running it once more, answer that it
        failed and was not retried, with the key that finds it in the log, and finish it
        so that no process adopts it again."""
        asked = _clipped(work.asked.words())
        self.log.error(
            "gave up %s, %r: its process died %d times while carrying it out; answered "
            "that it failed and was not retried, and it is not run again",
            work.key,
            asked,
            orphan.adoptions,
        )
        if self.metrics is not None:
            self.metrics.delivery_given_up(self.platform)
        await self._answer_orphan(
            work, orphan, answer_with, messages.not_retried(asked, work.key, orphan.adoptions)
        )

    async def _answer_orphan(
        self, work: Work, orphan: Orphan, answer_with: Answer, reply: Reply
    ) -> None:
        """Answer an orphan without running it, and finish it (answered or not: it has
        nothing more to do)."""
        try:
            await answer_with(reply, False)
        finally:
            await answer(
                self.ledger.finish(orphan.claim),
                correlation_id=work.invocation.correlation_id,
                where=work.where,
            )

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run the work after the ack, holding a strong reference: the event loop keeps
        only weak ones, and a task nobody references can vanish mid-flight."""
        task = asyncio.create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def drain(self, grace: float = 10.0) -> None:
        """Let answers already started finish (on shutdown)."""
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=grace)


def _clipped(asked: str, most: int = 200) -> str:
    """What the person asked, short enough for one log line and one answer."""
    return asked if len(asked) <= most else asked[: most - 1] + "…"
