"""A local fake of Slack's Socket Mode endpoint: the WebSocket an app dials after
``apps.connections.open`` hands it a URL.

It runs an aiohttp server on 127.0.0.1 in its own thread. On each connection it sends
``hello``, as Slack does, and then records every text frame the app sends back (the
envelope acknowledgements). ``send()`` pushes an envelope to the connected app, the way
Slack delivers a slash command or a button click over the socket.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from typing import Any

from aiohttp import WSMsgType, web


class FakeSocketMode:
    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.connections = 0
        self._lock = threading.Lock()
        self._ws: web.WebSocketResponse | None = None
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stopped = asyncio.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.url = ""

    def start(self) -> FakeSocketMode:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fake Socket Mode server did not start")
        return self

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._stopped.set)
        self._thread.join(timeout=10)

    def __enter__(self) -> FakeSocketMode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_connected(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while self._ws is None or self._ws.closed:
            if time.monotonic() > deadline:
                raise AssertionError("the app never opened the Socket Mode connection")
            time.sleep(0.02)

    def send(self, kind: str, payload: dict[str, Any], **extra: Any) -> str:
        """Deliver one envelope (``slash_commands``, ``interactive``, ...); its id."""
        envelope_id = str(uuid.uuid4())
        envelope = {
            "envelope_id": envelope_id,
            "type": kind,
            "payload": payload,
            "accepts_response_payload": kind != "events_api",
            **extra,
        }
        ws = self._ws
        if ws is None:
            raise AssertionError("no app is connected")
        asyncio.run_coroutine_threadsafe(ws.send_json(envelope), self._loop).result(5)
        return envelope_id

    def wait_ack(self, envelope_id: str, timeout: float = 10.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                for frame in self.received:
                    if frame.get("envelope_id") == envelope_id:
                        return frame
            time.sleep(0.01)
        raise AssertionError(f"the app never acknowledged envelope {envelope_id}")

    # -- the server thread -----------------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        app = web.Application()
        app.router.add_get("/link", self._link)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        self.url = f"ws://127.0.0.1:{port}/link"
        self._ready.set()
        await self._stopped.wait()
        await runner.cleanup()

    async def _link(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)  # answers the SDK's pings with pongs
        await ws.prepare(request)
        self._ws = ws
        self.connections += 1
        await ws.send_json(
            {
                "type": "hello",
                "num_connections": 1,
                "debug_info": {"host": "fake", "approximate_connection_time": 18060},
                "connection_info": {"app_id": "A0QUEUEBOT"},
            }
        )
        async for message in ws:
            if message.type == WSMsgType.TEXT:
                with self._lock:
                    self.received.append(json.loads(message.data))
        return ws
