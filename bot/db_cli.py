"""``queuebot db upgrade`` (queuebot's tables to the newest revision), ``queuebot db
grant`` (the runtime role's privileges, printed or applied) and ``queuebot db prune``
(queuebot's own residue, done and old, removed in audited batches)."""

from __future__ import annotations

from bot.audit_key import audit_trail, check_audit_key
from services import grants, retention
from services.config import Config
from services.db import create_engine, redacted
from services.db.migrate import require_newest
from services.db.migrate import upgrade as migrate
from services.estate.estate import utcnow


async def upgrade(config: Config) -> int:
    engine = create_engine(config.env.state_url, settings=config.file.database)
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
    engine = create_engine(config.env.state_url, settings=config.file.database)
    try:
        count = await grants.apply(engine, role)
    finally:
        await engine.dispose()
    print(f"granted: {count} statement(s) give role {role!r} queuebot's runtime privileges")
    print(grants.QUEUE_TABLES_NOTE)
    return 0


async def prune(config: Config, older_than: str, *, dry_run: bool) -> int:
    """Remove the residue older than ``older_than`` (or, dry, count it); print a line per
    table. The tables must be at the newest revision, and a keyed trail needs its key
    (each batch's audit event extends it) before anything is deleted."""
    age = retention.parse_age(older_than)
    engine = create_engine(config.env.state_url, settings=config.file.database)
    try:
        await require_newest(engine)
        if dry_run:
            report = await retention.count(engine, age=age, now=utcnow())
        else:
            trail = audit_trail(config)
            await check_audit_key(engine, trail, announce=False)
            report = await retention.prune(engine, trail, age=age, now=utcnow())
    finally:
        await engine.dispose()
    print("\n".join(report.lines()))
    return 0
