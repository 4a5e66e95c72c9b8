"""The message_job profile: its tables (``ddl/``), reads (``profile``), guarded writes
(``changes``, ``events``) and staged-redrive operations (``plans``), in one package."""

from __future__ import annotations

from services.estate.message_job.profile import MessageJobProfile

__all__ = ["MessageJobProfile"]
