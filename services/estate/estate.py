"""The queue estate: the team's queue database and the profiles that read it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as SATimeoutError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.config import QueueConfig
from services.db import READ_ONLY, error_line, redacted
from services.errors import ConfigError, NotFound, Unavailable
from services.estate.profile import QueueProfile
from services.estate.registry import ProfileRegistry, shipped_profiles


def utcnow() -> datetime:
    return datetime.now(UTC)


class Estate:
    """Every configured queue, reached through one engine on the estate's database."""

    def __init__(
        self,
        *,
        engine: AsyncEngine,
        queues: dict[str, QueueConfig],
        clock: Callable[[], datetime] = utcnow,
        registry: ProfileRegistry | None = None,
    ) -> None:
        if not queues:
            raise ConfigError("no queue is configured; add a [queue] table with a profile")
        known = registry or shipped_profiles()
        self.engine = engine
        self.clock = clock
        self.profiles: dict[str, QueueProfile] = {
            name: known.get(cfg.kind, preset=cfg.preset is not None)(name, cfg)
            for name, cfg in queues.items()
        }

    @property
    def default_queue(self) -> str:
        return next(iter(self.profiles))

    def profile(self, queue: str | None) -> QueueProfile:
        if queue is None:
            return self.profiles[self.default_queue]
        try:
            return self.profiles[queue]
        except KeyError:
            raise NotFound(
                f"no queue named {queue!r}; configured queues: {', '.join(self.profiles)}"
            ) from None

    def failure_reasons(self) -> tuple[str, ...]:
        """The failure reasons a person may pick from for ``--failure-reason`` on any
        configured queue: every fixed list of the queues' profiles, in queue order, each
        reason once. None to pick from (any text is typed) where no queue keeps failure
        reasons, or where one keeps reasons of no fixed list: a pick list would leave its
        reasons out."""
        reasons: dict[str, None] = {}
        for profile in self.profiles.values():
            if profile.failure_reasons is None:
                return ()
            reasons.update(dict.fromkeys(profile.failure_reasons))
        return tuple(reasons)

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[AsyncConnection]:
        """A read connection; failures to connect or read become ``Unavailable``."""
        connected = False
        try:
            async with self.engine.connect() as conn:
                await conn.execution_options(**READ_ONLY)
                connected = True
                yield conn
        except SATimeoutError as exc:
            raise Unavailable(
                "queuebot is answering many requests at once and has no database connection "
                "free; try again in a moment"
            ) from exc
        except (OperationalError, InterfaceError) as exc:
            what = "could not be read" if connected else "cannot be reached"  # locked, timed out
            raise Unavailable(
                f"the queue database {redacted(self.engine.url)} {what} "
                f"({error_line(exc)}); try again, or check `queuebot config check`"
            ) from exc
        except DBAPIError as exc:
            if exc.connection_invalidated:
                raise Unavailable(
                    f"lost the connection to {redacted(self.engine.url)}; try again"
                ) from exc
            raise
