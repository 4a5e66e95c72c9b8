"""queuebot's benchmarks: each module a bench that builds what it measures, prints its
figures and judges them against its targets, run from the repository's root as
``.venv/bin/python -m bench.NAME`` (``--help`` says what it takes; ``--smoke``, a size that
runs in seconds). ``bench.kit`` holds what the benches share; bench/README.md, the
latest figures and how to reproduce each.

Not part of the package: like the tests, the benches find ``testkit`` and queuebot's own
packages from the repository's root.
"""
