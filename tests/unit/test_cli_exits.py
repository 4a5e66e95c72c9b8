"""What the command line does with a failure it did not expect: one line, exit 70."""

from __future__ import annotations

import argparse

import pytest

from bot import cli


async def test_an_unexpected_error_is_one_line_and_exit_70(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async def broken(args: argparse.Namespace) -> int:
        raise RuntimeError("boom\n  at line two")

    monkeypatch.setattr(cli, "_dispatch", broken)
    assert await cli.run(cli.parse(["config", "check"])) == cli.EXIT_BUG == 70
    assert capsys.readouterr().err == (
        "queuebot: unexpected error (RuntimeError: boom); run again with --log-level DEBUG "
        "to see where, and report it\n"
    )
