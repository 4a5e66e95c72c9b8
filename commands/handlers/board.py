"""``/queue board``: what the person has to do and watch now, the same board a Slack App
Home and a Discord status message show (``services/board``)."""

from __future__ import annotations

from commands.context import Invocation
from commands.deps import Deps
from commands.messages import with_notes
from commands.model import ShowBoard
from commands.reply import Reply
from services.board import board_message
from services.errors import ConfigError


async def handle_board(cmd: ShowBoard, inv: Invocation, deps: Deps) -> Reply:
    if deps.board is None:
        raise ConfigError("this queuebot process shows no board")
    person = inv.person
    if deps.standings is not None and person is not None:
        # a read is authorized without the groups, but what waits for the person's
        # approval rests on the roles they hold now: the groups' grants included
        person = await deps.standings.standing(
            person, platform=inv.platform, account=inv.account, chat_roles=inv.chat_roles
        )
    message = board_message(await deps.board.board(person=person))
    return Reply(with_notes(message, person.notes) if person is not None else message)
