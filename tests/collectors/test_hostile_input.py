"""Hostile input to the monitor's readers (issue 12): agent ring files and their directory, recordings. Bad
input is refused in one line, or skipped and counted on screen while everything else keeps running; nothing
hangs; another user's files are never read. Each test here failed on main before these checks."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import time

import pytest

from collectors import agent_format as fmt
from collectors.agent import sweep_dead_files
from collectors.agent_reader import AgentReader
from collectors.errors import CollectorError
from collectors.monitor import Monitor
from collectors.nvml_collector import NVMLCollector
from collectors.recording import read_recording
from collectors.recording_summary import summarize
from collectors.replay import ReplayMonitor, demo_recording_path
from tests.conftest import REPO_ROOT, run_memsight

HANG_GUARD_S = 60  # a hang guard, not a speed check
OTHER_UID = 54321  # a uid nobody here runs as; the tests run as root, so they can chown files to it

needs_root = pytest.mark.skipif(os.getuid() != 0, reason="chown to another uid needs root")


class _Absent:
    def init(self):
        raise ImportError("no pynvml here")


def monitor_for(directory) -> Monitor:
    # every record read is kept (not only the newest of each tick): these tests count them one by one
    return Monitor(hz=5, agent_dir=str(directory), nvml=NVMLCollector(_Absent()), agent_record_hz=math.inf)


def my_key() -> tuple[int, int]:
    return os.getpid(), fmt.process_start_ticks(os.getpid())


def record(**values: float) -> tuple:
    """A slot payload: every field NaN (unknown) but t and device, then the given ones."""
    v = dict.fromkeys(fmt.RECORD_FIELDS, math.nan) | {"t": time.time(), "device": 0.0, "cuda_state": 2.0}
    v |= values
    return (*(v[name] for name in fmt.RECORD_FIELDS), b"step")


def write_ring(directory, records: list[tuple], fine: int = 16, coarse: int = 4, key=None) -> str:
    """A ring file as the agent writes it, for this (live) process unless `key` says otherwise."""
    pid, ticks = key or my_key()
    path = os.path.join(directory, fmt.ring_file_name(pid, ticks))
    buf = bytearray(fmt.file_size(fine, coarse))
    buf[: fmt.HEADER_SIZE] = fmt.pack_header(pid, ticks, time.time(), 10.0, "python x.py", fine, coarse, 10.0)
    for n, values in enumerate(records):
        offset = fmt.slot_offset("fine", n, fine, coarse)
        fmt.write_slot(buf, offset, n, fmt.PAYLOAD.pack(*values))
    fmt.write_u64(buf, fmt.OFF_FINE_COUNT, len(records))
    fmt.write_f64(buf, fmt.OFF_HEARTBEAT, time.time())
    with open(path, "wb") as fh:
        fh.write(buf)
    return path


# ------------------------------------------------------------------------------------------ agent rings


@pytest.mark.parametrize(
    "bad",
    [{"allocated": math.inf}, {"reserved": -math.inf}, {"device": math.nan}, {"t": math.inf}, {"rss": 1e300}],
    ids=["inf-allocated", "-inf-reserved", "nan-device", "inf-time", "1e300-rss"],
)
def test_a_non_finite_number_in_a_slot_is_skipped_and_counted_on_screen(tmp_path, bad):
    write_ring(tmp_path, [record(allocated=1.0), record(**bad), record(allocated=3.0)])
    monitor = monitor_for(tmp_path)
    state = monitor.sample_once()  # main: OverflowError / ValueError out of the first sample
    (view,) = state.agents
    assert [r.allocated for r in view.history] == [1, 3]
    assert "skipped 1 bad agent record(s)" in state.input_warnings["agents"]
    from tui.screens.live_buckets import bucket_comparisons  # what the live screen's bucket panel shows

    lines = [c.missing for c in bucket_comparisons(state, {}, {})]
    assert any("skipped 1 bad agent record(s)" in line for line in lines)
    monitor.stop()


def test_a_fifo_named_like_a_ring_does_not_block_start_up(tmp_path):
    pid, ticks = my_key()
    code = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(REPO_ROOT)!r})
        from collectors import agent_format as fmt
        from collectors.monitor import Monitor
        from collectors.nvml_collector import NVMLCollector
        class Absent:
            def init(self):
                raise ImportError("no pynvml")
        pid = os.getpid()
        os.mkfifo(os.path.join({str(tmp_path)!r}, fmt.ring_file_name(pid, fmt.process_start_ticks(pid))))
        m = Monitor(hz=5, agent_dir={str(tmp_path)!r}, nvml=NVMLCollector(Absent()))
        state = m.sample_once()
        print(state.input_warnings.get("agents", ""))
    """)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD_S
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "not a regular file" in proc.stdout


