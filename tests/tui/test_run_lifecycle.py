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
from tests.tui.test_replay_alerts import press_replay_jump

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
    # the log panel's title may reach the terminal a frame after the child's first line (a loaded machine)
    deadline = time.monotonic() + 15
    title = re.compile(rb"output of pid (\d+)")
    while (match := title.search(bytes(run.output))) is None and time.monotonic() < deadline:
        time.sleep(0.2)
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
        mark = len(run.output)
        os.write(run.master, b"q")
        # y only once the question is on screen again: a y that reaches the Live screen first does nothing
        # (a fixed 0.5 s here was a guess at how long a loaded machine takes to show it)
        assert run.wait_for(b"is still running", since=mark), bytes(run.output[-3000:])
        os.write(run.master, b"y")
        assert run.proc.wait(timeout=20) == 130
        assert _gone(pid)
    finally:
        run.close()


# --- item 5 (recorded part) and item 3's summary: what a recording holds -----------------------------
def _recorded_run(tmp_path, warn_gib: float):
    from collectors.alerts import AlertOptions  # noqa: PLC0415
    from collectors.monitor import Monitor  # noqa: PLC0415

    path = tmp_path / "run.jsonl"
    options = AlertOptions(headroom_warning_bytes=int(warn_gib * 2**30), headroom_critical_bytes=0)
    monitor = Monitor(agent_dir=str(tmp_path), record_to=path, alert_options=options)
    monitor.start()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(monitor.state().history["available"][0]) < 4:
            time.sleep(0.2)
    finally:
        monitor.stop()
    return path, monitor


def test_a_recording_holds_the_alerts_raised_the_process_names_and_the_summary(tmp_path):
    from collectors.recording import read_recording  # noqa: PLC0415
    from collectors.recording_summary import summarize  # noqa: PLC0415

    # a warning threshold of 100,000 GiB: this machine's headroom is under it, so the rule fires at once
    path, monitor = _recorded_run(tmp_path, warn_gib=100_000)
    raised = [a for a in monitor.state().alerts if a.kind == "headroom"]
    assert raised
    recording = read_recording(path)
    kinds = [e["k"] for e in recording.events]
    assert kinds[-1] == "summary"
    recorded_alerts = [e for e in recording.events if e["k"] == "alert"]
    alerts = monitor.state().alerts
    assert [(a["t"], a["message"]) for a in recorded_alerts] == [(a.t, a.message) for a in alerts]
    doc = summarize(recording)
    assert [a["message"] for a in doc["alerts"]] == [a.message for a in raised]
    assert doc["alerts"][0]["severity"] == "warning" and doc["alerts"][0]["kind"] == "headroom"
    # process names: this test's own process is in the recording by its command line, not only "python"
    me = next(s for s in doc["sources"] if s["kind"] == "process" and s["pid"] == os.getpid())
    with open("/proc/self/cmdline", "rb") as f:
        argv = f.read().rstrip(b"\0").split(b"\0")
    assert me["cmdline"].startswith(" ".join(a.decode() for a in argv)[:100])
    assert me["name"]
    # the summary: lowest headroom is exactly the smallest MemAvailable the recording holds
    available = [e["mem_available"] for e in recording.events if e["k"] == "os"]
    summary = doc["summary"]
    assert summary["lowest_headroom"]["bytes"] == min(available)
    assert summary["lowest_headroom"]["source"] == "MemAvailable"
    used = [e["mem_total"] - e["mem_available"] for e in recording.events if e["k"] == "os"]
    assert summary["peaks"]["system_used"]["bytes"] == max(used)
    assert summary["alerts_total"] == len(raised)


