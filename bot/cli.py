"""``queuebot``: the command line. Every failure exits non-zero with one line."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Coroutine
from datetime import timedelta
from pathlib import Path
from typing import Any

from bot.bootstrap import App, build_app, running_scheduler
from bot.console import Console, ConsoleNotifier
from bot.demo import demo_url, ensure_demo_estate, record_history, write_demo_config
from bot.serve import serve
from services.audit import AuditTrail
from services.config import Config, load_config
from services.db import create_engine, redacted
from services.errors import QueuebotError
from services.estate.indexes import recommended_indexes
from services.estate.model import DeadFilter
from services.migrate import head_revision, upgrade

log = logging.getLogger("queuebot")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="queuebot", description=__doc__)
    p.add_argument("--config", help="TOML file (default: $QUEUEBOT_CONFIG or ./queuebot.toml)")
    p.add_argument(
        "--log-level",
        default=os.environ.get("QUEUEBOT_LOG_LEVEL", "WARNING"),
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="the bot: HTTP app (Slack endpoint, health), Slack")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", default=8080, type=int, help="port to listen on")

    console = sub.add_parser("console", help="chat with queuebot from the terminal (stdin)")
    console.add_argument("--as", dest="person", help="act as this person from [people]")

    demo = sub.add_parser("demo", help="demo estate + config on SQLite, then the console")
    demo.add_argument(
        "--db",
        default="queuebot.db",
        type=Path,
        help="SQLite file for the demo (default ./queuebot.db)",
    )
    demo.add_argument("--fresh", action="store_true", help="rebuild the demo from scratch")
    demo.add_argument("--as", dest="person", help="act as this person (alice, bob, dora)")

    db = sub.add_parser("db", help="queuebot's own database")
    db_sub = db.add_subparsers(dest="db_command", required=True, metavar="SUBCOMMAND")
    db_sub.add_parser("upgrade", help="migrate queuebot's own tables to the newest schema")

    config = sub.add_parser("config", help="configuration")
    config_sub = config.add_subparsers(dest="config_command", required=True, metavar="SUBCOMMAND")
    config_sub.add_parser("check", help="validate config, environment and the estate")

    audit = sub.add_parser("audit", help="queuebot's audit trail")
    audit_sub = audit.add_subparsers(dest="audit_command", required=True, metavar="SUBCOMMAND")
    audit_sub.add_parser("verify", help="check the audit hash chain; non-zero on any tampering")

    estate = sub.add_parser("estate", help="the queue estate")
    estate_sub = estate.add_subparsers(dest="estate_command", required=True, metavar="SUBCOMMAND")
    indexes = estate_sub.add_parser("indexes", help="recommended indexes for your tables")
    indexes.add_argument(
        "--print",
        dest="print_sql",
        action="store_true",
        required=True,
        help="print the SQL (queuebot never creates them itself)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return asyncio.run(_dispatch(args))
    except QueuebotError as exc:
        print(f"queuebot: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


async def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "demo":
        return await _demo(args)
    config = load_config(args.config)
    handlers: dict[str, Any] = {
        "console": lambda: _console(config, args.person),
        "serve": lambda: serve(config, host=args.host, port=args.port),
        "db": lambda: _db_upgrade(config),
        "config": lambda: _config_check(config),
        "estate": lambda: _indexes(config),
        "audit": lambda: _audit_verify(config),
    }
    run: Coroutine[Any, Any, int] = handlers[args.command]()
    return await run


async def _console(config: Config, person: str | None, banner: str | None = None) -> int:
    app = await build_app(config, notifier=ConsoleNotifier(sys.stdout))
    try:
        if person is not None and app.directory.by_name(person) is None:
            known = ", ".join(app.directory.names()) or "nobody is configured"
            raise QueuebotError(f"--as {person}: no such person (people: {known})")
        if banner:
            print(banner, flush=True)
        console = Console(
            router=app.router, directory=app.directory, out=sys.stdout, acting_as=person
        )
        async with running_scheduler(app):  # plan waves, expiry and counts, as in serve
            await console.run(sys.stdin)
        return 0
    finally:
        await app.close()


async def _demo(args: argparse.Namespace) -> int:
    db: Path = args.db
    built = await ensure_demo_estate(db, fresh=args.fresh)
    config_path = db.with_name("queuebot.demo.toml")
    write_demo_config(config_path, overwrite=args.fresh or built)
    url = demo_url(db)
    env = {**os.environ, "QUEUEBOT_DATABASE_URL": url, "QUEUEBOT_QUEUE_DATABASE_URL": url}
    config = load_config(config_path, environ=env)
    banner = await _demo_banner(config, db, config_path, built)
    return await _console(config, args.person, banner=banner)


async def _demo_banner(config: Config, db: Path, config_path: Path, built: bool) -> str:
    app = await build_app(config)
    try:
        if built:  # the demo's queues have a history: their counts a quarter hour ago
            await record_history(app.state_engine, app.estate, ago=timedelta(minutes=15))
        reads = app.router.deps.reads
        dead = await reads.list_dead(queue="clips", filters=DeadFilter(limit=1))
        example = dead.rows[0].id if dead.rows else "<job id>"
    finally:
        await app.close()
    state = "built" if built else "reused (use --fresh to rebuild)"
    return "\n".join(
        [
            f"queuebot demo: estate {state} in {db}; config in {config_path}.",
            "Queues: clips (message_job: messages + jobs), workers (worker_queue: one table).",
            "People: alice (operator, approver), bob (operator, approver), "
            "dora (duty-officer, operator).",
            f"Try: /queue triage | /queue triage --queue workers | @alice /queue show {example} | "
            "/queue help. End with Ctrl-D.",
            '     @alice /queue redrive --error-like ffmpeg --sample 2 --reason "OOM fix '
            'deployed" then @bob /queue approve CR-1, and /queue plan P-1.',
            "",
        ]
    )


async def _db_upgrade(config: Config) -> int:
    engine = create_engine(config.env.state_url)
    try:
        revision = await upgrade(engine)
    finally:
        await engine.dispose()
    print(f"queuebot database {redacted(config.env.state_url)} is at revision {revision}")
    return 0


async def _audit_verify(config: Config) -> int:
    engine = create_engine(config.env.state_url)
    try:
        async with engine.connect() as conn:
            result = await AuditTrail().verify(conn)
    finally:
        await engine.dispose()
    if result.ok:
        print(f"audit trail intact: {result.checked} event(s) verified")
        return 0
    print(
        f"audit trail BROKEN at event {result.first_bad}: {result.problem} "
        f"({result.checked} event(s) before it verified)",
        file=sys.stderr,
    )
    return 1


async def _config_check(config: Config) -> int:
    """Validate everything a start would need and say what is there."""
    app: App = await build_app(config, migrate=False)
    problems: list[str] = []
    lines = [
        f"config: {config.source or 'defaults (no file)'}",
        f"state database: {redacted(config.env.state_url)}",
        f"queue database: {redacted(config.env.estate_url)}",
    ]
    try:
        from services.migrate import current_revision

        current = await current_revision(app.state_engine)
        head = head_revision()
        if current != head:
            problems.append(
                f"state database is at revision {current}, newest is {head}: "
                "run `queuebot db upgrade` (serve and console do it on start)"
            )
        for name, profile in app.estate.profiles.items():
            try:
                async with app.estate.connect() as conn:
                    tables = await profile.tables(conn)
                lines.append(
                    f"queue {name} ({profile.name}): tables "
                    f"{', '.join(t.name for t in tables.values())} ok"
                )
            except QueuebotError as exc:
                problems.append(exc.message)
        people = config.file.people
        lines.append(f"people: {', '.join(people) or 'none (everyone is read-only)'}")
        if people and not app.directory.with_role("approver"):
            problems.append("nobody has the approver role: no change could ever be approved")
        env = config.env  # the validated environment, not the process's own
        for var, value in (
            ("SLACK_BOT_TOKEN", env.slack_bot_token),
            ("SLACK_SIGNING_SECRET", env.slack_signing_secret),
            ("SLACK_APP_TOKEN", env.slack_app_token),
        ):
            lines.append(f"{var}: {'set' if value is not None else 'not set'}")
    finally:
        await app.close()
    print("\n".join(lines))
    if problems:
        for problem in problems:
            print(f"problem: {problem}", file=sys.stderr)
        return 1
    print("config check: ok")
    return 0


async def _indexes(config: Config) -> int:
    from services.db import normalise_url
    from services.estate.registry import shipped_profiles

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
    profiles = shipped_profiles()
    for name, cfg in config.queues.items():
        profile = profiles.get(cfg.profile)(name, cfg)
        out.append(f"\n-- queue {name} ({cfg.profile})")
        out.extend(recommended_indexes(profile, dialect))
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
