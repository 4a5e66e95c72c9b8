"""queuebot's test kit: the local fake Slack and the request signer, shared by the tests
and the benchmarks and shipped with the package, the way errbot ships its test backend.

* ``testkit.fake_slack``: a local fake of Slack's Web API and ``response_url`` endpoint
  that records every call (``FakeSlack``, ``Call``).
* ``testkit.slack_requests``: requests built the way Slack builds them, signed with the
  fake workspace's secret (``SECRET``, ``signed``, ``slash_fields``).

It imports nothing from queuebot itself (bot, commands, services), so anything may use it.
"""
