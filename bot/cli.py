"""``queuebot``: the command line, what runs each command. Its grammar and help are in
``bot/cli_parser.py``; the demo and the console are started by ``bot/demo_cli.py`` and
``bot/console_cli.py``. Every failure is one line on stderr and an exit code that names
its kind (README.md, "Exit codes"; the same table is in ``queuebot --help``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Coroutine
from typing import Any

from bot import housekeep_cli, runbook_cli
from bot.bootstrap import UNKEYED, audit_trail
from bot.cli_parser import EXIT_USAGE, LOG_LEVELS, parse
from bot.config_check import config_check
from bot.console_cli import run_console
from bot.demo_cli import run_demo
from bot.logs import setup_logging
from bot.serve import serve
from services import grants
from services.audit import Anchor, AuditKeyMissing, Verification
from services.config import Config, load_config
from services.db import (
    check_url,
    create_engine,
    reading,
    redacted,
    require_sqlite_file,
)
from services.errors import ConfigError, NotMigrated, QueuebotError, Unavailable
from services.estate.estate import Estate
from services.estate.indexes import recommended_indexes
from services.estate.profile import BoundTable
from services.migrate import require_newest, upgrade

log = logging.getLogger("queuebot")

# EXIT_USAGE = 2 is bot/cli_parser.py's: argparse exits with it
EXIT_PROBLEM = 1  # a check found a problem (the audit trail does not hold, config check)
EXIT_AUDIT_KEY = 3  # the trail is keyed and no key was given
EXIT_GRANT_REFUSED = 4
EXIT_UNAVAILABLE = 5  # a database cannot be reached
EXIT_NOT_MIGRATED = 6  # queuebot's tables are missing or at another revision
EXIT_BUG = 70  # an error queuebot did not expect (sysexits' EX_SOFTWARE)
EXIT_INTERRUPTED = 130


def _log_level(given: str | None) -> str:
    """``--log-level``, else QUEUEBOT_LOG_LEVEL (any case), else WARNING."""
    if given is not None:
        return given
    raw = os.environ.get("QUEUEBOT_LOG_LEVEL", "")
    level = raw.strip().upper() or "WARNING"
    if level not in LOG_LEVELS:
        raise ConfigError(
            f"environment: QUEUEBOT_LOG_LEVEL = {raw!r}: expected one of {', '.join(LOG_LEVELS)}"
        )
    return level


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        level = _log_level(args.log_level)
    except ConfigError as exc:
        print(f"queuebot: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
    setup_logging(level)
    try:
        return asyncio.run(run(args))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def exit_code(exc: QueuebotError) -> int:
    """The exit code of a failure queuebot can explain."""
    if isinstance(exc, AuditKeyMissing):
        return EXIT_AUDIT_KEY
    if isinstance(exc, grants.GrantRefused):
        return EXIT_GRANT_REFUSED
    if isinstance(exc, NotMigrated):
        return EXIT_NOT_MIGRATED
    if isinstance(exc, Unavailable):
        return EXIT_UNAVAILABLE
    return EXIT_USAGE


async def run(args: argparse.Namespace) -> int:
    """Run one parsed command; every failure is one line on stderr and its exit code."""
    try:
        return await _dispatch(args)
    except QueuebotError as exc:
        print(f"queuebot: {exc.message}", file=sys.stderr)
        return exit_code(exc)
    except Exception as exc:  # a bug: one line here, the traceback under --log-level DEBUG
        log.debug("unexpected error", exc_info=exc)
        said = (str(exc).strip().splitlines() or [""])[0][:300]
        print(
            f"queuebot: unexpected error ({type(exc).__name__}: {said}); run again with "
            "--log-level DEBUG to see where, and report it",
            file=sys.stderr,
        )
        return EXIT_BUG


async def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "demo":
        return await run_demo(args)
    if args.command == "runbook":  # reads files (and, with none, the configuration) only
        held = runbook_cli.check(args.files, lambda: load_config(args.config))
        return 0 if held else EXIT_PROBLEM
    config = load_config(args.config)
    _databases_there(config, args)
    handlers: dict[str, Any] = {
        "console": lambda: run_console(config, args.person),
        "serve": lambda: serve(config, host=args.host, port=args.port),
        "db": lambda: (
            _db_grant(config, args.role, apply=args.apply)
            if args.db_command == "grant"
            else _db_upgrade(config)
        ),
        "config": lambda: config_check(config),
        "housekeep": lambda: housekeep_cli.run(config, args),
        "estate": lambda: _indexes(config),
        "audit": lambda: (
            _audit_head(config) if args.audit_command == "head" else _audit_verify(config, args)
        ),
    }
    run: Coroutine[Any, Any, int] = handlers[args.command]()
    return await run


def _databases_there(config: Config, args: argparse.Namespace) -> None:
    """Before connecting: a SQLite database's directory exists, and, for a command that
    only reads, so does its file (SQLite would create an empty one on connect)."""
    if args.command == "estate":  # prints SQL from the configuration; connects to nothing
        return
    reads_only = args.command in ("config", "audit")
    state, estate = config.env.state_url, config.env.estate_url
    check_url(state, variable="QUEUEBOT_DATABASE_URL")
    if estate != state:
        check_url(estate, variable="QUEUEBOT_QUEUE_DATABASE_URL")
    require_sqlite_file(
        state,
        variable="QUEUEBOT_DATABASE_URL",
        state=True,
        must_exist=reads_only,
        default="database_url" not in config.env.model_fields_set,
    )
    if estate != state and args.command in ("config", "console", "serve"):
        require_sqlite_file(
            estate, variable="QUEUEBOT_QUEUE_DATABASE_URL", state=False, must_exist=reads_only
        )


async def _db_upgrade(config: Config) -> int:
    engine = create_engine(config.env.state_url)
    try:
        revision = await upgrade(engine)
    finally:
        await engine.dispose()
    print(f"queuebot database {redacted(config.env.state_url)} is at revision {revision}")
    return 0


async def _db_grant(config: Config, role: str, *, apply: bool) -> int:
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


def _anchors(args: argparse.Namespace) -> list[Anchor]:
    texts: list[str] = list(args.anchor)
    if args.anchor_file is not None:
        try:
            lines = args.anchor_file.read_text("utf-8").splitlines()
        except OSError as exc:
            raise QueuebotError(f"cannot read {args.anchor_file}: {exc.strerror}") from exc
        texts += [t for t in (line.strip() for line in lines) if t and not t.startswith("#")]
    return [Anchor.parse(t) for t in texts]


async def _checked_trail(
    config: Config, anchors: list[Anchor]
) -> tuple[Verification, Anchor | None]:
    """Verify the trail (and read its head) in one snapshot of queuebot's database."""
    engine = create_engine(config.env.state_url)
    try:
        await require_newest(engine)
        trail = audit_trail(config)
        async with reading(engine) as conn:
            if conn.dialect.name == "postgresql":
                await conn.execution_options(isolation_level="REPEATABLE READ")
            result = await trail.verify(conn, anchors=anchors)
            return result, await trail.head(conn)
    finally:
        await engine.dispose()


