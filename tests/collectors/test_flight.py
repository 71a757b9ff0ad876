"""The flight recorder (collectors/flight.py): bounded, rolling, on disk every 2 s; SIGKILL of memsight and of
the command leave the last flushed seconds readable, and `memsight replay DIR` says where it ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from collectors.errors import CollectorError
from collectors.flight import FlightRecorder, flight_end, joined_file, new_run_dir, read_flight, segments
from collectors.recording import read_recording
from collectors.replay import ReplayMonitor
from collectors.snapshots import NVMLSnapshot, ProcessInfo
from tests.collectors.builders import os_snapshot
from tests.conftest import HANG_GUARD_S, REPO_ROOT, run_memsight

GiB, MiB = 2**30, 2**20
SYNC_S = 2.0


def _procs(i: int) -> tuple[ProcessInfo, ...]:
    # a process table like a busy host's (fifty rows), so segments fill quickly
    return tuple(
        ProcessInfo(100 + k, f"worker{k}", f"python worker.py --shard {k}", "me", (k + 1) * MiB + i, 0, False)
        for k in range(50)
    )


def test_segments_roll_within_the_limit_and_read_back_in_order(tmp_path):
    clock = [0.0]
    flight = FlightRecorder(tmp_path / "f", hz=2.0, limit_bytes=MiB, clock=lambda: clock[0])
    nvml = NVMLSnapshot(status="no NVML library", available=False, devices=(), t=1000.0)
    flight.nvml(nvml)  # written once, on change: every later segment repeats it at its top
    for i in range(600):
        clock[0] = i / 2
        flight.os(os_snapshot(1000.0 + i / 2, 10 * GiB - i * MiB, _procs(i)))
    flight.close()
    kept = segments(tmp_path / "f")
    assert flight.rotations >= 8 and flight.deleted >= 1
    # the limit holds after every rotation: the kept segments are within it, plus the one being written
    assert sum(p.stat().st_size for p in kept[:-1]) <= MiB
    assert kept[0].name != "segment-000001.jsonl"  # the oldest were deleted
    recording = read_flight(tmp_path / "f")
    times = [e["t"] for e in recording.events if e["k"] == "os"]
    assert times == sorted(times) and times[-1] == 1000.0 + 599 / 2
    step = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert set(step) == {0.5}  # nothing lost between segments
    assert sum(1 for e in recording.events if e["k"] == "nvml") == len(kept)
    assert sum(1 for e in recording.events if e["k"] == "proc") >= 50 * len(kept)  # each segment declares
    ends = flight_end(tmp_path / "f", recording)
    assert ends.last_t == times[-1] and not ends.closed  # no summary was written
    joined = joined_file(tmp_path / "f")  # what `memsight replay DIR` streams
    assert read_recording(joined).events == recording.events  # each segment decodes as it did alone
    replay = ReplayMonitor(joined)
    while not replay.at_end:
        replay.step()
    assert replay.state().os.mem_available == 10 * GiB - 599 * MiB
    # the processes' command lines, declared again in each segment, survive the deleted first ones
    assert replay.state().os.processes[49].cmdline == "python worker.py --shard 49"


def test_a_used_directory_and_a_tiny_limit_are_refused(tmp_path):
    FlightRecorder(tmp_path / "f").close()
    with pytest.raises(CollectorError, match="already holds a flight recording"):
        FlightRecorder(tmp_path / "f")
    with pytest.raises(CollectorError, match="at least 1 MiB"):
        FlightRecorder(tmp_path / "g", limit_bytes=1000)


def test_old_runs_are_pruned_to_the_newest(tmp_path):
    for k in range(12):
        run = tmp_path / f"run-2026010{k // 10}-{k:06d}-1"
        run.mkdir()
        (run / "segment-000001.jsonl").write_text("{}\n")
        os.utime(run, (1000 + k, 1000 + k))
    fresh = new_run_dir(tmp_path, keep=10)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert len(left) == 9 and left[0].endswith("000003-1")  # the 9 newest; this run makes the 10th
    assert not fresh.exists() and fresh.name.startswith("run-") and fresh.name.endswith(f"-{os.getpid()}")


CHILD = "import time\nwhile True:\n    time.sleep(0.05)\n"


def _start(tmp_path, flight):
    return subprocess.Popen(
        [sys.executable, "-m", "tui.cli", "run", "--headless", "--hz", "4", "--flight-dir", str(flight),
         "--agent-dir", str(tmp_path / "agents"), "--", sys.executable, "-c", CHILD],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def _kill_tree(proc: subprocess.Popen) -> None:
    """memsight and the command it runs (which outlives a SIGKILLed memsight, orphaned)."""
    try:
        family = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    proc.kill()
    proc.wait(HANG_GUARD_S)
    for p in family:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


def _wait_for_samples(flight, seconds: float) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        if segments(flight):
            try:
                ends = flight_end(flight)
            except CollectorError:
                ends = None
            if ends is not None and ends.last_t is not None and ends.last_t - ends.first_t >= seconds:
                return
        time.sleep(0.2)
    raise AssertionError("memsight wrote no flight recording")


def test_sigkill_of_memsight_leaves_the_last_flushed_seconds(tmp_path):
    flight = tmp_path / "flight"
    memsight = _start(tmp_path, flight)
    child = None
    try:
        _wait_for_samples(flight, 3.0)
        child = psutil.Process(memsight.pid).children()[0]
        killed_at = time.time()
        memsight.send_signal(signal.SIGKILL)
        memsight.wait(HANG_GUARD_S)
        assert child.is_running()  # memsight could not pass anything on: the command is orphaned, running
        child.send_signal(signal.SIGKILL)  # and then the command too (a host that goes down takes both)
        child.wait(HANG_GUARD_S)
    finally:
        _kill_tree(memsight)
        if child is not None and child.is_running():
            child.kill()
    ends = flight_end(flight)
    # on disk: everything up to the last 2 s sync, and one 0.25 s tick on top (and scheduling slack)
    assert ends.last_t >= killed_at - SYNC_S - 0.25 - 1.0
    assert not ends.closed
    replayed = run_memsight("replay", str(flight), "--json")
    assert replayed.returncode == 0, replayed.stderr
    doc = json.loads(replayed.stdout)
    assert doc["flight"]["closed"] is False and doc["flight"]["last_t"] == ends.last_t
    assert "memsight stopped without closing it (killed, or the host went down)" in doc["flight"]["ends"]
    os_source = next(s for s in doc["sources"] if s["id"] == "os")
    assert os_source["end"] == ends.last_t and os_source["samples"] >= 8  # 3 s and more at 4 Hz


def test_sigkill_of_the_command_is_recorded_to_the_end(tmp_path):
    flight = tmp_path / "flight"
    memsight = _start(tmp_path, flight)
    try:
        _wait_for_samples(flight, 2.0)
        child = psutil.Process(memsight.pid).children()[0]
        child.send_signal(signal.SIGKILL)
        _, stderr = memsight.communicate(timeout=HANG_GUARD_S)
    finally:
        _kill_tree(memsight)
    assert memsight.returncode == 128 + signal.SIGKILL  # memsight exits with the command's status
    assert f"flight recording in {flight}" in stderr
    ends = flight_end(flight)
    assert ends.closed and "closed by the run" in ends.sentence()
    recording = read_flight(flight)
    assert recording.events[-1]["k"] == "summary"


def test_the_end_sentence_sizes_a_small_recording_in_its_own_unit():
    from collectors.flight import FlightEnd

    small = FlightEnd(first_t=0.0, last_t=2.0, closed=True, segments=1, bytes=10_000)
    assert small.sentence().endswith("closed by the run (1 segment(s), 9.77 KiB)")  # was "0.0 MiB"
    large = FlightEnd(first_t=0.0, last_t=2.0, closed=False, segments=8, bytes=64 * 2**20)
    assert large.sentence().endswith("(8 segment(s), 64.0 MiB)")
