"""Reading the queues: triage, dead letters, show and the estate's listings through one
gate (``service.py``: ``QueueReads``; ``gate.py``: at most so many at once, a fresh answer
shared), the triage as people read it (``view.py``), the counts kept every minute for the
detectors and the growth checks (``samples.py``), and the gauges of ``GET /metrics``
(``gauges.py``)."""
