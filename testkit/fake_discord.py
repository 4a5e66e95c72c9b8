"""A local fake Discord for the tests: the REST API and the gateway, recording every call.

It runs in its own thread (aiohttp on 127.0.0.1, a free port, its own event loop) so the
process under test can call it while the test waits. REST lives under ``/api/v10`` (point
``DISCORD_API_BASE_URL`` at ``api_url``); ``GET /gateway/bot`` hands out the gateway at
``/gateway``, which speaks gateway v10 JSON: HELLO (op 10), IDENTIFY (op 2) answered with
READY and one GUILD_CREATE, heartbeats (op 1) answered with ACKs (op 11). A wrong token is
refused as Discord refuses it: 401 on REST, close code 4004 on the gateway.

A test plays a person by injecting ``INTERACTION_CREATE`` the way the gateway delivers it
(``command`` for a slash command, ``click`` for a button, ``submit`` for a modal the bot
opened, ``message_command`` for a message's context menu) and then reads what the bot sent
back: ``callbacks`` (interaction responses), ``followups`` (webhook posts and edits),
``channel_messages`` and ``threads``. ``rate_limit(n)`` makes the next n REST calls answer
429 with a ``retry_after``; ``hold(channel)`` answers every message posted to that channel
429 until ``release``. An interaction's token dies as Discord's does 15 minutes after
delivery: before its first response (``stale``), just after it (``expires_after_callback``)
or when the test says (``expire``); ``webhook_calls`` lists what the bot sent on a token,
refusals included. The guild's members and their roles (``member_roles``, carried by each
interaction and listed by ``GET /guilds/{guild}/members``; ``member_update``) are in
testkit/fake_discord_members.py.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import BodyPartReader, WSMsgType, web

from testkit.fake_discord_members import GuildMembers

APPLICATION_ID = "300000000000000001"
BOT_ID = "300000000000000002"
GUILD_ID = "400000000000000001"
DEFAULT_TOKEN = "fake-discord-bot-token"  # noqa: S105 - a test token, accepted only here
EPHEMERAL = 64  # message flag: only the person who acted sees it


@dataclass
class Call:
    """One REST call as the fake received it."""

    method: str
    path: str  # below /api/v10, e.g. /channels/1/messages
    body: dict[str, Any]
    files: dict[str, bytes]
    at: float
    status: int = 200


@dataclass
class StoredMessage:
    id: str
    channel_id: str
    content: str
    embeds: list[dict[str, Any]]
    components: list[dict[str, Any]]
    flags: int = 0
    attachments: list[str] = field(default_factory=list)
    edits: int = 0

    @property
    def custom_ids(self) -> list[str]:
        return [
            str(c.get("custom_id"))
            for row in self.components
            for c in row.get("components", [])
            if c.get("custom_id")
        ]

    def text(self) -> str:
        """Everything a person reads in the message: content, embeds' titles, text, fields."""
        parts = [self.content]
        for embed in self.embeds:
            parts += [str(embed.get("title", "")), str(embed.get("description", ""))]
            for f in embed.get("fields", []):
                parts += [str(f.get("name", "")), str(f.get("value", ""))]
            parts.append(str(embed.get("footer", {}).get("text", "")))
        return "\n".join(p for p in parts if p)


@dataclass
class Interaction:
    """An interaction the fake delivered, and what the bot answered to it."""

    id: str
    token: str
    kind: int  # 2 a command, 3 a component
    channel_id: str
    callbacks: list[dict[str, Any]] = field(default_factory=list)  # POST .../callback bodies
    original: StoredMessage | None = None  # the response message, when one was made
    followups: list[StoredMessage] = field(default_factory=list)
    deleted: list[StoredMessage] = field(default_factory=list)  # responses taken back
    delivered_at: float = 0.0
    first_answer_at: float | None = None

    def answered_within(self) -> float | None:
        if self.first_answer_at is None:
            return None
        return self.first_answer_at - self.delivered_at

    def replies(self) -> list[StoredMessage]:
        """Every message the person saw in answer: the response, then the follow-ups."""
        return ([self.original] if self.original is not None else []) + self.followups


def _snowflakes() -> Callable[[], str]:
    counter = itertools.count(1)
    base = int(time.time() * 1000 - 1420070400000) << 22

    def next_id() -> str:
        return str(base + next(counter))

    return next_id


