"""`memsight run`'s gap chart and its recording count the command's own agents only, like its bars and summary
(tests/tui/test_run_scope.py): with another run's agent in the same agent directory, the chart's allocated /
reserved / gap sums are this run's agent's figures, and a replay of the recording sums (chart and summary) the
same agents. Real child processes run real agents (collectors/agent.py) writing real agent files, fed with
recorded torch.cuda.memory_summary() figures (../shared/fixtures) through RecordedCuda (no GPU here)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from collectors.monitor import Monitor
from collectors.recording import read_recording
from collectors.replay import ReplayMonitor
from collectors.torch_stats import derive, parse_memory_summary
from tests.conftest import REPO_ROOT, SHARED_FIXTURES, needs_shared
from tui import cmd_run
from tui.app import MemsightApp

PY = sys.executable
OWN = "memory_summary_zerollama_minicpm.txt"  # this run's process: 5.49 GiB allocated, 5.55 reserved
STRAY = "memory_summary_unsloth_h100_standby.txt"  # another run's: 31.49 GiB allocated, 36.76 reserved
# an agent on "cuda:0" serving one recorded memory summary at 10 Hz until told to stop
CHILD = (
    "import pathlib, sys, time\n"
    "from collectors.agent import Agent\n"
    "from collectors.torch_stats import RecordedCuda, parse_memory_summary\n"
    "stats = parse_memory_summary(pathlib.Path(sys.argv[1]).read_text())\n"
    "cuda = RecordedCuda({0: stats}, mem_info={0: (10 * 2**30, 80 * 2**30)})\n"
    "agent = Agent(hz=10, directory=sys.argv[2], cuda=cuda)\n"
    "agent.open()\n"
    "deadline = time.time() + 60\n"
    "while not pathlib.Path(sys.argv[3]).exists() and time.time() < deadline:\n"
    "    agent.tick()\n"
    "    time.sleep(0.1)\n"
    "agent.stop()\n"
)


def _figures(name: str) -> tuple[int, int]:
    d = derive(parse_memory_summary((SHARED_FIXTURES / name).read_text()))
    return d["allocated"], d["reserved"]


@needs_shared
async def test_the_gap_chart_and_the_replayed_recording_count_the_runs_own_agent(tmp_path):
    agents = tmp_path / "agents"
    agents.mkdir(mode=0o700)
    go = tmp_path / "go"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("MEMSIGHT_AGENT", None)

    def start(name: str, **kw) -> subprocess.Popen:
        argv = [PY, "-c", CHILD, str(SHARED_FIXTURES / name), str(agents), str(go)]
        return subprocess.Popen(argv, env=env, cwd=REPO_ROOT, **kw)

    stray = start(STRAY)
    own = start(OWN, start_new_session=True)
    record = tmp_path / "run.jsonl"
    monitor = Monitor(hz=5, agent_dir=agents, discover_interval_s=0.2, keep_dead_s=float("inf"),
                      record_to=record)  # fmt: skip
    child = cmd_run.RunChild(own, "python child.py", None)
    monitor.set_scope(child.family)
    own_alloc, own_resv = _figures(OWN)
    stray_alloc, _ = _figures(STRAY)
    try:
        deadline = time.monotonic() + 60
        state = monitor.sample_once()
        while time.monotonic() < deadline:
            series = {key for key in state.history if key.startswith("allocated:")}
            points = [len(state.history[key][0]) for key in series]
            if series and min(points) >= 3:
                break
            time.sleep(0.2)
            state = monitor.sample_once()
        # the stray's agent is not read (issue 21 item 6): only this run's series are kept ...
        assert {int(key.split(":")[1]) for key in series} == {own.pid}
        # ... and the sums the chart draws are this run's agent's alone (the stray's 31 GiB was added in)
        times, allocated = state.history["allocated"]
        assert len(times) >= 3 and set(allocated) == {float(own_alloc)}
        assert set(state.history["reserved"][1]) == {float(own_resv)}
        assert set(state.history["gap"][1]) == {float(own_resv - own_alloc)}
        app = MemsightApp(monitor, source_label="t", child=child, manage_monitor=False)
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause()
            chart = app.live_view.chart
            assert set(chart.allocated) == {float(own_alloc)}
            assert set(chart.gap) == {float(own_resv - own_alloc)}
            await pilot.press("q")
    finally:
        go.touch()
        for proc in (own, stray):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        monitor.stop()

    # the recording says which agents were the run's; its replay sums those, chart and summary alike
    recording = read_recording(record)
    scopes = [e for e in recording.events if e["k"] == "scope"]
    assert scopes and scopes[-1]["own"] == [own.pid]
    replay = ReplayMonitor(record)
    while not replay.at_end:
        replay.step()
    replayed = replay.state()
    assert set(replayed.history["allocated"][1]) == {float(own_alloc)}
    summary = replay.scan()
    assert summary.peak("allocated").bytes == own_alloc != stray_alloc + own_alloc
    assert monitor.state().summary.peak("allocated").bytes == own_alloc  # as the run itself summed it
    # only this run's agent is read and recorded (issues 20, 21): the other is in no summary at all
    assert {e["pid"] for e in recording.events if e["k"] == "agent"} == {own.pid}
    recorded = next(e for e in recording.events if e["k"] == "summary")
    assert recorded["scope"] == f"this run's agents only (pid {own.pid})"
