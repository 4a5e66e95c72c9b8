"""Benchmarks run at once never drop each other's database: each run's scratch database
has a name of its own; only the triage estate, kept or reused on purpose, has a fixed one."""

from __future__ import annotations

import importlib
from types import ModuleType

import psycopg
import pytest

from tests.conftest import PG_ADMIN, _pg_conninfo, need_postgres

MODULES = {"scratch_db": "bench.kit.scratch", "triage": "bench.triage"}


def bench(module: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return importlib.import_module(MODULES[module])


def exists(name: str) -> bool:
    with psycopg.connect(_pg_conninfo(PG_ADMIN)) as conn:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
        return found.fetchone() is not None


def test_two_runs_at_once_get_databases_of_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    need_postgres()
    scratch = bench("scratch_db", monkeypatch)
    first, _ = scratch.create(PG_ADMIN, "qb_bench_redrive")
    second, url = scratch.create(PG_ADMIN, "qb_bench_redrive")  # a second run, started later
    try:
        assert first != second
        assert first.startswith("qb_bench_redrive_") and url.endswith(f"/{second}")
        assert {first, second} <= set(scratch.leftovers(PG_ADMIN, "qb_bench_redrive"))
        scratch.drop(PG_ADMIN, second)  # the second run ends first ...
        assert exists(first) and not exists(second)  # ... and leaves the first one's alone
    finally:
        scratch.drop(PG_ADMIN, first)
        scratch.drop(PG_ADMIN, second)
    assert not exists(first)


def test_triage_uses_the_named_estate_only_when_kept_or_reused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    triage = bench("triage", monkeypatch)
    once, again = (triage.database_name(keep=False, reuse=False) for _ in range(2))
    assert once != again and once.startswith("qb_bench_triage_")
    for keep, reuse in ((True, False), (False, True), (True, True)):
        assert triage.database_name(keep=keep, reuse=reuse) == "qb_bench_triage"
