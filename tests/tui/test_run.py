"""`memsight run` as a user meets it: CMD's output in a log file tailed on the Live screen, the banner when
CMD exits, signals that always end memsight (real processes, the TUI in a real pty), the display
options shared with watch/replay, a --prometheus port in use, the vLLM line,
the Live layout by terminal size."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import signal
import socket
import struct
import subprocess
import sys
import termios
import threading
import time

from textual.widgets import Static

from collectors.snapshots import VLLMModelStats, VLLMSnapshot
from tests.conftest import REPO_ROOT
from tests.tui.fixed_states import FixedMonitor, bare_state, gb10_state
from tests.tui.test_app import text_of
from tui import cli, cmd_replay, cmd_run
from tui.app import MemsightApp
from tui.screens.vllm_view import vllm_line
from tui.widgets.bucket_bars import BucketBars
from tui.widgets.gap_chart import GapChart
from tui.widgets.log_tail import LogPanel, LogTail

PY = sys.executable


# --- the log tail -----------------------------------------------------------------------------------
def test_log_tail_reads_only_what_was_appended_and_is_bounded(tmp_path):
    path = tmp_path / "out.log"
    tail = LogTail(path, max_lines=3, max_read_bytes=100)
    assert tail.read_new() == ()  # not created yet
    path.write_bytes(b"one\ntwo\nthr")
    assert tail.read_new() == ("one", "two", "thr")  # the unfinished line is shown too
    with open(path, "ab") as f:
        f.write(b"ee\nfour\n")
    assert tail.read_new() == ("two", "three", "four")
    assert tail.offset == path.stat().st_size
    with open(path, "ab") as f:  # 1,000 bytes at once: only the last 100 are read
        f.write(b"".join(b"line %03d\n" % i for i in range(111)))
    assert tail.read_new() == ("line 108", "line 109", "line 110")
    assert tail.skipped_bytes == path.stat().st_size - 100 - len(b"one\ntwo\nthree\nfour\n")
    path.write_bytes(b"progress 10%\rprogress 90%\n")  # truncated, and a carriage-return redraw
    assert tail.read_new() == ("progress 90%",)


# --- the app with a real child ---------------------------------------------------------------------
async def test_live_screen_tails_the_child_log_and_shows_the_exit_banner(tmp_path):
    log = tmp_path / "child.log"
    go = tmp_path / "exit-now"  # the child exits only once the test has seen it running
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [PY, "-u", "-c", "import os, sys, time\nfor i in range(30): print('line', i)\n"
             "while not os.path.exists(sys.argv[1]): time.sleep(0.05)\nraise SystemExit(3)", str(go)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    child = cmd_run.RunChild(proc, "python demo.py", log)
    app = MemsightApp(FixedMonitor(gb10_state()), source_label="t", child=child)
    async with app.run_test(size=(160, 48)) as pilot:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            app.refresh_data()
            await pilot.pause(0.1)
            panel = app.screen.query_one(LogPanel)
            if panel.shown and panel.shown[-1] == "line 29":
                break
        assert panel.display and panel.shown[-1] == "line 29"
        assert str(log) in panel.border_title
        banner = app.screen.query_one("#live-banner", Static)
        assert not banner.display
        go.touch()
        proc.wait(timeout=20)
        app.refresh_data()
        await pilot.pause()
        assert banner.display
        assert re.fullmatch(
            r"python demo\.py exited with status 3, ended at \d\d:\d\d:\d\d — q to quit", str(banner.content)
        )
        assert app.is_running  # the final state stays on screen
        await pilot.press("q")
    assert app.return_code == 0


async def test_exit_with_child_closes_the_app_with_its_status(tmp_path):
    proc = subprocess.Popen([PY, "-c", "raise SystemExit(5)"])
    proc.wait(timeout=20)
    child = cmd_run.RunChild(proc, "x", None)
    app = MemsightApp(FixedMonitor(gb10_state()), child=child, exit_with_child=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.2)
    assert app.return_code == 5


# --- real memsight processes -------------------------------------------------------------------------
SLEEPER = "import time\nprint('started', flush=True)\ntime.sleep(60)"


def test_sigterm_ends_headless_run_with_the_childs_status(tmp_path):
    proc = subprocess.Popen(
        [PY, "-m", "tui.cli", "run", "--headless", "--agent-dir", str(tmp_path), "--", PY, "-c", SLEEPER],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout.readline() == b"started\n"  # the child keeps memsight's stdout when headless
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 128 + signal.SIGTERM


def test_sigterm_after_grace_kills_a_child_that_ignores_it(tmp_path):
    child = subprocess.Popen([PY, "-c", "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                              "print('ok', flush=True)\ntime.sleep(60)"], stdout=subprocess.PIPE)
    assert child.stdout.readline() == b"ok\n"
    signals = cmd_run.StopSignals(child)
    signals.received, signals.received_at = signal.SIGTERM, time.monotonic()
    child.send_signal(signal.SIGTERM)
    started = time.monotonic()
    assert signals.wait(grace_s=0.5) == 128 + signal.SIGKILL
    assert time.monotonic() - started < 5


class PtyRun:
    """`memsight run` (the TUI) in a real pseudo-terminal of 160x48, its screen output drained by a thread."""

    def __init__(self, tmp_path, *args: str) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 48, 160, 0, 0))
        env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "160", "LINES": "48"}
        self.log = tmp_path / "child.log"
        cmd = [PY, "-m", "tui.cli", "run", "--agent-dir", str(tmp_path), "--log", str(self.log), *args]
        self.proc = subprocess.Popen(
            cmd, cwd=REPO_ROOT, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True
        )
        os.close(slave)
        self.master = master
        self.output = bytearray()
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            self.output.extend(data)

    def wait_for(self, text: bytes, timeout: float = 60, since: int = 0) -> bool:
        """True once `text` is in the screen output written from byte `since` on (False at the timeout)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.output[since:]:
                return True
            time.sleep(0.1)
        return False

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        os.close(self.master)


