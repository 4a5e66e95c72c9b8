"""``queuebot``: the command line, what runs each command. Its grammar and help are in
``bot/cli_parser.py``; each command lives in its own module (``bot/*_cli.py``,
``bot/serve.py``, ``bot/config_check.py``), imported only when that command runs, so a
short command (and serve's worker process, which starts from this module) does not pay for
the others' imports. Every failure is one line on stderr and an exit code that names its
kind (``bot/exits.py``; README.md, "Exit codes"; the same table is in ``queuebot --help``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from bot.cli_parser import LOG_LEVELS, parse
from bot.exits import (
    EXIT_AUDIT_KEY,
    EXIT_BUG,
    EXIT_GRANT_REFUSED,
    EXIT_INTERRUPTED,
    EXIT_NOT_MIGRATED,
    EXIT_PROBLEM,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
)
from bot.logs import setup_logging
from services.config import load_config
from services.db import check_url, require_sqlite_file
from services.errors import ConfigError, NotMigrated, QueuebotError, Unavailable

if TYPE_CHECKING:
    from services.config import Config

__all__ = [
    "EXIT_AUDIT_KEY",
    "EXIT_BUG",
    "EXIT_GRANT_REFUSED",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_MIGRATED",
    "EXIT_PROBLEM",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "exit_code",
    "main",
    "parse",
    "run",
]

log = logging.getLogger("queuebot")


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
    from services import grants
    from services.audit import AuditKeyMissing

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
        from bot.demo_cli import run_demo

        return await run_demo(args)
    if args.command == "runbook":  # reads files (and, with none, the configuration) only
        from bot import runbook_cli

        held = runbook_cli.check(args.files, lambda: load_config(args.config))
        return 0 if held else EXIT_PROBLEM
    config = load_config(args.config)
    _databases_there(config, args)
    return await _COMMANDS[args.command](config, args)


async def _console(config: Config, args: argparse.Namespace) -> int:
    from bot.console_cli import run_console

    return await run_console(config, args.person)


async def _serve(config: Config, args: argparse.Namespace) -> int:
    from bot.serve import serve

    return await serve(config, host=args.host, port=args.port)


async def _db(config: Config, args: argparse.Namespace) -> int:
    from bot import db_cli

    if args.db_command == "grant":
        return await db_cli.grant(config, args.role, apply=args.apply)
    if args.db_command == "prune":
        return await db_cli.prune(config, args.older_than, dry_run=args.dry_run)
    return await db_cli.upgrade(config)


async def _config(config: Config, args: argparse.Namespace) -> int:
    from bot.config_check import config_check

    return await config_check(config)


async def _housekeep(config: Config, args: argparse.Namespace) -> int:
    from bot import housekeep_cli

    return await housekeep_cli.run(config, args)


async def _estate(config: Config, args: argparse.Namespace) -> int:
    from bot import estate_cli

    return await estate_cli.indexes(config)


async def _audit(config: Config, args: argparse.Namespace) -> int:
    from bot import audit_cli

    if args.audit_command == "head":
        return await audit_cli.head(config)
    return await audit_cli.verify(config, args)


_COMMANDS: dict[str, Callable[[Config, argparse.Namespace], Awaitable[int]]] = {
    "console": _console,
    "serve": _serve,
    "db": _db,
    "config": _config,
    "housekeep": _housekeep,
    "estate": _estate,
    "audit": _audit,
}


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


if __name__ == "__main__":
    raise SystemExit(main())
