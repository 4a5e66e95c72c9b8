"""A person's board where they opened it (a Slack App Home): the same board ``/queue board``
shows them (commands/handlers/board.py), their standing resolved the same way (the roles
their groups give them decide what waits for their approval) and their right to read it
checked as the command's; an account that may not read it is shown why, in place of the
board. The board is made of a snapshot read once for every App Home refreshed together."""

from __future__ import annotations

from commands.auth import authorize
from commands.catalog import spec_for
from commands.context import Invocation
from commands.deps import Deps
from commands.messages import with_notes
from commands.model import ShowBoard
from services.board import Snapshot, board_message
from services.errors import PermissionDenied
from services.message import Heading, Message, Text

BOARD = spec_for(ShowBoard())


async def home_words(deps: Deps, snapshot: Snapshot, platform: str, account: str) -> Message:
    """The board of the person with ``account`` on ``platform``, as of ``snapshot``."""
    person = deps.directory.by_account(platform, account)
    if deps.standings is not None:
        # an unknown account may be made known by a group; a known one's roles from
        # groups decide what waits for their approval
        person = await deps.standings.standing(person, platform=platform, account=account)
    try:
        authorize(
            BOARD,
            Invocation(person=person, platform=platform, account=account),
            deps.access,
            people=deps.directory.names(),
            config_file=deps.config_file,
        )
    except PermissionDenied as refused:
        return Message("queuebot shows you no board", (Heading("queuebot"), Text(refused.message)))
    message = board_message(snapshot.board(person))
    return with_notes(message, person.notes) if person is not None else message
