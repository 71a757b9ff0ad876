"""`memsight run` counts its own command's agents only: two runs (or a run and a stray agent) sharing one
agent directory each read their own process's agent alone: its buckets in the Live screen's measured bars,
agents table, recording, --json and run summary (issue 21 item 6: another run's exited agent was starred in
the agents table and listed by --record and --json); the other agent stays visible as a process. Real
child processes, real agents (torch on the CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from collectors.monitor import Monitor
from tests.conftest import REPO_ROOT, needs_torch
from tui import cmd_run
from tui.app import MemsightApp

pytestmark = needs_torch("the child processes build a torch model that their agents track")
PY = sys.executable
# a model of ARG input features x 256 outputs, fp32, tracked by the agent `memsight run` started in it; it
# says it is ready (file 2), then waits for the other process (file 3) and stays 2 s more, so both monitors
# see both agents at once
CHILD = (
    "import pathlib, sys, time\n"
    "import torch\n"
    "import collectors.agent as agent\n"
    "model = torch.nn.Linear(int(sys.argv[1]), 256, bias=False)\n"
    "agent.track_model(model)\n"
    "pathlib.Path(sys.argv[2]).touch()\n"
    "deadline = time.time() + 60\n"
    "while not pathlib.Path(sys.argv[3]).exists() and time.time() < deadline: time.sleep(0.05)\n"
    "time.sleep(2.0)\n"
)


def _weights(features: int) -> int:
    return features * 256 * 4


def _child_env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("MEMSIGHT_AGENT", None)
    return env


def _alive(*children: subprocess.Popen) -> None:
    """A child that died before it was ready fails the test now, with its status, not at the deadline."""
    for child in children:
        if child.poll() is not None:
            pytest.fail(f"child pid {child.pid} exited {child.returncode} before both agents were seen")


def test_two_simultaneous_runs_each_summarize_only_their_own_agent(tmp_path):
    agents = tmp_path / "agents"
    sizes = {"a": 2048, "b": 6144}  # 2 MiB and 6 MiB of weights
    runs = {}
    for name, features in sizes.items():
        other = "b" if name == "a" else "a"
        ready, wait_for = str(tmp_path / name), str(tmp_path / other)
        argv = [PY, "-m", "tui.cli", "run", "--headless", "--json", "--hz", "5", "--agent-dir", str(agents),
                "--", PY, "-c", CHILD, str(features), ready, wait_for]  # fmt: skip
        runs[name] = subprocess.Popen(
            argv, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_child_env()
        )
    try:
        outputs = {name: proc.communicate(timeout=150) for name, proc in runs.items()}
    finally:
        for proc in runs.values():
            if proc.poll() is None:
                proc.kill()
    for name, (out, err) in outputs.items():
        assert runs[name].returncode == 0, err.decode()
        doc = json.loads(out)
        (agent,) = [s for s in doc["sources"] if s["kind"] == "agent"]  # its own agent's, not the other run's
        summary = doc["summary"]
        # its summary sums its own alone (both at once: 8 MiB, what the first bug printed)
        assert summary["peaks"]["weights"]["bytes"] == _weights(sizes[name]), (name, summary["peaks"])
        assert summary["scope"] == f"this run's agents only (pid {agent['pid']})"
        processes = {s["pid"] for s in doc["sources"] if s["kind"] == "process"}
        assert agent["pid"] in processes
        peak_line = next(line for line in err.decode().splitlines() if "peak MiB:" in line)
        assert f"weights {_weights(sizes[name]) / 2**20:.2f}" in peak_line  # 2.00 or 6.00 MiB


async def test_live_bars_count_the_runs_own_agent_and_leave_the_other_as_a_process(tmp_path):
    agents = tmp_path / "agents"
    agents.mkdir(mode=0o700)
    env = cmd_run.child_environment(_child_env(), str(agents), 5.0)
    stray = subprocess.Popen(  # another run's agent in the same directory
        [PY, "-c", CHILD, "6144", str(tmp_path / "b"), str(tmp_path / "go")], env=env, cwd=REPO_ROOT
    )
    own = subprocess.Popen(
        [PY, "-c", CHILD, "2048", str(tmp_path / "a"), str(tmp_path / "go")], env=env, cwd=REPO_ROOT,
        start_new_session=True,
    )  # fmt: skip
    monitor = Monitor(hz=5, agent_dir=agents, discover_interval_s=0.2, keep_dead_s=float("inf"))
    child = cmd_run.RunChild(own, "python child.py", None)
    monitor.set_scope(child.family)
    try:
        deadline = time.monotonic() + 90
        while not ((tmp_path / "a").exists() and (tmp_path / "b").exists()) and time.monotonic() < deadline:
            _alive(own, stray)
            time.sleep(0.1)
        state = monitor.sample_once()
        weights: dict[int, int | None] = {}
        while time.monotonic() < deadline:
            _alive(own, stray)
            weights = {b.pid: b.weights_bytes for b in state.buckets}
            if weights.get(own.pid):
                break
            time.sleep(0.2)
            state = monitor.sample_once()
        # the stray's agent file (its ring is written: its weights are tracked) is not read at all
        assert weights == {own.pid: _weights(2048)}
        assert [a.pid for a in state.agents] == [own.pid]
        app = MemsightApp(monitor, source_label="t", child=child, manage_monitor=False)
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause()
            (comparison,) = app.live_view.comparisons
            assert comparison.measured_bytes("weights") == _weights(2048)  # not 8 MiB: the stray is not ours
            assert [r.pid for r in app.live_view.agents] == [own.pid]  # the stray is no row of the table
            stray_rss = next(p.rss for p in app.state.os.processes if p.pid == stray.pid)
            # the stray's memory is with "other procs / OS" (MemTotal - MemAvailable - this run's RSS)
            assert comparison.measured_bytes("other") >= stray_rss
            rows = {r.pid: r for r in app.process_rows}
            assert rows[own.pid].own and not rows[stray.pid].own  # still listed, not marked as this run's
            await pilot.press("q")
        summary = monitor.state().summary
        assert summary.peak("weights").bytes == _weights(2048)
        assert summary.scope == f"this run's agents only (pid {own.pid})"
    finally:
        (tmp_path / "go").touch()
        for proc in (own, stray):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        monitor.stop()
