"""``queuebot``: the command line. Every failure is one line on stderr and an exit code
that names its kind (the table is in README.md, "Exit codes"):

  0  done
  1  a check found a problem: `audit verify` or `audit head` found the trail tampered
     with, `config check` listed problems, `runbook check` found a runbook broken
  2  the command line, the configuration file or the environment is wrong
  3  the audit trail is keyed and QUEUEBOT_AUDIT_KEY is not set
  4  `db grant` refused
  5  a database cannot be reached (down, wrong address or credentials, no such SQLite
     file or directory)
  6  queuebot's own tables are missing or at another revision: `queuebot db upgrade`
  70 an unexpected error (a bug): run again with --log-level DEBUG for the traceback
  130 interrupted
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Coroutine
from datetime import timedelta
from importlib import metadata
from pathlib import Path
from typing import Any, NoReturn

from bot import housekeep_cli, runbook_cli
from bot.bootstrap import UNKEYED, audit_trail, build_app, running_scheduler
from bot.config_check import config_check
from bot.console import Console, ConsoleNotifier
from bot.demo import (
    demo_state,
    demo_url,
    ensure_demo_estate,
    record_history,
    running_demo_worker,
    write_demo_config,
)
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
from services.estate.model import DeadFilter
from services.estate.profile import BoundTable
from services.migrate import require_newest, upgrade

log = logging.getLogger("queuebot")

EXIT_PROBLEM = 1  # a check found a problem (the audit trail does not hold, config check)
EXIT_USAGE = 2  # the command line, the configuration file or the environment is wrong
EXIT_AUDIT_KEY = 3  # the trail is keyed and no key was given
EXIT_GRANT_REFUSED = 4
EXIT_UNAVAILABLE = 5  # a database cannot be reached
EXIT_NOT_MIGRATED = 6  # queuebot's tables are missing or at another revision
EXIT_BUG = 70  # an error queuebot did not expect (sysexits' EX_SOFTWARE)
EXIT_INTERRUPTED = 130


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the command and where help is."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see `{self.prog} --help`)\n")


def _version() -> str:
    try:
        return metadata.version("queuebot")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def _common(*, top: bool) -> _Parser:
    """Options every command takes, before or after its name (``queuebot console --config
    x.toml`` as well as ``queuebot --config x.toml console``). After the name they default
    to nothing, so they never undo the same option given before it."""
    p = _Parser(add_help=False)
    unset = None if top else argparse.SUPPRESS
    p.add_argument(
        "--config",
        default=unset,
        help="TOML file (default: $QUEUEBOT_CONFIG or ./queuebot.toml)",
    )
    p.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default=unset,
        help="log threshold (default: $QUEUEBOT_LOG_LEVEL or WARNING)",
    )
    return p


def _parser() -> argparse.ArgumentParser:
    common = _common(top=False)
    p = _Parser(
        prog="queuebot",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[_common(top=True)],
    )
    p.add_argument("--version", action="version", version=f"queuebot {_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser(
        "serve", help="the bot: HTTP app (Slack endpoint, health), Slack", parents=[common]
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", default=8080, type=int, help="port to listen on")

    console = sub.add_parser(
        "console", help="chat with queuebot from the terminal (stdin)", parents=[common]
    )
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
    demo.add_argument(
        "--no-worker",
        dest="worker",
        action="store_false",
        help="run no simulated worker: redriven and requeued jobs stay queued",
    )

    db = sub.add_parser("db", help="queuebot's own database", parents=[common])
    db_sub = db.add_subparsers(dest="db_command", required=True, metavar="SUBCOMMAND")
    db_sub.add_parser(
        "upgrade",
        help="migrate queuebot's own tables to the newest schema",
        parents=[common],
    )
    grant = db_sub.add_parser(
        "grant",
        help="the least privilege of the role serve and console run as (PostgreSQL)",
        description="Print the GRANT statements for the runtime role, or apply them as the "
        "owner of queuebot's tables (QUEUEBOT_DATABASE_URL). The role must not own the tables.",
        parents=[common],
    )
    grant.add_argument("role", help="the runtime role (an existing PostgreSQL role)")
    grant.add_argument("--apply", action="store_true", help="run them now instead of printing them")

    config = sub.add_parser("config", help="configuration", parents=[common])
    config_sub = config.add_subparsers(dest="config_command", required=True, metavar="SUBCOMMAND")
    config_sub.add_parser(
        "check", help="validate config, environment and the estate", parents=[common]
    )

    audit = sub.add_parser("audit", help="queuebot's audit trail", parents=[common])
    audit_sub = audit.add_subparsers(dest="audit_command", required=True, metavar="SUBCOMMAND")
    verify = audit_sub.add_parser(
        "verify",
        help="check the audit chain and its anchors; 1 on any tampering",
        parents=[common],
    )
    verify.add_argument(
        "--anchor",
        action="append",
        default=[],
        metavar="N:MAC",
        help="an anchor kept outside the database (from `audit head`); repeatable",
    )
    verify.add_argument(
        "--anchor-file",
        type=Path,
        metavar="PATH",
        help="anchors one per line (blank lines and lines starting with # are skipped)",
    )
    audit_sub.add_parser(
        "head",
        help="verify the trail, then print its head as an anchor (N:MAC) to keep elsewhere",
        parents=[common],
    )

    estate = sub.add_parser("estate", help="the queue estate", parents=[common])
    estate_sub = estate.add_subparsers(dest="estate_command", required=True, metavar="SUBCOMMAND")
    indexes = estate_sub.add_parser(
        "indexes", help="recommended indexes for your tables", parents=[common]
    )
    indexes.add_argument(
        "--print",
        dest="print_sql",
        action="store_true",
        required=True,
        help="print the SQL (queuebot never creates them itself)",
    )
    runbook_cli.add_parser(sub, common)
    housekeep_cli.add_parser(sub, common)
    return p


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    return _parser().parse_args(argv)


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
        return await _demo(args)
    if args.command == "runbook":  # reads files (and, with none, the configuration) only
        held = runbook_cli.check(args.files, lambda: load_config(args.config))
        return 0 if held else EXIT_PROBLEM
    config = load_config(args.config)
    _databases_there(config, args)
    handlers: dict[str, Any] = {
        "console": lambda: _console(config, args.person),
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


async def _console(config: Config, person: str | None, banner: str | None = None) -> int:
    app = await build_app(config, notifier=ConsoleNotifier(sys.stdout), announce=banner is None)
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
    banner = await _demo_banner(config, db, config_path, built, worker=args.worker)
    if not args.worker:
        return await _console(config, args.person, banner=banner)
    async with running_demo_worker(config):  # beside the console, on the same event loop
        return await _console(config, args.person, banner=banner)


async def _demo_banner(
    config: Config, db: Path, config_path: Path, built: bool, *, worker: bool = True
) -> str:
    """The demo's welcome, with suggestions that fit the estate as it is now: the request
    and plan numbers they name are the next ones, and a plan or request left by an earlier
    run is followed up instead of suggesting a new one."""
    app = await build_app(config, announce=False)
    try:
        if built:  # the demo's queues have a history: their counts a quarter hour ago
            await record_history(app.state_engine, app.estate, ago=timedelta(minutes=15))
        reads = app.router.deps.reads
        dead = await reads.list_dead(queue="clips", filters=DeadFilter(limit=1))
        example = dead.rows[0].id if dead.rows else "<job id>"
        ffmpeg = (
            await reads.list_dead(queue="clips", filters=DeadFilter(error_like="ffmpeg", limit=1))
        ).total
        timeouts = (
            await reads.list_dead(
                queue="clips", filters=DeadFilter(error_like="upstream timeout", limit=1)
            )
        ).total
        pending = await app.changes.pending()
        state = await demo_state(app.state_engine)
    finally:
        await app.close()
    cr, plan = state.next_request, state.next_plan
    steps: list[str] = []
    for number, queue, plan_state in state.active_plans:
        if plan_state == "halted":
            steps.append(
                f"P-{number} ({queue}) is halted: /queue plan P-{number}; go on with @alice "
                f'/queue resume P-{number} --reason "...", or return its unclaimed jobs with '
                f'@alice /queue rollback P-{number} --reason "...", then @bob /queue approve '
                f"CR-{cr}."
            )
        else:
            steps.append(f"P-{number} ({queue}) is running: /queue plan P-{number} follows it.")
    for request in pending:
        other = "alice" if request.requester != "alice" else "bob"
        steps.append(
            f"{request.ref} ({request.kind.value} by {request.requester}) waits for approval: "
            f"@{other} /queue approve {request.ref}   (/queue pending lists every one)."
        )
    busy = any(queue == "clips" for _, queue, _ in state.active_plans) or any(
        r.kind.value == "plan" and r.queue == "clips" for r in pending
    )
    if not busy:  # one plan per queue: suggest a new one only when clips has none

        def halt(cr: int, plan: int) -> str:
            return (
                f'@alice /queue redrive --all --reason "transcoder fixed", then @bob /queue '
                f'approve CR-{cr}: its "upstream timeout" jobs die again and halt P-{plan}.'
            )

        if ffmpeg:
            steps.append(
                f'Watch a plan: @alice /queue redrive --error-like ffmpeg --sample 2 --reason "OOM '
                f'fix deployed", then @bob /queue approve CR-{cr}, and /queue plan P-{plan}.'
            )
            if timeouts and worker:
                steps.append("When it is done, watch a halt: " + halt(cr + 1, plan + 1))
        elif timeouts and worker:
            steps.append("Watch a halt: " + halt(cr, plan))
        elif not timeouts:
            steps.append(
                "Every dead letter of clips that can be redriven was: `queuebot demo --fresh` "
                "starts over."
            )
    runs = (
        "A simulated worker finishes redriven and requeued jobs a few seconds later; clips "
        'jobs that died of "upstream timeout" and workers rows of type continue-issue fail '
        "again (--no-worker turns it off)."
        if worker
        else "No worker runs (--no-worker): redriven and requeued jobs stay queued, so a "
        "plan waits after its sample."
    )
    built_or_reused = "built" if built else "reused (use --fresh to rebuild)"
    return "\n".join(
        [
            f"queuebot demo: estate {built_or_reused} in {db}; config in {config_path}.",
            "Queues: clips (message_job: messages + jobs), workers (worker_queue: one table).",
            "People: alice (operator, approver), bob (operator, approver), "
            "dora (duty-officer, operator).",
            f"Try: /queue triage | /queue triage --queue workers | @alice /queue show {example} | "
            "/queue help. End with Ctrl-D.",
            *(f"     {step}" for step in steps),
            runs,
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