def test_sigterm_ends_the_tui_run_and_its_child(tmp_path):
    run = PtyRun(tmp_path, "--", PY, "-c", SLEEPER)
    try:
        assert run.wait_for(b"started"), bytes(run.output[-2000:])  # the log panel shows the child's line
        run.proc.send_signal(signal.SIGTERM)
        assert run.proc.wait(timeout=15) == 128 + signal.SIGTERM
        assert run.log.read_text() == "started\n"  # the child's output went to the log, not the screen
        assert f"the output of {PY} is in {run.log}".encode() in run.output
    finally:
        run.close()


def test_tui_run_keeps_the_final_state_then_q_exits_with_the_childs_status(tmp_path):
    run = PtyRun(tmp_path, "--", PY, "-c", "print('bye')\nraise SystemExit(7)")
    try:
        assert run.wait_for(b"exited with status 7"), bytes(run.output[-2000:])
        assert run.proc.poll() is None
        os.write(run.master, b"q")
        assert run.proc.wait(timeout=15) == 7
        assert run.log.read_text() == "bye\n"
    finally:
        run.close()


def test_tui_run_exit_with_child(tmp_path):
    run = PtyRun(tmp_path, "--exit-with-child", "--", PY, "-c", "raise SystemExit(4)")
    try:
        assert run.proc.wait(timeout=60) == 4
    finally:
        run.close()


# --- options shared with watch -------------------------------------------------------------------------
def test_run_and_replay_take_the_display_options(tmp_path):
    from collectors.replay import bundled_recording

    display = ["--hz", "4", "--headroom-warn", "3", "--model", "qwen3-8b", "--format", "fp8",
               "--kv-dtype", "fp8", "--context", "4096", "--users", "2", "--tp", "1"]
    for argv in (["run", *display, "--", "true"], ["replay", str(bundled_recording()), *display]):
        parser, _ = cli.build_parser(argv)
        args = parser.parse_args(argv)
        assert args.hz == 4 and args.users == 2 and args.format == "fp8"
    args = cli.build_parser(["replay"])[0].parse_args(["replay", str(bundled_recording()), *display])
    monitor, options = cmd_replay.app_arguments(args)
    assert options["refresh_hz"] == 4
    assert options["plan_inputs"].model == "qwen3-8b" and options["plan_inputs"].context == 4096
    assert monitor.alert_options == options["thresholds"]
    assert options["thresholds"].headroom_warning_bytes == 3 * 2**30


def test_watch_takes_the_export_options():
    argv = ["watch", "--prometheus", "9400", "--vllm-url", "http://localhost:8000"]
    args = cli.build_parser(argv)[0].parse_args(argv)
    from tui import cmd_watch

    monitor, _ = cmd_watch.app_arguments(args, "watch")
    assert monitor.vllm is not None and monitor.vllm.url == "http://localhost:8000/metrics"
    assert monitor.prometheus_address == ("127.0.0.1", 9400)


