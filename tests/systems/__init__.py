"""Tests of queuebot on the real queue systems (their harness: testkit/systems/)."""
