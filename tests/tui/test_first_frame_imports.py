"""`memsight watch` draws the Live screen's first frame before it imports the planner, the collectors'
monitor, pynvml, psutil and plotext (issue 20: the first frame pays only for what it shows); the monitor, the
plan inputs and the other sections come right after it, and the screen then shows its figures. A behaviour
test (which modules a fresh interpreter had loaded when the first frame was drawn), not a timing one:
bench/monitor_cpu.py measures the time. The command runs through tui.cli.main as a user runs it, headless (a
test has no terminal)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

from tests.conftest import REPO_ROOT

# What the first frame may load of memsight: the dispatcher and watch's options, the config file's reader,
# the app's shell, the Live screen with its headroom gauge (its other widgets come with the first figures),
# and the leaves those read.
ALLOWED_OWN = {
    "tui", "tui.cli", "tui.options", "tui.cmd_watch", "tui.config", "tui.app", "tui.asyncio_no_tls",
    "tui.render_caches",
    "tui.screens", "tui.screens.live", "tui.widgets", "tui.widgets.fmt", "tui.widgets.headroom",
    "planner", "planner.errors", "planner.limits", "planner.units", "collectors", "collectors.errors",
    "collectors.alert_options", "planner.meminfo",
}  # fmt: skip
HEAVY = {"plotext", "textual_plotext", "pynvml", "psutil"}
# ... nor the reader of a config file that is not there (MEMSIGHT_CONFIG names none), nor `run`'s module
NOT_BEFORE_THE_FIRST_FRAME = {"tomllib", "tui.cmd_run"}
# What the Live screen never needs while it is the screen shown (issue 20: its resident memory): `memsight
# run`'s module, the other screens and their widgets, the recorder without --record, the checkpoint reader
# (the default model is a catalog name), the statistics module (the runway rule needs a median, no more)
NOT_ON_THE_LIVE_SCREEN = {
    "tui.cmd_run", "tui.screens.plan", "tui.screens.processes",
    "tui.widgets.capacity_bars", "collectors.recorder", "tomllib", "statistics", "planner.checkpoint",
    "plotext", "textual_plotext",  # the gap chart draws its own braille (2.0 MiB resident: issue 20)
}  # fmt: skip

# setup() (tui/cmd_watch.py: monitor_and_options) is what the app calls once its first frame is drawn: the
# modules loaded then are the first frame's
CODE = """
import asyncio, sys
before = set(sys.modules)
import tui.app, tui.cli
from tui import cmd_watch
tui.cli.require_terminal = lambda: None  # headless: the test has no terminal
seen = {}
make = cmd_watch.monitor_and_options
def first_frame_drawn(*args):
    seen["loaded"] = sorted(set(sys.modules) - before)
    seen["first_status"] = str(APP[0].screen.query_one("#live-status").render())
    return make(*args)
cmd_watch.monitor_and_options = first_frame_drawn
async def pilot(pilot):
    while pilot.app.live_view is None:
        await pilot.pause(0.05)
    await pilot.pause(0.6)  # a few ticks more, the chart drawn
    seen["steady"] = sorted(sys.modules)
    seen["headroom"] = str(pilot.app.screen.query_one("#headroom").render())
    seen["chart"] = len(pilot.app.screen.query("#gap-chart"))
    pilot.app.exit()
APP = []
def run(app):
    APP.append(app)
    asyncio.run(app.run_async(headless=True, size=(160, 48), auto_pilot=pilot))
tui.app.MemsightApp.run = run
seen["code"] = tui.cli.main(["watch", "--hz", "4"])
print(repr(seen), file=sys.stderr)
"""


def test_the_first_frame_imports_neither_the_planner_nor_the_collectors(tmp_path):
    env = {**os.environ, "MEMSIGHT_CONFIG": str(tmp_path / "no-config.toml")}
    done = subprocess.run(
        [sys.executable, "-c", CODE], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    report = ast.literal_eval(done.stderr.splitlines()[-1])
    assert report["code"] == 0
    loaded = set(report["loaded"])
    own = {m for m in loaded if m.split(".")[0] in ("tui", "planner", "collectors")}
    assert own <= ALLOWED_OWN, f"the first frame imported {sorted(own - ALLOWED_OWN)}"
    heavy = {m for m in loaded if m.split(".")[0] in HEAVY}
    assert not heavy, f"the first frame imported {sorted(heavy)}"
    assert not loaded & NOT_BEFORE_THE_FIRST_FRAME, sorted(loaded & NOT_BEFORE_THE_FIRST_FRAME)
    steady = set(report["steady"])
    assert {"tui.widgets.gap_chart", "collectors.monitor"} <= steady  # the Live screen, all drawn
    assert not steady & NOT_ON_THE_LIVE_SCREEN, sorted(steady & NOT_ON_THE_LIVE_SCREEN)
    # the first frame has a figure: host memory (MemAvailable, MemTotal), read from /proc/meminfo without the
    # collectors
    host = r"memory available [\d.]+ GiB of [\d.]+ GiB"
    status = report["first_status"]
    assert re.fullmatch(rf"this machine \(live\) · {host} · starting the monitor…", status), status
    # then the monitor and the plan came: the gauge shows a measured figure, the chart is mounted
    assert report["headroom"].startswith("headroom ") and report["headroom"][9].isdigit(), report["headroom"]
    assert report["chart"] == 1


def test_the_first_frame_status_reads_host_memory_from_meminfo(tmp_path):
    from tui.cmd_watch import first_frame_status  # noqa: PLC0415

    meminfo = "MemTotal:       128450560 kB\nMemFree:  1024 kB\nMemAvailable:   41943040 kB\n"
    (tmp_path / "meminfo").write_text(meminfo)
    assert first_frame_status("this machine (live)", proc_root=str(tmp_path)) == (
        "this machine (live) · memory available 40.0 GiB of 122 GiB · starting the monitor…"
    )
    # no /proc/meminfo (macOS): the source alone, the monitor says the rest once started
    label = "this machine (live)"
    assert first_frame_status(label, proc_root=str(tmp_path / "none")) == label
