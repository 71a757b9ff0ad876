"""What keeps the monitor cheap, asserted as behaviour (the CPU figures themselves: bench/monitor_cpu.py).

The process list is rescanned at most every process_interval_s while meminfo is re-read every sample through
a kept-open file; optional files a kernel lacks are not retried; one local sampling thread, an NVML thread
only while NVML is initialised; the chart history is rebuilt only when a series got a sample.
"""

from __future__ import annotations

import os
import shutil
import threading
import time

from collectors.monitor import Monitor
from collectors.nvidia_smi import SmiBackend
from collectors.nvml_collector import NVMLCollector
from collectors.os_collector import OSCollector, parse_meminfo
from collectors.snapshots import NVMLSnapshot
from collectors.state import StateBuilder
from tests.collectors.builders import os_snapshot
from tests.conftest import SHARED_FIXTURES, needs_shared

GiB = 2**30


def _copy_process(root, pid: int, as_pid: int) -> None:
    d = root / str(as_pid)
    d.mkdir()
    for name in ("stat", "statm", "cmdline"):
        (d / name).write_bytes(open(f"/proc/{pid}/{name}", "rb").read())


def _set_available(meminfo_path, kib: int) -> None:
    lines = meminfo_path.read_text().splitlines()
    out = [f"MemAvailable:   {kib} kB" if line.startswith("MemAvailable:") else line for line in lines]
    meminfo_path.write_text("\n".join(out) + "\n")  # in place (same inode), as procfs regenerates it


def test_process_list_rescanned_at_most_every_interval_meminfo_every_sample(tmp_path):
    root = tmp_path / "proc"
    root.mkdir()
    shutil.copy("/proc/meminfo", root / "meminfo")
    me = os.getpid()
    _copy_process(root, me, me)
    now = [100.0]
    c = OSCollector(root, clock=lambda: now[0], process_interval_s=1.0)
    first = c.sample()
    assert {p.pid for p in first.processes} == {me}
    _copy_process(root, me, 999_998)  # a process appears ...
    _set_available(root / "meminfo", 1234)  # ... and memory falls
    now[0] = 100.5
    second = c.sample()
    assert second.mem_available == 1234 * 1024  # meminfo: every sample, through the kept-open file
    assert second.processes is first.processes  # the list: not rescanned within the second
    # asking for a pid the last scan saw chooses again from that scan, without reading /proc
    assert [p.pid for p in c.sample(include_pids=[me]).processes] == [me]
    now[0] = 101.0
    third = c.sample()
    assert {p.pid for p in third.processes} == {me, 999_998}
    assert next(p for p in third.processes if p.pid == 999_998).is_new
    c.close()
    _set_available(root / "meminfo", 4321)
    now[0] = 101.2
    assert c.sample().mem_available == 4321 * 1024  # reopened after close()
    c.close()


def test_missing_psi_is_not_retried_every_tick(tmp_path):
    root = tmp_path / "proc"
    root.mkdir()
    shutil.copy("/proc/meminfo", root / "meminfo")
    c = OSCollector(root)
    assert c.sample().psi_some_avg10 is None and c.sample().oom_kill is None
    (root / "pressure").mkdir()
    (root / "pressure" / "memory").write_text("some avg10=1.50 avg60=0 avg300=0 total=1\n")
    # a kernel does not grow PSI at run time: the absence found once stands (no open() per tick)
    assert c.sample().psi_some_avg10 is None
    fresh = OSCollector(root)
    assert fresh.sample().psi_some_avg10 == 1.5
    c.close()
    fresh.close()


def test_real_proc_values_through_kept_files_match_a_fresh_read():
    c = OSCollector(process_interval_s=0.0)
    for _ in range(3):  # the kept-open meminfo is re-read, not a frozen first copy
        snap = c.sample(include_pids=[os.getpid()])
        with open("/proc/meminfo") as f:
            total = parse_meminfo(f.read())["MemTotal"]
        assert snap.mem_total == total
    (mine,) = [p for p in snap.processes if p.pid == os.getpid()]
    with open("/proc/self/statm") as f:
        statm_rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    assert abs(mine.rss - statm_rss) < 64 * 2**20 and mine.user not in ("", "?")
    c.close()


class _AbsentNVML:
    def init(self):
        raise ImportError("no pynvml in this test")


def _memsight_threads() -> set[str]:
    names = ("memsight-os", "memsight-nvml", "memsight-agents")
    return {t.name for t in threading.enumerate() if t.name in names}


def test_one_sampling_thread_without_nvml_and_it_keeps_sampling(tmp_path):
    monitor = Monitor(hz=20, agent_dir=str(tmp_path / "agents"), nvml=NVMLCollector(_AbsentNVML()))
    monitor.start()
    try:
        assert _memsight_threads() == {"memsight-os"}
        first = monitor.state()
        deadline = time.monotonic() + 3.0
        while monitor.state().t == first.t and time.monotonic() < deadline:
            time.sleep(0.02)
        state = monitor.state()
        assert state.t > first.t and state.os is not None
        assert state.source_status["nvml"].startswith("no NVML library")
        assert state.source_status["agents"] == "0 agent(s)"
    finally:
        started = time.monotonic()
        monitor.stop()
    assert time.monotonic() - started < 1.0  # the thread waits on the stop Event, not in a sleep
    assert _memsight_threads() == set()


@needs_shared
def test_initialised_nvml_gets_its_thread_and_builds_only_on_change(tmp_path):
    text = (SHARED_FIXTURES / "nvidia-smi_gb10_vllm-61383MiB.txt").read_text()
    nvml = NVMLCollector(SmiBackend.from_text(text))
    monitor = Monitor(hz=20, agent_dir=str(tmp_path / "agents"), nvml=nvml)
    assert monitor._read_nvml() is True  # the first snapshot differs from "not sampled yet"
    assert monitor._read_nvml() is False  # the same recorded table again: nothing to rebuild
    monitor.start()
    try:
        assert _memsight_threads() == {"memsight-os", "memsight-nvml"}
    finally:
        monitor.stop()



def test_history_is_rebuilt_only_when_a_series_changed_and_charts_headroom():
    builder = StateBuilder(history_points=3)
    builder.update_nvml(NVMLSnapshot("no NVML library: test", False, ()))
    builder.update_os(os_snapshot(1.0, 20 * GiB))
    a = builder.build(1.0)
    b = builder.build(1.2)  # another thread's build, nothing new: the same history mapping
    assert b.history is a.history
    assert a.history["available"] == ((1.0,), (float(20 * GiB),))
    assert a.history["headroom"] == ((1.0,), (float(20 * GiB),))  # no GPU: headroom is MemAvailable
    for i, gib in enumerate((19, 18, 17), start=2):
        builder.update_os(os_snapshot(float(i), gib * GiB))
        state = builder.build(float(i))
    assert state.history is not a.history
    assert state.history["available"] == ((2.0, 3.0, 4.0), tuple(float(g * GiB) for g in (19, 18, 17)))
    assert state.history["headroom"][0] == (2.0, 3.0, 4.0)  # bounded by history_points
    # a sample the ring refuses (time going backwards) is neither charted nor silent
    builder.update_os(os_snapshot(3.5, GiB))
    late = builder.build(4.5)
    assert late.history["available"] == state.history["available"]
    assert late.dropped["rings"] == 1
    assert late.history["allocated"] == ((), ()) and late.history["gap"] == ((), ())
