"""Where the pool is (collectors/pool.py) and the driver's out-of-memory lines (collectors/kernel_log.py).

Real material: this machine's /proc (meminfo, smaps_rollup of real processes mapping a real file), the
GB10 nvidia-smi tables of ../shared/fixtures behind the NVML interface, and the NV_ERR_NO_MEMORY lines a GB10
logged (tests/data/kernel_log/SOURCES.md)."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess
import sys
import time

import pytest

from collectors.kernel_log import KernelLogWatcher
from collectors.monitor import Monitor
from collectors.nvidia_smi import SmiBackend, SmiProcess, parse
from collectors.nvml_collector import NVMLCollector
from collectors.os_collector import OSCollector
from collectors.pool import SMAPS_SOURCE, PoolSampler, file_resident, pool_parts
from collectors.recorder import Recorder
from collectors.recording import read_recording
from collectors.replay import ReplayMonitor
from collectors.snapshots import NVMLSnapshot
from tests.conftest import SHARED_FIXTURES, needs_shared

MiB = 2**20
GiB = 2**30
KERNEL_LOG = pathlib.Path(__file__).resolve().parent.parent / "data" / "kernel_log"
DMESG = KERNEL_LOG / "dmesg_gb10_vllm-pr41834_nv-err-no-memory.txt"
NO_NVML = NVMLSnapshot(status="no NVML library", available=False, devices=())


def _as_kmsg(lines: list[str], first_seq: int) -> str:
    """dmesg lines as /dev/kmsg records: 'PRI,SEQ,TS_USEC,FLAGS;MESSAGE' (seconds -> microseconds)."""
    out = []
    for i, line in enumerate(lines):
        stamp, _, message = line.partition("] ")
        usec = round(float(stamp.strip("[ ")) * 1e6)
        out.append(f"3,{first_seq + i},{usec},-;{message}\n")
    return "".join(out)


def test_driver_oom_lines_before_and_after_start_are_counted_apart(tmp_path):
    lines = DMESG.read_text().splitlines()
    log = tmp_path / "kmsg"
    log.write_text(_as_kmsg(lines[:4], 100))
    watcher = KernelLogWatcher(str(log), clock=lambda: 1_000_000.0, uptime=lambda: 81040.0)
    first = watcher.poll()
    assert first.readable and first.why == ""
    assert (first.before_start, first.since_start) == (4, 0)
    with log.open("a") as f:
        f.write(_as_kmsg(lines[:4], 100))  # the same records again (a re-read): counted once
        f.write(_as_kmsg(lines[4:], 104))  # three more NVRM lines and the systemd one
    second = watcher.poll()
    assert (second.before_start, second.since_start) == (4, 3)
    assert second.last_lines[-1].startswith("NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory")
    # the newest line was logged at 81034.304215 s after boot, 5.695785 s before "now" (81040 s)
    assert second.last_t == pytest.approx(1_000_000.0 - (81040.0 - 81034.304215))


def test_dmesg_text_is_read_too_and_an_unreadable_log_says_why_once(tmp_path):
    status = KernelLogWatcher(str(DMESG)).poll()
    assert status.before_start == 7  # seven NVRM lines; the systemd line is not the driver's
    missing = KernelLogWatcher(str(tmp_path / "no-such-log"))
    gone = missing.poll()
    assert not gone.readable and gone.why.startswith("kernel log not readable: ")
    assert "No such file" in gone.why
    assert missing.poll() == gone  # not retried every tick


def test_the_real_kernel_log_is_read_or_said_unreadable():
    status = KernelLogWatcher().poll()
    if status.readable:
        assert status.why == "" and status.since_start == 0
    else:
        assert status.why.startswith("kernel log not readable: /dev/kmsg")


def _mapper(path: pathlib.Path) -> subprocess.Popen:
    """A process that maps `path` and touches every page (a model shard under mmap), then waits."""
    code = (
        "import mmap,sys\n"
        f"f=open({str(path)!r},'rb'); m=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ)\n"
        "s=sum(m[i] for i in range(0,len(m),4096)); print('ready',flush=True); sys.stdin.read()\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdout.readline().strip() == b"ready"
    return child


@pytest.fixture
def two_engines(tmp_path):
    """Two processes mapping the same 64 MiB file, like two engines serving one model's shards."""
    shard = tmp_path / "model-00001-of-00001.safetensors"
    shard.write_bytes(os.urandom(64 * MiB))
    children = [_mapper(shard), _mapper(shard)]
    yield children
    for child in children:
        child.kill()
        child.wait()


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps_rollup"), reason="no smaps_rollup (kernel < 4.14)")
def test_two_processes_mapping_one_shard_count_it_once(two_engines):
    reads = [file_resident("/proc", child.pid) for child in two_engines]
    assert all(source == SMAPS_SOURCE for _, source in reads)
    # proportional set size: each holds half of the 64 MiB it shares (plus its own share of libraries)
    total = sum(n for n, _ in reads)
    assert 64 * MiB <= total < 64 * MiB + 64 * MiB  # once, not twice (128 MiB) as RSS would say
    for n, _ in reads:
        assert n >= 32 * MiB


