"""Agent files the monitor does not read (another user's, writable by others, a symbolic link, a FIFO) are
said where the agents are, with the reason, in `watch` and in a replay of its recording, and listed by
`replay --json` (issue 17 item 6: they were skipped correctly, but the user saw fewer agents and no reason).

Real agents writing real ring files (collectors.agent.Agent), the real Monitor, Recorder and ReplayMonitor,
the real app."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time

import pytest

from collectors import agent_format as fmt
from collectors.agent import Agent
from collectors.monitor import Monitor
from collectors.recorder import read_recording, summarize
from collectors.replay import ReplayMonitor
from tests.conftest import REPO_ROOT
from tui.app import MemsightApp
from tui.widgets.agents_table import AgentsTable


def _own_ring_name() -> str:
    """The ring file name of this process: what a live agent here would write, so the monitor looks at it."""
    return fmt.ring_file_name(os.getpid(), fmt.process_start_ticks(os.getpid()))


def _writable_by_others(agents, elsewhere):
    agent = Agent(hz=10, directory=str(agents))
    agent.open()
    os.chmod(agent.path, 0o666)
    return agent, "mode 0o666, writable by others: not read"


def _symlink(agents, elsewhere):
    agent = Agent(hz=10, directory=str(elsewhere))  # a real ring, linked in under the agent's name
    agent.open()
    os.symlink(agent.path, agents / _own_ring_name())
    return agent, "a symbolic link, not an agent's file: not read"


def _fifo(agents, elsewhere):
    os.mkfifo(agents / _own_ring_name(), 0o600)
    return None, "not a regular file, so not an agent file"


def _another_user(agents, elsewhere):
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    agent = Agent(hz=10, directory=str(agents))
    agent.open()
    os.chown(agent.path, 12345, -1)
    return agent, f"belongs to uid 12345, not to you ({os.getuid()}): not read"


async def _agents_area(monitor, size=(160, 48)) -> tuple[str, int]:
    """What the Live screen says above the agents table, and how many rows the table has."""
    app = MemsightApp(monitor, source_label="test", manage_monitor=False)
    async with app.run_test(size=size) as pilot:
        if isinstance(monitor, ReplayMonitor):
            monitor.advance_to(monitor.duration_s)
            app.refresh_data()
        await pilot.pause()
        note = app.screen.query_one("#agents-missing")
        # no table before an agent shows (tui/screens/live.py: _agents_table)
        rows = sum(table.row_count for table in app.screen.query(AgentsTable) if table.display)
        return (str(note.content) if note.display else ""), rows


@pytest.mark.parametrize("make", [_writable_by_others, _symlink, _fifo, _another_user])
async def test_an_unsafe_agent_file_is_said_with_its_reason_live_replayed_and_in_json(tmp_path, make):
    agents, elsewhere = tmp_path / "agents", tmp_path / "elsewhere"
    agents.mkdir(mode=0o700)
    elsewhere.mkdir(mode=0o700)
    agent, reason = make(agents, elsewhere)
    path = str(agents / _own_ring_name())
    said = f"skipped 1 agent file(s): {path}: {reason}"
    recording = tmp_path / "watch.jsonl"
    monitor = Monitor(hz=5, agent_dir=str(agents), record_to=recording, discover_interval_s=0.0)
    try:
        for _ in range(2):
            if agent is not None:
                agent.tick()
            state = monitor.sample_once()
        assert state.agents == ()  # skipped, as before
        assert await _agents_area(monitor) == (f"no agent shown: {said}", 0)
        assert await _agents_area(monitor, (80, 24)) == (f"no agent shown: {said}", 0)
        assert state.input_warnings["agents"] == said
    finally:
        monitor.stop()
        if agent is not None:
            agent.stop()
    (skip,) = summarize(read_recording(recording))["skipped"]  # once, though it was looked at twice
    assert skip == {"t": skip["t"], "source": "agents", "path": path, "reason": f"{path}: {reason}"}
    assert await _agents_area(ReplayMonitor(recording)) == (f"no agent shown: {said}", 0)


async def test_a_file_made_safe_is_read_and_the_note_goes(tmp_path):
    agents = tmp_path / "agents"
    agents.mkdir(mode=0o700)
    agent = Agent(hz=10, directory=str(agents))
    agent.open()
    os.chmod(agent.path, 0o666)
    monitor = Monitor(hz=5, agent_dir=str(agents), discover_interval_s=0.0)
    try:
        agent.tick()
        assert monitor.sample_once().input_warnings["agents"].startswith("skipped 1 agent file(s)")
        os.chmod(agent.path, stat.S_IRUSR | stat.S_IWUSR)
        agent.tick()
        state = monitor.sample_once()
        assert [a.pid for a in state.agents] == [os.getpid()] and "agents" not in state.input_warnings
        assert await _agents_area(monitor) == ("", 1)
    finally:
        monitor.stop()
        agent.stop()


CHILD = (
    "import pathlib, sys, time\n"
    "from collectors.agent import Agent\n"
    "agent = Agent(hz=20, directory=sys.argv[1]).start()\n"
    "pathlib.Path(sys.argv[2]).touch()\n"
    "time.sleep(60)\n"
)


async def test_beside_agents_that_are_shown_the_skipped_one_is_said(tmp_path):
    """One agent read (a child process), this process's file skipped: the table shows one row and the line
    above it says which file was not read and why."""
    agents = tmp_path / "agents"
    agents.mkdir(mode=0o700)
    ready = tmp_path / "ready"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(agents), str(ready)], cwd=REPO_ROOT, env=env)
    os.mkfifo(agents / _own_ring_name(), 0o600)
    monitor = Monitor(hz=5, agent_dir=str(agents), discover_interval_s=0.0)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.05)
        # `ready` comes right after the child's Agent.start(): its first record (a row of the table) is
        # written by the agent's thread, maybe a moment later on a loaded machine
        state = monitor.sample_once()
        while time.monotonic() < deadline and not any(a.pid == child.pid and a.latest for a in state.agents):
            time.sleep(0.05)
            state = monitor.sample_once()
        assert [a.pid for a in state.agents] == [child.pid]
        path = agents / _own_ring_name()
        said = f"skipped 1 agent file(s): {path}: not a regular file, so not an agent file"
        assert await _agents_area(monitor) == (said, 1)
    finally:
        monitor.stop()
        child.kill()
        child.wait(timeout=30)
