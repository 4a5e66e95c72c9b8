"""Deliveries written down before their ack, by a thread of their own (PostgreSQL).

Slack and Discord wait for the ack; queuebot's event loop meanwhile computes earlier
answers. A write made on the loop waits for several of its turns (a connection, the
INSERT, the commit), each behind whatever answer work is ready, and under a burst that
was hundreds of milliseconds before each ack. Here one thread with one connection of
its own writes the claims: all the deliveries waiting when it is free go in one INSERT,
committed by itself (group commit), and each waiting ack is woken once, when its row is
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
from typing import Any

import psycopg
from sqlalchemy.engine import URL

from services.errors import DatabaseUnavailable
from services.jsonable import dumps

log = logging.getLogger("queuebot.ledger")
MOST = 200  # rows per INSERT


@dataclass(frozen=True)
class Ask:
    key: str
    owner: str
    request: dict[str, Any]
    at: datetime
    written: concurrent.futures.Future[bool]  # True: this row is ours; False: key existed


class ThreadedAcks:
    def __init__(self, url: URL) -> None:
        # libpq's own URI form of queuebot's database (psycopg connects without SQLAlchemy)
        self.conninfo = url.set(drivername="postgresql").render_as_string(hide_password=False)
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
        conn: psycopg.Connection[Any] | None = None
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
                conn = self._write(conn, batch)
        finally:
            if conn is not None:
                conn.close()

    def _write(
        self, conn: psycopg.Connection[Any] | None, batch: list[Ask]
    ) -> psycopg.Connection[Any] | None:
        """One statement in autocommit, so one round trip: this thread must take the GIL
        back from the busy event loop after every call into the network, and each time
        can cost a switch interval (5 ms)."""
        try:
            if conn is None or conn.closed or conn.broken:
                conn = psycopg.connect(self.conninfo, autocommit=True, connect_timeout=5)
            rows = conn.execute(
                _INSERT,
                (
                    [a.key for a in batch],
                    [a.at for a in batch],
                    [a.owner for a in batch],
                    [dumps(a.request) for a in batch],
                ),
            ).fetchall()
            ours = {str(owner) for (owner,) in rows}
        except Exception as exc:  # the caller acknowledges anyway; the work says why
            log.debug("could not write %d deliveries down: %s", len(batch), type(exc).__name__)
            failure = DatabaseUnavailable(
                database="queuebot's", detail=type(exc).__name__, committed=None
            )
            for ask in batch:
                if not ask.written.done():
                    ask.written.set_exception(failure)
            if conn is not None:
                conn.close()
            return None
        for ask in batch:
            if not ask.written.done():
                ask.written.set_result(ask.owner in ours)
        return conn


_INSERT = (
    "INSERT INTO qb_deliveries (key, seen_at, state, owner, request) "
    "SELECT k, s, 'claimed', o, r FROM unnest("
    "CAST(%s AS text[]), CAST(%s AS timestamptz[]), CAST(%s AS text[]), CAST(%s AS json[])"
    ") AS t(k, s, o, r) ON CONFLICT DO NOTHING RETURNING owner"
)
