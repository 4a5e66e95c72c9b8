"""The local fake Slack shared by the tests and the benchmarks: Slack's Web API and the
response_url endpoint, recording every call with its monotonic arrival time.

It runs in its own thread (uvicorn on 127.0.0.1, a free port) so the process under test
can call it while the test waits. ``rate_limit(n)`` makes the next n chat.postMessage
calls answer 429 with Retry-After: 1. ``pace(interval)`` is Slack's limit per channel: a
chat.postMessage to a channel less than ``interval`` after the last one it took there is
answered 429 with Retry-After. ``hold(channel)`` answers every chat.postMessage to that
channel 429 until ``release``. A refused call is recorded with ``#429`` after its path.
``apps.connections.open`` hands out ``socket_url`` (a ``FakeSocketMode``'s, see
tests/e2e/fake_socket_mode.py) once one is set.

User groups: ``usergroups`` maps a group's id to its members' user ids (set it as a test
goes: ``fake.usergroups["S0APPROVE"] = ["U0ALICE"]``), served by ``usergroups.list`` and
``usergroups.users.list`` (an unknown group: ``ok: false, error: no_such_subteam``);
``group_calls`` counts the ``usergroups.users.list`` calls per group. ``fail_groups()``
makes both answer HTTP 500 (or, given an ``error``, ``ok: false`` with it) until
``release_groups()``.

Views: ``views.open`` (a modal, given a ``trigger_id``), ``views.update`` (by ``view_id`` or
``external_id``; a stale ``hash`` is a ``hash_conflict``) and ``views.publish`` (a user's
Home tab) check each view against Block Kit's limits with slack_sdk's models
(testkit/slack_views.py) and refuse one that breaks them with ``invalid_arguments``, as
Slack does (recorded with ``#invalid`` after its path). ``views`` holds every open view by
its id (with ``id``, ``hash``, ``state`` as Slack adds them); ``homes`` each user's published
Home tab. ``expire_triggers()`` makes ``views.open`` answer ``expired_trigger_id`` (a
trigger is good for 3 s) until ``expire_triggers(False)``.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from testkit.slack_views import ViewRefused, check_view


@dataclass
class Call:
    path: str
    body: dict[str, Any]
    at: float
    ts: str | None = None  # the ts a successful chat.postMessage was given
    peer: int | None = None  # the caller's port: one per connection it opened


class FakeSlack:
    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._lock = threading.Lock()
        self._limited = 0
        self._failing = 0
        self._pace = 0.0
        self._pace_retry_after = 1
        self._last_post: dict[str, float] = {}  # channel -> when it last took a post
        self._held: dict[str, int] = {}  # channel -> Retry-After while held
        self._ts = 0
        self.socket_url: str | None = None  # what apps.connections.open hands out
        self.usergroups: dict[str, list[str]] = {}  # group id -> its members' user ids
        self.group_calls: Counter[str] = Counter()  # usergroups.users.list calls, by group
        self._groups_failing: str | None = None  # None: answering; "": HTTP 500; else error
        self.views: dict[str, dict[str, Any]] = {}  # view id -> the view as Slack keeps it
        self.homes: dict[str, dict[str, Any]] = {}  # user id -> their published Home tab
        self._triggers_expired = False
        self._view_serial = 0
        # IPPROTO_TCP named: asyncio turns Nagle off (TCP_NODELAY) only on a socket whose
        # proto says TCP, and each connection takes this one's; with Nagle on, every answer
        # on a kept-alive connection waited ~40 ms for the caller's delayed ACK
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        app = Starlette(routes=[Route("/{path:path}", self._handle, methods=["POST", "GET"])])
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    @property
    def api_url(self) -> str:
        return f"{self.url}/api/"

    def response_url(self, name: str) -> str:
        return f"{self.url}/response/{name}"

    def start(self) -> FakeSlack:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("fake Slack did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> FakeSlack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def rate_limit(self, times: int) -> None:
        self._limited = times

    def pace(self, interval: float, *, retry_after: int = 1) -> None:
        """Take at most one chat.postMessage per channel per ``interval`` seconds (0: no
        limit); one sooner is answered 429 with ``Retry-After: retry_after``."""
        self._pace = interval
        self._pace_retry_after = retry_after

    def hold(self, channel: str, *, retry_after: int = 1) -> None:
        """Answer every chat.postMessage to ``channel`` 429 (``Retry-After``) until
        ``release``."""
        self._held[channel] = retry_after

    def release(self, channel: str) -> None:
        self._held.pop(channel, None)

    def fail_groups(self, error: str | None = None) -> None:
        """Answer ``usergroups.list`` and ``usergroups.users.list`` with HTTP 500, or with
        ``ok: false`` and ``error`` (``"missing_scope"``), until ``release_groups``."""
        self._groups_failing = error or ""

    def release_groups(self) -> None:
        self._groups_failing = None

    def expire_triggers(self, expired: bool = True) -> None:
        """Answer ``views.open`` with ``expired_trigger_id`` (as Slack does after 3 s)."""
        self._triggers_expired = expired

    def fail_answers(self, times: int) -> None:
        """The next `times` posts to a response_url answer 503, as Slack does when busy."""
        self._failing = times

    def reset(self) -> None:
        with self._lock:
            self.calls.clear()

    def recorded(self, path_prefix: str = "") -> list[Call]:
        with self._lock:
            return [c for c in self.calls if c.path.startswith(path_prefix)]

    def wait_for(
        self, predicate: Callable[[Call], bool], *, timeout: float = 15.0, count: int = 1
    ) -> list[Call]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [c for c in self.recorded() if predicate(c)]
            if len(found) >= count:
                return found
            time.sleep(0.02)
        raise AssertionError(
            f"fake Slack saw no matching call in {timeout}s; calls: "
            f"{[c.path for c in self.recorded()]}"
        )

    def _refusal(self, channel: str) -> int | None:
        """The Retry-After of a chat.postMessage to ``channel`` refused now, if it is;
        otherwise the post is taken (and counts for the channel's pace)."""
        if channel in self._held:
            return self._held[channel]
        if self._limited > 0:
            self._limited -= 1
            return 1
        now = time.monotonic()
        with self._lock:
            last = self._last_post.get(channel)
            if self._pace > 0 and last is not None and now - last < self._pace:
                return self._pace_retry_after
            self._last_post[channel] = now
        return None

    async def _handle(self, request: Request) -> Response:
        raw = (await request.body()).decode("utf-8")
        if request.headers.get("content-type", "").startswith("application/json"):
            body: dict[str, Any] = json.loads(raw or "{}")
        else:
            body = {k: v[0] for k, v in parse_qs(raw).items()}
        body = {**dict(request.query_params), **body}  # a GET's arguments are its query
        path = "/" + request.path_params["path"]
        if path == "/api/chat.postMessage":
            retry_after = self._refusal(str(body.get("channel", "")))
            if retry_after is not None:
                with self._lock:
                    self.calls.append(Call(path + "#429", body, time.monotonic()))
                return JSONResponse(
                    {"ok": False, "error": "ratelimited"},
                    status_code=429,
                    headers={"Retry-After": str(retry_after)},
                )
        if path.startswith("/response/") and self._failing > 0:
            self._failing -= 1
            with self._lock:
                self.calls.append(Call(path + "#503", body, time.monotonic()))
            return PlainTextResponse("service unavailable", status_code=503)
        with self._lock:
            self._ts += 1
            ts = f"1764480000.{self._ts:06d}"
            peer = request.client.port if request.client is not None else None
            self.calls.append(Call(path, body, time.monotonic(), ts, peer))
        if path.startswith("/response/"):
            return PlainTextResponse("ok")
        if path == "/api/auth.test":
            return JSONResponse(
                {
                    "ok": True,
                    "url": "https://fake.slack/",
                    "team": "Fake",
                    "user": "queuebot",
                    "team_id": "T0FAKE",
                    "user_id": "U0BOT",
                    "bot_id": "B0BOT",
                }
            )
        if path.startswith("/api/usergroups."):
            return self._usergroups(path, body)
        if path in ("/api/views.open", "/api/views.update", "/api/views.publish"):
            return self._view(path, body)
        if path == "/api/apps.connections.open":
            if self.socket_url is None:
                return JSONResponse({"ok": False, "error": "socket_mode_not_enabled"})
            return JSONResponse({"ok": True, "url": self.socket_url})
        if path == "/api/chat.postMessage":
            return JSONResponse(
                {
                    "ok": True,
                    "channel": body.get("channel"),
                    "ts": ts,
                    "message": {"text": body.get("text")},
                }
            )
        return JSONResponse({"ok": True, "ts": body.get("ts", ts)})

    def _usergroups(self, path: str, body: dict[str, Any]) -> Response:
        """``usergroups.users.list`` (one group's members) and ``usergroups.list``."""
        group = str(body.get("usergroup", ""))
        if path == "/api/usergroups.users.list":
            with self._lock:
                self.group_calls[group] += 1
        failing = self._groups_failing
        if failing == "":
            return PlainTextResponse("internal server error", status_code=500)
        if failing is not None:
            return JSONResponse({"ok": False, "error": failing})
        if path == "/api/usergroups.users.list":
            if group not in self.usergroups:
                return JSONResponse({"ok": False, "error": "no_such_subteam"})
            return JSONResponse({"ok": True, "users": list(self.usergroups[group])})
        if path == "/api/usergroups.list":
            with_users = str(body.get("include_users", "")).lower() in {"1", "true"}
            groups = [
                {
                    "id": gid,
                    "team_id": "T0FAKE",
                    "is_usergroup": True,
                    "name": gid.lower(),
                    "handle": gid.lower(),
                    "user_count": len(users),
                    **({"users": list(users)} if with_users else {}),
                }
                for gid, users in self.usergroups.items()
            ]
            return JSONResponse({"ok": True, "usergroups": groups})
        return JSONResponse({"ok": False, "error": "unknown_method"})

    def _view(self, path: str, body: dict[str, Any]) -> Response:
        """``views.open``, ``views.update`` and ``views.publish``, as Slack answers them."""
        raw = body.get("view")
        try:
            view = json.loads(raw) if isinstance(raw, str) else raw
            kept = check_view(view)
        except (ValueError, ViewRefused) as exc:
            with self._lock:
                self.calls[-1].path = path + "#invalid"
            return JSONResponse(
                {
                    "ok": False,
                    "error": "invalid_arguments",
                    "response_metadata": {"messages": [f"[ERROR] {exc}"]},
                }
            )
        with self._lock:
            if path == "/api/views.open":
                if not body.get("trigger_id"):
                    return JSONResponse({"ok": False, "error": "invalid_arguments"})
                if self._triggers_expired:
                    return JSONResponse({"ok": False, "error": "expired_trigger_id"})
                self._view_serial += 1
                view_id = f"V{self._view_serial:08d}"
            elif path == "/api/views.update":
                view_id = str(body.get("view_id") or "")
                if not view_id:
                    external = body.get("external_id")
                    view_id = next(
                        (k for k, v in self.views.items() if v.get("external_id") == external),
                        "",
                    )
                if view_id not in self.views:
                    return JSONResponse({"ok": False, "error": "not_found"})
                stale = body.get("hash")
                if stale and stale != self.views[view_id]["hash"]:
                    return JSONResponse({"ok": False, "error": "hash_conflict"})
            else:
                user = str(body.get("user_id") or "")
                if not user or kept.get("type") != "home":
                    return JSONResponse({"ok": False, "error": "invalid_arguments"})
                self._view_serial += 1
                view_id = f"V{self._view_serial:08d}"
            self._view_serial += 1
            shown = {
                **kept,
                "id": view_id,
                "hash": f"{self._view_serial}.{view_id}",
                "state": {"values": {}},
            }
            if path == "/api/views.publish":
                self.homes[str(body.get("user_id"))] = shown
            else:
                self.views[view_id] = shown
        return JSONResponse({"ok": True, "view": shown})
