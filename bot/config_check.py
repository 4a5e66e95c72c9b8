"""``queuebot config check``: validate everything a start would need and say what is
there. Each finding is a line on stdout; what will not work as meant is a ``problem:``
line on stderr (exit 1); what works but may surprise is a ``warning:`` line (exit 0)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.access_check import access_report, role_holders
from bot.alertmanager import describe as describe_alerting
from bot.alertmanager import posted_nowhere, token_warning
from bot.audit_key import UNKEYED, audit_trail
from bot.bootstrap import App, build_app
from bot.exits import EXIT_PROBLEM
from bot.readers import attach_slack_reader
from bot.slack.setup import POSTING_ONLY, slack_setup
from services.changes.quorum import SETTING, approvals_words
from services.config import ApprovalConfig, Config
from services.db import reading, redacted, same_database
from services.db.migrate import current_revision, head_revision
from services.errors import ConfigError, QueuebotError
from services.estate import write_access
from services.estate.profile import QueueProfile
from services.housekeeping.run import housekeeping_lines
from services.incidents.audiences import audience_problems
from services.plans.messages import one_approval
from services.runbooks import queuebot_role

SEPARATE_DATABASES = (
    "queuebot's tables (QUEUEBOT_DATABASE_URL) and the queue (QUEUEBOT_QUEUE_DATABASE_URL) "
    "are in different databases: reads work, but every change is refused, because a change "
    "and its audit event must commit in one transaction. Point QUEUEBOT_DATABASE_URL at the "
    "queue's database (queuebot's tables are prefixed qb_) and unset "
    "QUEUEBOT_QUEUE_DATABASE_URL."
)


@dataclass
class Findings:
    """What the check found: lines to show, problems (exit 1) and warnings (exit 0)."""

    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


async def config_check(config: Config) -> int:
    """Validate everything a start would need and say what is there."""
    app: App = await build_app(config, migrate=False, writes=False)
    attach_slack_reader(config, app)  # rotas' holders read live where the token is set
    found = Findings(
        lines=[
            f"config: {config.source or 'defaults (no file)'}",
            f"state database: {redacted(config.env.state_url)}",
            f"queue database: {redacted(config.env.estate_url)}",
        ]
    )
    if not same_database(config.env.state_url, config.env.estate_url):
        found.problems.append(SEPARATE_DATABASES)
    try:
        current = await current_revision(app.state_engine)
        head = head_revision()
        if current != head:
            found.problems.append(
                f"state database is at revision {current}, newest is {head}: "
                "run `queuebot db upgrade` (serve and console do it on start)"
            )
        await _queues(app, found)
        alerting, alert_problems = describe_alerting(config)
        found.lines.extend(alerting)
        found.problems.extend(alert_problems)
        found.lines.extend(_runbook_lines(app, config))
        found.problems.extend(audience_problems(app.router.deps.runbooks, config.file))
        await _people(app, config, found)
        if app.standings is not None:
            access = await access_report(app.standings, config)
            found.lines.extend(access.lines)
            found.warnings.extend(access.warnings)
        _environment(config, found)
        if current == head:
            trail = audit_trail(config)
            async with reading(app.state_engine) as conn:
                key_problem = await trail.key_problem(conn)
            if key_problem is not None:
                found.problems.append(key_problem)
    finally:
        await app.close()
    print("\n".join(found.lines))
    for warning in found.warnings:
        print(f"warning: {warning}")
    if found.problems:
        for problem in found.problems:
            print(f"problem: {problem}", file=sys.stderr)
        return EXIT_PROBLEM
    print("config check: ok")
    return 0


async def _queues(app: App, found: Findings) -> None:
    """Each configured queue's tables, what they turn off, and the housekeeping."""
    for name, profile in app.estate.profiles.items():
        try:
            async with app.estate.connect() as conn:
                tables = await profile.tables(conn)
                unreadable = await _unreadable(conn, profile)
                described = await profile.describe(conn)
                found.problems.extend([unreadable[1]] if unreadable else [])
                found.problems.extend(await write_access.missing(conn, profile))
            names = ", ".join(t.name for t in tables.values())
            found.lines.append(
                f"queue {name} ({profile.name}): tables {names} "
                + (f"found, not readable by role {unreadable[0]!r}" if unreadable else "ok")
            )
            found.lines.extend(f"  {line}" for line in described)
            found.lines.extend(f"  {line}" for line in housekeeping_lines(profile, tables))
        except QueuebotError as exc:
            found.problems.append(exc.message)


async def _unreadable(conn: AsyncConnection, profile: QueueProfile) -> tuple[str, str] | None:
    """The role and the problem when it may not read every column queuebot reads (the
    check ``/readyz`` makes; the tables are there, so reflecting them said nothing)."""
    try:
        await profile.check_access(conn)
    except ConfigError as exc:
        role = (await conn.execute(sa.text("SELECT current_user"))).scalar_one()
        return str(role), exc.message
    return None


