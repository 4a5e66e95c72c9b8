"""``queuebot db upgrade`` (queuebot's tables to the newest revision) and ``queuebot db
grant`` (the runtime role's privileges, printed or applied)."""

from __future__ import annotations

from services import grants
from services.config import Config
from services.db import create_engine, redacted
from services.migrate import upgrade as migrate


async def upgrade(config: Config) -> int:
    engine = create_engine(config.env.state_url)
    try:
        revision = await migrate(engine)
    finally:
        await engine.dispose()
    print(f"queuebot database {redacted(config.env.state_url)} is at revision {revision}")
    return 0


async def grant(config: Config, role: str, *, apply: bool) -> int:
    if not apply:
        print(grants.script(role))
        return 0
    engine = create_engine(config.env.state_url)
    try:
        count = await grants.apply(engine, role)
    finally:
        await engine.dispose()
    print(f"granted: {count} statement(s) give role {role!r} queuebot's runtime privileges")
    print(grants.QUEUE_TABLES_NOTE)
    return 0
