"""The real queue systems' tests' shared fixture: a fresh, empty PostgreSQL database for a
system to build its schema in, by its libpq URL (the form the systems' tools take)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import _pg_conninfo, postgres_database


@pytest.fixture
def libpq_url() -> Iterator[str]:
    for url in postgres_database("empty"):
        yield _pg_conninfo(url)
