"""A staged redrive through the console, as a person sees it: each action prints the
plan's message once."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.e2e.demo_session import demo_session
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
    run = queuebot("demo", "--no-worker", stdin="".join(f"{x}\n" for x in lines), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    out = replies(run.stdout)
    for line in (lines[1], lines[2], lines[4]):  # approve (it starts), halt, approve resume
        assert out[line].count("== P-1: redrive 14 dead letters in clips") == 1, (line, out[line])
    halt = out["@alice /queue halt P-1 --reason looks-wrong"]
    assert "P-1 halted by alice: looks-wrong" in halt
    assert "/queue resume P-1" in halt and "/queue rollback P-1" in halt


def test_the_demo_worker_takes_a_plan_to_done_and_another_to_a_halt(tmp_path: Path) -> None:
    with demo_session(tmp_path) as demo:
        demo.say(REDRIVE)
        demo.say("@bob /queue approve CR-1")
        demo.wait_for(1, "completed")
        demo.say("/queue plan P-1")
        demo.say('@alice /queue redrive --all --reason "transcoder fixed"')
        demo.say("@bob /queue approve CR-2")
        demo.wait_for(2, "halted")
        demo.say("/queue plan P-2")
        out, err = demo.finish()
    assert demo.demo.returncode == 0, err
    banner = out.split("\n> ", 1)[0]
    assert "A simulated worker finishes redriven and requeued jobs" in banner
    said = replies(out)
    assert "now: done: the sample and 2 wave(s) finished" in said["/queue plan P-1"]
    assert "14/14 succeeded" in said["/queue plan P-1"]
    halted = said["/queue plan P-2"]
    assert "HALTED: 3 job(s) of sample re-entered the dead-letter state" in halted
    assert "the same signature as before: the fix did not hold" in halted
    assert "Traceback" not in out + err


def banner(run: subprocess.CompletedProcess[str]) -> str:
    assert run.returncode == 0, run.stderr
    return run.stdout.split("\n> ", 1)[0]


def test_the_banner_suggests_what_fits_the_estate_left_by_earlier_runs(tmp_path: Path) -> None:
    first = queuebot(
        "demo", "--no-worker", stdin=f"{REDRIVE}\n@bob /queue approve CR-1\n", cwd=tmp_path
    )
    assert "@bob /queue approve CR-1," in banner(first)
    assert "No worker runs (--no-worker)" in banner(first)

    second = queuebot(
        "demo",
        "--no-worker",
        stdin='@alice /queue halt P-1\n@alice /queue rollback P-1 --reason "fix did not hold"\n',
        cwd=tmp_path,
    )
    said = banner(second)
    assert "approve CR-1" not in said and "redrive --error-like" not in said
    assert "P-1 (clips) is running: /queue plan P-1 follows it." in said

    third = queuebot("demo", "--no-worker", stdin="@bob /queue approve CR-2\n", cwd=tmp_path)
    said = banner(third)
    assert "P-1 (clips) is halted" in said and "then @bob /queue approve CR-3" in said
    # the approval follows only a rollback with rows to return
    assert "with none unclaimed the rollback closes the plan at once" in said
    assert "CR-2 (rollback by alice) waits for approval: @bob /queue approve CR-2" in said

    fourth = queuebot("demo", "--no-worker", cwd=tmp_path)
    said = banner(fourth)  # rolled back: the sample's two jobs are dead letters again
    assert "Watch a plan: @alice /queue redrive --error-like ffmpeg" in said
    assert "then @bob /queue approve CR-3, and /queue plan P-2." in said


def test_the_demo_lists_its_faults_and_deploys_a_fix(tmp_path: Path) -> None:
    lines = [
        "/demo",
        "/demo fix transcoder",
        "/demo faults",
        "/demo fix ffmpeg",
        "@alice /demo break",
    ]
    run = queuebot("demo", stdin="".join(f"{x}\n" for x in lines), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    said = replies(run.stdout)
    assert "transcoder  broken" in said["/demo"]
    assert "transcoder  fixed" in said["/demo faults"]
    assert "transcoder: fix deployed" in said["/demo fix transcoder"]
    assert "no fault named 'ffmpeg' (faults: allowlist, transcoder)" in said["/demo fix ffmpeg"]
    assert "usage: /demo" in said["@alice /demo break"]
    without = queuebot("demo", "--no-worker", stdin="/demo fix transcoder\n", cwd=tmp_path)
    assert "unknown" in replies(without.stdout)["/demo fix transcoder"].lower()
