"""Stored values and time order, the OS collector on real /proc and real fixtures, NVML through recorded
nvidia-smi outputs."""

from __future__ import annotations

import math
import os
import shutil
from array import array
from dataclasses import replace

import pytest

from collectors.nvidia_smi import SmiBackend, parse
from collectors.nvml_collector import NVMLCollector, gpu_held_bytes
from collectors.os_collector import OSCollector, RssHistory, parse_free_h_line, parse_meminfo, parse_psi
from collectors.ring import UNSUPPORTED, TimeGate, is_unknown, is_unsupported, to_float
from collectors.state import StateBuilder
from tests.conftest import SHARED_FIXTURES, needs_shared

MiB = 2**20


def test_unsupported_is_distinct_from_unknown_and_zero():
    stored = array("d", [0.0, UNSUPPORTED, to_float(None)])  # the payload survives array('d')
    a, b, c = array("d", stored.tobytes())
    assert a == 0.0 and not is_unknown(a) and not is_unsupported(a)
    assert is_unsupported(b) and not is_unknown(b)
    assert is_unknown(c) and not is_unsupported(c)


def test_a_time_gate_counts_the_samples_it_refuses():
    gate = TimeGate()
    assert gate.append(2.0) and gate.append(2.0)  # the same time again is in order
    assert not gate.append(1.0)  # time going backwards
    assert not gate.append(math.nan)
    copied = gate.copy()
    assert copied.append(3.0) and not copied.append(2.5)
    assert gate.dropped == 2 and copied.dropped == 3 and gate.append(2.5)


def test_os_collector_reads_real_proc():
    c = OSCollector()
    snap = c.sample()
    with open("/proc/meminfo") as f:
        total = parse_meminfo(f.read())["MemTotal"]
    assert snap.mem_total == total
    assert 0 < snap.mem_available <= snap.mem_total
    me = [p for p in c.sample(include_pids=[os.getpid()]).processes if p.pid == os.getpid()]
    assert me and me[0].rss > 10 * MiB


def _copied_proc(tmp_path):
    """(a proc root, this pid): real /proc files copied for two processes, this one and a fake 999999."""
    root = tmp_path / "proc"
    root.mkdir()
    shutil.copy("/proc/meminfo", root / "meminfo")
    pid = os.getpid()
    for fake_pid in (pid, 999999):
        d = root / str(fake_pid)
        d.mkdir()
        for name in ("stat", "statm", "cmdline"):
            (d / name).write_bytes(open(f"/proc/{pid}/{name}", "rb").read())
    return root, pid


