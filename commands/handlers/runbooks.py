"""``/incident runbooks [SCENARIO]``: the runbooks an incident can follow, and who may
declare each (the runbook's authority, and the queuebot role [roles] maps it to)."""

from __future__ import annotations

from commands.context import Invocation
from commands.deps import Deps
from commands.model import Runbooks
from commands.reply import Reply
from services.errors import ConfigError
from services.message import Block, Heading, Message, Table, Text
from services.runbooks import CHECKS, Authority, Communication, Runbook, queuebot_role


async def handle_runbooks(cmd: Runbooks, inv: Invocation, deps: Deps) -> Reply:
    if deps.runbooks is None:
        raise ConfigError("this queuebot process loaded no runbooks")
    if cmd.scenario is not None:
        return Reply(runbook_detail(deps.runbooks.get(cmd.scenario), deps))
    return Reply(runbook_list(list(deps.runbooks.all()), deps))


def runbook_list(runbooks: list[Runbook], deps: Deps) -> Message:
    summary = f"{len(runbooks)} runbook(s): " + ", ".join(r.scenario_id for r in runbooks)
    blocks: list[Block] = [
        Heading(f"Runbooks ({len(runbooks)})"),
        Text("/incident runbooks SCENARIO shows one in full."),
    ]
    for runbook in runbooks:
        blocks += [
            Heading(f"{runbook.scenario_id}: {runbook.title}"),
            Text(_outline(runbook, deps)),
        ]
    return Message(summary, tuple(blocks))


def runbook_detail(runbook: Runbook, deps: Deps) -> Message:
    statement = runbook.statement
    blocks: list[Block] = [
        Heading(f"{runbook.scenario_id}: {runbook.title}"),
        Text(_outline(runbook, deps)),
        Text(
            "\n".join(
                f"{c.audience}, within {c.window}, over {c.channel_dependency_id}: "
                + (c.draft or "(no draft)")
                for c in _by_window(runbook)
            )
        ),
        Table(
            ("validation", "queuebot check"),
            tuple(
                (item.text, f"{item.check} ({CHECKS[item.check]})" if item.check else "-")
                for item in runbook.validation
            ),
            title="Validation",
        ),
        Text(
            "\n".join(
                (
                    f"assumes healthy: {', '.join(statement.assumes) or 'nothing'}",
                    "secrets: "
                    + (
                        "; ".join(
                            f"{s.id} (in {s.held_in_dependency_id}, "
                            f"{'recoverable' if s.recoverable_out_of_band else 'NOT recoverable'}"
                            " out of band)"
                            for s in statement.secrets
                        )
                        or "none"
                    ),
                    f"fencing: {statement.fencing or 'none (nothing is promoted)'}",
                    f"failback: {statement.failback}",
                )
            )
        ),
    ]
    return Message(f"{runbook.scenario_id}: {runbook.title} ({runbook.id})", tuple(blocks))


def _outline(runbook: Runbook, deps: Deps) -> str:
    statement = runbook.statement
    told = ", ".join(f"{c.audience} within {c.window}" for c in _by_window(runbook))
    where = "shipped with queuebot" if runbook.shipped else runbook.source
    return "\n".join(
        (
            f"{runbook.id}, version {runbook.version} ({where})",
            f"declared by: {_authority(statement.declaration_authority, deps)}",
            f"detected by: {_authority(statement.detection_authority, deps)}",
            f"told: {told}",
            f"restore order: {', then '.join(runbook.restore_order) or 'nothing to restore'}",
            "redrives: "
            + (
                f"held on its queue until {runbook.blocks_redrives_until} is restored"
                if runbook.blocks_redrives_until
                else "none held (checked as usual)"
            ),
        )
    )


def _by_window(runbook: Runbook) -> list[Communication]:
    return sorted(runbook.communications, key=lambda c: c.within_ms)


def _authority(authority: Authority, deps: Deps) -> str:
    role = queuebot_role(deps.roles, authority.role)
    if role is None:
        return (
            f"{authority.role} ({authority.name}): not mapped to a queuebot role; add "
            f'[roles] "{authority.role}" = "ROLE"'
        )
    people = ", ".join(p.name for p in deps.directory.with_role(role)) or "nobody has it yet"
    return f"{authority.role} ({authority.name}), queuebot role {role}: {people}"