def test_a_prometheus_port_in_use_is_one_line_and_exit_2(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for argv in (["watch", "--prometheus", str(port)],
                     ["run", "--agent-dir", str(tmp_path), "--prometheus", str(port), "--", "true"]):
            done = subprocess.run([PY, "-m", "tui.cli", *argv], cwd=REPO_ROOT, capture_output=True,
                                  text=True, timeout=60, stdin=subprocess.DEVNULL)
            assert done.returncode == 2, done.stderr
            lines = done.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("memsight: ") and str(port) in lines[0]
            assert "Traceback" not in done.stderr and done.stdout == ""


# --- vLLM line ----------------------------------------------------------------------------------------
def test_vllm_line():
    from dataclasses import replace

    state = gb10_state()
    assert vllm_line(state) == ""
    refused = "connection refused: http://h:8000"
    down = VLLMSnapshot(t=1.0, url="http://h:8000", status=refused, available=False)
    assert vllm_line(replace(state, vllm=down)) == "vLLM http://h:8000: connection refused: http://h:8000"
    model = VLLMModelStats(model_name="llama", engine="0", kv_cache_usage=0.4567, kv_cache_metric="x",
                           requests_running=3, requests_waiting=1, requests_swapped=None, preemptions_total=2,
                           prefix_cache_hits=25, prefix_cache_queries=100)
    up = VLLMSnapshot(t=1.0, url="http://h:8000", status="ok", available=True, models=(model,))
    assert vllm_line(replace(state, vllm=up)) == (
        "vLLM llama: KV cache 45.7% · running 3 / waiting 1 · preemptions 2 · prefix cache hits 25.0%"
    )


# --- layout ---------------------------------------------------------------------------------------------
async def test_the_chart_is_shown_on_a_tall_terminal_and_fills_the_spare_rows():
    app = MemsightApp(FixedMonitor(gb10_state()))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        chart = app.screen.query_one(GapChart)
        assert chart.display
        # the left column ends at the footer: no empty rows below the chart
        assert chart.region.bottom == app.screen.query_one("#live-left").region.bottom
        assert chart.region.height > 16
    app = MemsightApp(FixedMonitor(gb10_state()))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        chart = app.screen.query_one(GapChart)
        assert not chart.display
        await pilot.press("g")
        assert chart.display
        await pilot.resize_terminal(80, 30)
        await pilot.pause()
        assert chart.display  # the user's choice wins over the size rule


async def test_without_allocator_counters_the_chart_draws_the_headroom_over_time():
    """The demo's agent never initialized CUDA: the chart shows MemAvailable over time, not a blank."""
    from collectors.replay import ReplayMonitor, bundled_recording
    from tui.screens.live_rows import chart_series

    monitor = ReplayMonitor(bundled_recording())
    state = monitor.advance_to(monitor.duration_s * 0.6)
    series = chart_series(state)
    assert series.t == () and "CUDA not initialized" in series.missing
    assert series.fallback_label == "headroom (MemAvailable)"
    times, available = state.history["available"]
    assert series.fallback == available and len(series.fallback_t) == len(times) > 2
    app = MemsightApp(monitor, manage_monitor=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        chart = app.screen.query_one(GapChart)
        assert chart.display and not chart.has_class("-empty") and chart.region.height > 16


async def test_before_the_command_loads_a_model_the_live_screen_waits_instead_of_the_default_verdict():
    """Issue 21, item 4: under `memsight run` with no --model, the default Llama 3.1 8B plan used to stand on
    the Live screen ("does NOT fit" in red on a small machine) until the program loaded its model. Now the
    row says what it waits for, and, once the command ended without a model, how to get a plan."""
    proc = subprocess.Popen([PY, "-c", "import time; time.sleep(60)"])
    child = cmd_run.RunChild(proc, "python gen.py", None)
    app = MemsightApp(FixedMonitor(bare_state()), source_label="t", child=child)
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause()
            (running,) = app.live_view.comparisons
            bars = text_of(app.screen.query_one(BucketBars))
            follows = app.plan_view.follows
            proc.kill()
            proc.wait(timeout=20)
            app.refresh_data()
            await pilot.pause()
            (ended,) = app.live_view.comparisons
            await pilot.press("q")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert running.planned is None and "NOT fit" not in running.plan_label
    waiting = f"waiting for pid {proc.pid} to load a model: the plan follows it (or give --model M)"
    assert running.plan_label == waiting
    assert "no plan: waiting for pid" in bars
    assert follows == f"waiting for pid {proc.pid} to load a model: the bars plan the inputs below"
    assert ended.planned is None
    assert ended.plan_label.startswith(f"pid {proc.pid} loaded no model memsight could plan")
    # a model given on the command line is planned from the start
    given = frozenset({"model"})
    app = MemsightApp(FixedMonitor(bare_state()), source_label="t", child=child, plan_explicit=given)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        (given,) = app.live_view.comparisons
        await pilot.press("q")
    assert given.planned is not None and given.plan_label.startswith("llama-3.1-8b")


def test_the_live_view_with_no_terminal_says_so_and_starts_nothing(tmp_path):
    """Issue 21, item 12: `memsight > file` wrote the live view's escape codes into the file. With stdout not
    a terminal the live view now refuses in one line naming what suits a file (exit 2, nothing on stdout),
    and `memsight run` refuses before starting its command."""
    from collectors.replay import bundled_recording  # noqa: PLC0415

    marker = tmp_path / "ran"
    command = [PY, "-c", f"open({str(marker)!r}, 'w')"]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    for argv in (["watch"], ["demo"], ["replay", str(bundled_recording())],
                 ["run", "--agent-dir", str(tmp_path), "--", *command]):  # fmt: skip
        done = subprocess.run([PY, "-m", "tui.cli", *argv], cwd=tmp_path, capture_output=True, text=True,
                              timeout=60, stdin=subprocess.DEVNULL, env=env)  # fmt: skip
        assert done.returncode == 2, (argv, done.stderr)
        assert done.stdout == "" and "\x1b" not in done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("memsight: the live view needs a terminal, and stdout is not one; for a file")
        assert "memsight replay FILE --json" in line
    assert not marker.exists()
    assert not list(tmp_path.glob("memsight-run-*.log"))  # no log of a command that never started
