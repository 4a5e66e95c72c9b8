"""The pg-boss preset (Node): ``pgboss.job``, partitioned by queue name."""

from __future__ import annotations

from services.estate.pg_boss.preset import PgBossProfile

__all__ = ["PgBossProfile"]
