"""``queuebot config check``: validate everything a start would need and say what is
there. Each finding is a line on stdout; what will not work as meant is a ``problem:``
line on stderr (exit 1); what works but may surprise is a ``warning:`` line (exit 0)."""

from __future__ import annotations

import sys

from bot.alertmanager import describe as describe_alerting
from bot.bootstrap import UNKEYED, App, audit_trail, build_app
from services.config import Config
from services.db import reading, redacted, same_database
from services.errors import QueuebotError
from services.housekeeping.run import housekeeping_lines
from services.migrate import current_revision, head_revision
from services.runbooks import queuebot_role

EXIT_PROBLEM = 1

SEPARATE_DATABASES = (
    "queuebot's tables (QUEUEBOT_DATABASE_URL) and the queue (QUEUEBOT_QUEUE_DATABASE_URL) "
    "are in different databases: reads work, but every change is refused, because a change "
    "and its audit event must commit in one transaction. Point QUEUEBOT_DATABASE_URL at the "
    "queue's database (queuebot's tables are prefixed qb_) and unset "
    "QUEUEBOT_QUEUE_DATABASE_URL."
)


async def config_check(config: Config) -> int:
    """Validate everything a start would need and say what is there."""
    app: App = await build_app(config, migrate=False, writes=False)
    problems: list[str] = []
    lines = [
        f"config: {config.source or 'defaults (no file)'}",
        f"state database: {redacted(config.env.state_url)}",
        f"queue database: {redacted(config.env.estate_url)}",
    ]
    if not same_database(config.env.state_url, config.env.estate_url):
        problems.append(SEPARATE_DATABASES)
    try:
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
                    described = await profile.describe(conn)
                lines.append(
                    f"queue {name} ({profile.name}): tables "
                    f"{', '.join(t.name for t in tables.values())} ok"
                )
                lines.extend(f"  {line}" for line in described)
                lines.extend(f"  {line}" for line in housekeeping_lines(profile, tables))
            except QueuebotError as exc:
                problems.append(exc.message)
        alerting, alert_problems = describe_alerting(config)
        lines.extend(alerting)
        problems.extend(alert_problems)
        lines.extend(_runbook_lines(app, config))
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
            said = "empty (counts as not set)" if var in env.empty else "not set"
            lines.append(f"{var}: {'set' if value is not None else said}")
        lines.append(
            "QUEUEBOT_AUDIT_KEY: set (the audit chain is keyed)"
            if env.audit_key is not None
            else f"QUEUEBOT_AUDIT_KEY: not set: {UNKEYED.split(': ', 1)[1]}"
        )
        if current == head:
            trail = audit_trail(config)
            async with reading(app.state_engine) as conn:
                key_problem = await trail.key_problem(conn)
            if key_problem is not None:
                problems.append(key_problem)
    finally:
        await app.close()
    print("\n".join(lines))
    if problems:
        for problem in problems:
            print(f"problem: {problem}", file=sys.stderr)
        return EXIT_PROBLEM
    print("config check: ok")
    return 0


def _runbook_lines(app: App, config: Config) -> list[str]:
    """The runbooks loaded, and each declaring authority [roles] does not map yet."""
    shelf = app.router.deps.runbooks
    if shelf is None:
        return []
    runbooks = shelf.all()
    own = [r for r in runbooks if not r.shipped]
    lines = [
        f"runbooks: {', '.join(r.scenario_id for r in runbooks)} ({len(runbooks) - len(own)} "
        f"shipped, {len(own)} from [runbooks] dir)"
    ]
    lines += [
        f"  {r.scenario_id}: declared by {r.declaration_role!r}, which [roles] does not map "
        "to a queuebot role yet (incidents need it)"
        for r in runbooks
        if queuebot_role(config.file.roles, r.declaration_role) is None
    ]
    return lines
