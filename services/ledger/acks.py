"""Deliveries written down before their ack, by a thread of their own (PostgreSQL).

Slack and Discord wait for the ack; queuebot's event loop meanwhile computes earlier
answers. A write made on the loop waits for several of its turns (a connection, the
INSERT, the commit), each behind whatever answer work is ready, and under a burst that
was hundreds of milliseconds before each ack. Here one thread with one connection of
its own writes the claims: all the deliveries waiting when it is free go in one INSERT,
committed by itself (group commit), and each waiting ack is woken once, when its row is
committed. A key already in the ledger (a redelivery) is left to the caller.

A caller that stops waiting (its ack cannot wait longer) is told nothing was recorded,
and that must stay true, though the database may be silent rather than down and its
INSERT may still arrive, or may have committed with the answer lost:

- a delivery whose caller gave up before its INSERT went out is never sent;
- the INSERT writes a row only while the database's clock is within ``late_after`` of
  the ack (a statement held up by a partition and delivered later writes nothing), and
  that is well before the claim could go stale and be taken over by the orphan sweep;
- every delivery given up on after its INSERT went out is *unsettled*: as soon as the
  database answers, its key is marked done and answered ("not recorded"), whether or not
  a row of it arrived, so that nothing ever acts on it, and an INSERT still on its way
  finds the key taken.

The INSERT is given ``bound`` seconds; past that its socket is shut down (a database that
keeps TCP alive and answers nothing would otherwise hold this thread, and every ack
behind it, for the whole outage) and the connection is made anew.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from sqlalchemy.engine import URL

from services.config import DatabaseConfig
from services.db.bounds import NoAnswer, libpq_params, server_settings, shut
from services.errors import DatabaseUnavailable
from services.jsonable import dumps

log = logging.getLogger("queuebot.ledger")
MOST = 200  # rows per INSERT
BOUND = 3.0  # seconds an INSERT may take before its connection is shut down
SETTLE_EVERY = 0.5  # seconds between tries to settle what callers gave up on
NOT_RECORDED = "not recorded: the database did not answer before the acknowledgement"
_WAITING, _ABANDONED, _FINISHED = "waiting", "abandoned", "finished"


@dataclass(eq=False)
class Ask:
    key: str
    owner: str
    request: dict[str, Any]
    at: datetime
    written: concurrent.futures.Future[bool]  # True: this row is ours; False: key existed
    state: str = _WAITING
    lock: threading.Lock = field(default_factory=threading.Lock)

    def abandon(self) -> bool:
        """The caller stops waiting; False when the thread finished the ask first."""
        with self.lock:
            if self.state != _WAITING:
                return False
            self.state = _ABANDONED
            return True

    def finish(self) -> bool:
        """The thread is about to give the result; False when the caller gave up first."""
        with self.lock:
            if self.state != _WAITING:
                return False
            self.state = _FINISHED
            return True

    @property
    def abandoned(self) -> bool:
        return self.state == _ABANDONED


class _Watchdog:
    """Shuts a connection's socket down when the statement it carries outlives its bound;
    a thread of its own, looking every tenth of a second."""

    def __init__(self, bound: float) -> None:
        self.bound = bound
        self._lock = threading.Lock()
        self._armed: tuple[float, int] | None = None
        self._expired = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def arm(self, fd: int) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="queuebot-acks-watchdog", daemon=True
                )
                self._thread.start()
            self._armed = (time.monotonic() + self.bound, fd)
            self._expired = False

    def disarm(self) -> bool:
        """Whether the bound expired (the socket was shut down)."""
        with self._lock:
            self._armed = None
            return self._expired

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            with self._lock:
                if self._armed is not None and time.monotonic() >= self._armed[0]:
                    shut(self._armed[1])
                    self._armed = None
                    self._expired = True


class ThreadedAcks:
    def __init__(
        self,
        url: URL,
        *,
        settings: DatabaseConfig | None = None,
        late_after: float = 5.0,
        bound: float = BOUND,
    ) -> None:
        # libpq's own parameters for queuebot's database (psycopg connects without
        # SQLAlchemy), with [database]'s timeouts and keepalives
        settings = settings or DatabaseConfig()
        self.params = libpq_params(url, settings)
        self._settings = server_settings(url, settings)  # PostgreSQL's side, once connected
        self.late_after = late_after
        self._asks: queue.SimpleQueue[Ask | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._unsettled: dict[str, Ask] = {}
        self._watchdog = _Watchdog(bound)

    async def write(self, key: str, owner: str, request: dict[str, Any], at: datetime) -> bool:
        """Whether the row was written as this claim (False: the key is in the ledger
        already); ``DatabaseUnavailable`` when it could not be written. Cancelled (the
        ack cannot wait longer), the delivery is not recorded: never sent if it was not
        yet, settled as not recorded if it was."""
        self._start()
        ask = Ask(key, owner, request, at, concurrent.futures.Future())
        self._asks.put(ask)
        try:
            return await asyncio.wrap_future(ask.written)
        except asyncio.CancelledError:
            if not ask.abandon():  # the thread finished it first: whatever it wrote goes
                self._unsettle([ask])
            raise

    def unsettled(self) -> int:
        with self._lock:
            return len(self._unsettled)

    def _start(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="queuebot-acks", daemon=True)
                self._thread.start()

    def _unsettle(self, asks: list[Ask]) -> None:
        with self._lock:
            self._unsettled.update((a.key, a) for a in asks)

    def close(self) -> None:
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None and thread.is_alive():
            self._asks.put(None)
            thread.join(timeout=5 + self._watchdog.bound)
        self._watchdog.stop()
        left = self.unsettled()
        if left:
            log.warning(
                "%d delivery claim(s) given up on before their ack could not be settled as "
                "not recorded: if one reached the database, the orphan sweep finishes it",
                left,
            )

    def _run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        settled_at = 0.0
        try:
            while True:
                first = self._next()
                if first is None:
                    conn = self._settle(conn)  # one last try before the process ends
                    return
                if isinstance(first, Ask):
                    conn = self._write(conn, self._batch(first))
                if self.unsettled() and time.monotonic() - settled_at >= SETTLE_EVERY:
                    settled_at = time.monotonic()
                    conn = self._settle(conn)
        finally:
            if conn is not None:
                conn.close()

    def _next(self) -> Ask | str | None:
        """The next delivery to write; None: stop; ``"tick"``: time to settle again."""
        try:
            return self._asks.get(timeout=SETTLE_EVERY if self.unsettled() else None)
        except queue.Empty:
            return "tick"

    def _batch(self, first: Ask) -> list[Ask]:
        batch = [first]
        with contextlib.suppress(queue.Empty):
            while len(batch) < MOST:
                more = self._asks.get_nowait()
                if more is None:
                    self._asks.put(None)  # stop after this batch
                    break
                batch.append(more)
        return batch

    def _connect(
        self, conn: psycopg.Connection[Any] | None
    ) -> tuple[psycopg.Connection[Any], bool]:
        """The thread's connection, and whether it was made just now."""
        if conn is not None and not conn.closed and not conn.broken:
            return conn, False
        conn = psycopg.connect(**self.params, autocommit=True)
        statement, values = self._settings
        if statement:
            try:
                self._execute(conn, statement, values)
            except BaseException:
                conn.close()
                raise
        return conn, True

    def _execute(self, conn: psycopg.Connection[Any], statement: str, params: Any) -> list[Any]:
        """One statement in autocommit, so one round trip: this thread must take the GIL
        back from the busy event loop after every call into the network, and each time
        can cost a switch interval (5 ms). Past the watchdog's bound: ``NoAnswer``."""
        self._watchdog.arm(conn.pgconn.socket)
        try:
            cursor = conn.execute(statement, params)
            return cursor.fetchall() if cursor.description else []
        except psycopg.OperationalError as exc:
            if self._watchdog.disarm():
                conn.close()
                raise NoAnswer(
                    f"no answer from the database within {self._watchdog.bound:g} s"
                ) from exc
            raise
        finally:
            self._watchdog.disarm()

    def _write(
        self, conn: psycopg.Connection[Any] | None, batch: list[Ask]
    ) -> psycopg.Connection[Any] | None:
        # a caller that gave up before its INSERT went out: nothing is sent for it
        live = [a for a in batch if not a.abandoned]
        ours: list[Ask] = []
        seen: set[str] = set()
        for ask in live:  # one key once: a second copy is a redelivery, for the caller
            if ask.key in seen:
                self._give(ask, False)
            else:
                seen.add(ask.key)
                ours.append(ask)
        if not ours:
            return conn
        sent = False
        try:
            for attempt in (1, 2):
                conn, fresh = self._connect(conn)
                try:
                    sent = True
                    rows = self._execute(conn, _INSERT, self._values(ours))
                    break
                except NoAnswer:
                    raise  # the database is silent: the caller cannot wait for another try
                except psycopg.OperationalError:
                    # a connection that served before may have died since (a failover, a
                    # restart): once more on a new one, which finds a row that arrived
                    if attempt == 2 or fresh:
                        raise
                    conn.close()
            written = {str(owner) for (owner,) in rows}
        except Exception as exc:  # the caller answers "not recorded"; the log says why
            log.debug("could not write %d deliveries down: %s", len(ours), type(exc).__name__)
            if conn is not None:
                conn.close()
            said = str(exc).strip().splitlines()  # the driver's first line names no secret
            failure = DatabaseUnavailable(
                database="queuebot's",
                detail=said[0][:160] if said else type(exc).__name__,
                committed=None,
            )
            if sent:  # whatever reached the database is settled as not recorded
                self._unsettle(ours)
            for ask in ours:
                self._give(ask, failure)
            return None
        for ask in ours:
            if not self._give(ask, ask.owner in written) and ask.owner in written:
                self._unsettle([ask])  # written, but its caller gave up: not recorded
        return conn

    def _give(self, ask: Ask, result: bool | BaseException) -> bool:
        """The ask's result to its caller; False when the caller had given up."""
        if not ask.finish():
            return False
        if isinstance(result, BaseException):
            ask.written.set_exception(result)
        else:
            ask.written.set_result(result)
        return True

    def _values(self, asks: list[Ask]) -> tuple[Any, ...]:
        return (
            [a.key for a in asks],
            [a.at for a in asks],
            [a.owner for a in asks],
            [dumps(a.request) for a in asks],
            self.late_after,
        )

    def _settle(self, conn: psycopg.Connection[Any] | None) -> psycopg.Connection[Any] | None:
        """Mark every delivery given up on as done and answered, not recorded."""
        with self._lock:
            asks = list(self._unsettled.values())
        if not asks:
            return conn
        try:
            conn, _ = self._connect(conn)
            self._execute(
                conn,
                _SETTLE,
                (
                    NOT_RECORDED,
                    [a.key for a in asks],
                    [a.at for a in asks],
                    [a.owner for a in asks],
                ),
            )
        except psycopg.OperationalError as exc:  # the database is still away: later
            log.debug("could not settle %d deliveries yet: %s", len(asks), type(exc).__name__)
            if conn is not None:
                conn.close()
            return None
        except Exception as exc:  # refused for good: saying so once is all that is left
            log.warning(
                "could not settle %d delivery claim(s) given up on before their ack (%s): "
                "if one reached the database, the orphan sweep finishes it",
                len(asks),
                type(exc).__name__,
            )
        with self._lock:
            for ask in asks:
                self._unsettled.pop(ask.key, None)
        return conn