def _gb10_backend(engines: dict[int, int]) -> SmiBackend:
    """The recorded GB10 (nvidia-smi_gb10_vllm-61383MiB: memory Not Supported) with `engines` pid -> bytes as
    its compute processes, beside the recorded desktop processes."""
    report = parse((SHARED_FIXTURES / "nvidia-smi_gb10_vllm-61383MiB.txt").read_text())
    desktop = tuple(p for p in report.processes if p.kind == "graphics")
    ours = tuple(SmiProcess(0, pid, "compute", "VLLM::EngineCore", n) for pid, n in engines.items())
    return SmiBackend(dataclasses.replace(report, processes=desktop + ours))


@needs_shared
def test_two_engines_sharing_a_gb10_pool_decompose_it_exactly(two_engines, tmp_path):
    a, b = two_engines
    # the two GPU figures GB10 nvidia-smi tables recorded for vLLM engines (61383 MiB and 50408 MiB)
    nvml = NVMLCollector(_gb10_backend({a.pid: 61383 * MiB, b.pid: 50408 * MiB}))
    log = tmp_path / "kmsg"
    log.write_text("")
    sampler = PoolSampler(kernel_log=str(log))
    monitor = Monitor(nvml=nvml, agent_dir=str(tmp_path / "agents"), pool_sampler=sampler)
    state = monitor.sample_once()
    monitor.stop()
    parts = state.pool
    assert parts.unified and state.unified
    assert parts.gpu_held == (61383 + 50408 + 179 + 48) * MiB
    # every part itemized by /proc/meminfo, plus what it leaves unitemized, is MemTotal to the byte
    itemized = parts.free + parts.processes + parts.page_cache + parts.shmem + parts.kernel + parts.unitemized
    assert itemized == parts.total == state.os.mem_total
    # the two engines' mapped shard is in the page cache once, as the experiment's files
    assert 64 * MiB <= parts.experiment_files < 128 * MiB
    assert parts.reclaimable_cache == parts.page_cache - parts.experiment_files
    assert parts.kernel_log.readable and parts.kernel_log.since_start == 0


@needs_shared
def test_driver_oom_alerts_while_headroom_looks_healthy_and_replays(tmp_path):
    log = tmp_path / "kmsg"
    lines = DMESG.read_text().splitlines()
    log.write_text(_as_kmsg(lines[:2], 1))
    clock = [2000.0]
    nvml = NVMLCollector(_gb10_backend({os.getpid(): 61383 * MiB}), clock=lambda: clock[0])
    sampler = PoolSampler(kernel_log=str(log), interval_s=1.0, clock=lambda: clock[0])
    record = tmp_path / "run.jsonl"
    monitor = Monitor(
        nvml=nvml,
        agent_dir=str(tmp_path / "agents"),
        pool_sampler=sampler,
        clock=lambda: clock[0],
        record_to=record,
        os_collector=OSCollector(clock=lambda: clock[0]),
    )
    first = monitor.sample_once()
    assert first.pool.kernel_log.before_start == 2 and not any(a.kind == "driver_oom" for a in first.alerts)
    with log.open("a") as f:
        f.write(_as_kmsg(lines[2:], 3))
    clock[0] += 2.0
    state = monitor.sample_once()
    monitor.stop()
    (alert,) = [a for a in state.alerts if a.kind == "driver_oom"]
    # this machine's MemAvailable is far above the 8 GiB warning: the headroom rule is silent, this is not
    assert state.headroom_bytes > 8 * GiB and not any(a.kind == "headroom" for a in state.alerts)
    assert alert.value == 5 and alert.message.startswith("the NVIDIA driver could not get memory 5 time(s)")
    assert "NV_ERR_NO_MEMORY" in alert.message and "(MemAvailable)" in alert.message
    # the recording holds the pool's detail: a replay shows the same decomposition and the same alert
    replay = ReplayMonitor(record)
    while not replay.at_end:
        replay.step()
    replayed = replay.state()
    assert replayed.pool.kernel_log.since_start == 5
    assert replayed.pool.experiment_files == state.pool.experiment_files
    assert [a.kind for a in replayed.alerts if a.kind == "driver_oom"] == ["driver_oom"]


