"""The console adapter: chat with queuebot from a terminal or a script (stdin lines).

A line may start with ``@person`` to act as that person: ``@bob /queue approve CR-1``.
Replies are plain text. This adapter has exactly one error boundary, in ``answer``.

Each console is a session with an id of its own (``run_id``), which is its channel: a
command typed in it is made "in" the session, and the posts that report it (a plan's
waves, whichever process runs them) can be printed only there (``session_reach``).
"""

from __future__ import annotations

import asyncio
import getpass
import itertools
import os
import re
import time
from collections.abc import Awaitable, Callable
from typing import TextIO

from bot.boundary import answer
from bot.console_screen import Screen
from bot.render_text import render_message
from commands.context import Invocation, new_correlation_id
from commands.reply import Reply
from commands.router import Router
from services.errors import NotFound
from services.message import Message
from services.notify import ChannelRef, MessageRef
from services.outbox import Reach, destination
from services.people import Directory

_AS = re.compile(r"^@(\S+)\s*(.*)$", re.DOTALL)
EXIT_WORDS = {"exit", "quit", r"\q"}
# A line the console's host answers itself (the demo's `/demo` lines), or None: not its own.
Aside = Callable[[str], Awaitable[Reply | None]]


_RUNS = itertools.count()


def run_id() -> str:
    """A session's mark on its message numbers: the time (seconds) and the process id, in
    base 36, and which session of the process it is after the first. No two sessions share
    all three, so their numbers never collide."""
    mark = f"{_base36(int(time.time()))}.{_base36(os.getpid())}"
    later = next(_RUNS)
    return f"{mark}.{_base36(later)}" if later else mark


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, rest = divmod(n, 36)
        out = digits[rest] + out
        if n == 0:
            return out


def session_reach(session: str) -> Reach:
    """Where a console session's outbox relay delivers: posts without a destination, and
    the posts of its own session (another process's wave of a plan asked for here),
    never another place's (a Slack plan's news, which serve posts; an ended session's,
    which nobody can print)."""
    return Reach(places=frozenset({destination("console", session)}))


class ConsoleNotifier:
    """Implements the notifier port by printing to the console. Messages are numbered
    ``RUN-N``, ``RUN`` the session's id: a plan's message is kept by reference in the
    database and may be updated by a later session, whose own posts must not take the
    same numbers. The session's own channel is shown as ``#console``."""

    def __init__(
        self, out: TextIO, run: str | None = None, *, screen: Screen | None = None
    ) -> None:
        self._screen = screen or Screen(out)
        self._run = run or run_id()
        self._ids = itertools.count(1)

    async def post(
        self, *, channel: str | ChannelRef, message: Message, thread: MessageRef | None = None
    ) -> list[MessageRef]:
        name = channel.channel if isinstance(channel, ChannelRef) else channel
        number = f"{self._run}-{next(self._ids)}"
        ref = MessageRef("console", name, number, thread.message_id if thread else None)
        where = f"#{self._shown(name)}" + (f" thread {thread.message_id}" if thread else "")
        self._screen.write(f"[{where}] (message {ref.message_id})\n{render_message(message)}\n\n")
        return [ref]

    async def update(self, *, ref: MessageRef, message: Message) -> None:
        self._screen.write(
            f"[#{self._shown(ref.channel)}] (message {ref.message_id} updated)\n"
            f"{render_message(message)}\n\n"
        )

    def _shown(self, channel: str) -> str:
        return "console" if channel == self._run else channel


class Console:
    """``hint(name)`` follows a refusal of an unknown name: where the people may be instead
    (the demo's configuration, when the one read lists nobody: ``bot/console_cli.py``).
    ``aside`` answers the lines the console's host keeps for itself (the demo's `/demo`)
    before the router sees them."""

    def __init__(
        self,
        *,
        router: Router,
        directory: Directory,
        out: TextIO,
        acting_as: str | None,
        screen: Screen | None = None,
        hint: Callable[[str], str] | None = None,
        aside: Aside | None = None,
        session: str | None = None,
    ) -> None:
        self.router = router
        self.directory = directory
        self.out = out
        self.acting_as = acting_as
        self.screen = screen or Screen(out)
        self.hint = hint
        self.aside = aside
        self.session = session  # the channel of what is typed here

    def _invocation(self, name: str | None, correlation_id: str) -> Invocation:
        if name is None:
            return Invocation(
                person=None,
                platform="console",
                account=f"console:{_os_user()}",
                channel=self.session,
                correlation_id=correlation_id,
            )
        person = self.directory.by_name(name)
        if person is None:
            known = ", ".join(self.directory.names()) or "nobody is configured"
            said = self.hint(name) if self.hint else ""
            where = self.router.deps.config_file or "the configuration (no file was read)"
            raise NotFound(
                f"no person named {name!r} under [people] in {where} (people: {known}); "
                "start a line with @name to act as someone" + (f"; {said}" if said else "")
            )
        return Invocation(
            person=person,
            platform="console",
            account=name,
            channel=self.session,
            correlation_id=correlation_id,
        )

    async def answer(self, line: str) -> Reply:
        """Run one line and return the reply; the console's only error boundary."""
        correlation_id = new_correlation_id()
        return await answer(
            self._run(line, correlation_id), correlation_id=correlation_id, where="the console"
        )

    async def _run(self, line: str, correlation_id: str) -> Reply:
        name = self.acting_as
        match = _AS.match(line)
        if match:
            name, line = match.group(1), match.group(2)
        if self.aside is not None and (own := await self.aside(line)) is not None:
            return own
        return await self.router.handle_line(line, self._invocation(name, correlation_id))

    async def run(self, source: TextIO) -> None:
        interactive = source.isatty()
        while True:
            if interactive:
                self.screen.prompt()
            raw = await asyncio.to_thread(source.readline)
            self.screen.answered()
            if raw == "":
                break
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            if line.lower() in EXIT_WORDS:
                break
            if not interactive:
                self.screen.write(f"> {line}\n")
            reply = await self.answer(line)
            self.screen.write(render_message(reply.message) + "\n\n")


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"