def test_replay_json_carries_alerts_names_and_the_summary(tmp_path):
    path, _ = _recorded_run(tmp_path, warn_gib=100_000)
    done = memsight("replay", str(path), "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["alerts"] and doc["alerts"][0]["message"].startswith("headroom ")
    assert doc["summary"]["alerts_total"] == len(doc["alerts"])
    assert any(s.get("cmdline") for s in doc["sources"] if s["kind"] == "process")


def test_summary_round_trips_through_json_and_reads_as_lines(tmp_path):
    from collectors.recording import read_recording  # noqa: PLC0415
    from collectors.summary import summary_from_json  # noqa: PLC0415
    from tui.screens.run_summary import summary_lines  # noqa: PLC0415
    from tui.widgets.fmt import size  # noqa: PLC0415

    path, monitor = _recorded_run(tmp_path, warn_gib=100_000)
    summary = monitor.state().summary
    recorded = next(e for e in read_recording(path).events if e["k"] == "summary")
    assert summary_from_json(recorded) == summary
    lines = summary_lines(summary)
    low = summary.lowest_headroom
    assert f"lowest headroom: {size(low)} (MemAvailable)" in lines[3]
    assert lines[4].startswith(f"alerts: {summary.alerts_total} (")


# --- item 3: the Live screen keeps the run's last figures and shows its summary ------------------------
async def test_after_the_command_ends_the_live_screen_keeps_its_figures_greyed_with_the_summary(tmp_path):
    from dataclasses import replace  # noqa: PLC0415

    from textual.widgets import Static  # noqa: PLC0415

    from collectors.summary import SummaryAccumulator  # noqa: PLC0415
    from tests.tui.fixed_states import FixedMonitor, gb10_state  # noqa: PLC0415
    from tui import cmd_run  # noqa: PLC0415
    from tui.app import MemsightApp  # noqa: PLC0415
    from tui.widgets.agents_table import AgentsTable  # noqa: PLC0415
    from tui.widgets.bucket_bars import BucketBars  # noqa: PLC0415

    state = gb10_state()
    state = replace(state, summary=SummaryAccumulator().add(state, list(state.alerts)))
    go = tmp_path / "go"
    proc = subprocess.Popen([PY, "-c", "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): "
                             "time.sleep(0.05)", str(go)])
    child = cmd_run.RunChild(proc, "python gen.py", None)
    app = MemsightApp(FixedMonitor(state), source_label="t", child=child)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        bars = app.screen.query_one(BucketBars)
        weights_before = bars.data.measured_bytes("weights")
        summary = app.screen.query_one("#live-summary", Static)
        assert not summary.display and "ended at" not in bars.data.title
        assert not app.screen.query_one("#pools").has_class("ended")
        go.touch()
        proc.wait(timeout=20)
        app.refresh_data()
        await pilot.pause()
        bars = app.screen.query_one(BucketBars)
        assert "last figures, ended at " in bars.data.title
        assert bars.data.measured_bytes("weights") == weights_before  # the figures stay
        assert app.screen.query_one("#pools").has_class("ended")
        # `memsight run` shows only its command's agents: none here, so no table is mounted (live.py:
        # _agents_table); one mounted after the end would carry the class from the start
        assert all(table.has_class("ended") for table in app.screen.query(AgentsTable))
        assert summary.display
        text = str(summary.content)
        assert text.startswith("run summary: ")
        assert f"peak GiB: weights {state.summary.peak('weights').bytes / 2**30:.2f}" in text
        assert "peak reserved − allocated: " in text and "lowest headroom: " in text
        # the view stays open after the run: later states do not move the run's summary
        later = replace(state, t=state.t + 600, summary=replace(state.summary, end_t=state.t + 600))
        app.monitor.current = later
        app.refresh_data()
        await pilot.pause()
        assert app.run_summary is state.summary and str(summary.content) == text


def test_a_run_keeps_its_agents_figures_after_the_command_exits(tmp_path):
    """The real thing: `memsight run` in a pty, an agent-carrying child that exits; 12 s later (past the
    10 s after which a watch drops an exited agent) its row and the ended label are still on screen."""
    from tests.tui.test_run import PtyRun  # noqa: PLC0415

    run = PtyRun(tmp_path, "--", PY, "-c", "import time\nprint('started', flush=True)\ntime.sleep(2)")
    try:
        pid = _child_pid(run)
        assert run.wait_for(b"exited with status 0"), bytes(run.output[-3000:])
        mark = len(run.output)
        time.sleep(12)
        os.write(run.master, b"2")  # away and back: the Live screen redraws everything it shows
        time.sleep(0.5)
        os.write(run.master, b"1")
        # the redraw, waited for (a fixed 1.5 s was a guess at a loaded machine's speed)
        expected = (b"run summary:", b"ended at", str(pid).encode(), b"exited")  # the agent's row is kept
        deadline = time.monotonic() + 30
        while not all(text in run.output[mark:] for text in expected) and time.monotonic() < deadline:
            time.sleep(0.1)
        later = bytes(run.output[mark:])
        assert b"run summary:" in later, later[-3000:]
        assert b"ended at" in later
        assert str(pid).encode() in later and b"exited" in later  # the agent's row is kept
        os.write(run.master, b"q")
        assert run.proc.wait(timeout=20) == 0
    finally:
        run.close()


# --- item 5: replay controls -----------------------------------------------------------------------------
async def test_replay_keys_pause_seek_speed_and_jump_to_the_alert_and_the_peak():
    from collectors.alerts import AlertOptions  # noqa: PLC0415
    from collectors.replay import ReplayMonitor  # noqa: PLC0415
    from tui.app import MemsightApp  # noqa: PLC0415
    from tui.widgets.alert_log import AlertLog  # noqa: PLC0415

    # a headroom warning 64 MiB above the bundled recording's lowest headroom: raised once, mid-run
    lowest = ReplayMonitor(demo_recording_path()).scan().lowest_headroom
    options = AlertOptions(
        headroom_warning_bytes=lowest + 64 * 2**20, headroom_critical_bytes=0, new_process_bytes=2**40
    )
    monitor = ReplayMonitor(demo_recording_path(), alert_options=options)
    app = MemsightApp(monitor, source_label="replay", thresholds=options)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        assert "Pause" in _footer_text(app)
        await pilot.press("space")
        assert monitor.paused
        held = monitor.offset_s
        await pilot.pause(0.4)
        assert monitor.offset_s == held  # paused: the clock stands still
        assert "paused" in str(app.screen.query_one("#live-status").content)
        await press_replay_jump(pilot, app, "a")
        (alert,) = monitor.scan().alerts
        assert alert.kind == "headroom" and alert.t - monitor.start_t > 10
        assert monitor.offset_s == pytest.approx(alert.t - monitor.start_t)
        await pilot.pause()
        assert [r.message for r in app.screen.query_one(AlertLog).shown] == [alert.message]
        assert "at the alert" in str(app.screen.query_one("#live-status").content)
        await press_replay_jump(pilot, app, "a")  # no second alert
        assert "no alert after this point" in str(app.screen.query_one("#live-status").content)
        await press_replay_jump(pilot, app, "p")
        peak = monitor.scan().peak("system_used")  # no CUDA in this recording: the peak is memory used
        assert monitor.offset_s == pytest.approx(peak.t - monitor.start_t)
        assert monitor.state().os.mem_total - monitor.state().os.mem_available == peak.bytes
        await pilot.press("left")
        assert monitor.offset_s == pytest.approx(peak.t - monitor.start_t - 10)
        await pilot.press("home")
        assert monitor.offset_s == 0.0
        await pilot.press("plus")
        assert monitor.speed == 2.0
        await pilot.press("minus", "minus")
        assert monitor.speed == 0.5
        await pilot.press("space")  # play again: the clock moves
        assert not monitor.paused
        await pilot.pause(0.5)
        assert monitor.offset_s > 0.0
        await pilot.press("question_mark")
        await pilot.pause()
        from rich.console import Console  # noqa: PLC0415

        console = Console(width=120, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
        console.print(app.screen.query_one("#help-text").content)
        help_text = console.export_text()
        assert "Next alert" in help_text and "Back 10 s" in help_text


def _footer_text(app) -> str:
    from textual.widgets import Footer  # noqa: PLC0415

    footer = app.screen.query_one(Footer)
    return " ".join(str(getattr(k, "description", "")) for k in footer.query("FooterKey"))


async def test_the_live_footer_lists_its_keys_when_it_appears():
    # The Live screen mounts its footer with its first figures (issue 20: the first frame is its skeleton).
    # Textual's own footer shows no key until a bindings signal and two refreshes later (a test that looked at
    # the keys one pause after the start found none under load): here the keys come with the footer.
    import asyncio  # noqa: PLC0415

    from textual.widgets import Footer  # noqa: PLC0415

    from collectors.replay import ReplayMonitor  # noqa: PLC0415
    from tui.app import MemsightApp  # noqa: PLC0415

    app = MemsightApp(ReplayMonitor(demo_recording_path()), source_label="replay")
    async with app.run_test(size=(160, 48)):
        for _ in range(100_000):
            footer = next(iter(app.screen.query(Footer)), None)
            if footer is not None and footer.is_mounted:
                break
            await asyncio.sleep(0)
        descriptions = _footer_text(app)
        assert "Pause" in descriptions and "Quit" in descriptions and "Gap chart" in descriptions


async def test_replay_keys_are_not_offered_outside_a_replay():
    from tests.tui.fixed_states import FixedMonitor, gb10_state  # noqa: PLC0415
    from tui.app import MemsightApp  # noqa: PLC0415

    app = MemsightApp(FixedMonitor(gb10_state()), source_label="t")
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        assert "Pause" not in _footer_text(app)
        await pilot.press("space", "a", "p")  # nothing happens, nothing breaks
        assert app.is_running


def test_replay_json_of_a_recording_without_a_summary_replays_it_once():
    done = memsight("replay", str(demo_recording_path()), "--json")
    doc = json.loads(done.stdout)
    assert doc["summary_from"] == "replayed with the default thresholds"
    from collectors.recording import read_recording  # noqa: PLC0415

    events = read_recording(demo_recording_path()).events
    available = [e["mem_available"] for e in events if e["k"] == "os"]
    assert doc["summary"]["lowest_headroom"]["bytes"] == min(available)
    from collectors import agent_format  # noqa: PLC0415

    i = agent_format.RECORD_FIELDS.index("weights_bytes")
    weights = [e["r"][i] for e in events if e["k"] == "agent" and e["r"][i] is not None]
    assert doc["summary"]["peaks"]["weights"]["bytes"] == max(weights)  # one agent: its largest record


# --- item 8: nothing cut off ------------------------------------------------------------------------------
LONG_ALERTS = (
    ("headroom", "headroom 17.08 GiB (MemAvailable) under 20.00 GiB, the warning threshold (headroom-warn)"),
    ("new_process", "new process 4242 (python gen.py --model llama-3.1-8b) holds 1.01 GiB of resident RAM"),
)


def _state_with_long_alerts():
    from dataclasses import replace  # noqa: PLC0415

    from collectors.snapshots import Alert  # noqa: PLC0415
    from tests.tui.fixed_states import gb10_state  # noqa: PLC0415

    state = gb10_state()
    return replace(state, alerts=tuple(Alert(state.t, kind, "warning", text) for kind, text in LONG_ALERTS))


@pytest.mark.parametrize("size", [(160, 48), (80, 24)])
async def test_alert_texts_are_shown_in_full_wrapped_to_the_box(size):
    from tests.tui.fixed_states import FixedMonitor  # noqa: PLC0415
    from tui.app import MemsightApp  # noqa: PLC0415
    from tui.widgets.alert_log import AlertLog  # noqa: PLC0415

    app = MemsightApp(FixedMonitor(_state_with_long_alerts()), source_label="t")
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        await pilot.pause(0.2)
        log = app.screen.query_one(AlertLog)
        width = log.scrollable_content_region.width
        assert all(line.cell_length <= width for line in log.lines)  # nothing drawn past the box's edge
        written = " ".join(" ".join(line.text for line in log.lines).split())
        for _, text in LONG_ALERTS:
            assert text in written


@pytest.mark.parametrize("replay", [False, True], ids=["live", "replay"])
async def test_at_80x24_the_footer_keys_are_whole_and_the_agents_table_fits(replay):
    from textual.widgets import Footer  # noqa: PLC0415

    from collectors.replay import ReplayMonitor  # noqa: PLC0415
    from tests.tui.fixed_states import FixedMonitor, gb10_state  # noqa: PLC0415
    from tui.app import MemsightApp  # noqa: PLC0415
    from tui.widgets.agents_table import AgentsTable  # noqa: PLC0415

    monitor = ReplayMonitor(demo_recording_path()) if replay else FixedMonitor(gb10_state())
    app = MemsightApp(monitor, source_label="t", manage_monitor=not replay)
    if replay:
        monitor.advance_to(60.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        keys = list(app.screen.query_one(Footer).query("FooterKey"))
        assert keys and all(k.region.right <= 80 and k.region.width > 0 for k in keys)
        assert any("Quit" in str(k.description) for k in keys)
        table = app.screen.query_one(AgentsTable)
        widest = max(line.cell_len for line in table.render().split("\n"))
        assert widest <= table.content_region.width  # no column cut off
        label = table.get_row_at(0)[1].plain
        assert label == ("python demo_workload.py" if replay else "python serve.py")


async def test_at_80x24_what_is_below_the_fold_is_named_until_scrolled_to():
    from tests.tui.fixed_states import FixedMonitor, gb10_state  # noqa: PLC0415
    from tui.app import MemsightApp  # noqa: PLC0415

    app = MemsightApp(FixedMonitor(gb10_state()), source_label="t")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.pause(0.2)
        more = app.screen.query_one("#live-more")
        assert more.display
        # the agents' table starts on the body's last row (the bucket bars' height is laid out at the
        # column's width: no blank rows under their table); the processes and the alerts are below
        assert str(more.content).startswith("↓ below: processes, alerts (3)")
        app.screen.query_one("#live-body").scroll_end(animate=False)
        await pilot.pause(0.2)
        assert not more.display  # at the end nothing is below
    app = MemsightApp(FixedMonitor(gb10_state()), source_label="t")
    async with app.run_test(size=(160, 48)) as pilot:  # wide and tall: everything fits, no line
        await pilot.pause()
        await pilot.pause(0.2)
        assert not app.screen.query_one("#live-more").display


def test_processes_are_named_by_command_line_and_the_runs_own_are_marked():
    from collectors.alerts import AlertOptions  # noqa: PLC0415
    from collectors.snapshots import short_command  # noqa: PLC0415
    from tests.tui.fixed_states import gb10_state  # noqa: PLC0415
    from tui.screens.live_rows import own_pids, process_rows  # noqa: PLC0415
    from tui.widgets.process_rows import row_cells  # noqa: PLC0415

    assert short_command("/usr/bin/python3 /home/u/gen.py --model x --users 8") == "python3 gen.py --model"
    assert short_command("") == ""
    state = gb10_state()
    rows = process_rows(state, AlertOptions(), own_pids(state) | {5120})
    names = {r.pid: row_cells(r)[1] for r in rows}
    assert names[2_590_604] == "● python serve.py --model"  # the agent's process: the experiment's own
    assert names[5120] == "● jupyter-lab --no-browser"  # e.g. the command `memsight run` started
    assert names[4411] == "chrome"  # someone else's


def test_under_run_only_the_commands_session_is_its_own():
    from tui import cmd_run  # noqa: PLC0415

    # CMD leads its own session (as `memsight run` starts it under the UI); its child stays in it
    child = subprocess.Popen(
        [PY, "-c", "import subprocess, sys, time\np = subprocess.Popen([sys.executable, '-c', "
         "'import time; time.sleep(30)'])\nprint(p.pid, flush=True)\ntime.sleep(30)"],
        stdout=subprocess.PIPE, start_new_session=True,
    )
    try:
        grandchild = int(child.stdout.readline())
        run_child = cmd_run.RunChild(child, "python gen.py", None)
        # this test's own pid stands for another run's agent in the same directory
        assert run_child.family({grandchild, os.getpid()}) == {child.pid, grandchild}
    finally:
        os.killpg(child.pid, 9)
        child.wait()


async def test_a_flat_headroom_is_not_drawn_as_a_cliff():
    from dataclasses import replace  # noqa: PLC0415
    from types import MappingProxyType  # noqa: PLC0415

    from tests.tui.fixed_states import FixedMonitor, bare_state  # noqa: PLC0415
    from tui.app import MemsightApp  # noqa: PLC0415
    from tui.widgets.gap_chart import GapChart, y_limits  # noqa: PLC0415

    state = bare_state()
    times = tuple(state.t - 30 + k for k in range(31))
    drift = tuple(11 * 2**30 - k * 300_000 for k in range(31))  # 9 MB lost over 30 s
    history = MappingProxyType({"available": (times, drift), "headroom": (times, drift)})
    state = replace(state, history=history)
    app = MemsightApp(FixedMonitor(state), source_label="t")
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        chart = app.screen.query_one(GapChart)
        assert chart.display
        text = chart.render().plain
        import re  # noqa: PLC0415

        ticks = [float(m) for m in re.findall(r"^\s*([\d.]+)┤", text, flags=re.MULTILINE)]
        # about 1 GiB of axis, not 0.01: its round ticks (0.2 GiB apart) span 0.6 of it at least
        assert len(ticks) >= 2 and max(ticks) - min(ticks) >= 0.6, ticks
    low, high = y_limits([v / 2**30 for v in drift], 1.0)
    assert high - low == 1.0 and low <= min(drift) / 2**30 and high >= max(drift) / 2**30
    assert y_limits([0.1, 0.1], 1.0) == (0.0, 1.0)  # never below zero
    assert y_limits([1.0, 5.0], 1.0) == (1.0, 5.0)  # a real span is left alone
