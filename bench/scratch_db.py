"""The scratch databases under the name the tests first imported them by, from bench/ on
the path: tests/integration/test_bench_scratch.py. ``bench.kit.scratch`` is the module;
this one goes once that test imports it."""

from __future__ import annotations

from bench.kit.scratch import create, drop, leftovers, unique_name

__all__ = ["create", "drop", "leftovers", "unique_name"]
