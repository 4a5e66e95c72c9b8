"""``POST /alerts/alertmanager``: Alertmanager's webhook (version "4").

The answer says what Alertmanager should do next:
- 200 once the notification is stored (processing and chat posts come after);
- 401 without the bearer token QUEUEBOT_ALERT_TOKEN asks for (when it is set);
- 400 with the reason for a body that is not a notification (Alertmanager does not
  retry a 4xx, but sends the whole group again on its next interval);
- 413 for a body over ``[http] max_body_kb`` (the body limit refuses it unread);
- 503 when it could not be stored, so Alertmanager retries it within the same send.
"""

from __future__ import annotations

import hmac
import logging

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bot.ratelimited_log import RateLimitedLog
from services.alerts.desk import AlertDesk
from services.alerts.payload import BadPayload, parse
from services.errors import DatabaseUnavailable

log = logging.getLogger("queuebot.alerts")
PATH = "/alerts/alertmanager"


class AlertmanagerEndpoint:
    def __init__(self, desk: AlertDesk, *, token: str | None, refused: RateLimitedLog) -> None:
        self.desk = desk
        self.token = token.encode() if token else None
        self.refused = refused

    def _authorized(self, request: Request) -> bool:
        if self.token is None:
            return True
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given:
            return False
        return hmac.compare_digest(given.strip().encode(), self.token)

    async def __call__(self, request: Request) -> Response:
        if not self._authorized(request):
            self.refused("%s: missing or wrong bearer token (401)", PATH)
            return JSONResponse(
                {"error": "a bearer token is required: Authorization: Bearer <token>"},
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="queuebot"'},
            )
        body = await request.body()
        try:
            notification = parse(body)
        except BadPayload as exc:
            self.refused("%s: bad payload (400): %s", PATH, exc)
            return JSONResponse({"error": f"not an Alertmanager notification: {exc}"}, 400)
        try:
            number = await self.desk.receive(notification)
        except DatabaseUnavailable as exc:
            log.warning("an alert notification could not be stored (503, retried): %s", exc)
            return _unavailable()
        except Exception:
            log.exception("an alert notification could not be stored (503, retried)")
            return _unavailable()
        return JSONResponse({"stored": number})


def _unavailable() -> Response:
    return JSONResponse(
        {"error": "the notification could not be stored; send it again"},
        status_code=503,
        headers={"Retry-After": "1"},
    )