def test_pool_parts_of_this_machine_add_up_and_psutil_leaves_parts_unknown():
    snap = OSCollector().sample()
    parts = pool_parts(snap, NO_NVML, None, (), unified=False)
    assert not parts.unified and parts.gpu_held is None and parts.experiment_files is None
    itemized = parts.free + parts.processes + parts.page_cache + parts.shmem + parts.kernel + parts.unitemized
    assert itemized == parts.total
    info = {}
    for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
        key, _, rest = line.partition(":")
        info[key] = int(rest.split()[0]) * 1024
    # Slab + stacks + page tables, a little apart in time from the snapshot: within 64 MiB
    kernel = info["Slab"] + info["KernelStack"] + info["PageTables"] + info.get("SecPageTables", 0)
    assert abs(parts.kernel - kernel) < 64 * MiB
    psutil_snap = OSCollector(proc_root="/nonexistent", source="psutil").sample()
    loose = pool_parts(psutil_snap, NO_NVML, None, (), unified=False)
    assert loose.page_cache is None and loose.processes is None and loose.kernel is None
    assert loose.not_read == ("processes", "page cache", "shared memory", "kernel")
    assert loose.unitemized == loose.total - loose.free  # everything but free, not itemized


def test_pool_sampler_is_bounded_by_its_interval():
    t = [0.0]
    sampler = PoolSampler(kernel_log=None, interval_s=5.0, clock=lambda: t[0])
    first = sampler.sample([os.getpid()])
    assert first.files and first.files[0][0] == os.getpid() and first.kernel_log is None
    t[0] = 4.9
    assert sampler.sample([1]) is first and not sampler.due()
    t[0] = 5.0
    assert sampler.due() and sampler.sample([]) is not first
    time.sleep(0)  # the sampler never sleeps: due() is the only gate


@needs_shared
def test_the_decomposition_is_on_metrics(two_engines, tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    from collectors.exporter import render_metrics

    a, b = two_engines
    log = tmp_path / "kmsg"
    log.write_text(_as_kmsg(DMESG.read_text().splitlines()[:1], 1))
    nvml = NVMLCollector(_gb10_backend({a.pid: 61383 * MiB, b.pid: 50408 * MiB}))
    monitor = Monitor(nvml=nvml, agent_dir=str(tmp_path / "a"), pool_sampler=PoolSampler(kernel_log=str(log)))
    state = monitor.sample_once()
    monitor.stop()
    served = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(render_metrics(state))
        for s in family.samples
    }
    parts = state.pool
    for part, value in (
        ("gpu", parts.gpu_held),
        ("experiment_files", parts.experiment_files),
        ("reclaimable_cache", parts.reclaimable_cache),
        ("unitemized", parts.unitemized),
        ("free", parts.free),
    ):
        assert served[("memsight_pool_part_bytes", (("part", part),))] == value
    assert served[("memsight_kernel_log_readable", ())] == 1
    assert served[("memsight_driver_oom_lines_total", ())] == 0  # the one line was there before the start


def test_a_checkpoint_read_in_halves_shows_in_the_recorded_pool(tmp_path):
    """A process maps a 64 MiB checkpoint and reads its first half, waits, then its second half: the pool's
    "experiment's files" part, sampled as a live run samples it and recorded, grows with each half."""
    shard = tmp_path / "model.safetensors"
    shard.write_bytes(os.urandom(64 * MiB))
    code = (
        "import mmap,sys\n"
        f"f=open({str(shard)!r},'rb'); m=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ); n=len(m)\n"
        "for lo,hi in ((0,n//2),(n//2,n)):\n"
        "    s=sum(m[i] for i in range(lo,hi,4096)); print('read',hi,flush=True); sys.stdin.readline()\n"
    )
    reader = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    record = tmp_path / "run.jsonl"
    sampler = PoolSampler(kernel_log=None, interval_s=0.0)
    recorder = Recorder(record)
    try:
        files = []
        for _ in range(2):
            assert reader.stdout.readline().startswith(b"read")
            detail = sampler.sample([reader.pid])  # the experiment's pids, as the Monitor passes them
            recorder.pool(detail)
            files.append(dict(detail.files)[reader.pid])
            reader.stdin.write(b"\n")
            reader.stdin.flush()
    finally:
        reader.kill()
        reader.wait()
        recorder.close()
    half, whole = files
    assert 32 * MiB <= half < 48 * MiB and whole - half >= 31 * MiB  # each half of the pages, and libraries
    recorded = [e for e in read_recording(record).events if e["k"] == "pool"]
    assert [dict(map(tuple, e["files"]))[reader.pid] for e in recorded] == files


def test_a_recording_made_before_the_pool_was_sampled_says_it_is_not_decomposed():
    """The bundled demo recordings predate MemFree and the parts: the panel says why it has no bar instead of
    drawing one part (shared memory) and 'MemFree n/a' as if the rest were empty."""
    from collectors.replay import bundled_recording  # noqa: PLC0415
    from tui.screens.pool_view import pool_data  # noqa: PLC0415

    replay = ReplayMonitor(bundled_recording("transformers"))
    replay.advance_to(replay.duration_s)
    data = pool_data(replay.state())
    assert data.parts == ()
    assert data.lines[0].startswith("not decomposed: this sample has no MemFree")
