"""Group membership, read from the platform and kept briefly.

A read is fresh for ``FRESH_FOR`` (60 s): within that, every command uses it, so a burst
of commands costs one platform call per group per minute. An event saying a group changed
(Slack's ``subteam_members_changed``, Discord's member updates) makes the next question
read again. When the platform cannot be read, the last membership read is used, marked
stale, for at most ``STALE_FOR`` (10 minutes) after it was read; past that, or with no
membership ever read, ``SourceUnavailable`` names the source and nothing is granted from
it (fail closed: never a role granted by an error)."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from services.access.sources import Reader, Source
from services.errors import QueuebotError, Unavailable

log = logging.getLogger("queuebot.access")

FRESH_FOR = timedelta(seconds=60)
STALE_FOR = timedelta(minutes=10)


class SourceUnavailable(Unavailable):
    """A group's members could not be read, and no read recent enough is kept."""

    def __init__(self, source: Source, why: str) -> None:
        super().__init__(f"{source.label()} cannot be read ({why}): nothing it grants is given")
        self.source = source
        self.why = why


@dataclass(frozen=True)
class Read:
    """A group's members as last read: ``stale`` when the latest attempt failed and these
    are from ``read_at`` (``failure`` says why)."""

    source: Source
    members: frozenset[str]
    read_at: datetime
    stale: bool = False
    failure: str | None = None

    def basis(self) -> dict[str, object]:
        """What a decision resting on it records in the audit trail."""
        out: dict[str, object] = {
            "source": self.source.label(),
            "read_at": self.read_at.isoformat(),
        }
        if self.stale:
            out["stale"] = True
        return out


@dataclass
class _Kept:
    read: Read | None = None  # the last successful read
    failed_at: datetime | None = None
    failure: str | None = None
    # events saying the group changed, and how many of them the last read began after:
    # an event told while a read is under way leaves the next question to read again
    told: int = 0
    seen: int = 0

    @property
    def asked_again(self) -> bool:
        return self.told != self.seen


class Membership:
    """The cache of every group's members, read through each platform's ``Reader``."""

    def __init__(
        self,
        readers: Mapping[str, Reader],
        *,
        clock: Callable[[], datetime],
        fresh_for: timedelta = FRESH_FOR,
        stale_for: timedelta = STALE_FOR,
        retry_after: timedelta = timedelta(seconds=5),
        read_within: timedelta = timedelta(seconds=5),
    ) -> None:
        self.readers = dict(readers)
        self.clock = clock
        self.fresh_for = fresh_for
        self.stale_for = stale_for
        self.retry_after = retry_after  # a failed source is asked again at most this often
        self.read_within = read_within  # a platform slower than this counts as failing
        self.calls: Counter[Source] = Counter()  # platform calls made, by source
        self._kept: dict[Source, _Kept] = {}
        self._locks: dict[Source, asyncio.Lock] = {}

    def add_reader(self, platform: str, reader: Reader) -> None:
        self.readers[platform] = reader

    def forget(self, source: Source) -> None:
        """The group changed (an event said so): the next question reads it again."""
        kept = self._kept.get(source)
        if kept is not None:
            kept.told += 1

    def forget_platform(self, platform: str) -> None:
        for source, kept in self._kept.items():
            if source.platform == platform:
                kept.told += 1

    def cached(self, source: Source) -> Read | None:
        """What is kept without asking the platform (fresh or not)."""
        kept = self._kept.get(source)
        return kept.read if kept else None

    async def read(self, source: Source) -> Read:
        """The group's members: kept while fresh, read again otherwise (one call at a
        time per group); stale within ``stale_for`` of the last good read when the
        platform fails; ``SourceUnavailable`` after."""
        usable = self._usable(source)
        if usable is not None:
            return usable
        lock = self._locks.setdefault(source, asyncio.Lock())
        async with lock:
            usable = self._usable(source)  # another command read it meanwhile
            if usable is not None:
                return usable
            return await self._read_now(source)

    def _usable(self, source: Source) -> Read | None:
        kept = self._kept.get(source)
        if kept is None or kept.asked_again:
            return None
        now = self.clock()
        if kept.failed_at is not None:  # failing: keep answering from the last read a while
            if now - kept.failed_at >= self.retry_after:
                return None
            return self._stale(source, kept, now)
        if kept.read is not None and now - kept.read.read_at < self.fresh_for:
            return kept.read
        return None

    def _stale(self, source: Source, kept: _Kept, now: datetime) -> Read:
        why = kept.failure or "it did not answer"
        if kept.read is None:
            raise SourceUnavailable(source, f"{why}; never read")
        if now - kept.read.read_at >= self.stale_for:
            minutes = int(self.stale_for.total_seconds() // 60)
            raise SourceUnavailable(
                source, f"{why}; last read {kept.read.read_at:%H:%M:%S} UTC, over {minutes} min ago"
            )
        return Read(source, kept.read.members, kept.read.read_at, stale=True, failure=why)

    async def _read_now(self, source: Source) -> Read:
        kept = self._kept.setdefault(source, _Kept())
        now = self.clock()
        began = kept.told  # events after this one are not answered by this read
        reader = self.readers.get(source.platform)
        if reader is None:
            kept.failed_at, kept.failure = now, _no_reader(source)
            kept.seen = began
            return self._stale(source, kept, now)
        self.calls[source] += 1
        try:
            async with asyncio.timeout(self.read_within.total_seconds()):
                members = await reader.members(source)
        except Exception as exc:  # any failure of the platform: stale, then refused
            kept.failed_at = now
            kept.failure = (
                f"it did not answer within {self.read_within.total_seconds():g} s"
                if isinstance(exc, TimeoutError)
                else _failure(exc)
            )
            kept.seen = began
            log.warning("could not read %s: %s", source.label(), kept.failure)
            return self._stale(source, kept, now)
        kept.read = Read(source, frozenset(members), self.clock())
        kept.failed_at = kept.failure = None
        kept.seen = began
        return kept.read


def _no_reader(source: Source) -> str:
    if source.platform == "slack":
        return "SLACK_BOT_TOKEN is not set"
    return (
        "queuebot does not read Discord's members: it needs DISCORD_BOT_TOKEN, [discord] "
        "guild and read_members = true, with the Server Members intent enabled; a command "
        "made on Discord still carries its member's roles"
    )


def _failure(exc: Exception) -> str:
    if isinstance(exc, QueuebotError):  # a reader's own words: "Slack answered HTTP 500"
        return exc.message[:200]
    said = str(exc).splitlines()[0] if str(exc) else ""
    said = said[:160]
    return f"{type(exc).__name__}: {said}" if said else type(exc).__name__