def test_os_collector_growth_and_vanished_processes(tmp_path):
    # a copy of real /proc files for two processes, one of which then vanishes or denies access
    root, pid = _copied_proc(tmp_path)
    clock = iter([0.0, 30.0, 60.0]).__next__
    c = OSCollector(root, growth_window_s=30.0, clock=clock)
    first = c.sample()
    assert {p.pid for p in first.processes} == {pid, 999999}
    page = os.sysconf("SC_PAGE_SIZE")
    statm = (root / str(pid) / "statm").read_text().split()
    statm[1] = str(int(statm[1]) + (12 * 2**30) // page)  # this process "took 12 GiB"
    (root / str(pid) / "statm").write_text(" ".join(statm))
    shutil.rmtree(root / "999999")
    (root / "12345").mkdir()  # a process that denies access (no readable files)
    second = c.sample()
    assert second.skipped_processes == 1
    grown = {p.pid: p.growth_bytes for p in second.processes}
    assert grown == {pid: 12 * 2**30}
    assert second.processes[0].is_new is False


def test_os_collector_tables_share_a_process_unchanged_values(tmp_path):
    # issue 20: the alert rules keep a minute of process tables (one a second); a process whose values did not
    # change holds them once across the tables, not once per table. Real /proc files, copied, then rescanned.
    root, pid = _copied_proc(tmp_path)
    clock = iter([0.0, 1.0, 2.0]).__next__
    c = OSCollector(root, growth_window_s=30.0, clock=clock)
    first = {p.pid: p for p in c.sample().processes}
    page = os.sysconf("SC_PAGE_SIZE")
    statm = (root / "999999" / "statm").read_text().split()
    statm[1] = str(int(statm[1]) + (2 * 2**20) // page)  # 999999 grew 2 MiB
    (root / "999999" / "statm").write_text(" ".join(statm))
    second = {p.pid: p for p in c.sample().processes}
    same, grew = second[pid], second[999999]
    assert same == replace(first[pid], growth_window_s=1.0) and same is not first[pid]  # a new table entry
    assert same.name is first[pid].name and same.rss is first[pid].rss  # ... holding the same values once
    assert same.start_ticks is first[pid].start_ticks
    assert grew.rss == first[999999].rss + 2 * 2**20 and grew.name is first[999999].name
    third = {p.pid: p for p in c.sample().processes}
    assert third[pid].rss is first[pid].rss and third[999999].rss is grew.rss


def test_rss_history_keeps_the_newest_sample_at_or_before_the_window_start():
    history = RssHistory(start_ticks=7)
    for t, rss in [(0.0, 100), (10.0, 110), (20.0, 120), (30.0, 130), (35.0, 135), (41.0, 2**40)]:
        history.add(t, rss, window_s=30.0)
    # at 41 s the 30 s window starts at 11 s: the sample at 10 s is its base (growth over 31 s), 0 s is gone
    assert list(history.times) == [10.0, 20.0, 30.0, 35.0, 41.0]
    assert list(history.rss) == [110, 120, 130, 135, 2**40] and history.start_ticks == 7
    history.add(71.0, 5, window_s=30.0)
    assert list(history.times) == [41.0, 71.0]  # exactly at the window's start: kept as the base


def test_psi_parse():
    assert parse_psi(
        "some avg10=1.50 avg60=0.00 avg300=0.00 total=1\nfull avg10=0.25 avg60=0 avg300=0 total=0"
    ) == (1.5, 0.25)


@needs_shared
def test_gb10_tables_are_unified_with_per_process_usage():
    text = (SHARED_FIXTURES / "nvidia-smi_gb10_vllm-61383MiB.txt").read_text()
    snap = NVMLCollector(SmiBackend.from_text(text)).sample()
    (d,) = snap.devices
    assert d.name == "NVIDIA GB10" and d.unified
    assert d.total is None and d.used is None and "memory" in d.unsupported
    assert {(p.pid, p.used_bytes, p.kind) for p in d.processes} == {
        (2283430, 61383 * MiB, "compute"),
        (2804, 179 * MiB, "graphics"),
        (3060, 48 * MiB, "graphics"),
    }
    assert gpu_held_bytes(snap) == (61383 + 179 + 48) * MiB


@needs_shared
def test_truncated_process_memory_is_unknown_not_five_digits():
    text = (SHARED_FIXTURES / "nvidia-smi_gb10_vllm-truncated-10707.txt").read_text()
    report = parse(text)
    vllm = [p for p in report.processes if p.pid == 3048280][0]
    assert vllm.truncated and vllm.used_bytes is None
    h200 = parse((SHARED_FIXTURES / "nvidia-smi_h200-x8_vllm_truncated-13042_570.158.01.txt").read_text())
    assert [p.used_bytes for p in h200.processes] == [None, None, None]
    assert h200.devices[0].used == 130429 * MiB and h200.devices[0].total == 143771 * MiB


@needs_shared
def test_discrete_gpus_report_v2_memory_from_q_output():
    text = (SHARED_FIXTURES / "nvidia-smi-a_h100-sxm5-x8_idle_first-gpu-block_565.57.01.txt").read_text()
    (d,) = NVMLCollector(SmiBackend.from_text(text)).sample().devices
    assert (d.total, d.reserved, d.used, d.free) == (81559 * MiB, 454 * MiB, 1 * MiB, 81106 * MiB)
    assert not d.unified and d.unsupported == ()
    gh = (
        NVMLCollector(
            SmiBackend.from_text((SHARED_FIXTURES / "nvidia-smi-a_gh200_idle_550.127.05.txt").read_text())
        )
        .sample()
        .devices[0]
    )
    assert (gh.total, gh.reserved, gh.used, gh.free) == (97871 * MiB, 1103 * MiB, 2 * MiB, 96767 * MiB)
    assert not gh.unified  # GH200 has its own HBM framebuffer


@needs_shared
def test_jetson_thor_and_rtx3090():
    thor = NVMLCollector(
        SmiBackend.from_text(
            (SHARED_FIXTURES / "nvidia-smi_jetson-thor_processes-0MiB_580.00.txt").read_text()
        )
    ).sample()
    assert thor.devices[0].unified and all(p.used_bytes == 0 for p in thor.devices[0].processes)
    rtx = NVMLCollector(
        SmiBackend.from_text((SHARED_FIXTURES / "nvidia-smi_rtx3090_vllm-22382MiB_590.48.01.txt").read_text())
    ).sample()
    d = rtx.devices[0]
    assert d.total == 24576 * MiB and d.used == 23383 * MiB and d.free == (24576 - 23383) * MiB
    assert "reserved" in d.unsupported and d.utilization_gpu == 18.0


@needs_shared
def test_unified_three_numbers_from_one_gb10_probe():
    # nvml probe + /proc/meminfo lines recorded on the same GB10 (nvitop PR #208)
    text = (SHARED_FIXTURES / "nvml_gb10_ctypes_memoryinfo_nvitop-208.txt").read_text()
    nvml = NVMLCollector(SmiBackend.from_text(text)).sample()
    assert nvml.devices[0].unified and "memory" in nvml.devices[0].unsupported
    meminfo = parse_meminfo(text)
    assert meminfo["MemTotal"] == 127600748 * 1024 and meminfo["MemAvailable"] == 118566368 * 1024
    free_h = parse_free_h_line((SHARED_FIXTURES / "free-h_gb10_vllm-61383MiB.txt").read_text())
    assert free_h["Mem.total"] == "119Gi" and free_h["Mem.available"] == "43Gi"


def test_no_nvml_library_is_one_status_not_a_crash():
    class Missing:
        def init(self):
            import pynvml

            raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    snap = NVMLCollector(Missing()).sample()
    assert not snap.available and snap.devices == () and snap.status.startswith("no NVML library")
    # and the real pynvml on this GPU-less machine: a status, no exception
    real = NVMLCollector().sample()
    assert not real.available and real.status


@needs_shared
def test_state_on_unified_uses_mem_available_and_three_numbers():
    text = (SHARED_FIXTURES / "nvidia-smi_gb10_vllm-61383MiB.txt").read_text()
    builder = StateBuilder()
    builder.update_nvml(NVMLCollector(SmiBackend.from_text(text)).sample())
    builder.update_os(OSCollector().sample())
    state = builder.build(1.0)
    assert state.unified and state.headroom_source == "MemAvailable"
    assert state.headroom_bytes == state.os.mem_available
    assert state.gpu_held_bytes == (61383 + 179 + 48) * MiB
    assert state.unified_gap_bytes == state.system_used_bytes - state.gpu_held_bytes


@pytest.mark.parametrize("bad", ["", "hello\n"])
def test_not_nvidia_smi_is_a_clear_error(bad):
    from collectors.errors import CollectorError

    with pytest.raises(CollectorError):
        parse(bad)


@pytest.mark.parametrize(
    ("csv", "names"),
    [
        ("index, name, memory.total [MiB]\nabc, NVIDIA GB10, 1024 MiB\n", "row 1"),
        ("index, memory.total [MiB], memory.used [MiB]\n0, 81559 MiB, lots\n", "'lots'"),
        ("index, memory.total [MiB]\n0, 81559 MiB\n1, \n", "row 2"),
    ],
)
def test_damaged_csv_is_a_clear_error_naming_the_row(csv, names):
    """A cut or edited `--format=csv` capture: one CollectorError naming the row, never a bare ValueError."""
    from collectors.errors import CollectorError

    with pytest.raises(CollectorError, match="nvidia-smi CSV row") as caught:
        parse(csv)
    assert names in str(caught.value)
