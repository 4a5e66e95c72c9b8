"""Plain helpers the test modules share; their pytest fixtures live in the conftest.py
files. Free ports are testkit/ports.py's (the benches use them too).

- people: alice, bob, dora and a stranger, in each form a test meets them
- platforms: the fake Slack and Discord as a serve is wired to them, a button click
- config: pieces of a configuration file (the detectors turned off)
- database: a query on a test database from outside the process that uses it
- processes: a queuebot started and talked to, its clean environment, stopping it
- launch, zygote: queuebot's processes forked from an interpreter that imported it once
- replies: what a read command replies, rendered
- plans: a staged redrive's view as its store gives it
- systems: whether a real queue system's runtime is here
- text: reading what queuebot said (in order)
"""
