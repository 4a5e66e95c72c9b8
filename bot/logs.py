"""Logging for every queuebot process (the command line, serve and its worker): one line
per record on stderr, and the libraries that log the requests they make kept at WARNING,
whatever ``--log-level`` says.

Those libraries print the URL of each request, and some of queuebot's URLs are secrets:
the housekeeping webhook carries its token in the URL, Slack's ``response_url`` answers a
command without any other credential, a Discord interaction token is part of the URL that
answers it, and the gateway's and Socket Mode's frames carry both. So at INFO and DEBUG
queuebot's own records show and those libraries' requests do not; their warnings and
errors still do."""

from __future__ import annotations

import logging
import sys

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Loggers that print request URLs, headers or frames at INFO or DEBUG.
QUIET = (
    "httpx",  # INFO: "HTTP Request: POST https://...token... "HTTP/1.1 200 OK""
    "httpcore",  # DEBUG: each request's headers
    "urllib3",  # DEBUG: each request's path and query
    "aiohttp.access",  # INFO: each request line served
    "aiohttp.client",
    "websockets",  # DEBUG: every frame (Socket Mode envelopes carry response_url)
    "slack_sdk",  # DEBUG: "Sending a request - url: <response_url>"
    "slack_bolt",  # DEBUG: the requests it handles
    "discord",  # DEBUG: "POST .../webhooks/<app>/<interaction token>", gateway events
)


def setup_logging(level: str | int) -> None:
    """Log at ``level`` to stderr; the loggers in ``QUIET`` at WARNING at most."""
    logging.basicConfig(level=level, stream=sys.stderr, format=FORMAT)
    asked = logging.getLevelNamesMapping()[level] if isinstance(level, str) else level
    floor = max(logging.WARNING, asked)
    for name in QUIET:
        logging.getLogger(name).setLevel(floor)
