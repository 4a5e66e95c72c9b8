"""The optional webhook told of each retry-exhausted row before it is retired (a team's
"permanent failure" hook: a GitHub comment and a human-action label, a pager, ...).

One POST of JSON per row; a 2xx answer means a human was told. Anything else (an error
status, no answer within the timeout, a refused connection) means the row was not, and
it stays failed. Housekeeping calls it before its transaction, never inside one.

Delivery is at least once: a run that is killed after a POST and before its commit, or
two runs at once, tell the same row again. Each POST carries an ``Idempotency-Key``
header (and ``idempotency_key`` in its body) that is the same for every telling of one
row's exhaustion, so the receiver can drop the repeats."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from services.errors import ConfigError
from services.estate.profile import as_utc
from services.jsonable import dumps

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("queuebot.housekeeping")
TIMEOUT = 10.0  # seconds one POST may take in all, answer included
AT_ONCE = 8  # requests in flight at once
HEADER = "Idempotency-Key"
EVENT = "retry_exhausted"
_URL = re.compile(r"^https?://[^\s/]+")


def idempotency_key(
    *, queue: str, job: str, retry: Any, max_retries: Any, next_attempt_at: datetime | None
) -> str:
    """The same for every run that tells of one exhaustion of a job: it is derived from
    the queue, the job and the retry state it was exhausted in (which a retry-exhausted
    row keeps until it is retired or given another chance), so a job that is requeued and
    exhausts its retries again is told under a new key."""
    when = as_utc(next_attempt_at)
    parts = (EVENT, queue, job, str(retry), str(max_retries), when.isoformat() if when else "")
    digest = hashlib.sha256("\x1f".join(parts).encode()).hexdigest()
    return f"queuebot-{EVENT.replace('_', '-')}-{digest[:32]}"


class Webhook:
    def __init__(self, url: SecretStr, *, timeout: float = TIMEOUT) -> None:
        if not _URL.match(url.get_secret_value()):
            raise ConfigError(
                "QUEUEBOT_HOUSEKEEP_WEBHOOK_URL is not an http(s) URL; set it to the address "
                "that takes a JSON POST per retry-exhausted job, or unset it"
            )
        self._url = url
        self.timeout = timeout

    def __repr__(self) -> str:
        return "Webhook(url=<hidden>)"

    async def tell(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, str | None]:
        """POST each row (each has its ``id`` and ``idempotency_key``), each within the
        timeout; by idempotency key, None where a 2xx came back, else why not."""
        import httpx  # here: every command builds a Webhook, few runs ever tell one (~0.1 s)

        gate = asyncio.Semaphore(AT_ONCE)
        results: dict[str, str | None] = {}

        async def one(client: httpx.AsyncClient, row: Mapping[str, Any]) -> None:
            key = str(row["idempotency_key"])
            async with gate:
                try:
                    async with asyncio.timeout(self.timeout):
                        answer = await client.post(
                            self._url.get_secret_value(),
                            content=dumps({"event": EVENT, **row}),
                            headers={"content-type": "application/json", HEADER: key},
                        )
                except (TimeoutError, httpx.TimeoutException):
                    results[key] = f"the webhook gave no answer within {self.timeout:g} s"
                    return
                except httpx.HTTPError as exc:
                    results[key] = f"the webhook could not be reached ({type(exc).__name__})"
                    return
                if 200 <= answer.status_code < 300:
                    results[key] = None
                else:
                    results[key] = f"the webhook answered HTTP {answer.status_code}"

        async with httpx.AsyncClient(timeout=self.timeout) as client:
            await asyncio.gather(*(one(client, row) for row in rows))
        failed = sum(1 for why in results.values() if why)
        if failed:
            log.warning("the housekeeping webhook did not take %d of %d rows", failed, len(rows))
        return results
