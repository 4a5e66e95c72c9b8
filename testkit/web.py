"""One-off HTTP requests for the tests and the benches: httpx's ``get``/``post``/
``request`` with one TLS context made once per process.

httpx's module functions build a client per call, and each client builds an SSL context
from certifi's CA bundle, even for a plain ``http://`` URL: about 50 ms of CPU a call. The
tests poll a starting serve's ``/healthz`` every 50 ms, so each start of serve cost the
test seconds of CPU that the starting serve then waited behind on two cores. Given a
context, httpx uses it as it is (about 2 ms a call). Each call is still a client of its
own: no connection is kept between calls, so a request never lands on a connection to a
serve that has since been killed.
"""

from __future__ import annotations

import functools
import ssl
from typing import Any

import httpx


@functools.cache
def _tls() -> ssl.SSLContext:
    return ssl.create_default_context()


def request(method: str, url: str, **kwargs: Any) -> httpx.Response:
    kwargs.setdefault("verify", _tls())
    return httpx.request(method, url, **kwargs)


def get(url: str, **kwargs: Any) -> httpx.Response:
    return request("GET", url, **kwargs)


def post(url: str, **kwargs: Any) -> httpx.Response:
    return request("POST", url, **kwargs)
