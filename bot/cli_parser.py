"""The command line's grammar and its help: what ``queuebot --help`` and each command's
``--help`` print. Help is plain text that fits an 80-column terminal (the tests hold it
to that); what runs each command is in ``bot/cli.py``."""

from __future__ import annotations

import argparse
import re
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, NoReturn

from bot.exits import EXIT_USAGE
from bot.healthcheck import DEFAULT_HOST, DEFAULT_PORT

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

DESCRIPTION = """\
queuebot: ChatOps for job queues. Every failure is one line on stderr and an
exit code that names its kind (README.md, section "Exit codes"):

  0    done
  1    a check found a problem: audit verify or audit head found the trail
       tampered with, config check listed problems, runbook check found a
       runbook broken
  2    the command line, the configuration file or the environment is wrong
  3    the audit trail is keyed and QUEUEBOT_AUDIT_KEY is not set
  4    db grant refused
  5    a database cannot be reached (down, wrong address or credentials, no
       such SQLite file or directory)
  6    queuebot's own tables are missing or at another revision: run
       queuebot db upgrade
  70   an unexpected error (a bug): run again with --log-level DEBUG for the
       traceback
  130  interrupted

Every command takes --config and --log-level before or after its name.
"queuebot COMMAND --help" says more about each."""

SERVE_DESCRIPTION = """\
Run the bot: the HTTP app (health, metrics, the Slack events endpoint,
Alertmanager's webhook), Slack (HTTP or Socket Mode) and Discord where their
variables are set, and the background work (alerts, the outbox, the
scheduler: plan waves, request expiry, queue counts). On PostgreSQL the
background work runs in a worker process serve starts; on SQLite, in this one.
It migrates queuebot's tables on start."""

# Every variable serve reads (services/config/env.py EnvSettings, and the log level read in
# bot/cli.py); a test holds this list to the settings, so a new variable cannot be missed.
SERVE_ENVIRONMENT: dict[str, str] = {
    "QUEUEBOT_CONFIG": "the TOML file, when --config is not given",
    "QUEUEBOT_LOG_LEVEL": "the log threshold, without --log-level",
    "QUEUEBOT_DATABASE_URL": "queuebot's database (default ./queuebot.db)",
    "QUEUEBOT_QUEUE_DATABASE_URL": "the queue's database, when it is another",
    "QUEUEBOT_AUDIT_KEY": "the audit chain's HMAC key (32+ characters)",
    "QUEUEBOT_ALERT_TOKEN": "the token Alertmanager must send (required)",
    "QUEUEBOT_HOUSEKEEP_WEBHOOK_URL": "told before housekeeping retires a job",
    "QUEUEBOT_CLAIM_STALE_SECONDS": "seconds until a delivery claim is stale (10)",
    "SLACK_BOT_TOKEN": "Slack: the bot token (xoxb-...)",
    "SLACK_SIGNING_SECRET": "Slack: the signing secret, for HTTP events",
    "SLACK_APP_TOKEN": "Slack: app-level token, Socket Mode (xapp-)",
    "SLACK_API_BASE_URL": "Slack's Web API (https://slack.com/api/)",
    "DISCORD_BOT_TOKEN": "Discord: the bot token",
    "DISCORD_API_BASE_URL": "Discord's API (https://discord.com/api/v10)",
}


def _environment_epilog() -> str:
    width = max(len(name) for name in SERVE_ENVIRONMENT)
    lines = [f"  {name:<{width}}  {said}" for name, said in SERVE_ENVIRONMENT.items()]
    return (
        "environment variables (empty counts as not set):\n"
        + "\n".join(lines)
        + "\neach secret (a database URL, a token, a key) may instead be given as NAME_FILE,\n"
        "the path of a file holding it; serve needs an alert token unless its file says\n"
        "[alerts] allow_unauthenticated = true"
    )


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the command and where help is."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see `{self.prog} --help`)\n")


def _version() -> str:
    try:
        return metadata.version("queuebot")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def _config_option(p: argparse.ArgumentParser, *, default: str | None, said: str) -> None:
    p.add_argument("--config", default=default, metavar="FILE", help=said)


def _log_level_option(p: argparse.ArgumentParser, *, default: str | None) -> None:
    p.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default=default,
        metavar="LEVEL",
        help=f"log threshold: {', '.join(LOG_LEVELS)} (default: $QUEUEBOT_LOG_LEVEL or WARNING)",
    )


def _common(*, top: bool) -> _Parser:
    """Options every command takes, before or after its name (``queuebot console --config
    x.toml`` as well as ``queuebot --config x.toml console``). After the name they default
    to nothing, so they never undo the same option given before it."""
    p = _Parser(add_help=False)
    unset = None if top else argparse.SUPPRESS
    _config_option(
        p, default=unset, said="TOML file (default: $QUEUEBOT_CONFIG or ./queuebot.toml)"
    )
    _log_level_option(p, default=unset)
    return p


def _demo(sub: argparse._SubParsersAction[_Parser]) -> None:
    demo = sub.add_parser(
        "demo",
        help="a demo estate and configuration on SQLite, then the console",
        description="Build a demo estate of two queues in a SQLite file, write a demo "
        "configuration (people alice, bob and dora), and open the console on them, with a "
        "simulated worker beside it. Run it again to reuse the estate.",
    )
    # Its own --config: the demo's file, which it writes when absent (README, the console).
    _config_option(
        demo,
        default=argparse.SUPPRESS,
        said="the demo's configuration: written when absent, read when present "
        "(default: queuebot.demo.toml beside --db)",
    )
    _log_level_option(demo, default=argparse.SUPPRESS)
    demo.add_argument(
        "--db",
        default="queuebot.db",
        type=Path,
        metavar="FILE",
        help="SQLite file for the demo (default: ./queuebot.db)",
    )
    demo.add_argument(
        "--fresh",
        action="store_true",
        help="rebuild the demo estate from scratch, and rewrite queuebot.demo.toml "
        "(never a file named with --config)",
    )
    demo.add_argument(
        "--as", dest="person", metavar="PERSON", help="act as this person (alice, bob, dora)"
    )
    demo.add_argument(
        "--no-worker",
        dest="worker",
        action="store_false",
        help="run no simulated worker: redriven and requeued jobs stay queued",
    )