# Each row is written only while the database's clock is within ``late_after`` of its ack
# (an INSERT delivered late writes nothing), and a row already there is returned only when
# it is this claim's own (the INSERT sent again after a lost connection).
_INSERT = (
    "INSERT INTO qb_deliveries (key, seen_at, state, owner, request) "
    "SELECT k, s, 'claimed', o, r FROM unnest("
    "CAST(%s AS text[]), CAST(%s AS timestamptz[]), CAST(%s AS text[]), CAST(%s AS json[])"
    ") AS t(k, s, o, r) WHERE clock_timestamp() < s + make_interval(secs => %s) "
    "ON CONFLICT (key) DO UPDATE SET owner = EXCLUDED.owner "
    "WHERE qb_deliveries.owner = EXCLUDED.owner AND qb_deliveries.state = 'claimed' "
    "RETURNING owner"
)
# A key given up on: its own claim, if it arrived, done and answered; if it did not, a
# row that says so (no request: the orphan sweep never takes it), so it never can.
_SETTLE = (
    "INSERT INTO qb_deliveries (key, seen_at, state, owner, done_at, answered_at, outcome) "
    "SELECT k, s, 'done', o, now(), now(), %s FROM unnest("
    "CAST(%s AS text[]), CAST(%s AS timestamptz[]), CAST(%s AS text[])) AS t(k, s, o) "
    "ON CONFLICT (key) DO UPDATE SET state = 'done', "
    "done_at = coalesce(qb_deliveries.done_at, EXCLUDED.done_at), "
    "answered_at = coalesce(qb_deliveries.answered_at, EXCLUDED.answered_at), "
    "outcome = EXCLUDED.outcome "
    "WHERE qb_deliveries.owner = EXCLUDED.owner AND qb_deliveries.state = 'claimed'"
)