def test_a_header_claiming_a_huge_capacity_is_not_mapped(tmp_path):
    fine = 8_000_000  # 1.6 GiB of slots
    path = os.path.join(tmp_path, fmt.ring_file_name(*my_key()))
    with open(path, "wb") as fh:
        fh.write(fmt.pack_header(os.getpid(), my_key()[1], time.time(), 10.0, "x", fine, 4, 10.0))
        fh.truncate(fmt.file_size(fine, 4))  # sparse: the size matches the claim
    with pytest.raises(CollectorError, match="claims 8000000 slots, over MAX_RING_CAPACITY = 65536"):
        AgentReader(path)


@needs_root
def test_a_ring_owned_by_another_uid_is_not_read(tmp_path):
    path = write_ring(tmp_path, [record(allocated=1.0)])
    os.chown(path, OTHER_UID, OTHER_UID)
    with pytest.raises(CollectorError, match=f"belongs to uid {OTHER_UID}"):
        AgentReader(path)
    state = monitor_for(tmp_path).sample_once()
    assert state.agents == () and f"belongs to uid {OTHER_UID}" in state.input_warnings["agents"]


def test_a_ring_others_can_write_is_not_read(tmp_path):
    path = write_ring(tmp_path, [record(allocated=1.0)])
    os.chmod(path, 0o666)
    with pytest.raises(CollectorError, match="writable by others"):
        AgentReader(path)


@needs_root
def test_an_open_agent_directory_of_another_user_shows_no_planted_agent(tmp_path):
    shared = tmp_path / "agents"
    shared.mkdir()
    planted = write_ring(shared, [record(allocated=123.0)])
    os.chown(planted, OTHER_UID, OTHER_UID)
    os.chown(shared, OTHER_UID, OTHER_UID)
    os.chmod(shared, 0o777)
    monitor = monitor_for(shared)
    state = monitor.sample_once()
    assert state.agents == ()  # main: the fake agent with 123 bytes allocated
    assert f"belongs to uid {OTHER_UID}" in state.input_warnings["agents"]
    monitor.stop()  # stop() sweeps dead agents' files: never in another user's directory
    assert os.path.exists(planted)


def test_a_world_writable_directory_of_this_user_is_not_read(tmp_path):
    shared = tmp_path / "agents"
    shared.mkdir()
    write_ring(shared, [record(allocated=123.0)])
    os.chmod(shared, 0o777)
    state = monitor_for(shared).sample_once()
    assert state.agents == () and "writable by others" in state.input_warnings["agents"]


@needs_root
def test_sweep_never_removes_another_users_file(tmp_path):
    dead = write_ring(tmp_path, [], key=(2**22 + 7, 1))  # no such pid: a dead agent's file
    os.chown(dead, OTHER_UID, OTHER_UID)
    assert sweep_dead_files(str(tmp_path)) == 0 and os.path.exists(dead)


# ------------------------------------------------------------------------------------------ recordings


def write_recording(path, *events: dict, header: dict | None = None) -> str:
    head = {"k": "header", "version": 1, "created": 1_700_000_000.0, "host": "h", "hz": 2.0} | (header or {})
    lines = [json.dumps(head), *(json.dumps(e) for e in events)]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def os_event(t: float, **override) -> dict:
    e = {
        "k": "os", "t": t, "mem_total": 64 * 2**30, "mem_available": 32 * 2**30, "cached": 0, "shmem": 0,
        "swap_total": 0, "swap_free": 0, "psi_some_avg10": None, "psi_full_avg10": None, "oom_kill": 0,
        "procs": [],
    }  # fmt: skip
    return e | override


def memsight(*args: str) -> subprocess.CompletedProcess:
    return run_memsight(*args)


@pytest.mark.parametrize(
    "bad",
    [
        {k: v for k, v in os_event(2.0).items() if k != "mem_total"},  # a missing field: KeyError on main
        os_event(2.0, mem_available="lots"),  # a wrong type: TypeError on main
        os_event(2.0, procs=[[1, 2, "x", "big", None, 0, "u"]]),  # a wrong-typed process row
        {"k": "agent", "pid": 1, "start": 1, "r": [1.0]},  # a short agent record: CollectorError on main
    ],
    ids=["missing-field", "wrong-type", "bad-process-row", "short-agent-record"],
)
def test_a_bad_event_is_skipped_and_counted_by_replay_json(tmp_path, bad):
    path = write_recording(tmp_path / "r.jsonl", os_event(1.0), bad, os_event(3.0))
    proc = memsight("replay", path, "--json")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    summary = json.loads(proc.stdout)
    assert summary["bad_lines"] == 1
    (os_source,) = [s for s in summary["sources"] if s["id"] == "os"]
    assert os_source["samples"] == 2


