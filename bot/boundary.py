"""The error boundary every adapter puts around a command: one place, one behaviour.

Known errors become the reply a person reads; anything else is logged with its traceback
and answered with the correlation id that finds it in the log.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import TypeVar

from commands import messages
from commands.reply import Reply
from services.errors import QueuebotError, Unavailable

log = logging.getLogger("queuebot")
T = TypeVar("T")


async def answer(call: Awaitable[T], *, correlation_id: str, where: str) -> T | Reply:
    try:
        return await call
    except Unavailable as exc:  # one line, no traceback: the cause is outside queuebot
        log.warning("[%s] %s: %s", correlation_id, where, exc.message)
        return messages.error_reply(exc)
    except QueuebotError as exc:
        return messages.error_reply(exc)
    except Exception:
        log.exception("unexpected error [%s] in %s", correlation_id, where)
        return messages.unexpected_reply(correlation_id)
