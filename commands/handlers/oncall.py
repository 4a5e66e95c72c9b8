"""``/queue oncall`` and ``/incident whois [ROTA]``: who holds each rota now and, for a
schedule, until when and who is next; each owned queue's teams and their members now.
Read from the same sources, through the same cache, as authorization (docs/access.md)."""

from __future__ import annotations

from commands import roster
from commands.context import Invocation
from commands.deps import Deps
from commands.messages import access as words
from commands.model import Oncall, Whois
from commands.reply import Reply
from services.access import Standings
from services.config import rota_key
from services.errors import ConfigError


def _standings(deps: Deps) -> Standings:
    if deps.standings is None:
        raise ConfigError("this queuebot process does not read rotas or teams")
    return deps.standings


async def handle_oncall(cmd: Oncall, inv: Invocation, deps: Deps) -> Reply:
    standings = _standings(deps)
    held = await roster.rotas_now(standings)
    owned = await roster.owners_now(standings)
    return Reply(words.oncall_message(held, owned))


async def handle_whois(cmd: Whois, inv: Invocation, deps: Deps) -> Reply:
    standings = _standings(deps)
    if cmd.rota is None:
        return Reply(words.whois_message(await roster.rotas_now(standings)))
    held = await standings.holders(cmd.rota)
    if held is None:
        raise words.unknown_rota(cmd.rota, [name for name, _ in standings.rotas.values()])
    key = rota_key(held.rota)
    declares = [
        r.scenario_id
        for r in (deps.runbooks.all() if deps.runbooks else ())
        if (found := standings.rota(r.declaration_role, r.declaration_name))
        and rota_key(found[0]) == key
    ]
    return Reply(words.rota_message(held, roster.rota_gives(standings, held.rota), declares))
