"""Alerts: notifications from Alertmanager and from queuebot's own detectors, stored
before they are acknowledged and turned into one chat thread per alert group.

``service`` holds the use cases (``AlertDesk``: receive, process, set aside), ``store``
their SQL, ``model`` the typed records (an alert group, the posts of its thread),
``merge`` what a notification changes in its group, ``messages`` what a thread says and
``publish`` the delivery of its posts; ``payload`` is Alertmanager's webhook payload,
``routes`` where a group goes and ``detectors`` queuebot's own alerts."""
