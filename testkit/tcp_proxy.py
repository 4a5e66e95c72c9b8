"""A loopback TCP proxy to a server (PostgreSQL in the tests) that can go silent or be cut.

``silence()`` is a network partition that drops packets: every connection stays open and
new ones are accepted, what either side sends is taken and held, and nothing arrives.
A client sees its writes succeed and no answer ever come, which is what a database behind
a partition looks like until a timeout says otherwise. ``forward()`` ends the partition:
what was held is delivered, as TCP delivers what it retransmitted once a path is back
(so a statement sent during the silence may still run when it ends), then bytes flow
again. A side that closed during the silence is closed on the other once its held bytes
are out. ``cut()`` is a failover instead: every connection is closed and new ones are
refused until ``forward()``.

One thread runs every connection through a selector; ``stop()`` ends it.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from dataclasses import dataclass, field

CHUNK = 65536


@dataclass(eq=False)
class _Side:
    """One socket of a proxied connection and what waits to be written to it."""

    sock: socket.socket | None
    pending: bytearray = field(default_factory=bytearray)
    read_closed: bool = False  # it sent EOF
    write_closed: bool = False  # EOF passed on to it


@dataclass(eq=False)
class _Pair:
    client: _Side
    server: _Side

    def other(self, side: _Side) -> _Side:
        return self.server if side is self.client else self.client


class TcpProxy:
    """Listens on ``host`` (the loopback), at ``port``, and proxies each connection to
    ``target``."""

    def __init__(self, target: tuple[str, int], *, host: str = "127.0.0.1") -> None:
        self.target = target
        self._listener = socket.create_server((host, 0))
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        self._mode = "forward"  # or "silent", "cut"
        self._selector = selectors.DefaultSelector()
        self._pairs: list[_Pair] = []
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._listener, selectors.EVENT_READ, "accept")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="tcp-proxy", daemon=True)
        self._thread.start()

    # -- what a test calls --

    @property
    def mode(self) -> str:
        return self._mode

    def silence(self) -> None:
        """Drop nothing, deliver nothing: hold every byte until ``forward``."""
        self._set("silent")

    def forward(self) -> None:
        """Deliver what was held and let bytes through again (after a cut: accept again)."""
        self._set("forward")

    def cut(self) -> None:
        """Close every connection and refuse new ones until ``forward``."""
        self._set("cut")

    def connections(self) -> int:
        with self._lock:
            return len(self._pairs)

    def stop(self) -> None:
        self._stopping = True
        self._wake()
        self._thread.join(timeout=5)

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the selector thread --

    def _set(self, mode: str) -> None:
        with self._lock:
            self._mode = mode
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _run(self) -> None:
        try:
            while not self._stopping:
                for key, mask in self._selector.select(timeout=0.5):
                    if key.data == "accept":
                        self._accept()
                    elif key.data == "wake":
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(CHUNK)
                    else:
                        pair, side = key.data
                        if mask & selectors.EVENT_READ:
                            self._read(pair, side)
                        if mask & selectors.EVENT_WRITE:
                            self._flush(pair, side)
                self._settle()
        finally:
            with self._lock:
                pairs, self._pairs = self._pairs, []
            for pair in pairs:
                self._close(pair)
            self._selector.close()
            for s in (self._listener, self._wake_r, self._wake_w):
                s.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            if self._mode == "cut":
                client.close()
                continue
            client.setblocking(False)
            pair = _Pair(_Side(client), _Side(None))
            with self._lock:
                self._pairs.append(pair)
            self._selector.register(client, selectors.EVENT_READ, (pair, pair.client))
            if self._mode == "forward":
                self._connect(pair)

    def _connect(self, pair: _Pair) -> None:
        """Reach the server for a connection accepted during a silence, or now."""
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            self._drop(pair)
            return
        upstream.setblocking(False)
        pair.server.sock = upstream
        self._selector.register(upstream, selectors.EVENT_READ, (pair, pair.server))

    def _read(self, pair: _Pair, side: _Side) -> None:
        if side.sock is None or side.read_closed:
            return
        try:
            data = side.sock.recv(CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if data:
            pair.other(side).pending += data
        else:
            side.read_closed = True
            self._interest(pair, side)

    def _flush(self, pair: _Pair, side: _Side) -> None:
        """Write what is held for ``side`` (forwarding only), and pass EOF on after it."""
        if self._mode != "forward" or side.sock is None or side.write_closed:
            return
        if side.pending:
            try:
                sent = side.sock.send(side.pending)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._drop(pair)
                return
            del side.pending[:sent]
        if not side.pending and pair.other(side).read_closed:
            with contextlib.suppress(OSError):
                side.sock.shutdown(socket.SHUT_WR)
            side.write_closed = True

    def _settle(self) -> None:
        """After every round: apply the mode to each connection, write what can be
        written, and forget connections finished on both sides."""
        with self._lock:
            pairs = list(self._pairs)
        for pair in pairs:
            if self._mode == "cut":
                self._drop(pair)
                continue
            if self._mode == "forward" and pair.server.sock is None:
                self._connect(pair)
                if pair.server.sock is None:
                    continue
            for side in (pair.client, pair.server):
                self._flush(pair, side)
                self._interest(pair, side)
            done = all(s.read_closed and s.write_closed for s in (pair.client, pair.server))
            if done:
                self._drop(pair)

    def _interest(self, pair: _Pair, side: _Side) -> None:
        if side.sock is None:
            return
        events = 0 if side.read_closed else selectors.EVENT_READ
        if self._mode == "forward" and side.pending and not side.write_closed:
            events |= selectors.EVENT_WRITE
        try:
            registered: int | None = self._selector.get_key(side.sock).events
        except (KeyError, ValueError):
            registered = None
        if registered == events or (registered is None and not events):
            return
        if not events:
            self._selector.unregister(side.sock)
        elif registered is None:
            self._selector.register(side.sock, events, (pair, side))
        else:
            self._selector.modify(side.sock, events, (pair, side))

    def _drop(self, pair: _Pair) -> None:
        with self._lock:
            if pair in self._pairs:
                self._pairs.remove(pair)
        self._close(pair)

    def _close(self, pair: _Pair) -> None:
        for side in (pair.client, pair.server):
            if side.sock is None:
                continue
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(side.sock)
            with contextlib.suppress(OSError):
                side.sock.close()
            side.sock = None
