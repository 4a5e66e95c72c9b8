"""The end-to-end tests' shared fixtures: the fake Slack (testkit/fake_slack.py), started
for the test and stopped after it, and a module's demo database (SQLite)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.fake_slack import FakeSlack
from tests.e2e.serving import demo_database


@pytest.fixture
def fake() -> Iterator[FakeSlack]:
    with FakeSlack().start() as server:
        yield server


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A SQLite demo database the module's tests share (see serving.demo_database)."""
    with demo_database("sqlite", tmp_path_factory.mktemp("demo")) as url:
        yield url
