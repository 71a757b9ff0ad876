"""OSCollector without procfs: psutil supplies the figures (a real psutil call on this machine), checked
against this machine's /proc/meminfo, and what psutil cannot know (PSI, oom_kill) stays None, never 0."""

from __future__ import annotations

import os

import pytest

from collectors.errors import CollectorError
from collectors.os_collector import OSCollector, parse_meminfo, parse_stat_start_ticks

MiB = 2**20


def _meminfo() -> dict[str, int]:
    with open("/proc/meminfo") as f:
        return parse_meminfo(f.read())


def test_empty_proc_root_falls_back_to_psutil(tmp_path):
    collector = OSCollector(tmp_path)  # an empty directory: no meminfo, no pids
    assert collector.source == "psutil"
    snap = collector.sample(include_pids=[os.getpid()])
    meminfo = _meminfo()
    assert snap.source == "psutil"
    # psutil reads the same kernel figures: totals equal, moving figures within a tolerance
    assert snap.mem_total == meminfo["MemTotal"]
    assert snap.swap_total == meminfo["SwapTotal"]
    tolerance = max(256 * MiB, meminfo["MemTotal"] // 50)  # the machine is shared: memory moves meanwhile
    assert abs(snap.mem_available - meminfo["MemAvailable"]) < tolerance
    assert 0 < snap.mem_available <= snap.mem_total
    assert abs(snap.swap_free - meminfo["SwapFree"]) < tolerance
    # psutil's Linux "cached" is Cached + SReclaimable; "shared" is Shmem
    assert abs(snap.cached - (meminfo["Cached"] + meminfo.get("SReclaimable", 0))) < tolerance
    assert abs(snap.shmem - meminfo["Shmem"]) < tolerance
    # what psutil cannot give is unknown, not zero
    assert snap.psi_some_avg10 is None and snap.psi_full_avg10 is None and snap.oom_kill is None


def test_psutil_process_list_matches_proc_for_this_process(tmp_path):
    collector = OSCollector(tmp_path)
    snap = collector.sample(include_pids=[os.getpid()])
    (me,) = [p for p in snap.processes if p.pid == os.getpid()]
    with open("/proc/self/stat") as f:
        start_ticks = parse_stat_start_ticks(f.read())
    with open("/proc/self/statm") as f:
        rss_now = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    # the same unit as /proc's starttime, so a reused pid is told apart the same way on both paths
    assert me.start_ticks == start_ticks
    assert abs(me.rss - rss_now) < 64 * MiB and me.rss > 10 * MiB
    with open("/proc/self/comm") as f:
        assert me.name == f.read().strip()
    assert "pytest" in me.cmdline or "python" in me.cmdline
    assert me.user and me.user != "?"
    assert collector.process_rss(os.getpid()) > 10 * MiB
    assert collector.process_rss(2**22 + 12345) is None  # no such pid (above pid_max's default)
    # the top list is sorted by RSS like the /proc path's
    rss = [p.rss for p in snap.processes]
    assert rss == sorted(rss, reverse=True)


def test_growth_window_works_on_the_psutil_path(tmp_path):
    times = iter([0.0, 30.0])
    collector = OSCollector(tmp_path, growth_window_s=30.0, clock=lambda: next(times))
    collector.sample(include_pids=[os.getpid()])
    ballast = bytearray(64 * MiB)  # touched below, so resident
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    second = collector.sample(include_pids=[os.getpid()])
    (me,) = [p for p in second.processes if p.pid == os.getpid()]
    assert me.growth_bytes is not None and me.growth_bytes >= 60 * MiB
    assert me.growth_window_s == 30.0
    del ballast


def test_real_proc_stays_the_primary_path():
    assert OSCollector().source == "proc"
    assert OSCollector().sample().source == "proc"
    with pytest.raises(CollectorError, match="'auto', 'proc' or 'psutil'"):
        OSCollector(source="sysctl")


def test_monitor_records_and_replays_the_source(tmp_path):
    from collectors.monitor import Monitor
    from collectors.nvml_collector import NVMLCollector
    from collectors.recording import read_recording
    from collectors.replay import ReplayMonitor, demo_recording_path

    class Absent:
        def init(self):
            raise ImportError("no pynvml in this test")

    empty = tmp_path / "no-proc"
    empty.mkdir()
    out = tmp_path / "rec.jsonl"
    monitor = Monitor(
        agent_dir=str(tmp_path / "agents"), record_to=out, nvml=NVMLCollector(Absent()), proc_root=str(empty)
    )
    state = monitor.sample_once()
    monitor.stop()
    assert state.os.source == "psutil" and state.os.oom_kill is None
    (event,) = [e for e in read_recording(out).events if e["k"] == "os"]
    assert event["source"] == "psutil" and event["oom_kill"] is None and event["psi_some_avg10"] is None
    assert ReplayMonitor(out).step().os.source == "psutil"
    # recordings made before the field existed read back as /proc
    assert ReplayMonitor(demo_recording_path()).step().os.source == "proc"
