"""Pieces of queuebot's configuration file that tests add to the demo's."""

from __future__ import annotations

# The detectors queuebot runs over the queues' counts: a test that counts alert posts turns
# them off (the demo's failed jobs would fire them and add a thread of their own).
DETECTORS = ("queue_loss", "dead_letter_growth", "failed_actionable")
DETECTORS_OFF = "".join(f"[alerts.detectors.{name}]\nenabled = false\n" for name in DETECTORS)
