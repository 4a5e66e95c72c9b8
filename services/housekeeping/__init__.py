"""The queue-failure runbook's retry worker (Parts A-F) as queuebot's own housekeeping:
on each queue, what its profile offers (``housekeeping_parts``: guarded set-based
statements, run here with audit events and notices as alerts; or
``housekeeping_report``: a report that changes nothing), a dry run and an advisory
lock. See docs/housekeeping.md."""