async def _people(app: App, config: Config, found: Findings) -> None:
    """Who is configured, and whether their changes could be approved: by the people
    holding the approver role now, under [people] or from its groups."""
    people = config.file.people
    standings = app.standings
    grants = standings.grants if standings else {}
    found.lines.append(
        f"people: {', '.join(people)}"
        if people
        else "people: none under [people]"
        + (
            "; roles come from groups alone (docs/access.md)"
            if grants
            else " (everyone is read-only)"
        )
    )
    if not people and not grants:
        return
    if standings is None:
        approvers = [p.name for p in app.directory.with_role("approver")]
        requesters = [p.name for p in app.directory.with_role("operator")]
        unread: list[str] = []
    else:
        approvers, unread = await role_holders(standings, config, "approver")
        requesters, unread_requesters = await role_holders(standings, config, "operator")
        unread += unread_requesters
    if unread:  # who approves is not all known here: say so, judge nothing
        found.lines.append(
            f"approvers now: {', '.join(approvers) or 'none known'}; not all read "
            f"({'; '.join(dict.fromkeys(unread))})"
        )
        return
    if not approvers:
        found.problems.append("nobody has the approver role: no change could ever be approved")
    short = config_warning(config.file.approval, approvers, requesters)
    if short is not None:
        found.warnings.append(short)


def config_warning(
    approval: ApprovalConfig, approvers: Sequence[str], requesters: Sequence[str]
) -> str | None:
    """What ``config check`` warns of: changes the approvers configured could not approve
    for some of the people who may request them (the ``requesters``, with the operator
    role; a requester never counts for their own). None when every change could be
    approved whoever requests it."""
    n, names = len(approvers), ", ".join(approvers)
    if n == 0 or not requesters:
        return None  # "nobody has the approver role" is a problem of its own
    if n == 1 and approvers[0] in requesters:
        return (
            f"only one person is an approver ({names}): a change {names} requests could "
            "never be approved (the requester never counts); add approvers under [people]"
        )
    large = approval.large_change_approvals
    reach = {r: len([a for a in approvers if a != r]) for r in requesters}
    stuck = [r for r in requesters if reach[r] < large]
    if not stuck:
        return None
    most = min(reach.values())
    who = (
        "whoever requests it"
        if len(stuck) == len(requesters)
        else f"when {_either_names(stuck)} requests it"
    )
    lower = f"lower {SETTING} to {most}" if most > 0 else ""
    people = f"only {n} {'person is an approver' if n == 1 else 'people are approvers'}"
    return (
        f"a change of more than {approval.large_change_rows} rows (a requeue, cancel, "
        f"redrive by ids or rollback) needs {approvals_words(large)} besides its requester "
        f"({SETTING}), and {people} ({names}): such a change could never be approved "
        f'{who}; add approvers under [people] (roles = ["approver"])'
        f"{f' or {lower}' if lower else ''}. A staged redrive, judged by its sample, "
        f"{one_approval(approval)}."
    )


def _either_names(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _environment(config: Config, found: Findings) -> None:
    """The chat platform variables and the audit key, as validated (not the process's)."""
    env = config.env
    try:
        slack = slack_setup(env, posting_only=config.file.slack.posting_only)
        if slack.posting_only:
            found.lines.append(f"slack: {POSTING_ONLY}")
    except ConfigError as exc:  # serve would refuse to start
        found.problems.append(exc.message)
    nowhere = posted_nowhere(config)
    if nowhere is not None:
        found.warnings.append(nowhere)
    open_alerts = token_warning(config)
    if open_alerts is not None:
        found.warnings.append(open_alerts)
    for var, value in (
        ("SLACK_BOT_TOKEN", env.slack_bot_token),
        ("SLACK_SIGNING_SECRET", env.slack_signing_secret),
        ("SLACK_APP_TOKEN", env.slack_app_token),
    ):
        said = "empty (counts as not set)" if var in env.empty else "not set"
        found.lines.append(f"{var}: {'set' if value is not None else said}")
    found.lines.append(
        "QUEUEBOT_AUDIT_KEY: set (the audit chain is keyed)"
        if env.audit_key is not None
        else f"QUEUEBOT_AUDIT_KEY: not set: {UNKEYED.split(': ', 1)[1]}"
    )


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
    standings = app.standings
    for r in runbooks:
        rota = standings.rota(r.declaration_role, r.declaration_name) if standings else None
        if rota is not None:
            lines.append(f"  {r.scenario_id}: declared by whoever holds rota {rota[0]}")
        elif queuebot_role(config.file.authority_roles(), r.declaration_role) is None:
            lines.append(
                f"  {r.scenario_id}: declared by {r.declaration_role!r}, which neither [rotas] "
                "nor [roles] names yet (incidents need it)"
            )
    return lines
