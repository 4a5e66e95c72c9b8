"""What the Slack end-to-end modules share: a fake Slack and a real `queuebot serve` on a
demo database (``Stack``, made by ``serving_stack``), the one form a request opened, and
the answer a request got at its response_url."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testkit.fake_slack import Call, FakeSlack
from tests.e2e.serving import Served, demo_database, running_serve
from tests.helpers.database import query
from tests.helpers.platforms import slack_env

# configured as in production: a keyed audit trail (unkeyed, serve warns)
AUDIT_KEY = "e2e-audit-key-0123456789abcdef0123456789"


@dataclass
class Stack:
    fake: FakeSlack
    served: Served
    db_url: str

    @property
    def url(self) -> str:
        return self.served.url

    def sql(self, statement: str, **params: Any) -> list[Any]:
        return query(self.db_url, statement, **params)


@contextlib.contextmanager
def serving_stack(kind: str, workdir: Path) -> Iterator[Stack]:
    """serve on a fresh demo database of ``kind`` (sqlite, postgres), with a fake Slack."""
    with demo_database(kind, workdir) as db_url, FakeSlack().start() as fake:
        env = {**slack_env(fake), "QUEUEBOT_AUDIT_KEY": AUDIT_KEY}
        with running_serve(workdir, db_url, env) as served:
            yield Stack(fake, served, db_url)


def opened(stack: Stack, before: set[str], *, timeout: float = 10.0) -> dict[str, Any]:
    """The one form opened since ``before`` (the view ids then)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        new = [v for k, v in list(stack.fake.views.items()) if k not in before]
        if new:
            assert len(new) == 1, new
            return new[0]
        time.sleep(0.02)
    raise AssertionError(f"no form opened; calls: {[c.path for c in stack.fake.recorded()]}")


def answer_to(fake: FakeSlack, name: str) -> Call:
    """The answer posted to the response_url named ``name``."""
    return fake.wait_for(lambda c: c.path == f"/response/{name}")[0]


def texts(call: Call) -> str:
    """An answer's blocks and text, as one string to look in."""
    return json.dumps(call.body.get("blocks", [])) + str(call.body.get("text", ""))
