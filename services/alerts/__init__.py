"""Alerts: notifications from Alertmanager and from queuebot's own detectors, stored
before they are acknowledged and turned into one chat thread per alert group."""
