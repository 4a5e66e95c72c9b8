"""Is a request Slack's? Slack's v0 scheme, checked at queuebot's edge before Bolt sees
the request: ``X-Slack-Signature`` is ``v0=`` and the hex HMAC-SHA256, keyed with the
signing secret, of ``v0:{X-Slack-Request-Timestamp}:{body}``, over the body's exact
bytes; the timestamp is within 5 minutes of now. The digests are compared in constant time.

Bolt parses a body before it checks the signature, so an unsigned body it cannot parse,
or a timestamp that is not a number, raised inside Bolt and was answered 500 with a
traceback; checked here first, each is a plain 401.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping

MAX_AGE = 5 * 60  # seconds either way, as Slack asks
_TIMESTAMP = re.compile(r"[0-9]{1,12}")


def refusal(secret: bytes, headers: Mapping[str, str], body: bytes, *, now: float) -> str | None:
    """Why the request is not Slack's (a few words for the log), or None when it is."""
    stamp = headers.get("x-slack-request-timestamp")
    signature = headers.get("x-slack-signature")
    if stamp is None or signature is None:
        return "no signature"
    if not _TIMESTAMP.fullmatch(stamp):
        return "a timestamp that is not a number"
    if abs(now - int(stamp)) > MAX_AGE:
        return "a timestamp more than 5 minutes off"
    digest = hmac.new(secret, b"v0:" + stamp.encode() + b":" + body, hashlib.sha256)
    # Starlette decodes header values as latin-1, so encoding them back is exact
    if not hmac.compare_digest(
        b"v0=" + digest.hexdigest().encode(), signature.encode("latin-1", "replace")
    ):
        return "a bad signature"
    return None
