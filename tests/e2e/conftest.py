"""The end-to-end tests' shared fixture: the fake Slack (testkit/fake_slack.py), started
for the test and stopped after it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.fake_slack import FakeSlack


@pytest.fixture
def fake() -> Iterator[FakeSlack]:
    with FakeSlack().start() as server:
        yield server
