"""``/incident runbooks [SCENARIO]``: the runbooks an incident can follow, and who may
declare each (the runbook's authority: the rota [rotas] names by it and who holds that now,
else the queuebot role [roles] maps it to and who holds that)."""

from __future__ import annotations

from collections.abc import Mapping

from commands.context import Invocation
from commands.deps import Deps
from commands.messages import holders_words
from commands.model import Runbooks
from commands.reply import Reply
from services.errors import ConfigError
from services.message import Block, Heading, Message, Table, Text
from services.runbooks import CHECKS, Authority, Communication, Runbook, queuebot_role

# who holds each authority now, by (role, name), as the outline says it
Holding = Mapping[tuple[str, str], str]


async def handle_runbooks(cmd: Runbooks, inv: Invocation, deps: Deps) -> Reply:
    if deps.runbooks is None:
        raise ConfigError("this queuebot process loaded no runbooks")
    if cmd.scenario is not None:
        runbook = deps.runbooks.get(cmd.scenario)
        return Reply(runbook_detail(runbook, await _holding([runbook], deps)))
    runbooks = list(deps.runbooks.all())
    return Reply(runbook_list(runbooks, await _holding(runbooks, deps)))


async def _holding(runbooks: list[Runbook], deps: Deps) -> Holding:
    """Each authority of ``runbooks`` and who holds it now: the rota [rotas] names by its
    role or name (its holders now), else the queuebot role [roles] maps it to (everyone
    holding that role, from [people] and its groups)."""
    found: dict[tuple[str, str], str] = {}
    for runbook in runbooks:
        statement = runbook.statement
        for authority in (statement.declaration_authority, statement.detection_authority):
            key = (authority.role, authority.name)
            if key not in found:
                found[key] = await _authority(authority, deps)
    return found


def runbook_list(runbooks: list[Runbook], holding: Holding) -> Message:
    summary = f"{len(runbooks)} runbook(s): " + ", ".join(r.scenario_id for r in runbooks)
    blocks: list[Block] = [
        Heading(f"Runbooks ({len(runbooks)})"),
        Text("/incident runbooks SCENARIO shows one in full."),
    ]
    for runbook in runbooks:
        blocks += [
            Heading(f"{runbook.scenario_id}: {runbook.title}"),
            Text(_outline(runbook, holding)),
        ]
    return Message(summary, tuple(blocks))


def runbook_detail(runbook: Runbook, holding: Holding) -> Message:
    statement = runbook.statement
    blocks: list[Block] = [
        Heading(f"{runbook.scenario_id}: {runbook.title}"),
        Text(_outline(runbook, holding)),
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


def _outline(runbook: Runbook, holding: Holding) -> str:
    statement = runbook.statement
    told = ", ".join(f"{c.audience} within {c.window}" for c in _by_window(runbook))
    where = "shipped with queuebot" if runbook.shipped else runbook.source
    return "\n".join(
        (
            f"{runbook.id}, version {runbook.version} ({where})",
            f"declared by: {_held(statement.declaration_authority, holding)}",
            f"detected by: {_held(statement.detection_authority, holding)}",
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


def _held(authority: Authority, holding: Holding) -> str:
    return holding[(authority.role, authority.name)]


async def _authority(authority: Authority, deps: Deps) -> str:
    standings = deps.standings
    rota = standings.rota(authority.role, authority.name) if standings else None
    if standings is not None and rota is not None:
        held = await standings.holders(rota[0])
        return f"{authority.role} ({authority.name}): rota {rota[0]}, {holders_words(held)}"
    role = queuebot_role(deps.roles, authority.role)
    if role is None:
        return (
            f"{authority.role} ({authority.name}): not mapped to a queuebot role; add "
            f'[roles] "{authority.role}" = "ROLE", or a rota of that name under [rotas]'
        )
    if standings is not None:
        names, unread = await standings.with_role(role)
    else:
        names, unread = [p.name for p in deps.directory.with_role(role)], []
    people = ", ".join(names) or ("not known" if unread else "nobody has it yet")
    also = f" ({'; '.join(unread)})" if unread else ""
    return f"{authority.role} ({authority.name}), queuebot role {role}: {people}{also}"