def _user(user_id: str, name: str, *, bot: bool = False) -> dict[str, Any]:
    return {
        "id": user_id,
        "username": name,
        "global_name": name,
        "discriminator": "0",
        "avatar": None,
        "bot": bot,
        "public_flags": 0,
        "flags": 0,
    }


class FakeDiscord(GuildMembers):
    def __init__(
        self,
        *,
        token: str = DEFAULT_TOKEN,
        guild: str = GUILD_ID,
        channels: tuple[str, ...] = ("200000000000000001", "200000000000000009"),
    ) -> None:
        super().__init__()
        self.token = token
        self.guild = guild
        self.channel_ids = list(channels)
        self.calls: list[Call] = []
        self.commands: dict[str, list[dict[str, Any]]] = {}  # where synced -> the commands
        self.messages: dict[str, StoredMessage] = {}
        self.threads: dict[str, dict[str, Any]] = {}  # thread id -> the thread channel
        self.interactions: dict[str, Interaction] = {}
        self.identified = 0  # IDENTIFYs accepted
        self.heartbeats = 0
        self.refuse_commands = False  # answer 403 Missing Access, as for a bot not in the guild
        self._clicked: dict[str, StoredMessage] = {}  # interaction id -> the message clicked
        self._expired: set[str] = set()  # interaction tokens made dead by ``expire``
        self._dying: set[str] = set()  # tokens that die once their callback is accepted
        self._lock = threading.Lock()
        self._limited = 0
        self._retry_after = 0.2
        self._held: dict[str, float] = {}  # channel -> retry_after while held
        self._next_id = _snowflakes()
        self._sockets: list[tuple[web.WebSocketResponse, list[int]]] = []
        self._loop = asyncio.new_event_loop()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    # -- addresses -------------------------------------------------------------------------

    @property
    def api_url(self) -> str:
        return f"{self.url}/api/v10"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    # -- life --------------------------------------------------------------------------------

    def start(self) -> FakeDiscord:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(timeout=10)
        return self

    async def _serve(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/gateway", self._gateway)
        app.router.add_route("*", "/api/v10/{path:.*}", self._rest)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.SockSite(self._runner, self._sock).start()

    def stop(self) -> None:
        async def close() -> None:
            for ws, _ in list(self._sockets):
                await ws.close()
            if self._runner is not None:
                await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def __enter__(self) -> FakeDiscord:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what a test controls ----------------------------------------------------------------

    def rate_limit(self, n: int, retry_after: float = 0.2) -> None:
        """The next n REST calls (interaction callbacks aside) answer 429."""
        with self._lock:
            self._limited = n
            self._retry_after = retry_after

    def hold(self, channel: str, *, retry_after: float = 1.0) -> None:
        """Answer every message posted to ``channel`` 429 (``retry_after``) until
        ``release``, as Discord does to a channel's bucket that is spent."""
        with self._lock:
            self._held[channel] = retry_after

    def release(self, channel: str) -> None:
        with self._lock:
            self._held.pop(channel, None)

    def wait_until(self, what: Callable[[], bool], timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while not what():
            if time.monotonic() > deadline:
                raise AssertionError("the fake Discord never saw what the test waited for")
            time.sleep(0.02)

    def connected(self) -> int:
        """Gateway sessions that identified and are open."""
        with self._lock:
            return sum(1 for ws, _ in self._sockets if not ws.closed)

    def command(
        self,
        group: str,
        sub: str,
        options: dict[str, Any] | None = None,
        *,
        user: str,
        channel: str | None = None,
        name: str = "someone",
        stale: bool = False,
        expires_after_callback: bool = False,
    ) -> Interaction:
        """Deliver ``/group sub option:value ...`` typed by ``user``, as the gateway does.
        ``stale``: Discord has given up on it already (its callback is refused with
        "Unknown interaction", its token is dead), as after a long pause on the way.
        ``expires_after_callback``: its first response (a defer) is accepted, then its
        token is dead, as when the answer is ready more than 15 minutes later: every
        webhook call on it (editing the response, a follow-up) answers 401 "Invalid Webhook
        Token" (code 50027)."""
        typed = [
            {"name": k, "type": _option_type(v), "value": v} for k, v in (options or {}).items()
        ]
        command_id, where = self._registered(group)
        data: dict[str, Any] = {
            "id": command_id,
            "name": group,
            "type": 1,
            "options": [{"name": sub, "type": 1, "options": typed}],
        }
        if where is not None:  # a guild's command says which guild, as Discord's do
            data["guild_id"] = where
        if group == "ping":  # a command the bot never registered
            data["options"] = []
        return self._deliver(
            2,
            data,
            user=user,
            channel=channel,
            name=name,
            stale=stale,
            expires_after_callback=expires_after_callback,
        )

    def click(
        self,
        custom_id: str,
        *,
        message_id: str,
        user: str,
        name: str = "someone",
        dispatch: bool = True,
    ) -> Interaction:
        """Deliver a click on a button of a message the bot posted. ``dispatch=False``:
        the interaction is made (its token answers for 15 minutes) but sent to no gateway
        session, as for a click whose process died as it took it (the test writes down
        what that process would have)."""
        stored = self.messages[message_id]
        data = {"custom_id": custom_id, "component_type": 2}
        return self._deliver(
            3,
            data,
            user=user,
            channel=stored.channel_id,
            name=name,
            message=stored,
            dispatch=dispatch,
        )

    def submit(
        self,
        opened: Interaction,
        values: dict[str, str | None],
        *,
        user: str,
        name: str = "someone",
    ) -> Interaction:
        """Submit the modal the bot answered ``opened`` with (its first response, type 9),
        holding ``values`` by field custom_id: a field not named keeps what the modal
        opened with, as Discord's does; None empties it. Delivered as Discord delivers a
        modal submission (an interaction of type 5)."""
        modal = opened.callbacks[0]
        assert modal.get("type") == 9, f"no modal was opened: {opened.callbacks}"
        data = modal["data"]
        components = []
        for n, label in enumerate(data["components"], start=1):
            field = label["component"]
            custom_id = field["custom_id"]
            if field["type"] == 4:  # a text input
                value = values.get(custom_id, field.get("value") or "")
                submitted: dict[str, Any] = {
                    "type": 4,
                    "custom_id": custom_id,
                    "value": value or "",
                }
            else:  # a select
                default = [o["value"] for o in field.get("options", []) if o.get("default")]
                chosen = values.get(custom_id, default[0] if default else None)
                submitted = {
                    "type": field["type"],
                    "custom_id": custom_id,
                    "values": [] if chosen is None else [chosen],
                }
            components.append({"type": 18, "id": n, "component": submitted})
        return self._deliver(
            5,
            {"custom_id": data["custom_id"], "components": components},
            user=user,
            channel=opened.channel_id,
            name=name,
        )

    def message_command(
        self, command: str, message: StoredMessage, *, user: str, name: str = "someone"
    ) -> Interaction:
        """A message's context-menu command (``Declare incident``) chosen by ``user``."""
        command_id, where = self._registered(command)
        data: dict[str, Any] = {
            "id": command_id,
            "name": command,
            "type": 3,
            "target_id": message.id,
            "resolved": {"messages": {message.id: self._message_json(message)}},
        }
        if where is not None:
            data["guild_id"] = where
        return self._deliver(2, data, user=user, channel=message.channel_id, name=name)

    def posted_earlier(self, channel: str, content: str, custom_ids: list[str]) -> StoredMessage:
        """A message the bot posted before (an older version, another process): a click
        can only come from a button a message carries."""
        components = [
            {
                "type": 1,
                "components": [
                    {"type": 2, "style": 2, "label": c[:80], "custom_id": c}
                    for c in custom_ids[row : row + 5]
                ],
            }
            for row in range(0, len(custom_ids), 5)
        ]
        return self._store(channel, {"content": content, "components": components}, {})

    def _registered(self, group: str) -> tuple[str, str | None]:
        """The command's id and the guild it was registered in (None: globally)."""
        for where, registered in self.commands.items():
            for c in registered:
                if c.get("name") == group:
                    return str(c["id"]), (None if where == "global" else where)
        return self._next_id(), None

    def _deliver(
        self,
        kind: int,
        data: dict[str, Any],
        *,
        user: str,
        channel: str | None,
        name: str,
        message: StoredMessage | None = None,
        stale: bool = False,
        expires_after_callback: bool = False,
        dispatch: bool = True,
    ) -> Interaction:
        channel = channel or self.channel_ids[0]
        interaction = Interaction(
            id=self._next_id(),
            token=f"itoken-{self._next_id()}",
            kind=kind,
            channel_id=channel,
            delivered_at=time.monotonic(),
        )
        payload: dict[str, Any] = {
            "id": interaction.id,
            "application_id": APPLICATION_ID,
            "type": kind,
            "data": data,
            "guild_id": self.guild,
            "channel_id": channel,
            "channel": self._channel(channel),
            "member": {
                "user": _user(user, name),
                "roles": self.roles_of(user),
                "joined_at": "2026-01-01T00:00:00+00:00",
                "deaf": False,
                "mute": False,
                "flags": 0,
                "permissions": "2248473465835073",
            },
            "token": interaction.token,
            "version": 1,
            "app_permissions": "2248473465835073",
            "locale": "en-US",
            "guild_locale": "en-US",
            "entitlements": [],
            "authorizing_integration_owners": {"0": self.guild},
            "context": 0,
            "attachment_size_limit": 10 * 1024 * 1024,
        }
        with self._lock:
            self.interactions[interaction.id] = interaction
            if stale:
                self._expired.add(interaction.token)
            if expires_after_callback:
                self._dying.add(interaction.token)
            if message is not None:
                payload["message"] = self._message_json(message)
                self._clicked[interaction.id] = message
        if dispatch:
            asyncio.run_coroutine_threadsafe(
                self._dispatch("INTERACTION_CREATE", payload), self._loop
            ).result(timeout=10)
        return interaction

    # -- what a test reads -----------------------------------------------------------------

    def channel_messages(self, channel: str) -> list[StoredMessage]:
        with self._lock:
            return [m for m in self.messages.values() if m.channel_id == channel]

    def delete_message(self, message_id: str) -> None:
        """Delete a message as a moderator does: editing it is then ``Unknown Message``."""
        with self._lock:
            self.messages.pop(message_id, None)

    def thread_of(self, message_id: str) -> dict[str, Any] | None:
        with self._lock:
            return self.threads.get(message_id)  # threads started from a message share its id

    def rest(self, method: str, fragment: str) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if c.method == method and fragment in c.path]

    def webhook_calls(self, interaction: Interaction) -> list[Call]:
        """The calls made with the interaction's token after its first response (editing
        or deleting the response, follow-ups), refused ones included (see ``status``)."""
        prefix = f"/webhooks/{APPLICATION_ID}/{interaction.token}"
        with self._lock:
            return [c for c in self.calls if c.path == prefix or c.path.startswith(prefix + "/")]

    # -- the gateway ---------------------------------------------------------------------------

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        sequence = [0]
        await ws.send_str(json.dumps({"op": 10, "d": {"heartbeat_interval": 41250}, "s": None}))
        async for msg in ws:
            if msg.type != WSMsgType.TEXT:
                break
            frame = json.loads(msg.data)
            op = frame.get("op")
            if op == 1:
                self.heartbeats += 1
                await ws.send_str(json.dumps({"op": 11, "d": None}))
            elif op == 2:
                if frame["d"].get("token") != self.token:
                    await ws.close(code=4004, message=b"Authentication failed.")
                    break
                with self._lock:
                    self.identified += 1
                    self._sockets.append((ws, sequence))
                await self._send(ws, sequence, "READY", self._ready())
                await self._send(ws, sequence, "GUILD_CREATE", self._guild())
            elif op == 6:  # RESUME: a fake session cannot be resumed; identify again
                await ws.send_str(json.dumps({"op": 9, "d": False}))
        with self._lock:
            self._sockets = [(w, s) for w, s in self._sockets if w is not ws]
        return ws

    async def _send(
        self, ws: web.WebSocketResponse, sequence: list[int], event: str, data: dict[str, Any]
    ) -> None:
        sequence[0] += 1
        await ws.send_str(json.dumps({"op": 0, "t": event, "s": sequence[0], "d": data}))

    async def _dispatch(self, event: str, data: dict[str, Any]) -> None:
        with self._lock:
            sockets = [(w, s) for w, s in self._sockets if not w.closed]
        if not sockets:
            raise AssertionError(f"no gateway session is open to deliver {event}")
        ws, sequence = sockets[-1]  # the newest session: one process, one shard
        await self._send(ws, sequence, event, data)

    def _ready(self) -> dict[str, Any]:
        return {
            "v": 10,
            "user": _user(BOT_ID, "queuebot", bot=True),
            "guilds": [{"id": self.guild, "unavailable": True}],
            "session_id": f"session-{self._next_id()}",
            "resume_gateway_url": self.gateway_url,
            "shard": [0, 1],
            "application": {"id": APPLICATION_ID, "flags": 0},
            "private_channels": [],
            "relationships": [],
        }

    def _guild(self) -> dict[str, Any]:
        return {
            "id": self.guild,
            "name": "fake guild",
            "unavailable": False,
            "owner_id": "100000000000000001",
            "member_count": 3,
            "large": False,
            "features": [],
            "roles": [
                {
                    "id": self.guild,
                    "name": "@everyone",
                    "permissions": "2248473465835073",
                    "position": 0,
                    "color": 0,
                    "hoist": False,
                    "managed": False,
                    "mentionable": False,
                    "flags": 0,
                }
            ],
            "channels": [self._channel(c) for c in self.channel_ids],
            "threads": [],
            "members": [],
            "emojis": [],
            "stickers": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
            "voice_states": [],
            "presences": [],
        }

    def _channel(self, channel: str) -> dict[str, Any]:
        thread = next((t for t in self.threads.values() if t["id"] == channel), None)
        if thread is not None:
            return thread
        return {
            "id": channel,
            "type": 0,
            "guild_id": self.guild,
            "name": f"channel-{channel[-4:]}",
            "position": self.channel_ids.index(channel) if channel in self.channel_ids else 0,
            "permission_overwrites": [],
            "nsfw": False,
            "parent_id": None,
            "topic": None,
            "last_message_id": None,
            "rate_limit_per_user": 0,
            "flags": 0,
        }

    # -- REST --------------------------------------------------------------------------------

    async def _rest(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["path"]
        body, files = await _read_body(request)
        if request.method == "GET":  # a GET's body, as recorded, is its query
            body = dict(request.query)
        call = Call(request.method, path, body, files, time.monotonic())
        with self._lock:
            self.calls.append(call)
            interaction_call = path.startswith(("/interactions/", "/webhooks/"))
            if not interaction_call and request.headers.get("Authorization") != f"Bot {self.token}":
                call.status = 401
                return _json({"message": "401: Unauthorized", "code": 0}, status=401)
            parts = path.strip("/").split("/")
            held = self._held.get(parts[1]) if _posts_message(request.method, parts) else None
            if held is not None:
                call.status = 429
                return _too_many(held)
            if self._limited > 0 and not path.startswith("/interactions/"):
                self._limited -= 1
                call.status = 429
                return _too_many(self._retry_after)
        answer, status = self._answer(request.method, path, body, files)
        call.status = status
        if answer is None:
            return web.Response(status=204)
        return _json(answer, status=status)

    def _answer(
        self, method: str, path: str, body: dict[str, Any], files: dict[str, bytes]
    ) -> tuple[dict[str, Any] | list[Any] | None, int]:
        parts = path.strip("/").split("/")
        if method == "GET" and path == "/gateway/bot":
            return {
                "url": self.gateway_url,
                "shards": 1,
                "session_start_limit": {
                    "total": 1000,
                    "remaining": 999,
                    "reset_after": 14400000,
                    "max_concurrency": 1,
                },
            }, 200
        if method == "GET" and path == "/users/@me":
            return _user(BOT_ID, "queuebot", bot=True), 200
        if method == "GET" and len(parts) == 3 and parts[0] == "guilds" and parts[2] == "members":
            return self.members_page(parts[1], body)
        if method == "GET" and path == "/oauth2/applications/@me":
            return self._application(), 200
        if method == "PUT" and parts[0] == "applications" and self.refuse_commands:
            return {"message": "Missing Access", "code": 50001}, 403
        if method == "PUT" and parts[0] == "applications" and parts[-1] == "commands":
            where = parts[3] if len(parts) == 5 else "global"  # .../guilds/{guild}/commands
            registered = [
                {  # a context menu is sent without a description; Discord's has ""
                    "description": "",
                    **c,
                    "id": self._next_id(),
                    "application_id": APPLICATION_ID,
                    "version": "1",
                }
                for c in body.get("_list", [])
            ]
            with self._lock:
                self.commands[where] = registered
            return registered, 200
        if method == "POST" and parts[0] == "interactions" and parts[-1] == "callback":
            return self._callback(parts[1], parts[2], body, files)
        if parts[0] == "webhooks" and len(parts) >= 3:
            return self._webhook(method, parts[2], parts[3:], body, files)
        if parts[0] == "channels" and len(parts) >= 3:
            return self._channel_call(method, parts, body, files)
        return {"message": f"the fake Discord has no {method} {path}", "code": 0}, 404

    def _user_json(self, user: str) -> dict[str, Any]:
        return _user(user, f"member-{user[-4:]}")

    def _application(self) -> dict[str, Any]:
        return {
            "id": APPLICATION_ID,
            "name": "queuebot",
            "icon": None,
            "description": "",
            "bot_public": False,
            "bot_require_code_grant": False,
            "owner": _user("100000000000000001", "alice"),
            "verify_key": "0" * 64,
            "flags": 0,
        }

    def _callback(
        self, interaction_id: str, token: str, body: dict[str, Any], files: dict[str, bytes]
    ) -> tuple[dict[str, Any] | None, int]:
        with self._lock:
            interaction = self.interactions.get(interaction_id)
            if interaction is None or interaction.token != token or token in self._expired:
                return {"message": "Unknown interaction", "code": 10062}, 404
            if interaction.callbacks:
                return {
                    "message": "Interaction has already been acknowledged.",
                    "code": 40060,
                }, 400
            broken = modal_problem(body.get("data") or {}) if body.get("type") == 9 else None
            if broken is not None:  # Discord's 400: the modal never shows
                return {"message": f"Invalid Form Body: {broken}", "code": 50035}, 400
            interaction.callbacks.append(body)
            interaction.first_answer_at = time.monotonic()
            if token in self._dying:  # accepted; from now on the token is dead
                self._dying.discard(token)
                self._expired.add(token)
        kind = int(body.get("type", 0))
        data = body.get("data") or {}
        resource: dict[str, Any] = {"type": kind}
        message: StoredMessage | None = None
        if kind == 4:  # a message in answer
            message = self._store(interaction.channel_id, data, files)
            interaction.original = message
        elif kind == 5:  # deferred: "thinking...", the original is made by a later edit
            message = self._store(interaction.channel_id, {"flags": data.get("flags", 0)}, {})
            interaction.original = message
        elif kind == 7:  # update the message the button is on
            source = self._source_of(interaction)
            if source is not None:
                self._edit(source, data, files)
                message = source
        if message is not None:
            resource["message"] = self._message_json(message)
        return {
            "interaction": {
                "id": interaction_id,
                "type": interaction.kind,
                "response_message_id": message.id if message else None,
                "response_message_loading": kind == 5,
                "response_message_ephemeral": bool(int(data.get("flags", 0)) & EPHEMERAL),
            },
            "resource": resource,
        }, 200

    def _source_of(self, interaction: Interaction) -> StoredMessage | None:
        """The message a clicked button is on."""
        return self._clicked.get(interaction.id)

    def _webhook(
        self,
        method: str,
        token: str,
        rest: list[str],
        body: dict[str, Any],
        files: dict[str, bytes],
    ) -> tuple[dict[str, Any] | None, int]:
        with self._lock:
            interaction = next((i for i in self.interactions.values() if i.token == token), None)
        if interaction is None:
            return {"message": "Unknown Webhook", "code": 10015}, 404
        if time.monotonic() - interaction.delivered_at > 15 * 60 or token in self._expired:
            return {"message": "Invalid Webhook Token", "code": 50027}, 401
        if method == "POST" and not rest:
            message = self._store(interaction.channel_id, body, files)
            interaction.followups.append(message)
            if interaction.first_answer_at is None:
                interaction.first_answer_at = time.monotonic()
            return self._message_json(message), 200
        if method == "PATCH" and len(rest) == 2 and rest[0] == "messages":
            target = interaction.original if rest[1] == "@original" else self.messages.get(rest[1])
            if target is None and rest[1] == "@original":
                target = self._clicked.get(interaction.id)  # a deferred update of a click
            if target is None:
                return {"message": "Unknown Message", "code": 10008}, 404
            self._edit(target, body, files)
            return self._message_json(target), 200
        if method == "DELETE" and rest == ["messages", "@original"]:
            gone = interaction.original
            if gone is None:
                return {"message": "Unknown Message", "code": 10008}, 404
            with self._lock:
                self.messages.pop(gone.id, None)
                interaction.original = None
                interaction.deleted.append(gone)
            return None, 204
        return {"message": "the fake Discord has no such webhook call", "code": 0}, 404

    def expire(self, interaction: Interaction) -> None:
        """Make an interaction's token dead, as it is 15 minutes after delivery."""
        with self._lock:
            self._expired.add(interaction.token)

    def _channel_call(
        self, method: str, parts: list[str], body: dict[str, Any], files: dict[str, bytes]
    ) -> tuple[dict[str, Any] | None, int]:
        channel = parts[1]
        known = channel in self.channel_ids or any(
            t["id"] == channel for t in self.threads.values()
        )
        if not known:
            return {"message": "Unknown Channel", "code": 10003}, 404
        if method == "POST" and parts[2:] == ["messages"]:
            return self._message_json(self._store(channel, body, files)), 200
        if method == "PATCH" and len(parts) == 4 and parts[2] == "messages":
            target = self.messages.get(parts[3])
            if target is None:
                return {"message": "Unknown Message", "code": 10008}, 404
            self._edit(target, body, files)
            return self._message_json(target), 200
        if (
            method == "POST"
            and len(parts) == 5
            and parts[2] == "messages"
            and parts[4] == "threads"
        ):
            source = self.messages.get(parts[3])
            if source is None:
                return {"message": "Unknown Message", "code": 10008}, 404
            thread = {
                "id": source.id,  # as in Discord: a thread from a message shares its id
                "type": 11,
                "guild_id": self.guild,
                "parent_id": channel,
                "name": str(body.get("name", ""))[:100],
                "owner_id": BOT_ID,
                "member_count": 1,
                "message_count": 0,
                "rate_limit_per_user": 0,
                "flags": 0,
                "thread_metadata": {
                    "archived": False,
                    "auto_archive_duration": int(body.get("auto_archive_duration", 1440)),
                    "archive_timestamp": _now(),
                    "locked": False,
                },
            }
            with self._lock:
                if source.id in self.threads:
                    return {"message": "A thread has already been created", "code": 160004}, 400
                self.threads[source.id] = thread
            return thread, 201
        return {"message": "the fake Discord has no such channel call", "code": 0}, 404

    # -- messages ------------------------------------------------------------------------------

    def _store(self, channel: str, body: dict[str, Any], files: dict[str, bytes]) -> StoredMessage:
        message = StoredMessage(
            id=self._next_id(),
            channel_id=channel,
            content=str(body.get("content") or ""),
            embeds=list(body.get("embeds") or []),
            components=list(body.get("components") or []),
            flags=int(body.get("flags") or 0),
            attachments=sorted(files),
        )
        _check_limits(message)
        with self._lock:
            self.messages[message.id] = message
        return message

    def _edit(self, message: StoredMessage, body: dict[str, Any], files: dict[str, bytes]) -> None:
        with self._lock:
            if "content" in body:
                message.content = str(body["content"] or "")
            if "embeds" in body:
                message.embeds = list(body["embeds"] or [])
            if "components" in body:
                message.components = list(body["components"] or [])
            if files:
                message.attachments = sorted(files)
            message.edits += 1
        _check_limits(message)

    def _message_json(self, message: StoredMessage) -> dict[str, Any]:
        return {
            "id": message.id,
            "channel_id": message.channel_id,
            "guild_id": self.guild,
            "author": _user(BOT_ID, "queuebot", bot=True),
            "content": message.content,
            "timestamp": _now(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": [
                {
                    "id": self._next_id(),
                    "filename": name,
                    "size": 1,
                    "url": f"{self.url}/files/{name}",
                    "proxy_url": f"{self.url}/files/{name}",
                }
                for name in message.attachments
            ],
            "embeds": message.embeds,
            "components": message.components,
            "pinned": False,
            "type": 0,
            "flags": message.flags,
        }


class LimitBroken(AssertionError):
    """The bot sent what Discord would refuse (400): the fake fails the test instead."""


def _check_limits(message: StoredMessage) -> None:
    """Discord's limits: 2,000 characters of content, 10 embeds with 6,000 characters in
    all, 5 rows of 5 buttons, custom_id up to 100 characters."""
    if len(message.content) > 2000:
        raise LimitBroken(f"content of {len(message.content)} characters")
    if len(message.embeds) > 10:
        raise LimitBroken(f"{len(message.embeds)} embeds")
    size = sum(len(StoredMessage("", "", "", [e], []).text()) for e in message.embeds)
    if size > 6000:
        raise LimitBroken(f"{size} characters across embeds")
    if len(message.components) > 5 or any(
        len(row.get("components", [])) > 5 for row in message.components
    ):
        raise LimitBroken("more than 5 rows of 5 components")
    if any(len(c) > 100 for c in message.custom_ids):
        raise LimitBroken("a custom_id over 100 characters")


def modal_problem(data: dict[str, Any]) -> str | None:
    """What Discord would refuse in a modal (a 400), or None: a title of 1-45 characters,
    a custom_id of 1-100, 1-5 components, each a label (up to 45 characters, its
    description 100) around a text input (value up to 4,000) or a select (1-25 options,
    each label and value up to 100)."""
    if not 1 <= len(str(data.get("title", ""))) <= 45:
        return "title must be 1 to 45 characters"
    if not 1 <= len(str(data.get("custom_id", ""))) <= 100:
        return "custom_id must be 1 to 100 characters"
    components = data.get("components") or []
    if not 1 <= len(components) <= 5:
        return f"{len(components)} components: a modal takes 1 to 5"
    for label in components:
        if label.get("type") != 18 or not 1 <= len(str(label.get("label", ""))) <= 45:
            return f"a component that is no label of 1 to 45 characters: {label}"
        if len(str(label.get("description") or "")) > 100:
            return "a label's description over 100 characters"
        field = label.get("component") or {}
        if not 1 <= len(str(field.get("custom_id", ""))) <= 100:
            return "a field's custom_id must be 1 to 100 characters"
        if field.get("type") == 4:
            if len(str(field.get("value") or "")) > 4000 or int(field.get("max_length", 0)) > 4000:
                return "a text input over 4,000 characters"
            if len(str(field.get("placeholder") or "")) > 100:
                return "a placeholder over 100 characters"
        elif field.get("type") == 3:
            options = field.get("options") or []
            if not 1 <= len(options) <= 25:
                return f"a select of {len(options)} options: it takes 1 to 25"
            if any(len(o["label"]) > 100 or len(o["value"]) > 100 for o in options):
                return "a select option over 100 characters"
        else:
            return f"a field of type {field.get('type')} in a modal"
    return None


def _posts_message(method: str, parts: list[str]) -> bool:
    """``POST /channels/{id}/messages``: a message posted to a channel."""
    return (
        method == "POST" and len(parts) == 3 and parts[0] == "channels" and parts[2] == "messages"
    )


def _too_many(retry_after: float) -> web.Response:
    return _json(
        {"message": "You are being rate limited.", "retry_after": retry_after, "global": False},
        status=429,
        headers={
            "Retry-After": str(retry_after),
            "X-RateLimit-Limit": "5",
            "X-RateLimit-Remaining": "0",
            "X-RateLimit-Reset-After": str(retry_after),
            "X-RateLimit-Bucket": "fake",
            "X-RateLimit-Scope": "user",
            # Discord's own 429s pass its proxy; discord.py takes a 429 without this
            # header for a Cloudflare ban and gives up
            "Via": "1.1 google",
        },
    )


def _json(data: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """JSON as Discord sends it: ``Content-Type: application/json`` exactly (discord.py
    reads any other content type, a charset suffix included, as text)."""
    return web.Response(
        body=json.dumps(data).encode(),
        status=status,
        headers={**(headers or {}), "Content-Type": "application/json"},
    )


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _option_type(value: Any) -> int:
    if isinstance(value, bool):
        return 5
    if isinstance(value, int):
        return 4
    if isinstance(value, float):
        return 10
    return 3


async def _read_body(request: web.Request) -> tuple[dict[str, Any], dict[str, bytes]]:
    """A JSON body, or a multipart one (``payload_json`` and files) as discord.py sends
    messages with attachments."""
    if request.content_type.startswith("multipart/"):
        body: dict[str, Any] = {}
        files: dict[str, bytes] = {}
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader):
                continue
            data = await part.read()
            if part.name == "payload_json":
                body = json.loads(data)
            else:
                files[part.filename or str(part.name)] = bytes(data)
        return body, files
    raw = await request.read()
    if not raw:
        return {}, {}
    parsed = json.loads(raw)
    return (parsed if isinstance(parsed, dict) else {"_list": parsed}), {}