def build_parser() -> argparse.ArgumentParser:
    common = _common(top=False)
    p = _Parser(
        prog="queuebot",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[_common(top=True)],
    )
    p.add_argument("--version", action="version", version=f"queuebot {_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser(
        "serve",
        help="the bot: HTTP app, Slack, Discord and the background work",
        description=SERVE_DESCRIPTION,
        epilog=_environment_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    serve.add_argument(
        "--host", default=DEFAULT_HOST, help="address to listen on (default: %(default)s)"
    )
    serve.add_argument(
        "--port", default=DEFAULT_PORT, type=int, help="port to listen on (default: %(default)s)"
    )

    console = sub.add_parser(
        "console", help="chat with queuebot from the terminal (stdin)", parents=[common]
    )
    console.add_argument(
        "--as", dest="person", metavar="PERSON", help="act as this person from [people]"
    )
    _demo(sub)

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
    prune = db_sub.add_parser(
        "prune",
        help="remove queuebot's own done, old residue (audited)",
        description="Remove what is done and older than AGE from queuebot's own tables "
        "(QUEUEBOT_DATABASE_URL): chat posts sent or closed, done delivery keys, queue counts "
        "(each queue's newest stays) and processed alert notifications. The audit trail, "
        "change requests, plans, incidents and set-aside alerts are never removed. Deletes "
        "in batches of 1000 rows, each with its db.pruned audit event (docs/retention.md).",
        parents=[common],
    )
    prune.add_argument(
        "--older-than",
        required=True,
        metavar="AGE",
        help="how old what goes is: a whole number and h, d or w (30d, 8w); at least 24h",
    )
    prune.add_argument(
        "--dry-run",
        action="store_true",
        help="count what would go; delete nothing, write no audit event",
    )

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
        help="an anchor kept outside the database (from audit head); repeatable",
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
        "indexes",
        help="print the recommended indexes for your tables",
        description="Print the SQL of the indexes that make queuebot's reads fast on your "
        "tables (queuebot never creates them itself). Printing is all it does; --print is "
        "accepted for scripts that pass it.",
        parents=[common],
    )
    indexes.add_argument(
        "--print",
        dest="print_sql",
        action="store_true",
        help="print the SQL (what it does anyway)",
    )
    _add_runbook(sub, common)
    _add_housekeep(sub, common)
    return p


RUNBOOK_DESCRIPTION = (
    "Check runbook files: the marker, the statement's JSON and every rule of it. Prints an "
    "ok line per runbook that holds and a line per problem (FILE: PATH: what is wrong). "
    "Exit 0 when all hold, 1 when any is broken, 2 when a file cannot be read. With no "
    "FILE, checks the runbooks queuebot would load: the shipped ones and [runbooks] dir."
)


def _add_runbook(sub: Any, common: argparse.ArgumentParser) -> None:
    """``runbook check [FILE...]`` (bot/runbook_cli.py runs it)."""
    runbook = sub.add_parser("runbook", help="runbooks: check their statements", parents=[common])
    runbook_sub = runbook.add_subparsers(
        dest="runbook_command", required=True, metavar="SUBCOMMAND"
    )
    check = runbook_sub.add_parser(
        "check",
        help="check runbook files (default: the shipped ones and [runbooks] dir)",
        description=RUNBOOK_DESCRIPTION,
        parents=[common],
    )
    check.add_argument(
        "files",
        nargs="*",
        type=Path,
        metavar="FILE",
        help="a runbook's Markdown file, or a folder of them",
    )


HOUSEKEEP_DESCRIPTION = (
    "Run the worker-queue retry worker once: cancel duplicate queued rows (A), retry "
    "failed rows with backoff and retire retry-exhausted ones once a human is told (B), "
    "delete old stale duplicates (C), release stuck claims (D), requeue trivial failures "
    "(E), re-route away from nodes running out of memory (F). Message queues are reported "
    "on, never changed. Thresholds come from [housekeeping]."
)


def _add_housekeep(sub: Any, common: argparse.ArgumentParser) -> None:
    """``housekeep [--dry-run] [--only A,B]`` (bot/housekeep_cli.py runs it)."""
    housekeep = sub.add_parser(
        "housekeep",
        help="run the retry worker once (for a timer); --dry-run says what it would do",
        description=HOUSEKEEP_DESCRIPTION,
        parents=[common],
    )
    housekeep.add_argument(
        "--dry-run", action="store_true", help="print what a run would change; change nothing"
    )
    housekeep.add_argument(
        "--only", metavar="A,B", default=None, help="only these parts (A-F, comma-separated)"
    )


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    return build_parser().parse_args(_negative_ages_joined(sys.argv[1:] if argv is None else argv))


def _negative_ages_joined(argv: list[str]) -> list[str]:
    """``--older-than -1d`` as ``--older-than=-1d``: argparse takes a value starting with
    a dash for an option and says only "expected one argument"; joined, the age reaches
    its own check, which says that an age must be positive."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1] == "--older-than" and re.fullmatch(r"-\d+[a-zA-Z]*", arg):
            out[-1] = f"--older-than={arg}"
        else:
            out.append(arg)
    return out