def test_created_1e300_is_one_line_not_an_overflow(tmp_path):
    path = write_recording(tmp_path / "r.jsonl", os_event(1.0), header={"created": 1e300})
    proc = memsight("replay", path)  # refused before the screen starts
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("memsight: ") and "created is 1e+300, expected time" in line


def test_one_bad_event_does_not_stop_interactive_replay(tmp_path):
    events = [os_event(float(t)) for t in range(1, 6)]
    events[2] = os_event(3.0, mem_total=None)  # main: TypeError in the replay thread, the view froze at t=2
    monitor = ReplayMonitor(write_recording(tmp_path / "r.jsonl", *events), speed=50.0)
    monitor.start()
    deadline = time.monotonic() + HANG_GUARD_S
    while not monitor.at_end and time.monotonic() < deadline:
        time.sleep(0.05)
    monitor.stop()
    assert monitor.at_end
    state = monitor.state()
    assert state.os is not None and state.os.t == 5.0
    warning = state.input_warnings["replay"]
    assert "recording: skipped 1 bad line(s) (line 4: os event: mem_total is None" in warning


def test_os_event_missing_its_optional_fields_replays_with_them_unknown(tmp_path):
    # found by the long fuzz run: the read check takes a missing "?" field as null, the replay's converter
    # raised KeyError on it, so the event was counted bad in the replay though it had passed the read
    events = [os_event(float(t)) for t in range(1, 4)]
    for name in ("cached", "shmem", "psi_some_avg10", "psi_full_avg10", "oom_kill"):
        events[1].pop(name, None)
    monitor = ReplayMonitor(write_recording(tmp_path / "r.jsonl", *events))
    state = monitor.advance_to(1.0)
    assert monitor.bad_events == 0, monitor.first_bad_event
    assert state.os is not None and state.os.t == 2.0
    assert state.os.cached is None and state.os.oom_kill is None


async def test_null_command_lines_replay_and_draw(tmp_path):
    """A proc or agent_meta event may say null for the command line (the read check allows it); the replay
    kept None, and the live screen raised AttributeError labelling the process (found by the fuzz suite's
    live screen surface, 3 of 4,805 long-profile cases)."""
    from tui.app import MemsightApp
    from tui.screens.processes import ProcessesScreen

    proc_row = [4242, 7, "python", 2**30, None, False, "u"]
    events = [
        {"k": "proc", "pid": 4242, "start": 7, "cmdline": None},
        {"k": "agent_meta", "pid": 4242, "start": 7, "cmdline": None, "path": None, "hz": None},
        os_event(1.0, procs=[proc_row]),
        os_event(2.0, procs=[proc_row]),
    ]
    monitor = ReplayMonitor(write_recording(tmp_path / "r.jsonl", *events))
    state = monitor.advance_to(1.0)
    (process,) = state.os.processes
    assert (process.cmdline, process.label) == ("", "python")
    (agent,) = state.agents
    assert (agent.cmdline, agent.path, agent.hz) == ("", "", 0.0)
    app = MemsightApp(monitor, source_label="replay", manage_monitor=False)
    async with app.run_test(size=(160, 48)) as pilot:
        app.refresh_data()
        await pilot.press("4")  # the Processes screen lists it by its label
        await pilot.pause()
        assert isinstance(app.screen, ProcessesScreen)
        assert [r.command for r in app.process_rows] == ["python"]


def test_a_recording_that_is_a_fifo_does_not_block(tmp_path):
    os.mkfifo(tmp_path / "r.jsonl")
    proc = memsight("replay", str(tmp_path / "r.jsonl"), "--json")
    assert proc.returncode == 2 and "not a regular file (a FIFO)" in proc.stderr


def test_deep_nesting_and_huge_integers_in_a_recording_are_counted_lines(tmp_path):
    path = tmp_path / "r.jsonl"
    write_recording(path, os_event(1.0))
    with open(path, "a") as fh:
        fh.write('{"k": "os", "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
        fh.write('{"k": "os", "t": ' + "9" * 5000 + "}\n")
        fh.write(json.dumps(os_event(2.0)) + "\n")
    recording = read_recording(path)
    assert recording.bad_lines == 2 and len(recording.events) == 2
    assert summarize(recording)["bad_lines"] == 2


def test_the_bundled_recording_has_no_bad_line():
    recording = read_recording(demo_recording_path())
    assert recording.bad_lines == 0 and len(recording.events) > 1000
