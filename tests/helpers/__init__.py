"""Plain helpers the test modules share (pytest fixtures live in the conftest.py files):
the people of the tests' configurations, the fake chat platforms' wiring, configuration
builders and the real queue systems' runtimes. Free ports are ``testkit/ports.py``'s (the
benches use them too)."""
