"""Changes of named rows at once, each approved by another person: a requeue, a cancel
and a redrive without stages, the estate's own ``Action``s on the rows a request froze
(``approvable.py``, registered by ``jobs.py``)."""
