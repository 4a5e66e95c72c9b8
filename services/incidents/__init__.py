"""Incidents declared from chat, run by a runbook: communications on their deadlines
(reminders, then escalation), restore order, validation and a timeline."""
