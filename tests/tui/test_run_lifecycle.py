"""A run as a user lives it, start to end: stdout that stays parseable JSON, quiet broken pipes, Ctrl-C
and `q` in the TUI reaching the command, the figures and the summary kept when the run ends, recordings that
hold the alerts and process names, replay controls. Real processes, real files, real Textual screens."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from collectors.replay import demo_recording_path
from tests.conftest import REPO_ROOT

PY = sys.executable


def memsight(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PY, "-m", "tui.cli", *args], cwd=REPO_ROOT, capture_output=True, timeout=120, **kwargs
    )


# --- item 4: stdout is memsight's when it prints JSON; a closed pipe is no traceback -------------------
def test_headless_json_stdout_parses_and_the_commands_output_goes_to_stderr(tmp_path):
    child = "import sys\nprint('child says hi')\nprint('child error', file=sys.stderr)"
    done = memsight("run", "--headless", "--json", "--agent-dir", str(tmp_path), "--", PY, "-c", child)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)  # the whole of stdout is one JSON document
    assert summary["sources"] and summary["sources"][0]["id"] == "os"
    assert b"child says hi" in done.stderr and b"child error" in done.stderr


def test_headless_json_with_log_sends_the_commands_output_to_the_log(tmp_path):
    log = tmp_path / "cmd.log"
    args = ("--json", "--log", str(log), "--agent-dir", str(tmp_path))
    done = memsight("run", *args, "--", PY, "-c", "print('to the log')")
    assert done.returncode == 0, done.stderr
    json.loads(done.stdout)
    assert log.read_text() == "to the log\n"
    assert b"to the log" not in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("replay", str(demo_recording_path()), "--json"),
        ("plan", "llama-3.1-8b", "--json"),
        ("plan", "llama-3.1-8b"),
    ],
    ids=["replay-json", "plan-json", "plan"],
)
def test_a_closed_stdout_pipe_ends_quietly(args):
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first byte, as `| head -0` would leave it
    try:
        done = subprocess.run(
            [PY, "-m", "tui.cli", *args], cwd=REPO_ROOT, stdout=write_end, stderr=subprocess.PIPE, timeout=120
        )
    finally:
        os.close(write_end)
    assert done.stderr == b""
    assert done.returncode == 141


def test_replay_json_into_head_reads_its_lines_and_says_nothing_else():
    head = subprocess.run(
        f"{PY} -m tui.cli replay {demo_recording_path()} --json | head -3",
        shell=True, cwd=REPO_ROOT, capture_output=True, timeout=120,
    )
    assert head.stdout.decode().splitlines()[0] == "{"
    assert head.stderr == b""


# --- item 1: Ctrl-C and q in the TUI reach the command ---------------------------------------------------
SLEEPER = "import time\nprint('started', flush=True)\ntime.sleep(60)"


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie (memsight has not reaped it yet) counts as gone: it runs no more
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "Z"


def _child_pid(run) -> int:
    import re  # noqa: PLC0415

    assert run.wait_for(b"started"), bytes(run.output[-2000:])
    match = re.search(rb"output of pid (\d+)", bytes(run.output))
    assert match, bytes(run.output[-2000:])
    return int(match.group(1))


def test_ctrl_c_in_the_tui_stops_the_command_and_memsight_exits_with_its_status(tmp_path):
    from tests.tui.test_run import PtyRun  # noqa: PLC0415

    run = PtyRun(tmp_path, "--", PY, "-c", SLEEPER)
    try:
        pid = _child_pid(run)
        os.write(run.master, b"\x03")  # Ctrl-C as the terminal (raw, the app's) delivers it: a key
        # Python's default SIGINT: KeyboardInterrupt, exit by SIGINT -> 128 + 2
        assert run.proc.wait(timeout=20) == 130, bytes(run.output[-3000:])
        assert _gone(pid)
        assert b"ctrl+q" not in bytes(run.output).lower()
    finally:
        run.close()


def test_q_while_the_command_runs_asks_first_then_y_stops_it(tmp_path):
    from tests.tui.test_run import PtyRun  # noqa: PLC0415

    run = PtyRun(tmp_path, "--", PY, "-c", SLEEPER)
    try:
        pid = _child_pid(run)
        os.write(run.master, b"q")
        assert run.wait_for(b"is still running"), bytes(run.output[-3000:])
        assert run.proc.poll() is None and not _gone(pid)  # asking stopped nothing
        os.write(run.master, b"n")  # stay
        time.sleep(1.0)
        assert run.proc.poll() is None and not _gone(pid)
        os.write(run.master, b"q")
        time.sleep(0.5)
        os.write(run.master, b"y")
        assert run.proc.wait(timeout=20) == 130
        assert _gone(pid)
    finally:
        run.close()