def _broken(result: Verification) -> int:
    where = f" at event {result.first_bad}" if result.first_bad is not None else ""
    print(
        f"audit trail BROKEN{where}: {result.problem} "
        f"({result.checked} event(s) {'before it ' if where else ''}verified)",
        file=sys.stderr,
    )
    return EXIT_PROBLEM


async def _audit_verify(config: Config, args: argparse.Namespace) -> int:
    anchors = _anchors(args)
    result, _ = await _checked_trail(config, anchors)
    if not result.ok:
        return _broken(result)
    unkeyed = result.checked - result.keyed
    print(
        f"audit trail intact: {result.checked} event(s) verified ({result.keyed} keyed, "
        f"{unkeyed} unkeyed), {result.anchors} of {len(anchors)} anchor(s) held, "
        f"{result.records} request(s), approval(s) and plan(s) have their events, "
        f"{result.incidents} incident(s) match theirs"
    )
    if config.env.audit_key is None:
        print(f"note: {UNKEYED}", file=sys.stderr)
    return 0


async def _audit_head(config: Config) -> int:
    result, head = await _checked_trail(config, [])
    if not result.ok:
        return _broken(result)
    if head is None:
        print("the audit trail is empty: nothing to anchor yet", file=sys.stderr)
        return 0
    print(head)
    return 0


async def _estate_tables(
    estate: Estate, url: str
) -> tuple[dict[str, dict[str, BoundTable]], dict[str, str]]:
    """Each queue's tables as reflected, for ``estate indexes``; where they cannot be read,
    why. One read-only connection for every queue, given 10 seconds in all: an unreachable
    database costs one wait, not one per queue."""
    from services.db import sqlite_file

    path = sqlite_file(url)
    if path is not None and not path.exists():  # connecting would leave an empty file
        return {}, dict.fromkeys(estate.profiles, f"there is no SQLite file {path}")
    tables: dict[str, dict[str, BoundTable]] = {}
    why: dict[str, str] = {}
    try:
        async with asyncio.timeout(10), estate.connect() as conn:
            for name, profile in estate.profiles.items():
                try:
                    tables[name] = await profile.tables(conn)
                except QueuebotError as exc:
                    why[name] = exc.message
    except TimeoutError:
        return {}, dict.fromkeys(estate.profiles, "the queue database gave no answer in 10 s")
    except QueuebotError as exc:  # it cannot be reached or read
        return {}, dict.fromkeys(estate.profiles, exc.message)
    return tables, why


async def _indexes(config: Config) -> int:
    from services.db import normalise_url

    dialect = (
        "postgresql"
        if normalise_url(config.env.estate_url).drivername.startswith("postgresql")
        else "sqlite"
    )
    out = [
        "-- queuebot: recommended indexes for your queue tables (optional, review first).",
        "-- PostgreSQL: run outside a transaction (CREATE INDEX CONCURRENTLY)."
        if dialect == "postgresql"
        else "-- SQLite.",
    ]
    engine = create_engine(config.env.estate_url, pool_size=1)
    try:
        estate = Estate(engine=engine, queues=config.queues)
        tables, why = await _estate_tables(estate, config.env.estate_url)
    finally:
        await engine.dispose()
    for name, profile in estate.profiles.items():
        out.append(f"\n-- queue {name} ({profile.name})")
        found = tables.get(name)
        if found is None:  # one line, whatever the reason says
            reason = " ".join(str(why.get(name)).split())
            out.append(f"-- its tables could not be read ({reason}): every index is listed")
        out.extend(recommended_indexes(profile, dialect, tables=found))
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
