"""The worker-queue retry worker (Parts A-F of the queue-failure runbook) as queuebot's
own housekeeping: guarded set-based statements with audit events, notices as alerts,
a dry run, an advisory lock, and a report of message queues. See docs/housekeeping.md."""
