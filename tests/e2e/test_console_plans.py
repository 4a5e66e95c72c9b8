"""A staged redrive through the console, as a person sees it: each action prints the
plan's message once."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.test_console import queuebot, replies

REDRIVE = '@alice /queue redrive --error-like ffmpeg --sample 2 --reason "OOM fix deployed"'


def test_each_plan_action_prints_the_plan_once(tmp_path: Path) -> None:
    lines = [
        REDRIVE,
        "@bob /queue approve CR-1",
        "@alice /queue halt P-1 --reason looks-wrong",
        '@alice /queue resume P-1 --reason "false alarm"',
        "@bob /queue approve CR-2",
    ]
    run = queuebot("demo", stdin="".join(f"{x}\n" for x in lines), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    out = replies(run.stdout)
    for line in (lines[1], lines[2], lines[4]):  # approve (it starts), halt, approve resume
        assert out[line].count("== P-1: redrive 14 dead letters in clips") == 1, (line, out[line])
    halt = out["@alice /queue halt P-1 --reason looks-wrong"]
    assert "P-1 halted by alice: looks-wrong" in halt
    assert "/queue resume P-1" in halt and "/queue rollback P-1" in halt
