"""What a read command (/queue triage, dlq, stuck, show) replies over an estate, rendered
as the console prints it, without a router or a person: its handler called directly."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

from bot.render_text import render_message
from commands.handlers import queue_read
from commands.model import Dlq, Show, Stuck
from commands.model import Triage as TriageCommand
from services.estate.estate import Estate
from services.reads.gate import ReadGate
from services.reads.service import QueueReads

HANDLERS: dict[type[object], Callable[..., Awaitable[Any]]] = {
    TriageCommand: queue_read.handle_triage,
    Dlq: queue_read.handle_dlq,
    Stuck: queue_read.handle_stuck,
    Show: queue_read.handle_show,
}


async def read_reply(estate: Estate, command: TriageCommand | Dlq | Stuck | Show) -> str:
    """The reply to ``command``, read afresh (nothing kept from an earlier read)."""
    reads = QueueReads(estate, gate=ReadGate(fresh_for=0.0))
    handler = HANDLERS[type(command)]
    done = await handler(command, None, SimpleNamespace(reads=reads))
    return render_message(done.message)
