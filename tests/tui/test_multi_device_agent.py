"""One agent on several CUDA devices, as transformers' `device_map="auto"` spreads a model over every GPU of
the box: the live view draws one row per device in `watch`, `run` and `replay`, at 160x48 and at 80x24 (issue
17 item 1: the agents table keyed its rows by pid and raised DuplicateKey at the second device's record).

Real agents (collectors.agent.Agent, ring files on disk) fed recorded allocator stats per device through
RecordedCuda (this machine has no GPU), the real Monitor, Recorder and ReplayMonitor, the real app."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from collectors.agent import Agent
from collectors.monitor import Monitor
from collectors.replay import ReplayMonitor
from collectors.torch_stats import RecordedCuda
from tests.conftest import REPO_ROOT
from tui import cmd_run
from tui.app import MemsightApp
from tui.widgets.agents_table import AgentsTable

GIB = 2**30
MIB = 2**20
SIZES = [(160, 48), (80, 24)]


def device_stats(device: int) -> dict[str, int]:
    """memory_stats() keys the agent reads; device d holds d+1 GiB allocated and 256 MiB more reserved, so
    the last device is the busiest."""
    allocated = (device + 1) * GIB
    return {
        "allocated_bytes.all.current": allocated,
        "allocated_bytes.all.peak": allocated,
        "reserved_bytes.all.current": allocated + 256 * MIB,
        "num_alloc_retries": 0,
        "num_ooms": 0,
    }


def multi_device_cuda(devices: int) -> RecordedCuda:
    return RecordedCuda(
        {d: device_stats(d) for d in range(devices)},
        mem_info={d: (40 * GIB, 80 * GIB) for d in range(devices)},
        integrated=False,
    )


def assert_one_row_per_device(app: MemsightApp, pid: int, devices: int) -> None:
    table = app.screen.query_one(AgentsTable)
    assert table.display and table.row_count == devices
    rows = [table.get_row_at(i) for i in range(devices)]
    assert [str(row[2]) for row in rows] == [f"cuda:{d}" for d in range(devices)]
    assert {str(row[0]).strip("★ ") for row in rows} == {str(pid)}
    assert [str(row[3]) for row in rows] == [f"{d + 1:.2f}" for d in range(devices)]  # allocated, GiB
    assert [str(row[0]).startswith("★") for row in rows] == [d == devices - 1 for d in range(devices)]


async def draw(monitor, pid: int, devices: int, *, replay: bool = False, **kwargs) -> None:
    for size in SIZES:
        app = MemsightApp(monitor, source_label="test", manage_monitor=False, **kwargs)
        async with app.run_test(size=size) as pilot:
            if replay:
                monitor.advance_to(monitor.duration_s)
                app.refresh_data()
            await pilot.pause()
            assert_one_row_per_device(app, pid, devices)


@pytest.mark.parametrize("devices", [2, 8])
async def test_watch_and_replay_draw_one_agent_on_many_devices(tmp_path, devices):
    agents = tmp_path / "agents"
    agents.mkdir(mode=0o700)
    agent = Agent(hz=10, directory=str(agents), cuda=multi_device_cuda(devices))
    agent.open()
    recording = tmp_path / "watch.jsonl"
    monitor = Monitor(hz=5, agent_dir=str(agents), record_to=recording, discover_interval_s=0.0)
    try:
        for _ in range(3):
            agent.tick()
            monitor.sample_once()
            time.sleep(0.05)
        await draw(monitor, agent.pid, devices)
    finally:
        monitor.stop()
        agent.stop()
    await draw(ReplayMonitor(recording), agent.pid, devices, replay=True)


def _records_on_every_device(state, pid: int, devices: int) -> bool:
    """The agent of `pid` has its latest record on each of its `devices` devices in the monitor's state."""
    seen = {r.device for a in state.agents if a.pid == pid for r in a.latest if r.device >= 0}
    return seen == set(range(devices))


# a `memsight run` child: an agent on DEVICES recorded devices, started as the bootstrap would
CHILD = (
    "import pathlib, sys, time\n"
    "from collectors.agent import Agent\n"
    "from tests.tui.test_multi_device_agent import multi_device_cuda\n"
    "agent = Agent(hz=20, directory=sys.argv[2], cuda=multi_device_cuda(int(sys.argv[1]))).start()\n"
    "time.sleep(0.3)\n"
    "pathlib.Path(sys.argv[3]).touch()\n"
    "time.sleep(60)\n"
)


@pytest.mark.parametrize("devices", [2, 8])
async def test_run_draws_its_command_on_many_devices(tmp_path, devices):
    agents = tmp_path / "agents"
    agents.mkdir(mode=0o700)
    ready = tmp_path / "ready"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(devices), str(agents), str(ready)],
        cwd=REPO_ROOT, env=env, start_new_session=True,
    )  # fmt: skip
    monitor = Monitor(hz=5, agent_dir=str(agents), discover_interval_s=0.0)
    child = cmd_run.RunChild(proc, "python child.py", None)
    monitor.set_scope(child.family)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert ready.exists(), "the child's agent did not start"
        # its first records, waited for: the child's 0.3 s before `ready` was a guess at when its agent's
        # thread has ticked, which a loaded machine can miss
        state = monitor.sample_once()
        while time.monotonic() < deadline and not _records_on_every_device(state, proc.pid, devices):
            time.sleep(0.05)
            state = monitor.sample_once()
        await draw(monitor, proc.pid, devices, child=child)
    finally:
        monitor.stop()
        proc.kill()
        proc.wait(timeout=30)
