"""Deliveries written down before their ack, by a thread of their own (PostgreSQL).

Slack and Discord wait for the ack; queuebot's event loop meanwhile computes earlier
answers. A write made on the loop waits for several of its turns (a connection, the
INSERT, the commit), each behind whatever answer work is ready, and under a burst that
was hundreds of milliseconds before each ack. Here one thread with one connection of
its own writes the claims: all the deliveries waiting when it is free go in one INSERT
and one commit (group commit), and each waiting ack is woken once, when its row is
committed. A key already in the ledger (a redelivery) is left to the caller.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import queue
import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import URL

from services.errors import DatabaseUnavailable
from services.models import Delivery

log = logging.getLogger("queuebot.ledger")
_deliveries = cast(sa.Table, Delivery.__table__)
MOST = 200  # rows per INSERT
CLAIMED = "claimed"


@dataclass(frozen=True)
class Ask:
    key: str
    owner: str
    request: dict[str, Any]
    at: datetime
    written: concurrent.futures.Future[bool]  # True: this row is ours; False: key existed


class ThreadedAcks:
    def __init__(self, url: URL) -> None:
        self.url = url
        self._asks: queue.SimpleQueue[Ask | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    async def write(self, key: str, owner: str, request: dict[str, Any], at: datetime) -> bool:
        """Whether the row was written as this claim (False: the key is in the ledger
        already); ``DatabaseUnavailable`` when it could not be written."""
        self._start()
        written: concurrent.futures.Future[bool] = concurrent.futures.Future()
        self._asks.put(Ask(key, owner, request, at, written))
        return await asyncio.wrap_future(written)

    def _start(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="queuebot-acks", daemon=True)
                self._thread.start()

    def close(self) -> None:
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None and thread.is_alive():
            self._asks.put(None)
            thread.join(timeout=5)

    def _run(self) -> None:
        engine = sa.create_engine(
            self.url.set(drivername="postgresql+psycopg"), pool_size=1, pool_pre_ping=True
        )
        try:
            while True:
                first = self._asks.get()
                if first is None:
                    return
                batch = [first]
                with contextlib.suppress(queue.Empty):
                    while len(batch) < MOST:
                        more = self._asks.get_nowait()
                        if more is None:
                            self._asks.put(None)  # stop after this batch
                            break
                        batch.append(more)
                self._write(engine, batch)
        finally:
            engine.dispose()

    def _write(self, engine: sa.Engine, batch: list[Ask]) -> None:
        try:
            with engine.begin() as conn:
                rows = conn.execute(
                    pg_insert(_deliveries)
                    .values(
                        [
                            {
                                "key": a.key,
                                "seen_at": a.at,
                                "state": CLAIMED,
                                "owner": a.owner,
                                "request": a.request,
                            }
                            for a in batch
                        ]
                    )
                    .on_conflict_do_nothing()
                    .returning(_deliveries.c.owner)
                )
                ours = {str(row.owner) for row in rows}
        except Exception as exc:  # the caller acknowledges anyway; the work says why
            log.debug("could not write %d deliveries down: %s", len(batch), type(exc).__name__)
            failure = DatabaseUnavailable(
                database="queuebot's", detail=type(exc).__name__, committed=None
            )
            for ask in batch:
                if not ask.written.done():
                    ask.written.set_exception(failure)
            return
        for ask in batch:
            if not ask.written.done():
                ask.written.set_result(ask.owner in ours)
