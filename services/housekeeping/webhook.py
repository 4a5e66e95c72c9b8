"""The optional webhook told of each retry-exhausted row before it is retired (a team's
"permanent failure" hook: a GitHub comment and a human-action label, a pager, ...).

One POST of JSON per row; a 2xx answer means a human was told. Anything else (an error
status, a timeout, a refused connection) means the row was not, and it stays failed."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
from pydantic import SecretStr

from services.errors import ConfigError
from services.jsonable import dumps

log = logging.getLogger("queuebot.housekeeping")
TIMEOUT = 10.0
AT_ONCE = 8  # requests in flight at once
_URL = re.compile(r"^https?://[^\s/]+")


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
        """POST each row; by row id, None where a 2xx came back, else why not."""
        gate = asyncio.Semaphore(AT_ONCE)
        results: dict[str, str | None] = {}

        async def one(client: httpx.AsyncClient, row: Mapping[str, Any]) -> None:
            async with gate:
                try:
                    answer = await client.post(
                        self._url.get_secret_value(),
                        content=dumps({"event": "retry_exhausted", **row}),
                        headers={"content-type": "application/json"},
                    )
                except httpx.HTTPError as exc:
                    results[str(row["id"])] = (
                        f"the webhook could not be reached ({type(exc).__name__})"
                    )
                    return
                if 200 <= answer.status_code < 300:
                    results[str(row["id"])] = None
                else:
                    results[str(row["id"])] = f"the webhook answered HTTP {answer.status_code}"

        async with httpx.AsyncClient(timeout=self.timeout) as client:
            await asyncio.gather(*(one(client, row) for row in rows))
        failed = sum(1 for why in results.values() if why)
        if failed:
            log.warning("the housekeeping webhook did not take %d of %d rows", failed, len(rows))
        return results
